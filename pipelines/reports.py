"""`gpupipe report`: a local run's HTML page (RUN_DIR), or the pool view of a config's recent
local runs (CONFIG), both from what the runs recorded in their run directories."""
from __future__ import annotations

from pathlib import Path

from components.contracts import names
from components.contracts.errors import GpupipeError
from pipelines import steps

# Where kfp.local keeps each step's artifacts inside a run directory (<task>/<output>).
TRAIN_REPORT_DIR = (steps.TRAIN, "report")
BLESSING_DIR = (steps.EVALUATE, "blessing")
ANOMALIES_DIR = (steps.VALIDATE, "anomalies")
PUSHED_DIR = (steps.PUSH, "pushed")
REPORT_OUTPUT = (steps.REPORT, "page")  # the report task's HTML output (components/report/component.py)


def run_page(run_dir: Path) -> Path:
    """The run's report page: `RUN_DIR/report.html` as `gpupipe run` leaves it; for a run
    without one (an older run, a run whose report task did not run) built now from the
    artifacts the run has."""
    from components.report.logic import run_report

    if not run_dir.is_dir():
        raise GpupipeError(f"report: {run_dir} is not a directory; give a run directory (runs/<pipeline>-<time>) "
                           "or a config")
    page = run_dir / names.RUN_REPORT_PAGE
    if page.is_file():
        return page
    if not run_dir.joinpath(*TRAIN_REPORT_DIR, names.TRAIN_REPORT_FILE).is_file():
        raise GpupipeError(f"report: {run_dir} holds no training report ({'/'.join(TRAIN_REPORT_DIR)}/"
                           f"{names.TRAIN_REPORT_FILE}); give the directory of a run that trained")
    present = lambda parts: str(run_dir.joinpath(*parts)) if run_dir.joinpath(*parts).is_dir() else ""  # noqa: E731
    run_report(page_html=str(page), title=f"gpupipe run report: {run_dir.name}",
               train_report_dir=present(TRAIN_REPORT_DIR), blessing_dir=present(BLESSING_DIR),
               anomalies_dir=present(ANOMALIES_DIR), pushed_dir=present(PUSHED_DIR))
    return page


def open_in_browser(page: Path) -> bool:
    import webbrowser

    return webbrowser.open(page.resolve().as_uri())


INPUT_BOUND = 0.3  # default: a run whose steps waited for input more than this share of their time


def _run_dirs(runs_dir: Path, pipeline: str) -> list:
    """The local run directories of `pipeline` (kfp.local names them <pipeline>-<timestamp>), newest first."""
    import re

    pattern = re.compile(rf"{re.escape(pipeline)}-\d{{4}}(-\d+){{6}}")
    found = [p for p in runs_dir.iterdir() if p.is_dir() and pattern.fullmatch(p.name)] if runs_dir.is_dir() else []
    return sorted(found, key=lambda p: p.name, reverse=True)


def pool_runs(pipeline: str, runs_dir: Path, limit: int = 10) -> list:
    """One record per recent run of `pipeline`: the run's directory name and its training
    report (None when the run did not train)."""
    from components.contracts.reports import read_train_report

    return [{"run": d.name, "train": read_train_report(str(d.joinpath(*TRAIN_REPORT_DIR)), required=False)}
            for d in _run_dirs(runs_dir, pipeline)[:limit]]


def _cell(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def render_pool(pipeline: str, runs_dir: Path, runs: list, input_bound: float = INPUT_BOUND) -> str:
    """The pool view: GPU-hours, examples/s, input-wait fraction, GPU utilisation,
    preemptions and cost per run, input-bound runs flagged, and the totals."""
    if not runs:
        return f"no runs of {pipeline} under {runs_dir} (gpupipe run writes them there; see --runs-dir)"
    width = max(len("run"), *(len(r["run"]) for r in runs))
    head = (f"{'run':<{width}}  {'GPU-hours':>9}  {'examples/s':>10}  {'input wait':>10}  {'GPU util':>8}  "
            f"{'preempted':>9}  {'cost':>8}")
    lines = [f"{pipeline}: {len(runs)} recent local run(s) under {runs_dir}, newest first", head]
    bound, hours, cost, preempted = [], 0.0, 0.0, 0
    for r in runs:
        t = r["train"]
        if t is None:
            lines.append(f"{r['run']:<{width}}  (no training report: the run stopped before or in training)")
            continue
        wait = t.get("input_wait_fraction")
        flag = ""
        if wait is not None and wait > input_bound:
            flag = "  input-bound"
            bound.append(r["run"])
        hours += t.get("gpu_hours") or 0.0
        cost += t.get("estimated_cost") or 0.0
        preempted += t.get("preemptions") or 0
        lines.append(f"{r['run']:<{width}}  {_cell(t.get('gpu_hours'), '{:.4f}'):>9}  "
                     f"{_cell(t.get('examples_per_second'), '{:,.1f}'):>10}  {_cell(wait, '{:.1%}'):>10}  "
                     f"{_cell(t.get('gpu_utilization_mean'), '{:.0f}%'):>8}  {_cell(t.get('preemptions'), '{}'):>9}  "
                     f"{_cell(t.get('estimated_cost'), '{:.4f}'):>8}{flag}")
    lines.append(f"{'total':<{width}}  {hours:>9.4f}  {'':>10}  {'':>10}  {'':>8}  {preempted:>9}  {cost:>8.4f}")
    if bound:
        lines.append(f"input-bound (input wait above {input_bound:.0%} of the step time): {len(bound)} run(s); the "
                     "accelerators waited for data: raise training.cache_budget_mb or disk_cache_budget_mb, or the "
                     "train pods' CPU (cluster.resources.train.cpu)")
    return "\n".join(lines)
