"""The Beam engine (components/ingest/beam.py) against the in-process path on the same
multi-file input: the same examples in the same splits, the same statistics, the same
one-line errors, nothing half-written."""
import glob
import inspect
import json
import os
import random

import pytest
import tensorflow as tf

from components.contracts.errors import GpupipeError
from components.contracts.examples import SLICE_FEATURE, block_files, examples_pattern
from components.contracts.statistics import read_statistics
from components.ingest.beam import ingest_data_beam, staging_location
from components.ingest.logic import ingest_data, pick_engine, run_ingest
from components.ingest.settings import DataSettings

# One worker runs this file: its tests share the module's Beam job (./dev test: --dist loadgroup).
pytestmark = [pytest.mark.unit, pytest.mark.xdist_group("beam-job")]

MULTI_PROCESS = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]
COLUMNS = dict(label="label", numeric_features=["x", "y"], categorical_features=["id", "color"])
FILES, ROWS_PER_FILE = 4, 800


def write_source(directory, files=FILES, rows=ROWS_PER_FILE, bad=None) -> str:
    """`files` CSVs of `rows` rows each, with missing values in x, color and (dropped)
    label; `bad`: (file, line) where x holds text."""
    rng = random.Random(7)
    os.makedirs(directory, exist_ok=True)
    for k in range(files):
        lines = ["id,label,x,y,color"]
        for i in range(rows):
            n = k * rows + i
            label = "" if n % 97 == 0 else rng.choice("ab")
            x = "" if n % 11 == 0 else f"{rng.random() * 10:.4f}"
            if bad == (k, i + 2):
                x = "oops"
            lines.append(f"r{n},{label},{x},{rng.gauss(0, 1):.5f},{rng.choice(['red', 'blue', 'green', ''])}")
        with open(os.path.join(directory, f"part-{k}.csv"), "w") as f:
            f.write("\n".join(lines) + "\n")
    return str(directory)


