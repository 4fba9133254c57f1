"""Validate: TFDV statistics per split, a schema, anomalies, skew, drift and an HTML report.

Statistics come from ingest (computed on its Arrow batches), from Beam when configured,
or else from the shards decoded batch by batch; one dataset per split. Blocking
anomalies raise a GpupipeError whose one line lists every anomaly.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from components.contracts import names
from components.contracts.errors import GpupipeError, reports_errors
from components.contracts.examples import examples_pattern, ingest_statistics_path, read_manifest, split_files
from components.contracts.settings import safe_name
from components.kinds import Columns
from components.kinds.text_kind import oov_drift
from components.contracts.statistics import StatisticsAccumulator, read_statistics, write_statistics
from components.validate.explain import (Explainer, feature_of as _feature_of, sparse_warnings, tolerated_unseen,
                                         unseen_tolerance)
from components.validate.settings import DriftSettings, ValidationSettings

READ_BATCH = 20_000


def feature_schema(examples_dir: str):
    """A minimal TFMD schema (names and types) from the ingest manifest, so every decoded
    batch has the same Arrow types even when a batch holds only missing values."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    manifest = read_manifest(examples_dir)
    if manifest is None:
        return None
    types = dict(manifest.get("features", {}))
    types[manifest["label"]] = manifest.get("label_type", "categorical")
    schema = schema_pb2.Schema()
    for name, kind in types.items():
        feature = schema.feature.add(name=name)
        feature.type = schema_pb2.FLOAT if kind == "numeric" else schema_pb2.BYTES
    return schema


def split_statistics(examples_dir: str, split: str, options=None):
    """TFDV statistics of one split (a DatasetFeatureStatisticsList with one dataset named
    `split`), computed in process batch by batch: each Arrow batch (decoded by tfx_bsl)
    feeds TFDV's combiners, whose accumulators are merged, so memory stays flat."""
    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    schema = feature_schema(examples_dir)
    decoder = example_coder.ExamplesToRecordBatchDecoder(schema.SerializeToString() if schema else None)
    records = tf.data.TFRecordDataset(split_files(examples_dir, split), compression_type="GZIP",
                                      num_parallel_reads=2).batch(READ_BATCH).prefetch(2)
    accumulator = StatisticsAccumulator(options)
    for batch in records:
        accumulator.add(decoder.DecodeBatch(list(batch.numpy())))
    if accumulator.empty:
        raise GpupipeError(f"examples: the {split} split under {examples_dir} holds no examples; check ingest's output")
    return accumulator.result(split)


def beam_split_statistics(examples_dir: str, split: str, pipeline_args: List[str], options=None):
    """The same statistics through Beam (`generate_statistics_from_tfrecord`): the path for
    data beyond one machine, on the runner the arguments name (Dataflow, Flink, Spark)."""
    import tensorflow_data_validation as tfdv
    from apache_beam.options.pipeline_options import PipelineOptions

    split_files(examples_dir, split)
    stats = tfdv.generate_statistics_from_tfrecord(
        data_location=examples_pattern(examples_dir, split), stats_options=options or tfdv.StatsOptions(),
        pipeline_options=PipelineOptions(pipeline_args or []))
    stats.datasets[0].name = split
    return stats


def infer_schema(train_stats, label: str, settings: Optional[ValidationSettings] = None):
    """TFDV's inferred schema, with deliberate edits: the label must be present in every
    example; other features may be missing (the model imputes them); a categorical
    feature's values unseen in training are an anomaly only past the tolerance (the model
    maps them to its out-of-vocabulary row or a hash bucket), a new label value always."""
    import tensorflow_data_validation as tfdv

    settings = settings or ValidationSettings()
    label = safe_name(label)
    tolerances = {safe_name(k): v for k, v in settings.unseen_category_tolerance_by_feature.items()}
    schema = tfdv.infer_schema(train_stats, infer_feature_shape=False)
    for feature in schema.feature:
        if feature.name == label:
            feature.presence.min_fraction = 1.0
            feature.presence.min_count = 1
            continue
        feature.presence.min_fraction = 0.0
        if feature.HasField("domain"):  # a string domain (TFDV keeps them at the schema's top level)
            tolerance = tolerances.get(feature.name, settings.unseen_category_tolerance)
            feature.distribution_constraints.min_domain_mass = 1.0 - tolerance
    return schema


