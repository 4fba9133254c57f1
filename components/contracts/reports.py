"""Readers of what the steps record about a run, for the run report and `gpupipe report`:
the training report (train's `report` artifact: `report.json`, with the per-epoch history),
the evaluation (inside evaluate's blessing artifact: `evaluation.json`), the validation
outcome (inside validate's anomalies artifact: `validation.json` and, with a served
baseline, TFDV's drift measurements in `drift-anomalies.pbtxt`) and the push result
(push's `pushed` artifact: `push.json`).

No TensorFlow: plain files (on the cluster, KFP's launcher has them on local paths), and
the drift measurements through tensorflow_metadata's protos alone.
"""
from __future__ import annotations

import json
import os
from typing import List, Optional

from components.contracts import names
from components.contracts.errors import GpupipeError


def _json(path: str, required: bool, what: str) -> Optional[dict]:
    if not os.path.isfile(path):
        if required:
            raise GpupipeError(f"{what}: {path} not found; run the step that writes it first")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as err:
        raise GpupipeError(f"{what}: {path} is not readable JSON ({err}); run the step again") from None


def read_train_report(report_dir: str, required: bool = True) -> Optional[dict]:
    """The training report: throughput, step times, input wait, GPU use, GPU-hours, cost,
    preemptions, and `history` (metric name -> one value per epoch run)."""
    return _json(os.path.join(report_dir, names.TRAIN_REPORT_FILE), required, "training report")


def read_evaluation(blessing_dir: str, required: bool = True) -> Optional[dict]:
    """metrics, classes, confusion_matrix, slices, and for two classes roc and pr curves."""
    return _json(os.path.join(blessing_dir, names.EVALUATION_FILE), required, "evaluation")


def read_validation(anomalies_dir: str, required: bool = True) -> Optional[dict]:
    """anomalies (lines), drift (lines past their threshold), baseline ("" without one)."""
    return _json(os.path.join(anomalies_dir, names.VALIDATION_FILE), required, "validation")


def read_push_result(pushed_dir: str, required: bool = True) -> Optional[dict]:
    """pushed, reason, version, path, stable, removed_versions, smoke_test."""
    return _json(os.path.join(pushed_dir, names.PUSH_RESULT_FILE), required, "push result")


def read_drift_measurements(anomalies_dir: str) -> List[dict]:
    """One {feature, measure, value, threshold} per feature compared with the served
    version's statistics (TFDV's drift_skew_info); [] when there was no baseline."""
    path = os.path.join(anomalies_dir, names.DRIFT_ANOMALIES_FILE)
    if not os.path.isfile(path):
        return []
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    anomalies = anomalies_pb2.Anomalies()
    with open(path, encoding="utf-8") as f:
        text_format.Parse(f.read(), anomalies)
    found = []
    for info in anomalies.drift_skew_info:
        for m in info.drift_measurements:
            found.append({"feature": ".".join(info.path.step),
                          "measure": anomalies_pb2.DriftSkewInfo.Measurement.Type.Name(m.type).lower(),
                          "value": m.value, "threshold": m.threshold})
    return found
