"""The compressed model beside the float one (serving.export float16 or int8): the TFLite model
train wrote (components/contracts/compressed.py) scored on the same eval rows as the
SavedModel, through the TFLite interpreter, and the release gate's line on it: refused when
the primary metric is worse than the SavedModel's by more than
evaluation.max_compression_drop. `evaluation.json` gets both forms' sizes and metrics."""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Callable, Optional

from components.contracts.blessing import Blessing
from components.contracts.compressed import TFLITE_FILE, load_compression, raw_features, tflite_runner
from components.kinds import load_feature_specs
from components.evaluate.metrics import LOWER_IS_BETTER
from components.evaluate.settings import EvaluationSettings

MB = 2 ** 20
SHOWN = ("accuracy", "auc", "log_loss", "rmse", "mae")  # beside the primary metric in the forms table


def tflite_serve(model_dir: str) -> Callable:
    """The model's TFLite form as a function from a batch of serialized examples to its outputs
    (what logic.predict calls in place of the SavedModel's serving_examples)."""
    specs = load_feature_specs(model_dir)
    run = tflite_runner(os.path.join(model_dir, TFLITE_FILE))
    return lambda batch: run(raw_features(batch, specs))


def drop(metric: str, full: float, small: float) -> float:
    """How much worse the compressed model scores (negative: better)."""
    return small - full if metric in LOWER_IS_BETTER else full - small


def forms(record: dict, full: dict, small: dict, metric: str) -> list:
    """Each form's size and metrics, the SavedModel first."""
    def shown(metrics: dict) -> dict:
        return {k: metrics[k] for k in (metric, *SHOWN) if k in metrics}

    return [{"form": "SavedModel (float32)", "bytes": record["saved_model_bytes"],
             "variables_bytes": record["variables_bytes"], "metrics": shown(full)},
            {"form": f"TFLite ({record['export']})", "bytes": record["tflite_bytes"], "metrics": shown(small)}]


def check_compressed(model_dir: str, evaluation, blessing: Blessing, settings: EvaluationSettings,
                     score: Callable[[Callable], dict]) -> Blessing:
    """The blessing with the compressed model's line (unchanged without one): `evaluation.compressed`
    set to its record, both forms and the drop. `score(serve)`: the metrics on the eval split of
    the model answering through `serve` (logic's scoring, the SavedModel's rows and labels)."""
    record = load_compression(model_dir)
    if record is None:
        return blessing
    metric, limit = settings.metric, settings.max_compression_drop
    small = score(tflite_serve(model_dir))
    full = evaluation.metrics
    lost = drop(metric, full[metric], small[metric])
    evaluation.compressed = {**record, "forms": forms(record, full, small, metric), "metric": metric, "drop": lost,
                             "max_drop": limit}
    also = (f" (accuracy {small['accuracy']:.4f} vs {full['accuracy']:.4f})"
            if metric != "accuracy" and "accuracy" in small else "")
    line = (f"{metric} {small[metric]:.4f} of the {record['export']} TFLite model ({record['tflite_bytes'] / MB:.2f} "
            f"MB) vs {full[metric]:.4f} of the SavedModel ({record['variables_bytes'] / MB:.2f} MB of variables) on "
            f"the eval split{also}: a drop of {lost:.4g}")
    if lost > limit:
        line += (f" exceeds evaluation.max_compression_drop {limit:g}; raise it, or export another form "
                 "(serving.export: float16 or float32)")
        reasons = [*blessing.reasons, line] if not blessing.blessed else [line]
        return replace(blessing, blessed=False, reasons=reasons)
    if not blessing.blessed:
        return blessing
    return replace(blessing, reasons=[*blessing.reasons, f"{line}, within evaluation.max_compression_drop {limit:g}"])


def render_forms(compressed: Optional[dict]) -> str:
    """Markdown: each form's size on disk and metrics."""
    if not compressed:
        return ""
    rows = compressed["forms"]
    keys = list(rows[0]["metrics"])
    lines = ["", "## Forms (serving.export)", "", "| form | size (MB) | " + " | ".join(keys) + " |",
             "|---|---|" + "---|" * len(keys)]
    lines += [f"| {r['form']} | {r['bytes'] / MB:.2f} | " + " | ".join(f"{r['metrics'][k]:.4f}" for k in keys) + " |"
              for r in rows]
    return "\n".join(lines) + "\n"
