"""Report: one self-contained HTML page per run, from what the other steps recorded (read
through components/contracts/reports.py): training curves per epoch, the confusion matrix,
ROC and PR curves (two classes), the slice table, the release gate's decision with its
reasons, drift against the served version's data, training throughput and cost, and where
the train task's time went (its phases).

Plotly draws the figures; plotly.js is inlined once per page, so the page opens without a
network (a laptop, the Kubeflow UI's HTML viewer). No TensorFlow: the step starts fast.
"""
from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from components.contracts import names, reports
from components.contracts.errors import reports_errors

PLOT_HEIGHT = "380px"
# Training-report rows of the throughput and cost table: (key, label, format).
THROUGHPUT_ROWS = (
    ("examples_per_second", "examples/s", "{:,.1f}"),
    ("train_seconds", "time in fit (s)", "{:.2f}"),
    ("epochs_run", "epochs run", "{}"),
    ("optimizer_steps", "optimizer steps", "{:,}"),
    ("global_batch_size", "global batch", "{}"),
    ("step_seconds_p50", "step time p50 (s)", "{:.4f}"),
    ("step_seconds_p95", "step time p95 (s)", "{:.4f}"),
    ("input_wait_fraction", "input-wait fraction", "{:.1%}"),
    ("feed_examples_per_core_second", "feed rate (examples/s per core)", "{:,.0f}"),
    ("input_core_us_per_example", "feed CPU per example (core-µs)", "{:.2f}"),
    ("input_cache", "input cache", "{}"),
    ("strategy", "strategy", "{}"),
    ("workers", "workers", "{}"),
    ("gpus", "GPUs", "{}"),
    ("gpu_utilization_mean", "GPU utilisation (mean)", "{:.0f}%"),
    ("gpu_hours", "GPU-hours", "{:.4f}"),
    ("estimated_cost", "cost (at training.gpu_hour_price)", "{:.4f}"),
    ("preemptions", "preemptions", "{}"),
    ("resumes", "resumes", "{}"),
)


@dataclass
class RunRecord:
    """What the steps recorded about one run (any part may be missing)."""
    train: Optional[dict] = None
    evaluation: Optional[dict] = None
    blessing: Optional[dict] = None
    validation: Optional[dict] = None
    drift: List[dict] = field(default_factory=list)
    push: Optional[dict] = None
    misclassified: List[dict] = field(default_factory=list)  # image models: {true, predicted, probability, src}


def read_run(*, train_report_dir: str = "", blessing_dir: str = "", anomalies_dir: str = "",
             pushed_dir: str = "") -> RunRecord:
    from components.contracts.blessing import read_blessing

    record = RunRecord()
    if train_report_dir:
        record.train = reports.read_train_report(train_report_dir)
    if blessing_dir:
        record.evaluation = reports.read_evaluation(blessing_dir, required=False)
        if os.path.isfile(os.path.join(blessing_dir, names.BLESSING_FILE)):
            record.blessing = read_blessing(blessing_dir).to_dict()
        record.misclassified = _mistakes(blessing_dir, (record.evaluation or {}).get("misclassified") or [])
    if anomalies_dir:
        record.validation = reports.read_validation(anomalies_dir, required=False)
        record.drift = reports.read_drift_measurements(anomalies_dir)
    if pushed_dir:
        record.push = reports.read_push_result(pushed_dir, required=False)
    return record


_MIME = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "bmp": "image/bmp"}


