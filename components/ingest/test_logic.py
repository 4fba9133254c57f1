"""Unit tests of ingest logic on CSVs the tests write."""
import glob
import json
import os

import pytest
import tensorflow as tf

from components.contracts.errors import GpupipeError
from components.contracts.examples import examples_pattern
from components.ingest.logic import ingest_data
from components.ingest.settings import DataSettings

pytestmark = pytest.mark.unit

HEADER = "label,x,color\n"


def data(source: str, categorical=("color",), **fields) -> DataSettings:
    """The data section these tests ingest: label 'label', numeric 'x', categorical `categorical`."""
    return DataSettings(source=source, label="label", numeric_features=["x"], categorical_features=list(categorical),
                        **fields)


def read_examples(examples_dir: str, split: str) -> list:
    files = sorted(glob.glob(examples_pattern(examples_dir, split)))
    return [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def rows_text(n: int) -> str:
    return "".join(f"{'a' if i % 2 else 'b'},{i}.5,{'red' if i % 3 else 'blue'}\n" for i in range(n))


def test_writes_gzip_shards_per_split_and_manifest(tmp_path, make_csv):
    src = make_csv(HEADER + rows_text(200))
    manifest = ingest_data(data(src, split={"eval_percent": 25}), str(tmp_path / "out"))
    train, evals = read_examples(str(tmp_path / "out"), "train"), read_examples(str(tmp_path / "out"), "eval")
    assert len(train) + len(evals) == 200
    assert manifest["rows"] == {"train": len(train), "eval": len(evals)}
    assert 25 <= len(evals) <= 75  # 25% of 200 by hash, loosely
    on_disk = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk["rows"] == manifest["rows"] and on_disk["split"]["eval_percent"] == 25
    assert on_disk["features"] == {"x": "numeric", "color": "categorical"}
    with open(glob.glob(examples_pattern(str(tmp_path / "out"), "train"))[0], "rb") as f:
        assert f.read(2) == b"\x1f\x8b"  # gzip magic


def test_split_is_deterministic_across_runs_and_row_order(tmp_path, make_csv):
    lines = rows_text(300).splitlines(keepends=True)
    a = ingest_data(data(make_csv(HEADER + "".join(lines))), str(tmp_path / "a"))
    b = ingest_data(data(make_csv(HEADER + "".join(lines))), str(tmp_path / "b"))
    c = ingest_data(data(make_csv(HEADER + "".join(reversed(lines)))), str(tmp_path / "c"))
    assert a["rows"] == b["rows"] == c["rows"]

    def eval_values(d):
        return sorted(e.features.feature["x"].float_list.value[0] for e in read_examples(str(tmp_path / d), "eval"))

    assert eval_values("a") == eval_values("b") == eval_values("c")


def test_split_by_key_column_keeps_key_together(tmp_path, make_csv):
    text = HEADER.replace("color", "user") + "".join(f"a,{i}.0,u{i % 7}\n" for i in range(140))
    ingest_data(data(make_csv(text), categorical=["user"], split={"eval_percent": 30, "key": "user"}),
                str(tmp_path / "o"))
    users = {s: {e.features.feature["user"].bytes_list.value[0] for e in read_examples(str(tmp_path / "o"), s)}
             for s in ("train", "eval")}
    assert users["train"] and users["eval"] and not users["train"] & users["eval"]


def test_split_hashes_the_features_never_the_label():
    """Unit: two rows with the same feature values and different labels get the same split;
    with a key, only the key decides."""
    import numpy as np
    import pyarrow as pa

    from components.ingest.tables import split_is_eval

    n = 400
    x = pa.array([float(i % 200) for i in range(n)], pa.float32())
    color = pa.array(["red" if i % 3 else None for i in range(n)])
    a = pa.RecordBatch.from_arrays([pa.array(["a"] * n), x, color], ["label", "x", "color"])
    b = pa.RecordBatch.from_arrays([pa.array(["a" if i % 2 else "b" for i in range(n)]), x, color],
                                   ["label", "x", "color"])
    features = ["x", "color"]
    assert np.array_equal(split_is_eval(a, 30, features), split_is_eval(b, 30, features))
    assert np.array_equal(split_is_eval(b, 30, None), split_is_eval(b, 30, features))  # None: after the label
    assert 0.2 < split_is_eval(b, 30, features).mean() < 0.4
    # the label is not hashed: the same features in a batch whose label column is all different
    ids = pa.RecordBatch.from_arrays([pa.array([f"l{i}" for i in range(n)]), x, color], ["label", "x", "color"])
    assert np.array_equal(split_is_eval(ids, 30, features), split_is_eval(a, 30, features))
    # with a key, features and label are out of it: rows with one key value agree
    key = pa.array([f"u{i % 13}" for i in range(n)])
    keyed = pa.RecordBatch.from_arrays([*b.columns, key], ["label", "x", "color", "user"])
    is_eval = split_is_eval(keyed, 30, "user")
    for u in set(key.to_pylist()):
        rows = np.array(key.to_pylist()) == u
        assert len(set(is_eval[rows])) == 1


def test_the_split_hash_is_pandas_hash_of_the_plain_columns():
    """split_is_eval hashes text columns dictionary-encoded: the same hashes as pandas' of the
    plain columns (with missing values), so every row stays in the split it had."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from components.ingest.tables import _HASH_KEY, split_is_eval

    n = 2000
    batch = pa.RecordBatch.from_arrays([
        pa.array([None if i % 11 == 0 else f"v{i % 37}" for i in range(n)]),
        pa.array([None if i % 7 == 0 else i / 3 for i in range(n)], pa.float32()),
        pa.array([None if i % 13 == 0 else f"é{i}" for i in range(n)]),
    ], ["a", "x", "b"])
    plain = pd.util.hash_pandas_object(batch.to_pandas(), index=False, hash_key=_HASH_KEY.ljust(16)[:16]).to_numpy()
    expected = (plain % np.uint64(100)) < np.uint64(30)
    assert (split_is_eval(batch, 30, ["a", "x", "b"]) == expected).all() and 0 < expected.sum() < n


def test_rows_with_the_same_features_and_different_labels_land_in_one_split(tmp_path, make_csv):
    """Acceptance (issue #27, 1): each feature tuple is in the table twice, once per label;
    both copies are in the same split, in process as the Beam job (components/ingest/
    test_beam.py holds the engines to the same examples)."""
    lines = [f"{label},{i}.5,{'red' if i % 3 else 'blue'}\n" for i in range(150) for label in ("a", "b")]
    manifest = ingest_data(data(make_csv(HEADER + "".join(lines)), split={"eval_percent": 30}), str(tmp_path / "o"))
    assert manifest["split"] == {"rule": "hash", "key": "<features>", "eval_percent": 30}
    seen = {}
    for split in ("train", "eval"):
        for e in read_examples(str(tmp_path / "o"), split):
            x = e.features.feature["x"].float_list.value[0]
            seen.setdefault(x, set()).add((split, e.features.feature["label"].bytes_list.value[0]))
    assert len(seen) == 150
    assert all(len({split for split, _ in rows}) == 1 and len(rows) == 2 for rows in seen.values())
    assert 0 < manifest["rows"]["eval"] < 300


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_split_key_that_is_not_a_feature_keeps_its_rows_together(tmp_path, fmt):
    """Acceptance (issue #27, 1), through the ingest step: `data.split.key` names a column
    that is no feature (text in the CSV, integers in the Parquet file): its rows stay
    together, and it is not in the examples."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from components.ingest.logic import run_ingest
    from components.ingest.settings import DataSettings

    n = 300
    table = pa.table({"user": [i % 23 for i in range(n)], "label": ["a" if i % 2 else "b" for i in range(n)],
                      "x": [i + 0.5 for i in range(n)], "color": ["red" if i % 3 else "blue" for i in range(n)]})
    source = str(tmp_path / f"t.{fmt}")
    pq.write_table(table, source) if fmt == "parquet" else pacsv.write_csv(table, source)
    settings = DataSettings(source=source, label="label", numeric_features=["x"], categorical_features=["color"],
                            split={"key": "user", "eval_percent": 30})
    manifest = run_ingest(settings=settings, examples_dir=str(tmp_path / "o"))
    assert manifest["split"]["key"] == "user" and manifest["features"] == {"x": "numeric", "color": "categorical"}
    user_of = {x + 0.5: x % 23 for x in range(n)}
    users = {}
    for split in ("train", "eval"):
        examples = read_examples(str(tmp_path / "o"), split)
        assert examples and all(sorted(e.features.feature) == ["color", "label", "x"] for e in examples)
        users[split] = {user_of[e.features.feature["x"].float_list.value[0]] for e in examples}
    assert users["train"] and users["eval"] and not users["train"] & users["eval"]
    assert len(users["train"] | users["eval"]) == 23


def test_a_split_key_that_is_not_a_column_is_one_line(tmp_path, make_csv):
    from components.ingest.logic import run_ingest
    from components.ingest.settings import DataSettings

    source = make_csv(HEADER + rows_text(20))
    settings = DataSettings(source=source, label="label", numeric_features=["x"], categorical_features=["color"],
                            split={"key": "usr"})
    with pytest.raises(GpupipeError) as err:
        run_ingest(settings=settings, examples_dir=str(tmp_path / "o"))
    assert str(err.value) == f"data.split.key: column 'usr' not found in {source}; fix data.split.key"


def test_missing_values_stay_missing(tmp_path, make_csv):
    text = HEADER + "a,,red\nb,2.0,\n" + rows_text(40)
    ingest_data(data(make_csv(text), split={"eval_percent": 50}), str(tmp_path / "o"))
    examples = read_examples(str(tmp_path / "o"), "train") + read_examples(str(tmp_path / "o"), "eval")
    first = next(e for e in examples if e.features.feature["color"].bytes_list.value == [b"red"]
                 and not e.features.feature["x"].float_list.value)
    assert first.features.feature["x"].WhichOneof("kind") is None  # no value, not 0 or NaN
    second = next(e for e in examples if list(e.features.feature["x"].float_list.value) == [2.0])
    assert second.features.feature["color"].WhichOneof("kind") is None  # not "" or "nan"


@pytest.mark.parametrize("text, expected", [
    ("", "is empty"),
    (HEADER, "has a header but no data rows"),
    ("x,color\n1.0,red\n", "column 'label' not found"),
    (HEADER + "a,1.0,red\nb,abc,red\n", "line 3: column 'x' is declared numeric but holds 'abc'"),
])
def test_bad_input_is_one_line_naming_the_problem(tmp_path, make_csv, text, expected):
    src = make_csv(text)
    with pytest.raises(GpupipeError) as err:
        ingest_data(data(src), str(tmp_path / "o"))
    message = str(err.value)
    assert expected in message and src in message and "\n" not in message


def test_missing_file_names_the_key_and_path(tmp_path):
    with pytest.raises(GpupipeError, match=r"data.source: file not found: .*nope.csv"):
        ingest_data(data(str(tmp_path / "nope.csv"), categorical=[]), str(tmp_path / "o"))


def test_rows_without_label_are_dropped_and_counted(tmp_path, make_csv):
    manifest = ingest_data(data(make_csv(HEADER + ",1.0,red\n" + rows_text(30)), split={"eval_percent": 50}),
                           str(tmp_path / "o"))
    assert manifest["rows_dropped_missing_label"] == 1
    assert sum(manifest["rows"].values()) == 30


def test_shards_roll_over(tmp_path, make_csv):
    manifest = ingest_data(data(make_csv(HEADER + rows_text(100)), split={"eval_percent": 10}), str(tmp_path / "o"),
                           shard_rows=20)
    shards = sorted(glob.glob(examples_pattern(str(tmp_path / "o"), "train")))
    assert manifest["shards"]["train"] == len(shards) >= 4
    sizes = [sum(1 for _ in tf.data.TFRecordDataset(f, compression_type="GZIP")) for f in shards]
    assert sizes[:-1] == [20] * (len(shards) - 1) and 0 < sizes[-1] <= 20  # each full but the last
    assert sum(sizes) == manifest["rows"]["train"]
    assert os.path.isfile(tmp_path / "o" / "manifest.json")


# ---------------------------------------------------------------- sources and formats
def _table(n=60):
    import pyarrow as pa

    return pa.table({"label": [("a" if i % 2 else "b") for i in range(n)],
                     "x": [None if i % 7 == 0 else float(i) + 0.5 for i in range(n)],
                     "color": [("red" if i % 3 else None) for i in range(n)]})


def _all_x(out):
    return sorted(e.features.feature["x"].float_list.value[0] if e.features.feature["x"].float_list.value else -1
                  for split in ("train", "eval") for e in read_examples(out, split))


def test_parquet_csv_and_tfrecord_sources_give_the_same_examples(tmp_path):
    import gzip

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    table = _table()
    pq.write_table(table, tmp_path / "d.parquet")
    pacsv.write_csv(table, tmp_path / "d.csv")
    with open(tmp_path / "d.csv", "rb") as src, gzip.open(tmp_path / "d.csv.gz", "wb") as dst:
        dst.write(src.read())
    ingest_data(data(str(tmp_path / "d.csv"), split={"eval_percent": 30}), str(tmp_path / "from-csv"))
    results = {}
    for name in ("d.parquet", "d.csv.gz"):
        out = str(tmp_path / f"from-{name}")
        results[name] = ingest_data(data(str(tmp_path / name), split={"eval_percent": 30}), out)
        assert _all_x(out) == _all_x(str(tmp_path / "from-csv"))
    # TFRecord in: the CSV ingest's own output shards, as a glob
    out = str(tmp_path / "from-tfrecord")
    manifest = ingest_data(data(str(tmp_path / "from-csv" / "*" / "part-*.tfrecord.gz"), split={"eval_percent": 30}),
                           out)
    assert manifest["format"] == "tfrecord" and sum(manifest["rows"].values()) == 60
    assert _all_x(out) == _all_x(str(tmp_path / "from-csv"))
    # the same rows land in the same split whatever the format
    assert results["d.parquet"]["rows"] == results["d.csv.gz"]["rows"] == manifest["rows"]


def test_a_tfrecord_feature_with_several_values_in_a_later_record_is_one_line(tmp_path):
    import tensorflow as tf

    source = str(tmp_path / "multi.tfrecord")
    with tf.io.TFRecordWriter(source) as writer:
        for i in range(30):
            xs = [float(i), 1.0] if i == 24 else [float(i)]
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "label": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a" if i % 2 else b"b"])),
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=xs))})).SerializeToString())
    with pytest.raises(GpupipeError) as err:
        ingest_data(data(source, categorical=[]), str(tmp_path / "o"))
    assert str(err.value) == (f"data.source: {source} record 25: feature 'x' holds 2 values; gpupipe reads one value "
                              "per feature: write one value per feature (one feature per value)")