@dataclass
class ValidationResult:
    statistics: Dict[str, object]
    schema: object
    anomalies: Dict[str, object]
    problems: List[str] = field(default_factory=list)  # schema anomalies, one line each
    warnings: List[str] = field(default_factory=list)  # tolerated unseen categorical values, one line each
    drift: List[str] = field(default_factory=list)  # drift past its threshold, one line each
    baseline: str = ""  # where the drift baseline came from ("" when there was none)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.drift


def _is_drift(reason) -> bool:
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    return "COMPARATOR" in anomalies_pb2.AnomalyInfo.Type.Name(reason.type)


def describe_anomalies(split: str, anomalies, drift: bool = False, explain=None) -> List[str]:
    """One line per anomalous feature: `split: feature 'x': description`; `drift` picks the
    drift-comparator reasons, otherwise the schema reasons. `explain(split, feature, reason)`
    (explain.py) may give gpupipe's own line for a reason instead of TFDV's sentence."""
    lines = []
    for feature_name, info in sorted(anomalies.anomaly_info.items()):
        reasons = [r for r in info.reason if _is_drift(r) == drift]
        explained = [(r, explain(split, feature_name, r) if explain else None) for r in reasons]
        lines += [line for _, line in explained if line]
        reasons = [r for r, line in explained if not line]
        if reasons:
            text = "; ".join(r.description or r.short_description for r in reasons)
            lines.append(f"{split}: feature '{feature_name}': {text}")
    if not drift and anomalies.HasField("dataset_anomaly_info"):
        reasons = "; ".join(r.description for r in anomalies.dataset_anomaly_info.reason)
        lines.append(f"{split}: dataset: {reasons}")
    return lines


def set_drift_comparators(schema, settings: DriftSettings) -> None:
    """L-infinity for string features, Jensen-Shannon divergence for numeric ones."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    thresholds = {safe_name(k): v for k, v in settings.features.items()}
    for feature in schema.feature:
        threshold = thresholds.get(feature.name)
        if not compared(feature):
            continue
        if feature.type == schema_pb2.BYTES:
            feature.drift_comparator.infinity_norm.threshold = threshold or settings.categorical_threshold
        elif feature.type in (schema_pb2.FLOAT, schema_pb2.INT):
            feature.drift_comparator.jensen_shannon_divergence.threshold = threshold or settings.numeric_threshold


def compared(feature) -> bool:
    """Whether the drift and skew comparators compare a feature's values (not an image's bytes)."""
    return feature.WhichOneof("domain_info") != "image_domain"


def apply_kinds(schema, features: Dict[str, str]) -> None:
    """Each feature's kind (the manifest's {feature: kind}) edits its entry in the schema, and
    the entries of the statistics columns ingest derived from it (<feature>__x)."""
    from components.kinds import KINDS

    for feature in schema.feature:
        kind = KINDS.get(features.get(feature.name, ""))
        if kind is not None:
            kind.edit_schema(feature)
        elif "__" in feature.name and (owner := KINDS.get(features.get(feature.name.rsplit("__", 1)[0], ""))):
            owner.edit_derived_schema(feature)


def annotate_columns(schema, columns: Dict[str, str]) -> None:
    """A feature renamed to its safe name says in the schema which column it came from."""
    for feature in schema.feature:
        if feature.name in columns:
            feature.annotation.comment.append(f"column {columns[feature.name]!r} in the data (renamed to a name "
                                              "TensorFlow takes)")


def ingest_statistics(examples_dir: str) -> Optional[Dict[str, object]]:
    """The statistics ingest computed on its Arrow batches (TFDV's in-memory path, merged
    batch by batch), when the examples came from gpupipe's ingest; else None."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    merged = read_statistics(ingest_statistics_path(examples_dir))
    if merged is None:
        return None
    found = {d.name: statistics_pb2.DatasetFeatureStatisticsList(datasets=[d]) for d in merged.datasets}
    return found if set(names.SPLITS) <= set(found) else None


def compute_statistics(examples_dir: str, settings: ValidationSettings) -> Dict[str, object]:
    """Per-split statistics: from Beam when configured; else those ingest computed while it
    held the data; else decoded from the shards batch by batch."""
    if settings.statistics_engine == "beam":
        return {split: beam_split_statistics(examples_dir, split, settings.beam_pipeline_args)
                for split in names.SPLITS}
    return ingest_statistics(examples_dir) or {split: split_statistics(examples_dir, split) for split in names.SPLITS}


