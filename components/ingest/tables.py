"""What both ingest engines do to the table (this step's in-process loop in logic.py and the
Beam job in beam.py): the column types, the hash split, the per-batch preparation (rows
without a label dropped, inf refused, safe column names, tf.Example encoding) and the
checks on the whole table with the manifest written last."""
from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from components.contracts import names
from components.contracts.errors import GpupipeError
from components.contracts.examples import (as_list_batch, blockable, encode_examples, ingest_statistics_path,
                                           manifest_path)
from components.contracts.settings import safe_name
from components.contracts.statistics import write_statistics
from components.ingest.settings import DataSettings
from components.kinds import Columns
from components.kinds.base import RowSource
from components.sources import readers

SHARD_ROWS = 200_000
# gzip level 1, chosen on measurement (bench/data.py, docs/benchmarks.md): ingest ran 33%
# faster than at zlib's default level 6, for shards 1.5x larger. The in-process engine's
# shards are deflated by ISA-L (contracts/tfrecord.py; its levels are 0-3), Beam's by zlib.
GZIP_LEVEL = 1
# The hash key is fixed, so splits never depend on the process or the machine.
_HASH_KEY = "gpupipe-split-v1"


def column_types(columns: Columns, numeric_label: bool = False, split_key: Optional[str] = None
                 ) -> Dict[str, pa.DataType]:
    """Declared kinds -> Arrow types, as each kind reads its column (numeric float32,
    categorical string, ...); the label is a string (classification) or float32
    (regression), and comes first. A split key that is not a feature is read too, as text,
    for the split alone (prepare_batch drops it)."""
    types = {columns.label: pa.float32() if numeric_label else pa.string()}
    types.update({name: kind.arrow_type(setting) for name, kind, setting in columns.declared()})
    if split_key and split_key not in types:
        types[split_key] = pa.string()
    return types


def statistics_options(columns: Columns):
    """TFDV's StatsOptions for ingest's statistics: a rank histogram of at least the values a
    declared kind needs (text: its vocabulary, from its token column), else TFDV's defaults."""
    import tensorflow_data_validation as tfdv

    options = tfdv.StatsOptions()
    needed = max([kind.statistics_buckets(setting) for _, kind, setting in columns.declared()], default=0)
    if needed > options.num_rank_histogram_buckets:
        options.num_rank_histogram_buckets = needed
    return options


def split_columns(features: Sequence[str], split_key: Optional[str]) -> List[str]:
    """What the split hashes: the key column when there is one, else the feature values
    (never the label: rows whose features are the same land in one split whatever their
    labels, so a label cannot choose its rows' split)."""
    return [split_key] if split_key else list(features)


def split_is_eval(batch: pa.RecordBatch, eval_percent: int,
                  columns: Union[str, Sequence[str], None] = None) -> np.ndarray:
    """A boolean per row: True for the eval split. Deterministic for the same values: a
    fixed-key hash (pandas' SipHash) of `columns` (a name or names; None: every column
    after the label, which column_types puts first), modulo 100. (Not of the serialized
    tf.Example: protobuf does not fix the order of map entries.)"""
    if columns is None:
        columns = batch.schema.names[1:]
    elif isinstance(columns, str):
        columns = [columns]
    # Text columns as categoricals (Arrow's dictionary encoding): pandas hashes an object
    # column by factorizing it and hashing its categories, so the hashes are the same, at
    # 1.5 instead of 2.6 core-µs a row on the click-through table (no Python string a value).
    arrays = [batch.column(batch.schema.get_field_index(c)) for c in columns]
    arrays = [pc.dictionary_encode(a) if pa.types.is_string(a.type) or pa.types.is_binary(a.type) else a for a in arrays]
    frame = pa.RecordBatch.from_arrays(arrays, list(columns)).to_pandas()
    hashes = pd.util.hash_pandas_object(frame, index=False, hash_key=_HASH_KEY.ljust(16)[:16]).to_numpy()
    return (hashes % np.uint64(100)) < np.uint64(eval_percent)


def _key_times(column, columns: Columns, key: str):
    """The split key's values parsed by its datetime entry's format (split.by time)."""
    from components.kinds.datetime_parse import compile_format, parse_strings

    setting = next(setting for name, _, setting in columns.declared() if name == key)
    return parse_strings(column, compile_format(setting.format))


