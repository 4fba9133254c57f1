"""KFP wrapper for report: maps typed artifacts to `components.report.logic.run_report`."""
from kfp.dsl import HTML, Artifact, Input, Metrics, Output


def report(train_report: Input[Metrics], blessing: Input[Artifact], anomalies: Input[Artifact],
           pushed: Input[Artifact], pipeline: str, run_id: str, page: Output[HTML]):
    """One self-contained HTML page for the run (plotly.js inlined; the Kubeflow UI shows
    it as the task's HTML output): training curves per epoch, confusion matrix, ROC/PR for
    two classes, slices, the gate's decision and reasons, drift against the served
    version, training throughput and cost."""
    from components.report.logic import run_report

    drawn = run_report(page_html=page.path, title=f"gpupipe run report: {pipeline} (run {run_id})",
                       train_report_dir=train_report.path, blessing_dir=blessing.path,
                       anomalies_dir=anomalies.path, pushed_dir=pushed.path)
    page.metadata["plots"] = drawn