def test_directory_source_reads_every_file_and_lists_them(tmp_path, make_csv):
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.csv").write_text(HEADER + rows_text(30))
    (d / "b.csv").write_text(HEADER + rows_text(20))
    (d / "_SUCCESS").write_text("")
    manifest = ingest_data(data(str(d), split={"eval_percent": 30}), str(tmp_path / "o"))
    assert sum(manifest["rows"].values()) == 50
    assert [(f["uri"].rsplit("/", 1)[-1], f["rows"]) for f in manifest["files"]] == [("a.csv", 30), ("b.csv", 20)]
    assert all(f["bytes"] > 0 for f in manifest["files"])


def test_source_from_gcs_prefix_through_the_emulator(tmp_path, monkeypatch):
    from components.contracts.storage.gcs import client as gcs_client
    from tests.fixtures.gcs import gcs_emulator

    with gcs_emulator(monkeypatch) as bucket:
        b = gcs_client().bucket(bucket)
        b.blob("raw/part-1.csv").upload_from_string(HEADER + rows_text(40))
        b.blob("raw/part-2.csv").upload_from_string(HEADER + rows_text(25))
        manifest = ingest_data(data(f"gs://{bucket}/raw", split={"eval_percent": 30}), str(tmp_path / "o"))
        assert sum(manifest["rows"].values()) == 65
        assert [f["uri"] for f in manifest["files"]] == [f"gs://{bucket}/raw/part-1.csv", f"gs://{bucket}/raw/part-2.csv"]
        with pytest.raises(GpupipeError, match=f"data.source: gs://{bucket}/raw/nope.csv does not exist"):
            ingest_data(data(f"gs://{bucket}/raw/nope.csv"), str(tmp_path / "o2"))


