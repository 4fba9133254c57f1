"""Ingest as one Apache Beam job (`data.engine: beam`), on the runner that
`data.beam_pipeline_args` names: the DirectRunner in this task by default, or Dataflow,
Flink, Spark, a portable runner.

The job runs the in-process path's own code on each source file (components/sources
readers, `tables.prepare_batch`: the same casts, missing values, inf check, hash split and
tfx_bsl encoder), writes the same layout (`{train,eval}/part-NNNNN.tfrecord.gz`, gzip)
with Beam's TFRecord sink, and computes the statistics in the same job with TFDV's
`GenerateStatistics` on the same Arrow batches. Where the in-process engine writes them
(`tables.writes_blocks`), the job writes the column blocks beside the shards
(`blocks/{train,eval}/part-NNNNN.tfrecord`, the feed's input) and the train sample (the
files' parts combined into one, `SmallestRows`; a row's position is its file's index and
its row in the file, so a table of several files gives another uniform sample than the
in-process engine's). The driver then applies the same checks on the whole table and
writes the same manifest.json (`tables.finish_ingest`).

Nothing half-written: the job writes into a staging location (`--temp_location` when
given, else a directory beside the examples artifact); only when it succeeded and the
checks pass are its files moved into the artifact, manifest.json last. A bad row ends the
job's work on that file and is reported as the same one-line GpupipeError as in process
(of the first bad file in source order); the staging location is then removed.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
import uuid
from typing import List, Optional, Sequence

import apache_beam as beam
from apache_beam import coders
from apache_beam.io.filesystem import CompressionTypes

from components.contracts import names
from components.contracts.compat.beam import TFRecordSink
from components.contracts.errors import GpupipeError
from components.contracts.examples import (BLOCK_ROWS, SAMPLE_ROWS, TrainSample, block_files, encode_blocks,
                                           examples_pattern, manifest_path, slice_buckets, smallest_rows,
                                           write_train_sample)
from components.contracts.storage import is_remote, schemes
from components.ingest.settings import DataSettings
from components.ingest.tables import (GZIP_LEVEL, Tally, column_types, finish_ingest, prepare_batch,
                                      statistics_options, time_cutoff, to_stream, writes_blocks)
from components.kinds import Columns
from components.kinds.base import RowSource
from components.sources import readers

_LOCAL_RUNNERS = {"", "DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner", "PrismRunner"}
_JOB = "_job"  # the job's own small outputs inside the staging location (per-file counts, errors, statistics)
_BATCHES = "_batches"


def _tag(split: str) -> str:
    return split + _BATCHES


def _blocks_tag(split: str) -> str:
    return split + "_blocks"


# A sampled row's position: its file's index in the high bits, its row in the file below
# (no file's row count is known before it is read), so no two rows share one.
_FILE_SHIFT = 40


class ReadPrepareSplit:
    """The per-file work, as a DoFn's body: (index, SourceFile) -> per split, the tf.Example
    records of each batch and its list-column batch (for statistics), and with `with_blocks`
    its column blocks and the file's part of the train sample (contracts/examples.py, as the
    in-process engine writes them); then one summary of the file, or the file's one-line
    error."""

    def __init__(self, types, columns: Columns, na_values: Sequence[str], eval_percent: int,
                 split_key: Optional[str], cutoff: Optional[int] = None, with_blocks: bool = False):
        self.types, self.columns, self.na_values = types, columns, list(na_values)
        self.eval_percent, self.split_key, self.cutoff = eval_percent, split_key, cutoff
        self.with_blocks = with_blocks

    def __call__(self, item):
        from apache_beam import pvalue

        index, f = item
        rows = {split: 0 for split in names.SPLITS}
        dropped, read = 0, 0
        sample = TrainSample() if self.with_blocks else None
        try:
            for batch in readers.read_batches(f, self.types, self.na_values):
                first_row, read = (index << _FILE_SHIFT) + read, read + batch.num_rows
                lost, prepared = prepare_batch(batch, self.columns, RowSource(f.uri, f.format), self.eval_percent,
                                               self.split_key, self.cutoff)
                dropped += lost
                if prepared is None:
                    continue
                for split, start, stop in prepared.ranges():
                    if stop > start:
                        rows[split] += stop - start
                        records = prepared.records[start:stop]
                        yield pvalue.TaggedOutput(split, records)
                        yield pvalue.TaggedOutput(_tag(split), prepared.lists.slice(start, stop - start))
                        if self.with_blocks:
                            columns = prepared.columns.slice(start, stop - start)
                            yield pvalue.TaggedOutput(_blocks_tag(split),
                                                      encode_blocks(columns, slice_buckets(records)))
                            if split == names.TRAIN_SPLIT:
                                sample.add(columns, records, first_row + prepared.offsets[start:stop])
        except GpupipeError as err:
            yield pvalue.TaggedOutput("errors", json.dumps({"index": index, "error": str(err)}))
            return
        part = sample.part() if sample is not None else None
        if part is not None:
            yield pvalue.TaggedOutput("sample", to_stream(part).to_pybytes())
        yield pvalue.TaggedOutput("files", json.dumps({"index": index, "uri": f.uri, "bytes": f.size,
                                                       "rows": sum(rows.values()), "split_rows": rows,
                                                       "dropped": dropped}))


class SmallestRows(beam.CombineFn):
    """The files' train sample parts merged into one (contracts/examples.py: smallest_rows):
    at most `size` rows held at any step, whatever the number of files."""

    def __init__(self, size: int = SAMPLE_ROWS):
        super().__init__()
        self.size = size

    def _merged(self, parts) -> Optional[bytes]:
        table = smallest_rows(list(parts), self.size)
        return to_stream(table).to_pybytes() if table is not None else None

    def create_accumulator(self):
        return None

    def add_input(self, accumulator, part):
        return self._merged([accumulator, part])

    def merge_accumulators(self, accumulators):
        return self._merged(accumulators)

    def extract_output(self, accumulator):
        return accumulator or b""


def pipeline_options(pipeline_args: Sequence[str]):
    from apache_beam.options.pipeline_options import PipelineOptions

    return PipelineOptions(list(pipeline_args))


def runner_of(pipeline_args: Sequence[str]) -> str:
    """The runner the arguments name ("" for none: the DirectRunner); an unknown one is a
    one-line error."""
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.runners.runner import create_runner

    runner = pipeline_options(pipeline_args).view_as(StandardOptions).runner or ""
    runner = runner if isinstance(runner, str) else type(runner).__name__
    if runner:
        try:
            create_runner(runner)
        except ValueError:
            raise GpupipeError(f"data.beam_pipeline_args: --runner={runner} is not a Beam runner; use DirectRunner, "
                               "DataflowRunner, FlinkRunner, SparkRunner, PortableRunner or PrismRunner") from None
    return runner


def staging_location(examples_dir: str, pipeline_args: Sequence[str]) -> str:
    """Where the job writes: under --temp_location when given (the runner's workers must
    reach it), else a new directory beside the examples artifact (a local runner)."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    temp = pipeline_options(pipeline_args).view_as(GoogleCloudOptions).temp_location
    job = f"gpupipe-ingest-{uuid.uuid4().hex[:12]}"
    if temp:
        return temp.rstrip("/") + "/" + job
    runner = runner_of(pipeline_args)
    if runner not in _LOCAL_RUNNERS:
        raise GpupipeError(f"data.beam_pipeline_args: --runner={runner} runs on other machines, which cannot write "
                           "into this task's examples directory; add --temp_location=gs://BUCKET/tmp (a location "
                           "the workers and this task both reach)")
    return os.path.join(os.path.dirname(os.path.abspath(examples_dir)),
                        f".{os.path.basename(os.path.abspath(examples_dir))}.{job}")


