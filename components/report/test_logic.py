"""Unit tests of report: the page from artifacts in the formats the other steps write
(train's report.json, evaluate's blessing.json and evaluation.json, validate's
validation.json and TFDV drift anomalies, push's push.json), made here by hand."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.contracts import names
from components.contracts.blessing import Blessing, write_blessing
from components.contracts.errors import GpupipeError
from components.report.logic import figures, read_run, run_report

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]

DRIFT_PBTXT = """
drift_skew_info {
  path { step: "bill_length_mm" }
  drift_measurements { type: JENSEN_SHANNON_DIVERGENCE value: 0.41 threshold: 0.3 }
}
drift_skew_info {
  path { step: "island" }
  drift_measurements { type: L_INFTY value: 0.05 threshold: 0.3 }
}
"""


def write_run(root: Path, binary: bool = True, drift: bool = True, reason: str = "accuracy 0.9100 meets threshold"):
    """The four artifacts of a run, in the steps' formats; returns run_report's keyword arguments."""
    train, blessing, anomalies, pushed = (root / n for n in ("train-report", "blessing", "anomalies", "pushed"))
    for d in (train, anomalies, pushed):
        d.mkdir(parents=True)
    history = {"loss": [0.9, 0.5, 0.3], "accuracy": [0.6, 0.8, 0.9]}
    (train / names.TRAIN_REPORT_FILE).write_text(json.dumps({
        "examples_per_second": 5120.5, "train_seconds": 2.5, "epochs_run": 3, "global_batch_size": 32,
        "input_wait_fraction": 0.42, "gpus": 1, "gpu_utilization_mean": 55.0, "gpu_hours": 0.0007,
        "estimated_cost": 0.0021, "preemptions": 1, "resumes": 1, "history": history}))
    classes = ["no", "yes"] if binary else ["a", "b", "c"]
    cm = [[40, 3], [5, 52]] if binary else [[10, 1, 0], [2, 9, 0], [0, 0, 12]]
    evaluation = {"metrics": {"accuracy": 0.91, "log_loss": 0.25, "examples": 100, **({"auc": 0.95} if binary else {})},
                  "classes": classes, "confusion_matrix": cm,
                  "slices": {"island": {"Biscoe": {"examples": 60, "accuracy": 0.95, "log_loss": 0.2},
                                        "<missing>": {"examples": 40, "accuracy": 0.85, "log_loss": 0.3}}},
                  "roc": {"fpr": [0.0, 0.1, 1.0], "tpr": [0.0, 0.8, 1.0], "thresholds": [1.0, 0.5, 0.0]} if binary
                  else None,
                  "pr": {"precision": [0.55, 0.9, 1.0], "recall": [1.0, 0.8, 0.0], "thresholds": [0.0, 0.5, 1.0]}
                  if binary else None}
    write_blessing(Blessing(blessed=True, metric="accuracy", value=0.91, threshold=0.9, reasons=[reason],
                            metrics=evaluation["metrics"]), str(blessing))
    (blessing / names.EVALUATION_FILE).write_text(json.dumps(evaluation))
    (anomalies / names.VALIDATION_FILE).write_text(json.dumps({
        "anomalies": [], "baseline": "served version 1" if drift else "",
        "drift": ["train vs served version 1: feature 'bill_length_mm': drifted"] if drift else []}))
    if drift:
        (anomalies / names.DRIFT_ANOMALIES_FILE).write_text(DRIFT_PBTXT)
    (pushed / names.PUSH_RESULT_FILE).write_text(json.dumps({"pushed": True, "version": 2, "path": "/s/m/2",
                                                             "reason": "blessed"}))
    return {"train_report_dir": str(train), "blessing_dir": str(blessing), "anomalies_dir": str(anomalies),
            "pushed_dir": str(pushed)}


def external_references(page: str) -> list:
    """src/href attributes of the page's elements (not strings inside plotly.js)."""
    from html.parser import HTMLParser

    found = []

    class Refs(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend(f"{tag} {k}={v}" for k, v in attrs if k in ("src", "href") and v)

    Refs().feed(page)
    return found


def test_binary_run_page_holds_every_section_and_inlines_plotly_once(tmp_path):
    dirs = write_run(tmp_path)
    page = tmp_path / "out" / "report.html"
    drawn = run_report(page_html=str(page), title="gpupipe run report: t", **dirs)
    assert drawn == ["plot-loss", "plot-metrics", "plot-confusion", "plot-roc", "plot-pr", "plot-drift"]
    text = page.read_text(encoding="utf-8")
    assert text.count("window.Plotly = Plotly") == 1  # plotly.js itself, once, inline
    assert external_references(text) == []
    for div in drawn:
        assert f'id="{div}"' in text and f'Plotly.newPlot(                        "{div}"' in text
    for shown in ("blessed: accuracy 0.9100 (threshold 0.9000)", "Pushed version 2: /s/m/2", "5,120.5",
                  "42.0%", "0.0021", "Baseline: served version 1. 1 feature(s) drifted",
                  "jensen_shannon_divergence", "&lt;missing&gt;"):
        assert shown in text, shown
    assert not list(page.parent.glob("*.partial"))


def test_figures_are_valid_plotly_and_carry_the_recorded_numbers(tmp_path):
    import plotly.graph_objects as go

    figs = figures(read_run(**write_run(tmp_path)))
    for fig in figs.values():
        go.Figure(fig)  # plotly's own schema check: raises on a misspelt property
    assert figs["plot-loss"]["data"][0]["y"] == [0.9, 0.5, 0.3] and figs["plot-loss"]["data"][0]["x"] == [1, 2, 3]
    assert figs["plot-confusion"]["data"][0]["z"] == [[40, 3], [5, 52]]
    assert figs["plot-roc"]["data"][0]["name"] == "ROC (AUC 0.9500)"
    assert figs["plot-drift"]["data"][0]["y"] == [0.41, 0.05] and figs["plot-drift"]["data"][1]["y"] == [0.3, 0.3]


def test_multiclass_run_without_baseline_has_no_roc_and_says_drift_was_not_checked(tmp_path):
    dirs = write_run(tmp_path, binary=False, drift=False, reason="<script>alert(1)</script>")
    page = tmp_path / "report.html"
    assert run_report(page_html=str(page), title="t", **dirs) == ["plot-loss", "plot-metrics", "plot-confusion"]
    text = page.read_text(encoding="utf-8")
    assert "No baseline yet (nothing served): drift not checked." in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>alert(1)" not in text


def test_a_missing_training_report_is_one_line_naming_the_file(tmp_path):
    dirs = write_run(tmp_path)
    (Path(dirs["train_report_dir"]) / names.TRAIN_REPORT_FILE).unlink()
    with pytest.raises(GpupipeError, match=r"training report: .*report.json not found; run the step"):
        run_report(page_html=str(tmp_path / "p.html"), title="t", **dirs)
    assert not (tmp_path / "p.html").exists()


def test_the_step_does_not_load_tensorflow(tmp_path):
    """Its task starts in a fraction of the others' time (bench/e2e.py prints the start-up)."""
    dirs = write_run(tmp_path)
    code = ("import sys, json; from components.report.logic import run_report; "
            f"run_report(page_html={str(tmp_path / 'p.html')!r}, title='t', **json.loads(sys.argv[1])); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'sklearn', 'pandas')))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(dirs)], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_tuned_run_lists_its_trials_and_marks_the_best(tmp_path):
    """training.tune: the train report's `tuning` (components/train/tune.py) is a table of
    every trial on the page, the chosen one marked; an untuned run has no such section."""
    dirs = write_run(tmp_path)
    page = tmp_path / "out" / "report.html"
    run_report(page_html=str(page), title="t", **dirs)
    assert "<h3>Tuning</h3>" not in page.read_text(encoding="utf-8")
    train_file = Path(dirs["train_report_dir"]) / names.TRAIN_REPORT_FILE
    report = json.loads(train_file.read_text())
    report["tuning"] = {"objective": "val_loss", "best_trial": "1", "trials": [
        {"trial_id": "0", "learning_rate": 0.0003, "hidden_units": [64, 32], "dropout": 0.1, "batch_size": 64,
         "value": 0.41234, "epochs_run": 12, "optimizer_steps": 480, "seconds": 3.21, "status": "COMPLETED"},
        {"trial_id": "1", "learning_rate": 0.00905, "hidden_units": [128, 64, 32], "dropout": 0.027,
         "batch_size": 256, "value": 0.08765, "epochs_run": 30, "optimizer_steps": 300, "seconds": 2.5,
         "status": "COMPLETED"},
        {"trial_id": "2", "learning_rate": 0.002, "hidden_units": [32], "dropout": 0.0, "batch_size": 32,
         "value": None, "seconds": 0.4, "status": "FAILED"}]}
    train_file.write_text(json.dumps(report))
    run_report(page_html=str(page), title="t", **dirs)
    text = page.read_text(encoding="utf-8")
    section = text[text.index("<h3>Tuning</h3>"):text.index("</table>", text.index("<h3>Tuning</h3>"))]
    assert section.count("<tr>") == 4  # the head and three trials
    assert "<td>1 (best)</td><td>0.00905</td><td>[128, 64, 32]</td>" in section
    assert "<td>0.41234</td>" in section and "<td>FAILED</td>" in section and "val_loss" in section


def test_the_train_phases_are_a_table_of_where_the_time_went(tmp_path):
    """The train report's `phases`: seconds, share of the task and cores busy per phase; the
    epochs between the first and the last share one row past EPOCH_ROWS epochs; a report
    without phases (an older run) has no such table."""
    from components.report.logic import EPOCH_ROWS

    dirs = write_run(tmp_path)
    page = tmp_path / "out" / "report.html"
    run_report(page_html=str(page), title="t", **dirs)
    assert "Where the time went" not in page.read_text(encoding="utf-8")
    train_file = Path(dirs["train_report_dir"]) / names.TRAIN_REPORT_FILE
    report = json.loads(train_file.read_text())
    epochs = [{"name": f"epoch {i}", "seconds": 1.0, "cpu_seconds": 2.0} for i in range(1, EPOCH_ROWS + 3)]
    report["phases"] = [{"name": "start", "seconds": 2.0, "cpu_seconds": 1.0}, *epochs,
                        {"name": "export", "seconds": 1.0, "cpu_seconds": 0.5}]
    train_file.write_text(json.dumps(report))
    run_report(page_html=str(page), title="t", **dirs)
    text = page.read_text(encoding="utf-8")
    section = text[text.index("<h3>Where the time went</h3>"):text.index("</table>", text.index("Where the time"))]
    total = 3.0 + len(epochs)
    assert f"{total:.1f} s in all" in section and section.count("<tr>") == 1 + 5  # start, first, between, last, export
    assert f"<td>start</td><td>2.00</td><td>{2 / total:.1%}</td><td>0.50</td>" in section
    assert f"<td>epochs 2-{len(epochs) - 1} (one row)</td><td>{len(epochs) - 2:.2f}</td>" in section
    assert section.index("epoch 1<") < section.index("epochs 2-") < section.index(f"epoch {len(epochs)}<") \
        < section.index("export")