def _mistakes(blessing_dir: str, listed: List[dict]) -> List[dict]:
    """The misclassified eval images evaluate wrote, each as a data: URI for the page."""
    import base64

    found = []
    for m in listed:
        path = os.path.join(blessing_dir, m["file"])
        if os.path.isfile(path):
            with open(path, "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            mime = _MIME.get(m["file"].rsplit(".", 1)[-1], "application/octet-stream")
            found.append({**m, "src": f"data:{mime};base64,{data}"})
    return found


def _misclassified(record: RunRecord) -> str:
    if not record.misclassified:
        return ""
    cells = "".join(f"<figure><img src='{m['src']}' alt='{_e(m['true'])}'><figcaption>true {_e(m['true'])}<br>"
                    f"predicted {_e(m['predicted'])} ({m['probability']:.0%})</figcaption></figure>"
                    for m in record.misclassified)
    return (f"<h3>Misclassified eval images ({len(record.misclassified)}, the most confident first)</h3>"
            f"<div class='mistakes'>{cells}</div>")


def _axis(title: str, **extra) -> dict:
    return {"title": {"text": title}, **extra}


def _layout(title: str, x: str, y: str, **extra) -> dict:
    return {"title": {"text": title, "x": 0.02, "xanchor": "left"}, "xaxis": _axis(x), "yaxis": _axis(y),
            "margin": {"l": 60, "r": 20, "t": 50, "b": 50}, **extra}


def figures(record: RunRecord) -> Dict[str, dict]:
    """Plotly figures (plain dicts) by div id, in page order; only those with data."""
    figs: Dict[str, dict] = {}
    history = (record.train or {}).get("history") or {}
    if history.get("loss"):
        epochs = list(range(1, len(history["loss"]) + 1))
        epoch_axis = _axis("epoch", tick0=1, dtick=max(1, math.ceil(len(epochs) / 10)))  # whole epochs
        figs["plot-loss"] = {"data": [{"type": "scatter", "mode": "lines+markers", "name": "loss", "x": epochs,
                                       "y": history["loss"]}],
                             "layout": _layout("Training loss per epoch", "epoch", "loss", xaxis=epoch_axis)}
        others = [k for k in history if k != "loss" and history[k] and len(history[k]) == len(epochs)]
        if others:
            figs["plot-metrics"] = {
                "data": [{"type": "scatter", "mode": "lines+markers", "name": k, "x": epochs, "y": history[k]}
                         for k in others],
                "layout": _layout("Training metrics per epoch", "epoch", ", ".join(others), xaxis=epoch_axis)}
    ev = record.evaluation or {}
    if ev.get("classes") and ev.get("confusion_matrix"):
        classes = ev["classes"]
        figs["plot-confusion"] = {
            "data": [{"type": "heatmap", "z": ev["confusion_matrix"], "x": classes, "y": classes,
                      "colorscale": "Blues", "reversescale": True, "texttemplate": "%{z}", "hovertemplate":
                          "true %{y}, predicted %{x}: %{z}<extra></extra>"}],
            "layout": _layout("Confusion matrix (eval split)", "predicted", "true",
                              yaxis=_axis("true", autorange="reversed"))}
    if ev.get("roc"):
        roc, auc = ev["roc"], ev.get("metrics", {}).get("auc")
        figs["plot-roc"] = {
            "data": [{"type": "scatter", "mode": "lines", "name": f"ROC (AUC {_num(auc, '{:.4f}')})",
                      "x": roc["fpr"], "y": roc["tpr"], "text": roc["thresholds"],
                      "hovertemplate": "threshold %{text:.3f}: FPR %{x:.3f}, TPR %{y:.3f}<extra></extra>"},
                     {"type": "scatter", "mode": "lines", "name": "chance", "x": [0, 1], "y": [0, 1],
                      "line": {"dash": "dash", "color": "#999"}}],
            "layout": _layout("ROC curve (eval split)", "false positive rate", "true positive rate")}
    if ev.get("pr"):
        pr, ap = ev["pr"], ev.get("metrics", {}).get("pr_auc")
        figs["plot-pr"] = {
            "data": [{"type": "scatter", "mode": "lines", "name": f"PR (average precision {_num(ap, '{:.4f}')})",
                      "x": pr["recall"], "y": pr["precision"], "text": pr["thresholds"],
                      "hovertemplate": "threshold %{text:.3f}: recall %{x:.3f}, precision %{y:.3f}<extra></extra>"}],
            "layout": _layout("Precision-recall curve (eval split)", "recall", "precision")}
    if record.drift:
        features = [d["feature"] for d in record.drift]
        figs["plot-drift"] = {
            "data": [{"type": "bar", "name": "measured", "x": features, "y": [d["value"] for d in record.drift],
                      "customdata": [d["measure"] for d in record.drift],
                      "hovertemplate": "%{x}: %{customdata} %{y:.4f}<extra></extra>"},
                     {"type": "scatter", "mode": "markers", "name": "threshold", "x": features,
                      "y": [d["threshold"] for d in record.drift], "marker": {"symbol": "line-ew-open", "size": 24,
                                                                              "color": "#d62728"}}],
            "layout": _layout(f"Drift of the train split vs {(record.validation or {}).get('baseline') or 'baseline'}",
                              "feature", "distance (L-infinity or Jensen-Shannon)")}
    return figs


def _num(value, fmt: str = "{:.4f}") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def _e(text) -> str:
    return html.escape(str(text))


def _table(head: List[str], rows: List[List[str]]) -> str:
    """Cells are escaped here."""
    out = ["<table><thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    out += ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows]
    return "".join(out) + "</tbody></table>"


def _gate(record: RunRecord) -> str:
    b = record.blessing
    if not b:
        return "<p>The release gate did not run.</p>"
    verdict = "blessed" if b["blessed"] else "not blessed"
    parts = [f"<p class='verdict {'ok' if b['blessed'] else 'bad'}'>{_e(verdict)}: {_e(b['metric'])} "
             f"{_num(b['value'])} (threshold {_num(b['threshold'])})</p>"]
    if b.get("baseline_version") is not None:
        parts.append(f"<p>Baseline: served version {_e(b['baseline_version'])}, {_e(b['metric'])} "
                     f"{_num(b.get('baseline_value'))}.</p>")
    else:
        parts.append("<p>Baseline: nothing served yet; change thresholds skipped.</p>")
    parts.append("<ul>" + "".join(f"<li>{_e(r)}</li>" for r in b.get("reasons", [])) + "</ul>")
    p = record.push
    if p:
        parts.append(f"<p>Pushed version {_e(p['version'])}: {_e(p['path'])}</p>" if p.get("pushed")
                     else f"<p>Not pushed: {_e(p.get('reason'))}</p>")
    return "".join(parts)


def _metrics_table(record: RunRecord) -> str:
    metrics = (record.evaluation or {}).get("metrics") or (record.blessing or {}).get("metrics") or {}
    return _table(["metric", "value"], [[k, _num(v) if isinstance(v, float) else str(v)] for k, v in metrics.items()])


def _forms(record: RunRecord) -> str:
    """serving.export float16/int8: each form's size on disk and metrics on the eval split."""
    compressed = (record.evaluation or {}).get("compressed")
    if not compressed:
        return ""
    keys = list(compressed["forms"][0]["metrics"])
    rows = [[f["form"], _num(f["bytes"] / 2 ** 20, "{:.2f}"), *(_num(f["metrics"].get(k)) for k in keys)]
            for f in compressed["forms"]]
    return (f"<h3>Forms (serving.export {_e(compressed['export'])})</h3>" + _table(["form", "MB", *keys], rows)
            + f"<p>{_e(compressed['metric'])} drop {_num(compressed['drop'], '{:.4g}')} (at most "
              f"{_num(compressed['max_drop'], '{:g}')}: evaluation.max_compression_drop).</p>")


def _slices(record: RunRecord) -> str:
    slices = (record.evaluation or {}).get("slices") or {}
    if not slices:
        return "<p>No slices configured (evaluation.slices).</p>"
    parts = []
    for feature, values in slices.items():
        keys = [k for k in next(iter(values.values()), {}) if k != "examples"]
        rows = [[value, str(m["examples"]), *(_num(m[k]) for k in keys)] for value, m in values.items()]
        parts.append(f"<h3>By {_e(feature)}</h3>" + _table(["value", "examples", *keys], rows))
    return "".join(parts)


def _drift(record: RunRecord) -> str:
    v = record.validation
    if v is None:
        return "<p>Validation did not record its outcome.</p>"
    parts = []
    if v.get("baseline"):
        parts.append(f"<p>Baseline: {_e(v['baseline'])}. " +
                     (f"{len(v['drift'])} feature(s) drifted past their threshold.</p>" if v["drift"]
                      else "No feature drifted past its threshold.</p>"))
        parts += ["<ul>" + "".join(f"<li>{_e(line)}</li>" for line in v["drift"]) + "</ul>"] if v["drift"] else []
        if record.drift:
            parts.append(_table(["feature", "measure", "value", "threshold"],
                                [[d["feature"], d["measure"], _num(d["value"]), _num(d["threshold"])]
                                 for d in record.drift]))
    else:
        parts.append("<p>No baseline yet (nothing served): drift not checked.</p>")
    anomalies = v.get("anomalies") or []
    parts.append("<p>Schema anomalies: " + (f"{len(anomalies)}</p><ul>" + "".join(f"<li>{_e(a)}</li>"
                                                                                  for a in anomalies) + "</ul>"
                                            if anomalies else "none.</p>"))
    return "".join(parts)


def _throughput(record: RunRecord) -> str:
    t = record.train
    if not t:
        return "<p>Training did not record a report.</p>"
    rows = [[label, _num(t.get(key), fmt)] for key, label, fmt in THROUGHPUT_ROWS if key in t]
    return _table(["measure", "value"], rows)


EPOCH_ROWS = 5  # more epochs than this: the first, the last and one row for those between


def _phases(record: RunRecord) -> str:
    """The train report's `phases` (components/train/phases.py): each phase's seconds, its share
    of the task and the cores it kept busy (CPU seconds over seconds)."""
    phases = (record.train or {}).get("phases") or []
    if not phases:
        return ""
    epochs = [p for p in phases if p["name"].startswith("epoch ")]
    if len(epochs) > EPOCH_ROWS:  # one row for the epochs between the first and the last
        middle = epochs[1:-1]
        between = {"name": f"epochs 2-{len(epochs) - 1} (one row)", "seconds": sum(p["seconds"] for p in middle),
                   "cpu_seconds": sum(p["cpu_seconds"] for p in middle)}
        at = phases.index(middle[0])
        phases = [*phases[:at], between, *(p for p in phases[at:] if p not in middle)]
    total = sum(p["seconds"] for p in phases)
    rows = [[p["name"], _num(p["seconds"], "{:.2f}"), _num(p["seconds"] / total if total else None, "{:.1%}"),
             _num(p["cpu_seconds"] / p["seconds"] if p["seconds"] else None, "{:.2f}")] for p in phases]
    return (f"<h3>Where the time went</h3><p>The train task's phases, {total:.1f} s in all.</p>"
            + _table(["phase", "seconds", "share", "cores busy"], rows))


def _tuning(record: RunRecord) -> str:
    """training.tune's trials (the train report's `tuning`), the chosen one marked."""
    tuning = (record.train or {}).get("tuning")
    if not tuning:
        return ""
    rows = [[t["trial_id"] + (" (best)" if t["trial_id"] == tuning["best_trial"] else ""),
             _num(t.get("learning_rate"), "{:.3g}"), str(t.get("hidden_units", "-")), _num(t.get("dropout"), "{:.3g}"),
             _num(t.get("batch_size"), "{}"), _num(t.get("value"), "{:.5g}"), _num(t.get("epochs_run"), "{}"),
             _num(t.get("optimizer_steps"), "{}"), _num(t.get("seconds"), "{:.1f}"), t.get("status", "-")]
            for t in tuning["trials"]]
    return "<h3>Tuning</h3>" + _table(["trial", "learning rate", "hidden units", "dropout", "batch size",
                                       tuning["objective"], "epochs", "steps", "seconds", "status"], rows)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; } td, th { border: 1px solid #ddd; padding: .25em .6em; }
th { background: #f4f4f4; text-align: left; } td:not(:first-child) { text-align: right; }
.verdict { font-weight: bold; font-size: 1.1em; } .ok { color: #1a7f37; } .bad { color: #c62828; }
/* fixed columns: a figure is drawn as its div is parsed, at the width it has then */
.plots { display: grid; grid-template-columns: repeat(auto-fill, 540px); gap: 20px; }
.mistakes { display: grid; grid-template-columns: repeat(auto-fill, 112px); gap: 10px; }
.mistakes img { width: 96px; height: 96px; object-fit: contain; image-rendering: pixelated; background: #eee; }
.mistakes figure { margin: 0; font-size: .8em; }
"""


def render_page(record: RunRecord, title: str) -> str:
    """The whole page: plotly.js inlined once, ahead of the first figure."""
    import plotly.io as pio

    figs = figures(record)
    rendered, first = {}, True
    for div_id, fig in figs.items():
        rendered[div_id] = pio.to_html(fig, include_plotlyjs=first, full_html=False, div_id=div_id, validate=False,
                                       default_height=PLOT_HEIGHT, default_width="100%",
                                       config={"displaylogo": False, "responsive": True})
        first = False

    def plots(*ids: str) -> str:
        found = [f"<div class='plot'>{rendered[i]}</div>" for i in ids if i in rendered]
        return f"<div class='plots'>{''.join(found)}</div>" if found else ""

    body = [f"<h1>{_e(title)}</h1>",
            "<h2>Release gate</h2>", _gate(record),
            "<h2>Training</h2>", plots("plot-loss", "plot-metrics") or "<p>No per-epoch history recorded.</p>",
            "<h3>Throughput and cost</h3>", _throughput(record), _phases(record), _tuning(record),
            "<h2>Evaluation</h2>", plots("plot-confusion", "plot-roc", "plot-pr"), _metrics_table(record),
            _misclassified(record),
            _forms(record),
            "<h2>Slices</h2>", _slices(record),
            "<h2>Data: drift against the served version</h2>", plots("plot-drift"), _drift(record)]
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


@reports_errors("report")
def run_report(*, page_html: str, title: str, train_report_dir: str = "", blessing_dir: str = "",
               anomalies_dir: str = "", pushed_dir: str = "") -> List[str]:
    """The report step: reads what train, evaluate, validate and push recorded in their
    artifacts and writes the page to `page_html` (whole: written beside, then renamed).
    Returns the ids of the plots drawn."""
    record = read_run(train_report_dir=train_report_dir, blessing_dir=blessing_dir, anomalies_dir=anomalies_dir,
                      pushed_dir=pushed_dir)
    page = render_page(record, title)
    os.makedirs(os.path.dirname(page_html) or ".", exist_ok=True)
    staged = page_html + ".partial"
    with open(staged, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(staged, page_html)
    return list(figures(record))