class _GzipWriter:
    """A file handle that gzips what is written to it at `level`, in chunks of about 1 MB,
    into a file Beam opened."""

    def __init__(self, raw, level: int, chunk: int = 1 << 20):
        import gzip

        self._raw, self._chunk = raw, chunk
        self._gzip = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0)
        self._pending, self._size = [], 0

    def write(self, data: bytes) -> None:
        self._pending.append(data)
        self._size += len(data)
        if self._size >= self._chunk:
            self._flush()

    def _flush(self) -> None:
        self._gzip.write(b"".join(self._pending))
        self._pending, self._size = [], 0

    def close(self) -> None:
        self._flush()
        self._gzip.close()
        self._raw.close()


class GzipTFRecordSink(TFRecordSink):
    """Beam's TFRecord sink with its shards gzipped at ingest's level (Beam's own gzip has
    no level and uses zlib's default, 6: slower, and ingest is gzip-bound), named
    `<prefix>-NNNNN.tfrecord.gz` like the in-process path's."""

    def __init__(self, prefix: str):
        super().__init__(prefix, coders.BytesCoder(), ".tfrecord.gz", 0, "-SSSSS", CompressionTypes.UNCOMPRESSED)

    def open(self, temp_path):
        return _GzipWriter(super().open(temp_path), GZIP_LEVEL)