def validate_examples(examples_dir: str, label: str, settings: Optional[ValidationSettings] = None,
                      baseline_stats=None, baseline_name: str = "") -> ValidationResult:
    """Statistics for each split, the schema (inferred from train, or the curated one), the
    anomalies of each split against it, train/eval skew, and, given baseline train
    statistics, the drift of this train split from them."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import statistics_pb2

    settings = settings or ValidationSettings()
    label = safe_name(label)
    statistics = compute_statistics(examples_dir, settings)
    if settings.schema_file:
        from google.protobuf import text_format
        from tensorflow_metadata.proto.v0 import schema_pb2

        from components.contracts import storage

        text = storage.read_text(settings.schema_file)
        if text is None:
            raise GpupipeError(f"validation.schema_file: {settings.schema_file} not found; write one with "
                               "`gpupipe schema CONFIG` or remove the key to infer it")
        schema = text_format.Parse(text, schema_pb2.Schema())
    manifest = read_manifest(examples_dir) or {}
    if not settings.schema_file:
        schema = infer_schema(statistics[names.TRAIN_SPLIT], label, settings)
        apply_kinds(schema, manifest.get("features", {}))
        annotate_columns(schema, manifest.get("columns", {}))
    kinds, columns = manifest.get("features", {}), manifest.get("columns", {})
    explain = Explainer(statistics, schema, kinds, columns, lambda f: unseen_tolerance(schema, f),
                        settings.schema_file or "")
    anomalies = {split: tfdv.validate_statistics(statistics[split], schema) for split in names.SPLITS}
    problems = [line for split in names.SPLITS for line in describe_anomalies(split, anomalies[split], explain=explain)]
    if settings.skew_threshold:
        skew_schema = type(schema)()
        skew_schema.CopyFrom(schema)
        for feature in skew_schema.feature:
            if feature.type == 1 and compared(feature):  # BYTES
                feature.skew_comparator.infinity_norm.threshold = settings.skew_threshold
        skew = tfdv.validate_statistics(statistics[names.TRAIN_SPLIT], skew_schema,
                                        serving_statistics=statistics[names.EVAL_SPLIT])
        problems += [line.replace("train:", "train vs eval (skew):", 1)
                     for line in describe_anomalies(names.TRAIN_SPLIT, skew, drift=True)]
        anomalies["skew"] = skew
    drift_lines = []
    if baseline_stats is not None:
        drift_schema = type(schema)()
        drift_schema.CopyFrom(schema)
        set_drift_comparators(drift_schema, settings.drift)
        previous = statistics_pb2.DatasetFeatureStatisticsList(datasets=[baseline_stats])
        drift_anomalies = tfdv.validate_statistics(statistics[names.TRAIN_SPLIT], drift_schema,
                                                   previous_statistics=previous)
        drift_lines = [line.replace("train:", f"train vs {baseline_name}:", 1)
                       for line in describe_anomalies(names.TRAIN_SPLIT, drift_anomalies, drift=True)
                       + oov_drift(statistics[names.TRAIN_SPLIT].datasets[0], baseline_stats,
                                   [n for n, k in manifest.get("features", {}).items() if k == "text"],
                                   {safe_name(k): v for k, v in settings.drift.features.items()},
                                   settings.drift.categorical_threshold)]
        anomalies["drift"] = drift_anomalies
    warnings = sparse_warnings(statistics, kinds, columns, settings.min_feature_presence) \
        + tolerated_unseen(statistics, schema, label, problems)
    return ValidationResult(statistics=statistics, schema=schema, anomalies=anomalies, problems=problems,
                            warnings=warnings, drift=drift_lines,
                            baseline=baseline_name)


VALIDATION_FILE = names.VALIDATION_FILE


def write_outputs(result: ValidationResult, statistics_dir: str, schema_dir: str, anomalies_dir: str,
                  report_html: str, summary_md: str = "") -> None:
    """Writes statistics (binary proto, both splits), schema.pbtxt, anomalies per split plus a
    Markdown summary, and TFDV's HTML report comparing train and eval."""
    import tensorflow_data_validation as tfdv
    from tensorflow_data_validation.utils.display_util import get_statistics_html

    for directory in (statistics_dir, schema_dir, anomalies_dir):
        os.makedirs(directory, exist_ok=True)
    write_statistics(os.path.join(statistics_dir, names.STATS_FILE),
                     {split: result.statistics[split] for split in names.SPLITS})
    tfdv.write_schema_text(result.schema, os.path.join(schema_dir, names.SCHEMA_FILE))
    for split, anomalies in result.anomalies.items():
        tfdv.write_anomalies_text(anomalies, os.path.join(anomalies_dir, f"{split}-{names.ANOMALIES_FILE}"))
    summary = ["# Data validation", "", "## Schema anomalies", ""]
    summary += [f"- {line}" for line in result.problems] or ["No anomalies."]
    if result.warnings:
        summary += ["", "## Warnings", ""] + [f"- warning: {line}" for line in result.warnings]
    summary += ["", "## Drift", ""]
    if result.baseline:
        summary += [f"Baseline: {result.baseline}.", ""]
        summary += [f"- {line}" for line in result.drift] or ["No drift past its threshold."]
    else:
        summary += ["No baseline statistics yet (nothing served); drift not checked."]
    for path in filter(None, (os.path.join(anomalies_dir, names.ANOMALIES_SUMMARY), summary_md)):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(summary) + "\n")
    with open(os.path.join(anomalies_dir, VALIDATION_FILE), "w", encoding="utf-8") as f:
        json.dump({"anomalies": result.problems, "warnings": result.warnings, "drift": result.drift,
                   "baseline": result.baseline}, f, indent=2)
    html = get_statistics_html(
        lhs_statistics=result.statistics[names.TRAIN_SPLIT], rhs_statistics=result.statistics[names.EVAL_SPLIT],
        lhs_name=names.TRAIN_SPLIT, rhs_name=names.EVAL_SPLIT)
    os.makedirs(os.path.dirname(report_html) or ".", exist_ok=True)
    with open(report_html, "w", encoding="utf-8") as f:
        f.write(html)


