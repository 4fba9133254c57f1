"""Validate's settings: the config's `validation:` section."""
from __future__ import annotations

from typing import Dict, List, Literal, Optional

from pydantic import Field

from components.contracts.settings import Strict


class DriftSettings(Strict):
    """Drift of the train split against a baseline: the training statistics stored with the
    version now served (or `baseline_statistics`). TFDV's comparators: L-infinity distance
    for categorical features, Jensen-Shannon divergence for numeric ones."""

    categorical_threshold: float = Field(0.3, gt=0, le=1, description="L-infinity distance")
    numeric_threshold: float = Field(0.3, gt=0, le=1, description="Jensen-Shannon divergence")
    features: Dict[str, float] = Field(default_factory=dict, description="per-feature thresholds")
    blocking: bool = Field(True, description="drift fails the run (false: warn in the summary)")
    baseline_statistics: Optional[str] = Field(
        None, description="a statistics file (validate's stats.pb) to compare with instead of the served version's")


class ValidationSettings(Strict):
    fail_on_anomalies: bool = Field(True, description="stop the run when TFDV reports a schema anomaly or skew")
    warn_only: List[str] = Field(default_factory=list, description="features whose anomalies and drift only warn")
    schema_file: Optional[str] = Field(
        None, description="a curated schema.pbtxt (`gpupipe schema CONFIG` writes the inferred one to review); "
                          "inferred from the train split when unset")
    skew_threshold: float = Field(0.0, ge=0, le=1, description="train vs eval L-infinity skew per categorical "
                                                              "feature; 0 disables")
    statistics_engine: Literal["in_process", "beam"] = Field(
        "in_process", description="in_process: TFDV's in-memory path batch by batch (one machine); beam: "
                                  "generate_statistics_from_tfrecord on the runner in beam_pipeline_args")
    beam_pipeline_args: List[str] = Field(
        default_factory=list, description="e.g. [--runner=DataflowRunner, --project=p, --region=r, "
                                          "--temp_location=gs://b/tmp]")
    drift: DriftSettings = DriftSettings()
    unseen_category_tolerance: float = Field(
        0.01, ge=0, lt=1, description="share of a split's values of a categorical feature that may be unseen in "
                                      "training (the model maps them to an out-of-vocabulary row); more is an "
                                      "anomaly; new label values always are")
    min_feature_presence: float = Field(
        0.01, ge=0, le=1, description="a declared feature with a value in fewer of the train split's rows than this "
                                      "share is named in a warning (almost empty columns teach the model little); "
                                      "0 disables")
    unseen_category_tolerance_by_feature: Dict[str, float] = Field(default_factory=dict,
                                                                   description="per-feature tolerances")
