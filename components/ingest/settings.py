"""Ingest's settings: the config's `data:` section."""
from __future__ import annotations

from typing import List, Literal, Optional

from pydantic import Field, model_validator

from components.contracts.names import NA_VALUES
from components.contracts.settings import Strict
from components.kinds import Columns


class SplitSettings(Strict):
    """How rows are split into train and eval: a deterministic hash, so reruns agree."""

    eval_percent: int = Field(20, ge=1, le=99, description="share of rows in the eval split")
    key: Optional[str] = Field(None, description="column to hash (any column of the data, a feature or not): its "
                                                 "rows stay together; unset: the feature values (never the label); "
                                                 "with by: time, the time column (one of data.datetime_features)")
    by: Literal["hash", "time"] = Field(
        "hash", description="hash: a deterministic hash of the key (or the feature values); time: the newest "
                            "eval_percent of the rows by the time column in `key` go to eval (rows at the cut-off "
                            "too; rows whose time is missing or does not parse to train), and the manifest states "
                            "the cut-off time")


class DataSettings(Columns):
    source: str = Field(description="a file, directory or glob (relative to the working directory), a "
                                    "gs://bucket/prefix, object or glob, or synthetic:ctr?rows=N&seed=S")
    format: Literal["auto", "csv", "parquet", "tfrecord", "images"] = Field(
        "auto", description="auto: from the file extension (.csv[.gz], .parquet, .tfrecord[.gz]), or images for a "
                            "folder of class folders of images (ROOT/<class>/*.jpg: columns image, label, file)")
    split: SplitSettings = SplitSettings()
    na_values: List[str] = Field(
        default_factory=lambda: list(NA_VALUES),
        description="CSV cell spellings that mean missing (default: Arrow's: '', NA, N/A, n/a, NULL, null, NaN, nan, "
                    "#N/A, ...); a row whose label is missing is dropped and counted")
    max_dropped_label_fraction: float = Field(
        0.2, ge=0, le=1, description="more rows than this without a label stop ingest (the label column is "
                                     "probably wrong, or its values spelt like na_values)")

    engine: Literal["local", "beam", "auto"] = Field(
        "local", description="local: ingest in this process; beam: an Apache Beam job on the runner in "
                             "beam_pipeline_args (the same reading, split, encoding, shards and statistics); "
                             "auto: beam when the source is larger than beam_threshold_mb, else local")
    beam_threshold_mb: float = Field(10240, gt=0, description="engine auto: sources larger than this (the sum of "
                                                              "their files' sizes, MB) go to Beam")
    beam_pipeline_args: List[str] = Field(
        default_factory=list,
        description="Beam's pipeline options, e.g. [--runner=DataflowRunner, --project=p, --region=r, "
                    "--temp_location=gs://b/tmp, --sdk_container_image=<the gpupipe CPU image>]; none: the "
                    "DirectRunner in this task. A runner other than the DirectRunner needs --temp_location (the "
                    "job writes its outputs there, then they are moved into the examples artifact)")

    @model_validator(mode="after")
    def _split_key_is_not_label(self) -> "DataSettings":
        if self.split.key is not None and self.split.key == self.label:
            raise ValueError("split.key must not be the label")
        if self.split.by == "time" and self.split.key not in self.names_of("datetime"):
            raise ValueError(f"split.by time needs split.key to name the time column, one of data.datetime_features "
                             f"({', '.join(self.names_of('datetime')) or 'none declared'}); now "
                             f"{self.split.key or 'unset'}")
        return self