def load_baseline(serving_base: str, model_name: str, baseline_statistics: str = ""):
    """(train statistics, description) of the drift baseline: `baseline_statistics` when
    given, else the statistics stored with the version now served; (None, "") when neither."""
    if baseline_statistics:
        path, name = baseline_statistics, f"statistics file {baseline_statistics}"
        merged = read_statistics(path)
        if merged is None:
            raise GpupipeError(f"validation.drift.baseline_statistics: {path} not found; fix the path or remove the key")
    else:
        from components.store.served import gpupipe_file, served_version

        found = served_version(serving_base, model_name) if serving_base and model_name else None
        if found is None:
            return None, ""
        path, name = gpupipe_file(found[1], names.STATS_FILE), f"served version {found[0]}"
        merged = read_statistics(path)
        if merged is None:
            return None, ""
    train = [d for d in merged.datasets if d.name == names.TRAIN_SPLIT] or list(merged.datasets[:1])
    if not train:
        raise GpupipeError(f"drift baseline: {path} holds no statistics; remove it or point at validate's stats.pb")
    return train[0], name


def run_validation(examples_dir: str, label: str, statistics_dir: str, schema_dir: str, anomalies_dir: str,
                   report_html: str, settings: Optional[ValidationSettings] = None, baseline_stats=None,
                   baseline_name: str = "", summary_md: str = "") -> ValidationResult:
    """The validate step: writes every output, then fails on blocking anomalies (schema
    anomalies and skew unless `fail_on_anomalies` is off or the feature is warn-only;
    drift when `drift.blocking`)."""
    settings = settings or ValidationSettings()
    result = validate_examples(examples_dir, label, settings, baseline_stats, baseline_name)
    write_outputs(result, statistics_dir, schema_dir, anomalies_dir, report_html, summary_md)
    warn_only = {safe_name(n) for n in settings.warn_only}
    blocking = [line for line in result.problems if settings.fail_on_anomalies and _feature_of(line) not in warn_only]
    blocking += [line for line in result.drift if settings.drift.blocking and _feature_of(line) not in warn_only]
    if blocking:
        raise GpupipeError(
            f"data validation found {len(blocking)} anomal{'y' if len(blocking) == 1 else 'ies'}: "
            + " | ".join(blocking)
            + " (fix the data, or review the schema and validation settings in the config)")
    return result


@reports_errors("validate")
def run_validate(*, examples_dir: str, columns: Columns, settings: ValidationSettings, statistics_dir: str,
                 schema_dir: str, anomalies_dir: str, summary_md: str, report_html: str, serving_base: str = "",
                 model_name: str = "") -> dict:
    """The validate step: the drift baseline is `settings.drift.baseline_statistics` or the
    statistics stored with the version served under `serving_base`. Returns counts for the
    artifact metadata."""
    baseline_stats, baseline_name = load_baseline(serving_base, model_name, settings.drift.baseline_statistics or "")
    result = run_validation(examples_dir, columns.label, statistics_dir, schema_dir, anomalies_dir, report_html,
                            settings, baseline_stats, baseline_name, summary_md)
    return {"anomalies": len(result.problems), "drift": len(result.drift), "baseline": result.baseline,
            "examples": {s: int(result.statistics[s].datasets[0].num_examples) for s in names.SPLITS}}