def check_reachable(files: List[readers.SourceFile], pipeline_args: Sequence[str]) -> None:
    """A remote runner's workers read the source themselves: a file on this task's disk is
    out of their reach."""
    runner = runner_of(pipeline_args)
    local = [f.uri for f in files if f.format != "synthetic" and not is_remote(f.uri)]
    if runner not in _LOCAL_RUNNERS and local:
        raise GpupipeError(f"data.source: {local[0]} is on this task's disk, which the workers of --runner={runner} "
                           f"cannot read; put the data on {schemes.named()} (or run on the DirectRunner)")


def build_pipeline(p, files: List[readers.SourceFile], staging: str, fn: ReadPrepareSplit) -> None:
    """The job: files -> per-file DoFn -> TFRecord shards per split, TFDV statistics per
    split, with `fn.with_blocks` the column blocks per split and the combined train sample,
    per-file summaries and errors, all under `staging`."""
    import tensorflow_data_validation as tfdv

    out = (p
           | "Files" >> beam.Create(list(enumerate(files)))
           | "Spread" >> beam.Reshuffle()
           | "ReadPrepareSplit" >> beam.FlatMap(fn).with_outputs(
               *names.SPLITS, *map(_tag, names.SPLITS), *map(_blocks_tag, names.SPLITS), "sample", "files",
               "errors"))
    job = staging.rstrip("/") + "/" + _JOB
    for split in names.SPLITS:
        prefix = staging.rstrip("/") + f"/{split}/part"
        (out[split]
         | f"Records{split}" >> beam.FlatMap(lambda records: records)
         | f"Write{split}" >> beam.io.Write(GzipTFRecordSink(prefix)))
        (out[_tag(split)]
         | f"Statistics{split}" >> tfdv.GenerateStatistics(statistics_options(fn.columns))
         | f"WriteStatistics{split}" >> tfdv.WriteStatisticsToBinaryFile(f"{job}/{split}.{names.STATS_FILE}"))
        if fn.with_blocks:  # without compression, named as the in-process engine's (examples.block_shard_path)
            (out[_blocks_tag(split)]
             | f"Blocks{split}" >> beam.FlatMap(lambda blocks: blocks)
             | f"WriteBlocks{split}" >> beam.io.WriteToTFRecord(
                 staging.rstrip("/") + f"/blocks/{split}/part", file_name_suffix=".tfrecord",
                 shard_name_template="-SSSSS", compression_type=CompressionTypes.UNCOMPRESSED))
    if fn.with_blocks:
        (out["sample"]
         | "Sample" >> beam.CombineGlobally(SmallestRows())
         | "WriteSample" >> beam.io.WriteToTFRecord(f"{job}/sample", shard_name_template="",
                                                    compression_type=CompressionTypes.UNCOMPRESSED))
    for what in ("files", "errors"):
        out[what] | f"Write{what}" >> beam.io.WriteToText(f"{job}/{what}.jsonl", shard_name_template="")


def _json_lines(path: str) -> List[dict]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _records(path: str) -> List[bytes]:
    """The records of a TFRecord file the job wrote without compression ([] when none)."""
    if not os.path.exists(path):
        return []
    import tensorflow as tf

    return [record for record in (r.numpy() for r in tf.data.TFRecordDataset(path)) if record]


def _read_stats(path: str, split: str):
    from tensorflow_metadata.proto.v0 import statistics_pb2

    stats = statistics_pb2.DatasetFeatureStatisticsList()
    if os.path.exists(path):
        with open(path, "rb") as f:
            stats.ParseFromString(f.read())
    if stats.datasets:
        stats.datasets[0].name = split
    return stats


def _remote(path: str) -> bool:
    """gs://, s3://, hdfs://...: a filesystem Beam reaches, not this task's disk."""
    return "://" in path