def records(examples_dir: str, split: str) -> list:
    """Every tf.Example of a split, serialized deterministically (the encoder's order of
    features is a map's, which differs between processes)."""
    files = sorted(glob.glob(examples_pattern(examples_dir, split)))
    return [tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
            for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def ids(serialized: set) -> set:
    return {tf.train.Example.FromString(r).features.feature["id"].bytes_list.value[0] for r in serialized}


def by_feature(dataset) -> dict:
    return {f.path.step[0]: f for f in dataset.features}


def common(feature):
    return feature.num_stats.common_stats if feature.HasField("num_stats") else feature.string_stats.common_stats


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """One multi-file source ingested by the ingest step on both engines: in process, and
    (data.engine auto, the source above the threshold) Beam's DirectRunner with two worker
    processes."""
    root = tmp_path_factory.mktemp("engines")
    source = write_source(root / "src")
    settings = DataSettings(source=source, **COLUMNS, split={"eval_percent": 25})
    local = run_ingest(settings=settings, examples_dir=str(root / "local"))
    on_beam = settings.model_copy(update={"engine": "auto", "beam_threshold_mb": 0.05,
                                          "beam_pipeline_args": MULTI_PROCESS})
    beam = run_ingest(settings=on_beam, examples_dir=str(root / "beam"))
    return {"root": root, "local": local, "beam": beam, "dirs": {k: str(root / k) for k in ("local", "beam")}}


def test_same_examples_in_the_same_splits(both):
    local, beam = both["dirs"]["local"], both["dirs"]["beam"]
    assert both["beam"]["rows"] == both["local"]["rows"]
    assert sum(both["local"]["rows"].values()) == FILES * ROWS_PER_FILE - both["local"]["rows_dropped_missing_label"]
    for split in ("train", "eval"):
        on_beam, in_process = records(beam, split), records(local, split)
        assert len(on_beam) == len(set(on_beam)) == both["local"]["rows"][split]  # none lost or written twice
        assert ids(on_beam) == ids(in_process)  # split membership
        assert set(on_beam) == set(in_process)  # the same tf.Example records
    shards = sorted(glob.glob(examples_pattern(beam, "train")))
    assert os.path.basename(shards[0]) == "part-00000.tfrecord.gz"
    with open(shards[0], "rb") as f:
        header = f.read(10)
    assert header[:2] == b"\x1f\x8b" and header[8] == 4  # gzip, at the fastest level (XFL=4), as in process


def test_same_manifest_apart_from_the_engine(both):
    beam, local = dict(both["beam"]), dict(both["local"])
    on_disk = json.loads(open(os.path.join(both["dirs"]["beam"], "manifest.json")).read())
    assert on_disk == beam
    assert beam.pop("engine") == {"name": "beam", "runner": "DirectRunner", "pipeline_args": MULTI_PROCESS}
    assert local.pop("engine") == {"name": "local", "workers": 1}
    # the column blocks for the train input, in shards of each engine's own count
    on_beam, in_process = beam.pop("blocks"), local.pop("blocks")
    assert on_beam.pop("shards")["train"] >= 1 and in_process.pop("shards")["train"] >= 1
    assert on_beam == in_process == {"rows": 1024, "compression": "none"}
    # and the train sample (the linear start's rows): every train row of this small table
    assert beam.pop("sample") == local.pop("sample") == {"file": "sample/train.parquet", "rows": local["rows"]["train"]}
    beam.pop("shards"), local.pop("shards")
    assert beam.pop("statistics") == {"file": "statistics/stats.pb"}
    assert local.pop("statistics")["file"] == "statistics/stats.pb"
    assert beam == local  # files with their rows, dropped labels, split rule, types, fingerprint, gzip level


def block_rows(examples_dir: str, split: str) -> set:
    """(id, validation-slice bucket) of every row in a split's column blocks."""
    files = block_files(examples_pattern(examples_dir, split))
    assert files and all(f.endswith(".tfrecord") for f in files)  # uncompressed, as the feed reads them
    rows = set()
    for record in tf.data.TFRecordDataset(files):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        ids, buckets = feature["id"].bytes_list.value, feature[SLICE_FEATURE].int64_list.value
        assert len(ids) == len(buckets) <= 1024
        rows.update(zip(ids, buckets))
    return rows


def test_the_job_writes_the_column_blocks_and_the_train_sample_as_in_process(both):
    """The feed's input from the Beam job: each split's rows in column blocks, each with the
    bucket the train input's hash gives its row-wise record, as the in-process engine's;
    and the train sample (every train row of this small table) the same table."""
    import pyarrow.parquet as pq

    beam, local = both["dirs"]["beam"], both["dirs"]["local"]
    for split in ("train", "eval"):
        rows = block_rows(beam, split)
        assert len(rows) == both["local"]["rows"][split] and rows == block_rows(local, split)
        written = tf.data.TFRecordDataset(sorted(glob.glob(examples_pattern(beam, split))), compression_type="GZIP")
        hashed = [tf.strings.to_hash_bucket_fast(r, 100).numpy() for r in written]  # train/data.py's slice hash
        assert sorted(b for _, b in rows) == sorted(int(b) for b in hashed)
    sample = {d: pq.read_table(os.path.join(both["dirs"][d], "sample", "train.parquet")) for d in ("beam", "local")}
    assert sample["beam"].num_rows == both["local"]["rows"]["train"] and sample["beam"].equals(sample["local"])


def test_the_sample_combiner_keeps_the_rows_of_smallest_priority_however_the_parts_meet():
    """SmallestRows (the job's combine of each file's sample part) with room for 300 rows, over
    three files' parts of 2,000 rows: the 300 rows of smallest priority of all 6,000, in the
    files' order, whichever parts its accumulators met first."""
    import numpy as np
    import pyarrow as pa

    from components.contracts.examples import TrainSample, row_priorities, smallest_rows
    from components.ingest.beam import _FILE_SHIFT, SmallestRows
    from components.ingest.tables import to_stream

    rows, size = 2000, 300
    parts = []
    for k in range(3):
        sample = TrainSample(size=size)
        columns = pa.RecordBatch.from_arrays([pa.array(np.arange(k * rows, (k + 1) * rows, dtype=np.float32))], ["x"])
        for start in range(0, rows, 700):  # the file's batches
            n = min(700, rows - start)
            sample.add(columns.slice(start, n), [f"row {k * rows + start + i}".encode() for i in range(n)],
                       (k << _FILE_SHIFT) + np.arange(start, start + n))
        parts.append(to_stream(sample.part()).to_pybytes())
    positions = np.concatenate([(k << _FILE_SHIFT) + np.arange(rows) for k in range(3)]).astype(np.uint64)
    expected = np.sort(np.argsort(row_priorities(positions))[:size]).astype(np.float32)  # x is the row's index

    combine = SmallestRows(size)
    one = combine.extract_output(
        combine.merge_accumulators([combine.add_input(combine.create_accumulator(), parts[2]),
                                    combine.add_input(combine.add_input(combine.create_accumulator(), parts[0]),
                                                      parts[1])]))
    other = combine.extract_output(combine.add_input(combine.add_input(combine.add_input(
        combine.create_accumulator(), parts[1]), parts[2]), parts[0]))
    for merged in (one, other):
        table = smallest_rows([merged], size)
        np.testing.assert_array_equal(table.column("x").to_numpy(), expected)
    assert combine.extract_output(combine.create_accumulator()) == b""  # no train row in any file


def test_same_statistics_counts_exact_means_close(both):
    local = {d.name: d for d in read_statistics(os.path.join(both["dirs"]["local"], "statistics/stats.pb")).datasets}
    beam = {d.name: d for d in read_statistics(os.path.join(both["dirs"]["beam"], "statistics/stats.pb")).datasets}
    assert sorted(beam) == sorted(local) == ["eval", "train"]
    for split in ("train", "eval"):
        assert beam[split].num_examples == local[split].num_examples == both["local"]["rows"][split]
        fb, fl = by_feature(beam[split]), by_feature(local[split])
        assert sorted(fb) == sorted(fl) == ["color", "id", "label", "x", "y"]
        for name in fl:
            assert (common(fb[name]).num_non_missing, common(fb[name]).num_missing) == \
                   (common(fl[name]).num_non_missing, common(fl[name]).num_missing), name
            if fl[name].HasField("num_stats"):
                assert fb[name].num_stats.mean == pytest.approx(fl[name].num_stats.mean, rel=1e-9)
                assert fb[name].num_stats.num_zeros == fl[name].num_stats.num_zeros
                assert (fb[name].num_stats.min, fb[name].num_stats.max) == \
                       (fl[name].num_stats.min, fl[name].num_stats.max)
            else:
                assert fb[name].string_stats.unique == fl[name].string_stats.unique
        assert common(fl["x"]).num_missing > 0  # the missing values were there to count


def test_a_bad_row_is_the_same_one_line_error_and_nothing_is_written(tmp_path, monkeypatch):
    """The source on gs:// (the gcs emulator), read by the job's workers; a bad row in the
    second file leaves nothing written."""
    from components.contracts.storage.gcs import client as gcs_client
    from tests.fixtures.gcs import gcs_emulator

    local_source = write_source(tmp_path / "src", files=3, rows=200, bad=(1, 57))
    with gcs_emulator(monkeypatch) as bucket:
        for name in sorted(os.listdir(local_source)):
            gcs_client().bucket(bucket).blob(f"raw/{name}").upload_from_filename(os.path.join(local_source, name))
        source = f"gs://{bucket}/raw"
        with pytest.raises(GpupipeError) as in_process:
            ingest_data(DataSettings(source=source, **COLUMNS), str(tmp_path / "local"))
        with pytest.raises(GpupipeError) as on_beam:
            ingest_data_beam(DataSettings(source=source, **COLUMNS), str(tmp_path / "beam"))
        message = str(on_beam.value)
        assert message == str(in_process.value)
        assert message.startswith(f"data.source: {source}/part-1.csv line 57: column 'x' is declared numeric but "
                                  "holds") and "\n" not in message
        assert [b.name for b in gcs_client().list_blobs(bucket)] == [f"raw/part-{k}.csv" for k in range(3)]
    assert not os.path.exists(tmp_path / "beam")  # no shard, no manifest
    assert sorted(os.listdir(tmp_path)) == ["local", "src"]  # and nothing staged beside it


def test_a_remote_runner_needs_a_temp_location_and_data_it_can_reach(tmp_path):
    with pytest.raises(GpupipeError, match=r"^data.beam_pipeline_args: --runner=DataflowRunner .* add "
                                           r"--temp_location=gs://"):
        staging_location(str(tmp_path / "examples"), ["--runner=DataflowRunner", "--project=p"])
    staged = staging_location(str(tmp_path / "ex"), ["--runner=FlinkRunner", "--temp_location=gs://b/tmp/"])
    assert staged.startswith("gs://b/tmp/gpupipe-ingest-")
    assert os.path.dirname(staging_location(str(tmp_path / "ex"), [])) == str(tmp_path)
    source = write_source(tmp_path / "src", files=1, rows=5)
    with pytest.raises(GpupipeError, match=r"^data.source: .*part-0.csv is on this task's disk, which the workers of "
                                           r"--runner=DataflowRunner cannot read; put the data on gs://"):
        ingest_data_beam(DataSettings(source=source, **COLUMNS, beam_pipeline_args=[
            "--runner=DataflowRunner", "--temp_location=gs://b/tmp"]), str(tmp_path / "o"))
    with pytest.raises(GpupipeError, match=r"^data.beam_pipeline_args: --runner=FastRunner is not a Beam runner; use "):
        ingest_data_beam(DataSettings(source=source, **COLUMNS, beam_pipeline_args=["--runner=FastRunner"]),
                         str(tmp_path / "o"))
    assert sorted(os.listdir(tmp_path)) == ["src"]


@pytest.mark.parametrize("engine, threshold, expected", [("local", 0.0001, "local"), ("beam", 1e6, "beam"),
                                                         ("auto", 1e6, "local"), ("auto", 0.0001, "beam")])
def test_engine_auto_picks_by_the_source_size(tmp_path, engine, threshold, expected):
    source = write_source(tmp_path / "src", files=2, rows=20)  # about 1.6 kB
    settings = DataSettings(source=source, **COLUMNS, engine=engine, beam_threshold_mb=threshold)
    assert pick_engine(settings)[0] == expected


def test_both_engines_split_by_a_key_that_is_not_a_feature_and_keep_feature_twins_together(tmp_path):
    """Acceptance (issue #27, 1) on both engines: a split key that is no feature ('id' is
    read for the split, not written), and, without a key, rows with the same features and
    different labels in one split; Beam's job and the in-process loop give the same records."""
    source = write_source(tmp_path / "src", files=2, rows=300)
    twins = tmp_path / "twins"
    twins.mkdir()
    with open(os.path.join(source, "part-0.csv")) as f:
        header, *lines = f.read().splitlines()
    flipped = [",".join([c[0] + "-twin", {"a": "b", "b": "a"}.get(c[1], c[1]), *c[2:]])
               for c in (line.split(",") for line in lines)]
    (twins / "part-0.csv").write_text("\n".join([header, *lines, *flipped]) + "\n")
    columns = dict(label="label", numeric_features=["x", "y"], categorical_features=["color"])
    cases = {"keyed": (source, "id"), "twins": (str(twins), None)}
    for case, (src, key) in cases.items():
        out = {engine: str(tmp_path / f"{case}-{engine}") for engine in ("local", "beam")}
        settings = DataSettings(source=src, **columns, split={"eval_percent": 30, "key": key})
        local, beam = ingest_data(settings, out["local"]), ingest_data_beam(settings, out["beam"])
        assert local["rows"] == beam["rows"] and local["split"]["key"] == (key or "<features>")
        for split in ("train", "eval"):
            in_process = records(out["local"], split)
            assert in_process and set(records(out["beam"], split)) == set(in_process), (case, split)
            assert all("id" not in tf.train.Example.FromString(r).features.feature for r in in_process)
        if case == "twins":  # each row and its twin (same x and y, the other label): one split
            where = {}
            for split in ("train", "eval"):
                for r in records(out["local"], split):
                    feature = tf.train.Example.FromString(r).features.feature
                    where.setdefault(feature["y"].float_list.value[0], set()).add(split)
            labelled = sum(1 for line in lines if line.split(",")[1])  # a row without a label is dropped
            assert len(where) == labelled > 290 and all(len(splits) == 1 for splits in where.values())
            assert sum(local["rows"].values()) == 2 * labelled


def test_both_engines_take_one_signature():
    """Issue #28: the engines take the data section and the run's inputs alike; the
    in-process one adds only its own tuning (rows per shard, gzip level, statistics)."""
    local = list(inspect.signature(ingest_data).parameters.values())
    beam = list(inspect.signature(ingest_data_beam).parameters.values())
    assert [p.name for p in beam] == ["settings", "output_dir", "numeric_label"]
    assert local[:len(beam)] == beam
    assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in local[2:])