def _truncated_parquet(tmp_path):
    import pyarrow.parquet as pq

    pq.write_table(_table(), tmp_path / "t.parquet")
    data = (tmp_path / "t.parquet").read_bytes()
    (tmp_path / "t.parquet").write_bytes(data[: len(data) // 2])
    return str(tmp_path / "t.parquet")


def _truncated_gzip(tmp_path):
    import gzip

    data = gzip.compress((HEADER + rows_text(2000)).encode())
    (tmp_path / "t.csv.gz").write_bytes(data[: len(data) // 2])
    return str(tmp_path / "t.csv.gz")


@pytest.mark.parametrize("make, expected", [
    (lambda p: str(p / "none-*.csv"), "matches no files"),
    (lambda p: (p / "empty-dir").mkdir() or str(p / "empty-dir"), "is an empty directory"),
    (lambda p: write(p / "r.csv", HEADER + "a,1.0,red\nb,2.0,red,extra\n"), "line 3: row has a different number "
                                                                             "of fields than the header's 3"),
    (lambda p: write(p / "u.csv", HEADER.encode() + b"a,1.0,red\nb,2.0,r\xe9d\n"), "line 3: bytes that are not UTF-8"),
    (_truncated_parquet, "is not a readable Parquet file, truncated or corrupt"),
    (_truncated_gzip, "is truncated or not valid gzip"),
])
def test_unreadable_sources_fail_with_one_line(tmp_path, make, expected):
    source = make(tmp_path)
    with pytest.raises(GpupipeError) as err:
        ingest_data(data(source), str(tmp_path / "o"))
    message = str(err.value)
    assert expected in message and "\n" not in message and message.startswith("data.source: ")


def write(path, content):
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


@pytest.mark.parametrize("joined_as", ["binary", "large_binary"])
def test_the_vectorised_encoder_parses_as_tfx_bsl_does(joined_as, monkeypatch):
    """contracts.example_encoder against tfx_bsl's encoder: missing values, empty and
    non-ASCII strings, strings long enough for two-byte lengths, a column missing in every
    row; the rows joined with 32-bit offsets (a batch's usual case) and 64-bit ones (a batch
    of 2 GB or more)."""
    import numpy as np
    import pyarrow as pa
    from tfx_bsl.coders import example_coder

    from components.contracts import example_encoder
    from components.contracts.examples import as_list_batch

    n = 300
    batch = pa.RecordBatch.from_arrays([
        pa.array([["a", "b"][i % 2] for i in range(n)]),
        pa.array([None if i % 7 == 0 else i * 0.5 for i in range(n)], pa.float32()),
        pa.array([None if i % 5 == 0 else ("" if i % 3 == 0 else "é" * (i % 200)) for i in range(n)]),
        pa.array([None] * n, pa.string()),
        pa.array([bytes([i % 256]) * (i % 40) for i in range(n)], pa.binary()),
    ], ["label", "x", "s", "never", "raw"])
    lists = as_list_batch(batch)
    assert example_encoder.can_encode(lists)
    if joined_as == "large_binary":
        monkeypatch.setattr(example_encoder, "_BINARY_BELOW", 0)
    ours, theirs = example_encoder.encode(lists), example_coder.RecordBatchToExamples(lists)
    assert len(ours) == n and isinstance(ours, list) and all(type(record) is bytes for record in ours)
    for a, b in zip(ours, theirs):
        assert tf.train.Example.FromString(a) == tf.train.Example.FromString(b)
    spec = {"label": tf.io.FixedLenFeature([1], tf.string), "x": tf.io.FixedLenFeature([1], tf.float32, [np.nan]),
            "s": tf.io.FixedLenFeature([1], tf.string, [""]), "never": tf.io.FixedLenFeature([1], tf.string, ["-"]),
            "raw": tf.io.FixedLenFeature([1], tf.string, [""])}
    a, b = tf.io.parse_example(ours, spec), tf.io.parse_example(theirs, spec)
    for name in spec:
        np.testing.assert_array_equal(a[name].numpy(), b[name].numpy())
    assert example_encoder.encode(lists.slice(0, 0)) == []


def test_the_column_blocks_parse_as_tfx_bsls_do():
    """contracts.examples.encode_blocks (laid out with Arrow and numpy) against tfx_bsl's
    encoder on the same lists: missing numbers NaN, missing strings empty, strings of 128
    bytes and more (two-byte lengths), a short last block, the slice buckets."""
    import numpy as np
    import pyarrow as pa
    from tfx_bsl.coders import example_coder

    from components.contracts.examples import SLICE_FEATURE, encode_blocks

    n = 700
    columns = pa.RecordBatch.from_arrays([
        pa.array([None if i % 7 == 0 else i * 0.5 for i in range(n)], pa.float32()),
        pa.array([None if i % 5 == 0 else ("" if i % 3 == 0 else "é" * (i % 150)) for i in range(n)]),
        pa.array([b"ab"[i % 2:] * (i % 9) for i in range(n)], pa.binary()),
    ], ["x", "s", "raw"]).slice(50, 600)
    buckets = np.arange(600) % 100
    ours = encode_blocks(columns, buckets, rows=256)
    offsets = pa.array([0, 256, 512, 600], pa.int32())
    theirs = example_coder.RecordBatchToExamples(pa.RecordBatch.from_arrays(
        [pa.ListArray.from_arrays(offsets, columns.column(0).fill_null(float("nan"))),
         *[pa.ListArray.from_arrays(offsets, columns.column(i).cast(pa.binary()).fill_null(b"")) for i in (1, 2)],
         pa.ListArray.from_arrays(offsets, pa.array(buckets))], ["x", "s", "raw", SLICE_FEATURE]))
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):  # (parsed and written again: the map's order aside; NaN == NaN bit for bit)
        assert tf.train.Example.FromString(a).SerializeToString(deterministic=True) == \
            tf.train.Example.FromString(b).SerializeToString(deterministic=True)
    assert encode_blocks(columns.slice(0, 0), []) == []


def _ingest_in_a_new_process(src: str, out: str, workers: int, shard_rows: int = 500) -> None:
    """ingest_data in a fresh Python (workers are forked only before TensorFlow's runtime
    has started, which other tests in this process start)."""
    import subprocess
    import sys

    code = ("import json, sys; from components.ingest.logic import ingest_data; "
            "from components.ingest.test_logic import data; "
            "print(json.dumps(ingest_data(data(sys.argv[1]), sys.argv[2], workers=int(sys.argv[3]), "
            "shard_rows=int(sys.argv[4]))))")
    done = subprocess.run([sys.executable, "-c", code, src, out, str(workers), str(shard_rows)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-2000:]


def test_worker_processes_write_what_one_process_writes(tmp_path, make_csv):
    """workers=2: the same rows in each split (row shards and column blocks), the same
    statistics' counts, the shards of both workers found by the readers."""
    from components.contracts.examples import block_files
    from components.contracts.statistics import read_statistics

    src = make_csv(HEADER + rows_text(3000) + ",1.0,red\n")  # one row without a label
    one = ingest_data(data(src), str(tmp_path / "one"), workers=0, shard_rows=500)
    _ingest_in_a_new_process(src, str(tmp_path / "two"), workers=2)
    two = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert two["engine"] == {"name": "local", "workers": 2}
    assert one["rows"] == two["rows"] and one["rows_dropped_missing_label"] == two["rows_dropped_missing_label"] == 1
    assert one["files"] == two["files"] and two["blocks"]["rows"] > 0
    for split in ("train", "eval"):
        def values(d):
            return sorted(e.features.feature["x"].float_list.value[0] for e in read_examples(str(tmp_path / d), split))

        assert values("one") == values("two")
        blocks = block_files(examples_pattern(str(tmp_path / "two"), split))
        assert blocks and all(b.endswith(".tfrecord") for b in blocks)  # uncompressed: the feed reads them each epoch
        parsed = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(blocks)]
        assert sorted(v for e in parsed for v in e.features.feature["x"].float_list.value) == values("one")

    def counts(d):
        stats = read_statistics(str(tmp_path / d / "statistics" / "stats.pb"))
        return sorted((s.name, f.path.step[0], f.num_stats.common_stats.num_non_missing
                       if f.HasField("num_stats") else f.string_stats.common_stats.num_non_missing)
                      for s in stats.datasets for f in s.features)

    assert counts("one") == counts("two")
    # the train sample (every train row here: fewer than SAMPLE_ROWS) is the same file
    import pyarrow.parquet as pq

    sample = {d: pq.read_table(str(tmp_path / d / "sample" / "train.parquet")) for d in ("one", "two")}
    assert sample["one"].equals(sample["two"]) and sample["one"].num_rows == one["rows"]["train"]
    assert two["sample"] == {"file": "sample/train.parquet", "rows": one["rows"]["train"]}


def test_the_sample_holding_every_train_row_reads_as_the_row_shards(tmp_path, make_csv):
    """read_train_sample's columns (no TensorFlow) are read_split's from the row shards: the
    same rows in the same order, a missing number NaN, a missing category empty, the
    label's text."""
    import numpy as np

    from components.contracts.linear import read_split, read_train_sample

    missing = "".join(f"a,,{c}\nb,{i}.25,\n" for i, c in enumerate(["red", "blue", "green"] * 5))
    src = make_csv(HEADER + rows_text(400) + missing)
    ingest_data(data(src), str(tmp_path / "ex"))
    kinds = {"x": "numeric", "color": "categorical"}
    x, y = read_train_sample(str(tmp_path / "ex"), "label", kinds, False)
    x2, y2 = read_split(str(tmp_path / "ex"), "train", "label", kinds, False)
    assert list(y) == list(y2) and list(x["color"]) == list(x2["color"]) and b"" in list(x["color"])
    np.testing.assert_array_equal(x["x"], x2["x"])
    assert np.isnan(x["x"]).sum() >= 1 and x["x"].dtype == x2["x"].dtype == np.float32


def test_a_prepared_batchs_offsets_are_its_rows_places_as_read(make_csv):
    """prepare_batch drops the rows without a label and puts the eval rows first; `offsets`
    gives each prepared row's place in the batch as read (the train sample's positions), so
    the sample is the same whatever the batches and workers (both engines add them to the
    batch's first row)."""
    import numpy as np

    from components.ingest.tables import column_types, prepare_batch
    from components.kinds.base import RowSource
    from components.sources import readers

    unlabelled = "".join(f",{i}.25,red\n" for i in range(0, 300, 7))
    src = make_csv(HEADER + rows_text(300) + unlabelled + rows_text(60))
    settings = data(src, split={"eval_percent": 30})
    files = readers.resolve(src, "auto")
    batch = next(readers.read_batches(files[0], column_types(settings), settings.na_values))
    dropped, prepared = prepare_batch(batch, settings, RowSource(src, "csv"), 30, None)
    assert dropped == 43 and 0 < prepared.eval_rows < prepared.rows == batch.num_rows - 43
    read = batch.column("x").to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(prepared.columns.column("x").to_numpy(zero_copy_only=False),
                                  read[prepared.offsets])
    assert sorted(prepared.offsets) == sorted(np.flatnonzero(batch.column("label").is_valid().to_numpy(
        zero_copy_only=False)))


def test_the_train_sample_keeps_the_rows_of_smallest_priority_whatever_the_batches(tmp_path):
    """TrainSample over 5,000 rows with room for 300: the 300 rows whose position's priority
    is smallest, in the source's order, whichever batches and processes carried them; each
    with its row's validation-slice bucket (the train input's hash of its tf.Example)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from components.contracts.examples import (SLICE_FEATURE, TrainSample, row_priorities, sample_path,
                                               write_train_sample)
    from components.ingest.tables import to_stream

    rows = 5000
    columns = pa.RecordBatch.from_arrays([pa.array(np.arange(rows, dtype=np.float32))], ["x"])
    records = [f"record {i}".encode() for i in range(rows)]
    expected = np.sort(np.argsort(row_priorities(np.arange(rows)))[:300]).astype(np.float32)

    def sampled(cuts, processes):
        parts = [TrainSample(size=300) for _ in range(processes)]
        for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):  # batches dealt out in turn, as to workers
            parts[i % processes].add(columns.slice(a, b - a), records[a:b], np.arange(a, b))
        out = str(tmp_path / f"{len(cuts)}-{processes}")
        assert write_train_sample(out, [to_stream(p.part()) for p in parts], size=300) == {
            "file": "sample/train.parquet", "rows": 300}
        return pq.read_table(sample_path(out))

    one = sampled([0, rows], 1)
    np.testing.assert_array_equal(one.column("x").to_numpy(), expected)
    assert one.equals(sampled([0, 700, 1400, 2100, 3333, 4000, rows], 2))
    assert one.equals(sampled(list(range(0, rows, 97)) + [rows], 3))
    picked = one.column("x").to_numpy().astype(int)
    buckets = tf.strings.to_hash_bucket_fast([records[i] for i in picked], 100).numpy()
    np.testing.assert_array_equal(one.column(SLICE_FEATURE).to_numpy(), buckets)


def test_an_error_in_a_worker_process_is_one_line(tmp_path, make_csv):
    import subprocess
    import sys

    src = make_csv(HEADER + rows_text(100) + "a,inf,red\n")
    code = ("import sys; from components.contracts.errors import GpupipeError; "
            "from components.ingest.logic import ingest_data; from components.ingest.test_logic import data\n"
            "try:\n    ingest_data(data(sys.argv[1]), sys.argv[2], workers=2)\n"
            "except GpupipeError as err:\n    print('GpupipeError:', err)")
    done = subprocess.run([sys.executable, "-c", code, src, str(tmp_path / "out")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "GpupipeError:" in done.stdout and "inf" in done.stdout
    assert not (tmp_path / "out" / "manifest.json").exists()