def _fetch(staging: str, local: str, options) -> None:
    """Every file the job wrote under a remote staging prefix, into `local` (Beam's
    filesystems: gs://, s3://, hdfs://, whichever the runner wrote to)."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    FileSystems.set_options(options)  # the job's credentials options, also for this task's reads
    prefix = staging.rstrip("/") + "/"
    for meta in FileSystems.match([prefix + "**"])[0].metadata_list:
        target = os.path.join(local, meta.path[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with FileSystems.open(meta.path, compression_type=CompressionTypes.UNCOMPRESSED) as src, \
                open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 << 20)


def _delete(staging: str, options) -> None:
    from apache_beam.io.filesystems import BeamIOError, FileSystems

    FileSystems.set_options(options)
    try:
        paths = [m.path for m in FileSystems.match([staging.rstrip("/") + "/**"])[0].metadata_list]
    except BeamIOError:  # nothing was written there
        return
    if paths:
        FileSystems.delete(paths)


def _move_into(local: str, output_dir: str) -> None:
    """The staged files into the examples directory: the splits and statistics first, the
    manifest last (a reader that goes by it never sees it before what it names)."""
    os.makedirs(output_dir, exist_ok=True)
    entries = sorted(os.listdir(local), key=lambda n: (n == os.path.basename(manifest_path(local)), n))
    for name in entries:
        target = os.path.join(output_dir, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        shutil.move(os.path.join(local, name), target)  # a rename on one filesystem


def ingest_data_beam(settings: DataSettings, output_dir: str, *, numeric_label: bool = False) -> dict:
    """`logic.ingest_data`'s outputs (shards, the column blocks and train sample where it
    writes them, statistics/stats.pb, manifest.json) from one Beam job on the runner in
    `settings.beam_pipeline_args`; the same arguments. Returns the manifest."""
    label, split_key, eval_percent = settings.label, settings.split.key, settings.split.eval_percent
    pipeline_args = list(settings.beam_pipeline_args)
    runner_of(pipeline_args)
    files = readers.resolve(settings.source, settings.format)
    readers.check_file_columns(files[0], label, settings.features, split_key)
    types = column_types(settings, numeric_label, split_key)
    check_reachable(files, pipeline_args)
    cutoff = time_cutoff(files, settings, types)  # split.by time: one pass over the time column here, first
    staging = staging_location(output_dir, pipeline_args)
    local = staging if not _remote(staging) else tempfile.mkdtemp(
        prefix=".gpupipe-ingest-", dir=os.path.dirname(os.path.abspath(output_dir)))
    try:
        pipeline = beam.Pipeline(options=pipeline_options(pipeline_args))
        if _remote(staging):  # Beam's filesystems, here too, with the job's options (credentials)
            from apache_beam.io.filesystems import FileSystems

            FileSystems.set_options(pipeline.options)
        fn = ReadPrepareSplit(types, Columns.part_of(settings), settings.na_values, eval_percent, split_key,
                              cutoff, with_blocks=writes_blocks(settings, types, split_key))
        build_pipeline(pipeline, files, staging, fn)
        pipeline.run().wait_until_finish()
        if _remote(staging):
            _fetch(staging, local, pipeline_options(pipeline_args))
        job = os.path.join(local, _JOB)
        errors = sorted(_json_lines(os.path.join(job, "errors.jsonl")), key=lambda e: e["index"])
        if errors:
            raise GpupipeError(errors[0]["error"])
        summaries = sorted(_json_lines(os.path.join(job, "files.jsonl")), key=lambda s: s["index"])
        rows = {split: sum(s["split_rows"][split] for s in summaries) for split in names.SPLITS}
        stats = {split: _read_stats(os.path.join(job, f"{split}.{names.STATS_FILE}"), split)
                 for split in names.SPLITS if rows[split]}
        shards = {split: len(glob.glob(examples_pattern(local, split))) for split in names.SPLITS}
        blocks = {"rows": BLOCK_ROWS, "compression": "none",
                  "shards": {split: len(block_files(examples_pattern(local, split))) for split in names.SPLITS}} \
            if fn.with_blocks else None
        sample = write_train_sample(local, _records(os.path.join(job, "sample"))) if fn.with_blocks else None
        shutil.rmtree(job)
        tally = Tally(files=files,
                      per_file=[{"uri": s["uri"], "bytes": s["bytes"], "rows": s["rows"]} for s in summaries],
                      rows=rows, shards=shards, dropped_no_label=sum(s["dropped"] for s in summaries), stats=stats,
                      cutoff=cutoff)
        engine = {"name": "beam", "runner": runner_of(pipeline_args) or "DirectRunner", "pipeline_args": pipeline_args}
        manifest = finish_ingest(local, settings, tally, numeric_label=numeric_label, compression_level=GZIP_LEVEL,
                                 engine=engine, blocks=blocks, sample=sample)
        _move_into(local, output_dir)
        return manifest
    finally:
        shutil.rmtree(local, ignore_errors=True)
        if _remote(staging):
            _delete(staging, pipeline_options(pipeline_args))