def time_cutoff(files: List[readers.SourceFile], settings: DataSettings, types: Dict[str, pa.DataType]
                ) -> Optional[int]:
    """split.by time: the cut-off (seconds since 1970) at or after which a row is in the eval
    split, so the newest eval_percent of the labelled rows whose time parses are (None for the
    hash split). One pass over the label and the time column alone, before the rows are read."""
    if settings.split.by != "time":
        return None
    key, label = settings.split.key, settings.label
    times = []
    for f in files:
        for batch in readers.read_batches(f, {label: types[label], key: types[key]}, settings.na_values):
            parsed = _key_times(batch.column(1).filter(pc.is_valid(batch.column(0))), settings, key)
            times.append(parsed.seconds[parsed.ok])
    found = np.sort(np.concatenate(times)) if times else np.empty(0, np.int64)
    if not len(found):
        raise GpupipeError(f"data.split: by time, but no value of column '{key}' in {settings.source} parses as a "
                           "time; set its format in data.datetime_features, or split by hash (remove split.by)")
    return int(found[min(len(found) - 1, len(found) * (100 - settings.split.eval_percent) // 100)])


def prepare_values(batch: pa.RecordBatch, columns: Columns, source: RowSource
                   ) -> Tuple[pa.RecordBatch, Dict[str, pa.Array]]:
    """Each kind's preparation of its columns (numeric: inf refused; image: paths read, each
    header checked): the batch with the prepared columns, and the columns derived for the
    statistics alone (an image's format, height and width)."""
    arrays, derived = list(batch.columns), {}
    for name, kind, setting in columns.declared():
        index = batch.schema.get_field_index(name)
        arrays[index], extra = kind.prepare_column(batch.column(index), name, setting, source)
        derived.update(extra)
    return pa.RecordBatch.from_arrays(arrays, batch.schema.names), derived


def check_not_empty(stats: Dict[str, object], columns: Columns, source: str) -> None:
    """A declared feature that is empty in every row teaches the model nothing (`stats`
    name the features by their safe names)."""
    for name in columns.features:
        present = 0
        for split_stats in stats.values():
            for feature in split_stats.datasets[0].features:
                if feature.path.step and feature.path.step[0] == safe_name(name):
                    present += common_statistics(feature).num_non_missing
        if not present:
            key = columns.key_of(name)
            raise GpupipeError(f"{key}: column '{name}' is empty in every row of {source}; remove it from {key}")


def common_statistics(feature):
    """A feature's TFDV common statistics, whatever its type's statistics are."""
    which = feature.WhichOneof("stats")
    return getattr(feature, which).common_stats if which else feature.num_stats.common_stats


@dataclass
class PreparedBatch:
    """One read batch with a label in every row, its rows ordered by split (the eval rows
    first, each split's rows in the source's order): its list columns (what TFDV takes), its
    tf.Example records, the number of eval rows, and its scalar columns under their safe
    names (what the column blocks hold: contracts.examples.encode_blocks), and each row's
    place in the batch as it was read (`offsets`: the rows without a label counted; the
    train sample's positions)."""

    lists: pa.RecordBatch
    records: List[bytes]
    eval_rows: int
    columns: pa.RecordBatch
    offsets: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.records)

    def ranges(self):
        """(split, first row, row after the last) for each split."""
        return ((names.EVAL_SPLIT, 0, self.eval_rows), (names.TRAIN_SPLIT, self.eval_rows, self.rows))


def writes_blocks(settings: DataSettings, types: Dict[str, pa.DataType], split_key: Optional[str]) -> bool:
    """Whether ingest writes the column blocks and the train sample beside the row shards
    (contracts/examples.py; both engines): for columns the blocks can hold (`column_types`'
    types, a split key that is not a feature left out), and not for a kind read one example
    at a time (an image's bytes would be written twice for nothing)."""
    return blockable([t for name, t in types.items() if name != split_key or name in settings.features]) \
        and not any(kind.per_example for _, kind, _ in settings.declared())


def to_stream(batch: Union[pa.RecordBatch, pa.Table]) -> pa.Buffer:
    """A batch (or table) in Arrow's stream format, for another process (a worker's pipe, a
    Beam job's elements): about a third of pickling it (pickle copies each buffer through
    Python)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write(batch)
    return sink.getvalue()


def prepare_batch(batch: pa.RecordBatch, columns: Columns, source: RowSource, eval_percent: int,
                  split_key: Optional[str], cutoff: Optional[int] = None) -> Tuple[int, Optional[PreparedBatch]]:
    """(rows dropped for a missing label, the rest prepared) for one batch as the reader
    gave it (column_types' columns: the label first, the features, and a split key that is
    not a feature): rows without a label dropped, values each kind refuses refused, split by
    the key or the feature values (or, given `cutoff`, by the key's time: time_cutoff), the
    key dropped unless it is a feature, encoded. Both
    engines (this module's loop and components/ingest/beam.py's DoFn) run every batch
    through it."""
    features = columns.features
    dropped = batch.column(0).null_count
    offsets = np.arange(batch.num_rows)
    if dropped:
        labelled = pc.is_valid(batch.column(0))
        offsets = np.flatnonzero(labelled.to_numpy(zero_copy_only=False))
        batch = batch.filter(labelled)
    if batch.num_rows == 0:
        return dropped, None
    batch, derived = prepare_values(batch, columns, source)
    if cutoff is not None:
        times = _key_times(batch.column(batch.schema.get_field_index(split_key)), columns, split_key)
        is_eval = times.ok & (times.seconds >= cutoff)
    else:
        is_eval = split_is_eval(batch, eval_percent, split_columns(features, split_key))
    if split_key and split_key not in features:  # read for the split alone
        keep = [i for i, name in enumerate(batch.schema.names) if name != split_key]
        batch = pa.RecordBatch.from_arrays([batch.column(i) for i in keep], [batch.schema.names[i] for i in keep])
    # The eval rows first (one take, each split then a slice of the batch, not a filter a split)
    eval_rows = int(is_eval.sum())
    if 0 < eval_rows < len(is_eval):
        order = np.concatenate([np.flatnonzero(is_eval), np.flatnonzero(~is_eval)])
        batch = batch.take(pa.array(order))
        offsets = offsets[order]
        if derived:
            derived = {name: column.take(pa.array(order)) for name, column in derived.items()}
    lists = as_list_batch(batch)
    lists = pa.RecordBatch.from_arrays(lists.columns, [safe_name(c) for c in lists.schema.names])
    records = encode_examples(batch, lists)
    columns = pa.RecordBatch.from_arrays(batch.columns, lists.schema.names)
    if derived:  # for the statistics alone, beside the features
        extra = as_list_batch(pa.RecordBatch.from_arrays(list(derived.values()), [safe_name(n) for n in derived]))
        lists = pa.RecordBatch.from_arrays([*lists.columns, *extra.columns], [*lists.schema.names, *extra.schema.names])
    return dropped, PreparedBatch(lists, records, eval_rows, columns, offsets)


def by_unit(per_file: List[dict], files: List[readers.SourceFile]) -> List[dict]:
    """The per-file counts, an image folder's summed per class folder (its files are too many to list)."""
    if not files or files[0].format != readers.IMAGE_FILE:
        return per_file
    from components.sources.images import class_of

    root, units = files[0].root, {}
    for entry in per_file:
        cls = class_of(entry["uri"], root) or entry["uri"].rsplit("/", 1)[-1]
        unit = units.setdefault(cls, {"uri": f"{root}/{cls}", "bytes": 0, "rows": 0, "files": 0})
        unit["bytes"] += entry["bytes"]
        unit["rows"] += entry["rows"]
    for cls in units:
        units[cls]["files"] = sum(1 for f in files if class_of(f.uri, root) == cls)
    return list(units.values())


def class_counts(stats: Dict[str, object], label: str) -> Dict[str, Dict[str, int]]:
    """{split: {class: rows}} from the label's statistics (TFDV's rank histogram)."""
    counts = {}
    for split, split_stats in stats.items():
        for feature in split_stats.datasets[0].features:
            if feature.path.step and feature.path.step[0] == label and feature.HasField("string_stats"):
                s = feature.string_stats
                counts[split] = {b.label: int(b.sample_count) for b in s.rank_histogram.buckets} or \
                                {v.value: int(v.frequency) for v in s.top_values}
    return counts


@dataclass(frozen=True)
class Tally:
    """What one engine's pass over the source found: the files (and per file its uri,
    bytes and rows), the rows and shards per split, the rows dropped for a missing label,
    the statistics per split (None: not computed) and the seconds spent in them (None: not
    timed apart, as inside a Beam job)."""

    files: List[readers.SourceFile]
    per_file: List[dict]
    rows: Dict[str, int]
    shards: Dict[str, int]
    dropped_no_label: int
    stats: Optional[Dict[str, object]]
    stats_seconds: Optional[float] = None
    cutoff: Optional[int] = None  # split.by time: the cut-off, seconds since 1970 (time_cutoff)


def finish_ingest(output_dir: str, settings: DataSettings, tally: Tally, *, numeric_label: bool,
                  compression_level: int, engine: Optional[dict] = None, blocks: Optional[dict] = None,
                  sample: Optional[dict] = None) -> dict:
    """The checks on the whole table (rows without a label, empty features, empty splits),
    then the statistics file and manifest.json (written last). Both engines end here."""
    source, label, split_key = settings.source, settings.label, settings.split.key
    files, rows, dropped_no_label, stats = tally.files, tally.rows, tally.dropped_no_label, tally.stats
    max_dropped_label_fraction = settings.max_dropped_label_fraction
    read = sum(rows.values()) + dropped_no_label
    if read and dropped_no_label / read > max_dropped_label_fraction:
        raise GpupipeError(
            f"data.label: {dropped_no_label} of {read} rows of {source} ({dropped_no_label / read:.0%}) have no "
            f"'{label}' (empty, or spelt like one of data.na_values); check data.label, or raise "
            f"data.max_dropped_label_fraction (now {max_dropped_label_fraction})")
    if stats and sum(rows.values()):
        check_not_empty(stats, settings, source)
        for name, kind, setting in settings.declared():  # each kind's checks on the whole table
            kind.check_statistics(safe_name(name), name, setting, stats, source)
    if sum(rows.values()) == 0:
        raise GpupipeError(f"data.source: {source} has a header but no data rows; point data.source at a file "
                           "with data")
    for split, count in rows.items():
        if count == 0:
            raise GpupipeError(
                f"data.split: the {split} split of {source} is empty ({sum(rows.values())} rows in all); "
                "add rows or change data.split.eval_percent")
    manifest = {
        "source": source,
        "format": "images" if files[0].format == readers.IMAGE_FILE else files[0].format,
        "files": by_unit(tally.per_file, files),
        "source_bytes": sum(f.size for f in files),
        "source_fingerprint": readers.fingerprint(files),
        "rows": rows,
        "shards": tally.shards,
        "rows_dropped_missing_label": dropped_no_label,
        "split": {"rule": settings.split.by, "key": split_key or "<features>",
                  "eval_percent": settings.split.eval_percent},
        "label": safe_name(label),
        "label_type": "numeric" if numeric_label else "categorical",
        "features": {safe_name(name): kind.name for name, kind, _ in settings.declared()},
        "columns": {safe_name(c): c for c in [label, *settings.features] if safe_name(c) != c},
        "compression": {"type": "GZIP", "level": compression_level},
        "engine": engine or {"name": "local"},
        # the column blocks beside the shards (contracts/examples.py): rows a block, shards a split
        **({"blocks": blocks} if blocks else {}),
        # the train sample (contracts/examples.py: TrainSample): file, rows
        **({"sample": sample} if sample else {}),
        "notes": list(getattr(files, "notes", [])),  # what the source left out (an image folder's other files)
    }
    if tally.cutoff is not None:  # eval: the rows at or after it
        manifest["split"]["cutoff"] = datetime.datetime.fromtimestamp(tally.cutoff, datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S")
    if stats and not numeric_label:
        manifest["classes"] = class_counts(stats, safe_name(label))
    if stats is not None:
        stats_path = ingest_statistics_path(output_dir)
        write_statistics(stats_path, stats)
        manifest["statistics"] = {"file": os.path.relpath(stats_path, output_dir)}
        if tally.stats_seconds is not None:  # the time in TFDV (not timed apart inside a Beam job)
            manifest["statistics"]["seconds"] = round(tally.stats_seconds, 3)
    with open(manifest_path(output_dir), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2)
    return manifest
