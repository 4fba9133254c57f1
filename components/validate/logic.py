"""Validate: TFDV statistics per split, an inferred schema, anomalies and an HTML report.

Statistics use TFDV's in-process path (`generate_statistics_in_memory`) on Arrow record
batches decoded from the ingest shards by tfx_bsl, one dataset per split. Blocking
anomalies raise a GpupipeError whose one line lists every anomaly.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from components import names
from components.errors import GpupipeError, reports_errors
from components.ingest.logic import examples_pattern

READ_BATCH = 50_000


def _read_split_records(examples_dir: str, split: str) -> List[bytes]:
    import tensorflow as tf

    files = sorted(glob.glob(examples_pattern(examples_dir, split)))
    if not files:
        raise GpupipeError(f"examples: no {split} shards under {examples_dir}; run ingest first")
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return [record.numpy() for record in dataset]


def split_statistics(examples_dir: str, split: str):
    """TFDV statistics (a DatasetFeatureStatisticsList with one dataset named `split`)."""
    import pyarrow as pa
    import tensorflow_data_validation as tfdv
    from tensorflow_data_validation.statistics import stats_impl
    from tfx_bsl.coders import example_coder

    records = _read_split_records(examples_dir, split)
    decoder = example_coder.ExamplesToRecordBatchDecoder()
    batches = [decoder.DecodeBatch(records[i:i + READ_BATCH]) for i in range(0, len(records), READ_BATCH)]
    table = pa.Table.from_batches(batches) if len(batches) == 1 else pa.concat_tables(
        [pa.Table.from_batches([b]) for b in batches], promote=True)
    record_batch = table.combine_chunks().to_batches()[0]
    stats = stats_impl.generate_statistics_in_memory(record_batch, tfdv.StatsOptions())
    stats.datasets[0].name = split
    return stats


def infer_schema(train_stats, label: str):
    """TFDV's inferred schema, with two deliberate edits: the label must be present in
    every example; other features may be missing (the model imputes them)."""
    import tensorflow_data_validation as tfdv

    schema = tfdv.infer_schema(train_stats, infer_feature_shape=False)
    for feature in schema.feature:
        if feature.name == label:
            feature.presence.min_fraction = 1.0
            feature.presence.min_count = 1
        else:
            feature.presence.min_fraction = 0.0
    return schema


@dataclass
class ValidationResult:
    statistics: Dict[str, object]
    schema: object
    anomalies: Dict[str, object]
    problems: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def describe_anomalies(split: str, anomalies) -> List[str]:
    """One line per anomalous feature: `split: feature 'x': description`."""
    lines = []
    for feature_name, info in sorted(anomalies.anomaly_info.items()):
        reasons = "; ".join(r.description or r.short_description for r in info.reason) or info.description
        lines.append(f"{split}: feature '{feature_name}': {reasons}")
    if anomalies.HasField("dataset_anomaly_info"):
        reasons = "; ".join(r.description for r in anomalies.dataset_anomaly_info.reason)
        lines.append(f"{split}: dataset: {reasons}")
    return lines


def validate_examples(examples_dir: str, label: str, schema_path: Optional[str] = None) -> ValidationResult:
    """Statistics for each split, the schema (inferred from train, or read from
    `schema_path`), and the anomalies of each split against it."""
    import tensorflow_data_validation as tfdv

    statistics = {split: split_statistics(examples_dir, split) for split in names.SPLITS}
    schema = tfdv.load_schema_text(schema_path) if schema_path else infer_schema(statistics[names.TRAIN_SPLIT], label)
    anomalies = {split: tfdv.validate_statistics(statistics[split], schema) for split in names.SPLITS}
    problems = [line for split in names.SPLITS for line in describe_anomalies(split, anomalies[split])]
    return ValidationResult(statistics=statistics, schema=schema, anomalies=anomalies, problems=problems)


def write_outputs(result: ValidationResult, statistics_dir: str, schema_dir: str, anomalies_dir: str,
                  report_html: str) -> None:
    """Writes statistics (binary proto, both splits), schema.pbtxt, anomalies per split plus a
    Markdown summary, and TFDV's HTML report comparing train and eval."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import statistics_pb2
    from tensorflow_data_validation.utils.display_util import get_statistics_html

    for directory in (statistics_dir, schema_dir, anomalies_dir):
        os.makedirs(directory, exist_ok=True)
    merged = statistics_pb2.DatasetFeatureStatisticsList()
    for split in names.SPLITS:
        merged.datasets.extend(result.statistics[split].datasets)
    with open(os.path.join(statistics_dir, names.STATS_FILE), "wb") as f:
        f.write(merged.SerializeToString())
    tfdv.write_schema_text(result.schema, os.path.join(schema_dir, names.SCHEMA_FILE))
    for split in names.SPLITS:
        tfdv.write_anomalies_text(result.anomalies[split], os.path.join(anomalies_dir, f"{split}-{names.ANOMALIES_FILE}"))
    summary = ["# Data validation", ""]
    summary += [f"- {line}" for line in result.problems] or ["No anomalies."]
    with open(os.path.join(anomalies_dir, names.ANOMALIES_SUMMARY), "w", encoding="utf-8") as f:
        f.write("\n".join(summary) + "\n")
    html = get_statistics_html(
        lhs_statistics=result.statistics[names.TRAIN_SPLIT], rhs_statistics=result.statistics[names.EVAL_SPLIT],
        lhs_name=names.TRAIN_SPLIT, rhs_name=names.EVAL_SPLIT)
    os.makedirs(os.path.dirname(report_html) or ".", exist_ok=True)
    with open(report_html, "w", encoding="utf-8") as f:
        f.write(html)


def load_statistics(statistics_dir: str, split: str):
    """One split's statistics (a DatasetFeatureStatistics) from a validate output."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    merged = statistics_pb2.DatasetFeatureStatisticsList()
    with open(os.path.join(statistics_dir, names.STATS_FILE), "rb") as f:
        merged.ParseFromString(f.read())
    for dataset in merged.datasets:
        if dataset.name == split:
            return dataset
    raise GpupipeError(f"statistics: no '{split}' dataset in {statistics_dir}; rerun validate")


def run_validation(examples_dir: str, label: str, statistics_dir: str, schema_dir: str, anomalies_dir: str,
                   report_html: str, fail_on_anomalies: bool = True, schema_path: Optional[str] = None) -> ValidationResult:
    """The validate step: writes every output, then fails on anomalies when told to."""
    result = validate_examples(examples_dir, label, schema_path)
    write_outputs(result, statistics_dir, schema_dir, anomalies_dir, report_html)
    if result.problems and fail_on_anomalies:
        raise GpupipeError(
            f"data validation found {len(result.problems)} anomal{'y' if len(result.problems) == 1 else 'ies'}: "
            + " | ".join(result.problems)
            + " (fix the data, or review the schema; set validation.fail_on_anomalies: false to only warn)")
    return result


@reports_errors("validate")
def run_validate(examples_dir: str, label: str, statistics_dir: str, schema_dir: str, anomalies_dir: str,
                 report_html: str, fail_on_anomalies: bool) -> dict:
    """The validate step as the component calls it; returns counts for the artifact metadata."""
    result = run_validation(examples_dir, label, statistics_dir, schema_dir, anomalies_dir, report_html,
                            fail_on_anomalies)
    return {"anomalies": len(result.problems),
            "examples": {s: int(result.statistics[s].datasets[0].num_examples) for s in names.SPLITS}}
