"""Real-world input that used to end in a traceback, a misleading message or a silently
wrong model: each now ends in one line naming the input and the fix (config errors before
anything runs, data errors in the failing step: exit 1 either way), no traceback on the
terminal, and no serving version. And the spellings a real CSV has that are fine."""
import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# Imported here, before any test's capture: run_local's default console is the sys.stderr of
# the moment it is imported (tests/test_init.py and tests/test_progress.py import it alike).
import pipelines.local_run  # noqa: F401,E402

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
PENGUINS = ROOT / "data" / "penguins.csv"


def user_env() -> dict:
    """A user's environment: nothing this test process set for TensorFlow's own logging."""
    return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def gpupipe_run(tmp_path, config: dict):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", str(path), "--runs-dir",
                          str(tmp_path / "runs"), "--serving-base", str(tmp_path / "serving")],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=user_env())
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout
    assert not (tmp_path / "serving").exists()
    return out


def gpupipe_run_in_process(tmp_path, config: dict, capfd, monkeypatch) -> tuple:
    """`gpupipe run` through the command's own entry point (pipelines.cli.main) in this process,
    in a user's environment: (exit code, stdout, stderr) as the terminal gets them (file
    descriptors, the tasks' output included). The terminal's one line with no traceback is
    shown by the subprocess runs; this is the same handler without a new interpreter."""
    from pipelines.cli import main

    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)  # as user_env()
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    capfd.readouterr()
    code = main(["run", str(path), "--runs-dir", str(tmp_path / "runs"), "--serving-base", str(tmp_path / "serving")])
    out, err = capfd.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    assert not (tmp_path / "serving").exists()
    return code, out, err


def config_error_in_process(tmp_path, config: dict, capfd, monkeypatch) -> str:
    code, _, err = gpupipe_run_in_process(tmp_path, config, capfd, monkeypatch)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert not (tmp_path / "runs").exists()  # before anything runs
    return lines[0]


def penguins(**edits) -> dict:
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    for dotted, value in edits.items():
        section, _, key = dotted.rpartition(".")
        target = raw
        for part in filter(None, section.split(".")):
            target = target[part]
        target[key] = value
    return raw


def config_error(tmp_path, config: dict) -> str:
    out = gpupipe_run(tmp_path, config)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, out.stderr
    return lines[0]


@pytest.mark.parametrize("edits, expected", [
    ({"cluster.resources.train.memory": "32GB"}, "cluster.resources.train.memory: '32GB' is not a Kubernetes quantity"),
    ({"cluster.resources.train.cpu": "four"}, "cluster.resources.train.cpu: 'four' is not a Kubernetes quantity"),
    ({"serving.model_name": "1ctr"}, "serving.model_name: '1ctr' is not a plain name: use lowercase letters, "
                                     "digits and '-', a letter first"),
    ({"training.pods.tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "value": "present"}]},
     "training.pods.tolerations.0: toleration 'nvidia.com/gpu': operator Exists takes no value; remove value, or use "
     "operator: Equal"),
    ({"training.pods.node_selector": {"cloud.google.com/gke-accelerator": "nvidia tesla t4"}},
     "training.pods.node_selector: 'nvidia tesla t4' (for cloud.google.com/gke-accelerator) is not a Kubernetes label "
     "value"),
    ({"data.numeric_features": ["bill_length_mm", "bill length mm"]},
     "data: columns 'bill_length_mm' and 'bill length mm' both map to the safe name 'bill_length_mm' (the names "
     "TensorFlow takes); rename one in the data and here"),
])
def test_a_config_the_cluster_would_refuse_is_one_line_before_anything_runs(tmp_path, edits, expected):
    line = config_error(tmp_path, penguins(**edits))
    assert line.startswith(f"error: {tmp_path / 'config.yaml'}: {expected}"), line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("column, safe", [
    ("bill_length_mm", "bill_length_mm"), ("Bill_Length2", "Bill_Length2"),  # TensorFlow takes them as written
    ("bill length (mm)", "bill_length_mm"), ("education-num", "education_num"), ("a.b", "a_b"),
    ("price:usd", "price_usd"), ("café", "cafe"), ("Größe", "Gro_e"), ("_id", "id"), ("2nd", "f_2nd"),
    ("(%)", "f_"), ("  a  b  ", "a_b"), ("class", "class_"),
])
def test_a_column_name_tensorflow_refuses_maps_to_a_safe_name(column, safe):
    from components.contracts.settings import safe_name, takes_as_written
    from components.kinds import Columns

    assert safe_name(column) == safe and takes_as_written(safe) and safe_name(safe) == safe
    Columns(label="y", numeric_features=[column])  # accepted in a config as written


def test_a_config_that_is_not_utf8(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes((ROOT / "configs" / "penguins.yaml").read_bytes().replace(b"Palmer", b"P\xe4lmer"))
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", str(path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=user_env())
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [
        f"error: {path}: not UTF-8 (byte {(ROOT / 'configs' / 'penguins.yaml').read_bytes().index(b'Palmer') + 1}); "
        "save the config as UTF-8"]


def write_penguins(path: Path, edit_row=None, header=None) -> str:
    rows = list(csv.reader(PENGUINS.open()))
    out = [header or rows[0]] + [edit_row(r) if edit_row else r for r in rows[1:]]
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(out)
    return str(path)


def test_two_columns_with_the_same_name(tmp_path):
    header = list(csv.reader(PENGUINS.open()))[0]
    source = write_penguins(tmp_path / "dup.csv", header=[*header[:-1], "island"])
    line = config_error(tmp_path, penguins(**{"data.source": source}))
    assert line == (f"error: data.source: {source} has two columns named 'island' (columns 2 and 8); rename one in "
                    "the data")


def test_tfrecords_that_are_not_examples(tmp_path, capfd, monkeypatch):
    """In process (the subprocess run of a broken first record shows the terminal's line)."""
    import tensorflow as tf

    source = str(tmp_path / "logs.tfrecord")
    with tf.io.TFRecordWriter(source) as writer:
        writer.write(b"\xff\x00 a log line, not a tf.train.Example")
    line = config_error_in_process(tmp_path, penguins(**{"data.source": source, "data.format": "tfrecord"}), capfd,
                                   monkeypatch)
    assert line.startswith(f"error: data.source: {source} holds TFRecords that are not tf.train.Example (")
    assert line.endswith("write tf.train.Example records, or export the table as CSV or Parquet")


def data_error(tmp_path, config: dict) -> str:
    out = gpupipe_run(tmp_path, config)
    assert out.returncode == 1
    errors = [line for line in out.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out.stdout
    return errors[0]


def test_inf_in_a_numeric_column_stops_ingest(tmp_path):
    source = write_penguins(tmp_path / "inf.csv", lambda r: [*r[:3], "inf" if r[3] != "NA" else r[3], *r[4:]])
    line = data_error(tmp_path, penguins(**{"data.source": source}))
    assert line.startswith(f"error: ingest: data: column 'bill_depth_mm' of {source} holds inf or -inf (")
    assert line.endswith("replace them with numbers, or leave the cells empty (a missing value)")


def test_a_numeric_column_empty_in_every_row_stops_ingest(tmp_path):
    source = write_penguins(tmp_path / "empty.csv", lambda r: [*r[:5], "", *r[6:]])
    line = data_error(tmp_path, penguins(**{"data.source": source}))
    assert line == (f"error: ingest: data.numeric_features: column 'body_mass_g' is empty in every row of {source}; "
                    "remove it from data.numeric_features")


def test_spaces_after_the_commas_and_a_byte_order_mark_are_read_as_meant(tmp_path, ingest):
    text = PENGUINS.read_text(encoding="utf-8")
    header, rest = text.split("\n", 1)
    source = tmp_path / "excel.csv"
    source.write_text("\ufeff" + ", ".join(header.split(",")) + "\n" + rest, encoding="utf-8")
    manifest = ingest(str(source), str(tmp_path / "ex"), "species", ["bill_length_mm", "body_mass_g"],
                      ["island", "sex"])
    assert sum(manifest["rows"].values()) == 344


@pytest.mark.parametrize("spelling", ["NA", "N/A"])
def test_other_label_spellings_of_missing_are_dropped_and_counted(tmp_path, ingest, spelling):
    source = write_penguins(tmp_path / "labels.csv", lambda r: [spelling if r[0] == "Chinstrap" else r[0], *r[1:]])
    manifest = ingest(source, str(tmp_path / "a"), "species", ["bill_length_mm"], ["island"])
    assert manifest["rows_dropped_missing_label"] == 68 and sum(manifest["rows"].values()) == 344 - 68


def test_label_spellings_of_missing_are_configurable_counted_and_bounded(tmp_path, ingest):
    from components.contracts.errors import GpupipeError
    from pipelines.local_run import RunSummary

    source = write_penguins(tmp_path / "labels.csv", lambda r: ["null" if r[0] == "Chinstrap" else r[0], *r[1:]])
    args = (source, str(tmp_path / "a"), "species", ["bill_length_mm"], ["island"])
    manifest = ingest(*args)  # the default spellings: 'null' is missing
    assert manifest["rows_dropped_missing_label"] == 68 and sum(manifest["rows"].values()) == 344 - 68
    with pytest.raises(GpupipeError) as err:
        ingest(*args[:1], str(tmp_path / "b"), *args[2:], max_dropped_label_fraction=0.1)
    assert str(err.value) == (f"data.label: 68 of 344 rows of {source} (20%) have no 'species' (empty, or spelt like "
                              "one of data.na_values); check data.label, or raise data.max_dropped_label_fraction "
                              "(now 0.1)")
    kept = ingest(*args[:1], str(tmp_path / "c"), *args[2:], na_values=["", "NA"])  # 'null' is a class here
    assert kept["rows_dropped_missing_label"] == 0
    summary = RunSummary(pipeline="p", status="SUCCESS", seconds=1.0, steps=[], ingest=manifest)
    assert "  ingest: 68 row(s) without a 'species' dropped (empty or one of data.na_values)" in summary.render()


def test_the_run_summary_shows_validates_warnings():
    from pipelines.local_run import RunSummary

    line = ("eval: feature 'color': 0.50% of values (1 of 201) unseen in training, within the tolerance 1.00% "
            "(validation.unseen_category_tolerance): the model's out-of-vocabulary row takes them")
    summary = RunSummary(pipeline="p", status="SUCCESS", seconds=1.0, steps=[],
                         validation={"anomalies": [], "warnings": [line], "drift": [], "baseline": ""})
    assert f"  warning: validate: {line}" in summary.render().splitlines()


def test_a_tfrecord_feature_with_several_values_stops_the_run(tmp_path, capfd, monkeypatch):
    """Found in the first record, before anything runs (later records: ingest, in
    components/ingest/test_logic.py); in process, as above."""
    import tensorflow as tf

    source = str(tmp_path / "multi.tfrecord")
    with tf.io.TFRecordWriter(source) as writer:
        for i, row in enumerate(csv.DictReader(PENGUINS.open())):
            feature = {k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()])) for k, v in row.items()}
            if i == 0:  # two bill lengths: no single cell to read
                feature["bill_length_mm"] = tf.train.Feature(float_list=tf.train.FloatList(value=[39.1, 40.0]))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    line = config_error_in_process(tmp_path, penguins(**{"data.source": source, "data.format": "tfrecord"}), capfd,
                                   monkeypatch)
    assert line == (f"error: data.source: {source} record 1: feature 'bill_length_mm' holds 2 values; gpupipe reads "
                    "one value per feature: write one value per feature (one feature per value)")


def split_penguins(directory: Path, fmt: str, drop_in_second: str) -> Path:
    """penguins.csv as two files of `fmt` in `directory`; the second lacks `drop_in_second`."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    directory.mkdir()
    table = pacsv.read_csv(PENGUINS, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    first, second = table.slice(0, 200), table.slice(200)
    second = second.drop([drop_in_second])
    for i, part in enumerate((first, second)):
        path = directory / f"part-{i}.{fmt}"
        if fmt == "csv":
            pacsv.write_csv(part, path)
        else:
            pq.write_table(part, path)
    assert isinstance(second, pa.Table)
    return directory / f"part-1.{fmt}"


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_directory_whose_second_file_lacks_a_declared_column(tmp_path, fmt):
    """Found before anything runs: the error names the second file and the column."""
    second = split_penguins(tmp_path / "data", fmt, "body_mass_g")
    line = config_error(tmp_path, penguins(**{"data.source": str(tmp_path / "data"), "data.format": fmt}))
    assert line.startswith(f"error: data.source: {second} (file 2 of 2 of data.source) has no column 'body_mass_g' "
                           "(its columns: species, island, bill_length_mm, bill_depth_mm, flipper_length_mm, sex, "
                           "year)"), line
    assert line.endswith("every file of a multi-file source needs the label, the features and the split key: add the "
                         "column to that file, or leave the file out of data.source")
    assert not (tmp_path / "runs").exists()


def test_the_ingest_step_names_a_later_file_without_a_declared_column(tmp_path, ingest):
    """In the cluster's ingest task (no preflight there): the same file and column, not
    Arrow's KeyError."""
    from components.contracts.errors import GpupipeError

    second = split_penguins(tmp_path / "data", "csv", "island")
    with pytest.raises(GpupipeError) as err:
        ingest(str(tmp_path / "data"), str(tmp_path / "out"), "species", ["bill_length_mm"], ["island", "sex"])
    assert str(err.value).startswith(f"data.source: {second} (one of data.source's files) has no column 'island' ")


def test_a_number_beyond_float32s_range_says_so(tmp_path):
    """1e300 is a finite number that float32 (what numeric features are read as) cannot
    hold: not 'holds inf'."""
    source = write_penguins(tmp_path / "big.csv", lambda r: [*r[:5], "1e300" if r[5] == "4500" else r[5], *r[6:]])
    row = next(i for i, r in enumerate(csv.reader(PENGUINS.open()), start=1) if r[5] == "4500")
    line = data_error(tmp_path, penguins(**{"data.source": source}))
    assert line == (f"error: ingest: data.source: {source} line {row}: column 'body_mass_g' holds 1e300, outside "
                    "float32's range (about ±3.4e+38, which numeric features are read as); rescale the column (e.g. "
                    "its logarithm, or other units), or move 'body_mass_g' to categorical_features if it is an "
                    "identifier")


def test_a_parquet_float64_beyond_float32s_range_says_so(tmp_path, ingest):
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from components.contracts.errors import GpupipeError

    table = pacsv.read_csv(PENGUINS, convert_options=pacsv.ConvertOptions(strings_can_be_null=True))
    masses = table.column("body_mass_g").to_pylist()
    masses[7] = -2e39
    table = table.set_column(table.schema.get_field_index("body_mass_g"), "body_mass_g", pa.array(masses, pa.float64()))
    source = str(tmp_path / "big.parquet")
    pq.write_table(table, source)
    with pytest.raises(GpupipeError) as err:
        ingest(source, str(tmp_path / "out"), "species", ["body_mass_g"], ["island"])
    assert str(err.value).startswith(f"data.source: {source} row 8 of a batch: column 'body_mass_g' holds -2e+39, "
                                     "outside float32's range"), str(err.value)


def test_a_parquet_file_read_as_csv_is_told_to_set_data_format(tmp_path):
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    source = str(tmp_path / "penguins.csv")  # a Parquet file behind a .csv name
    pq.write_table(pacsv.read_csv(PENGUINS), source)
    line = config_error(tmp_path, penguins(**{"data.source": source, "data.format": "csv"}))
    assert line == (f"error: data.source: {source} looks like Parquet (it starts with b'PAR1'), not CSV text, but it "
                    "is read as CSV; set data.format: parquet (or auto, with a .parquet file name)")


def test_a_feature_declared_both_numeric_and_categorical_says_exactly_that(tmp_path):
    line = config_error(tmp_path, penguins(**{"data.categorical_features": ["island", "sex", "body_mass_g"]}))
    assert line == (f"error: {tmp_path / 'config.yaml'}: data: feature 'body_mass_g' is declared both numeric and "
                    "categorical; keep it in one of numeric_features, categorical_features")


NUMERIC = ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g", "year")


def penguin_tfrecords(path: Path, gzip: bool = False) -> list:
    """penguins.csv as tf.train.Example records in `path`; the size each record takes in the
    file (12-byte header, data, 4-byte CRC)."""
    import tensorflow as tf

    sizes = []
    with tf.io.TFRecordWriter(str(path), options="GZIP" if gzip else None) as writer:
        for row in csv.DictReader(PENGUINS.open()):
            feature = {k: tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)])) if k in NUMERIC else
                       tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
                       for k, v in row.items() if v != "NA"}
            record = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            writer.write(record)
            sizes.append(12 + len(record) + 4)
    return sizes


def flip_byte(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]


def no_tf_internals(text: str) -> None:
    for internal in ("node ", "{{", "[[", "[Op:", "Traceback", "IteratorGetNext"):
        assert internal not in text, text


FIX = "re-export it, or leave it out of data.source"
# (how a file of penguin records is damaged, what the line says): found before anything runs
# when the first record is the broken one, else by the ingest step
FIRST_RECORD = [
    (lambda good, sizes: flip_byte(good, 20), "not a readable TFRecord file (record 1: corrupted — CRC mismatch)"),
    (lambda good, sizes: good[:30], "not a readable TFRecord file (record 1: truncated, the file ends inside it)"),
    (lambda good, sizes: PENGUINS.read_bytes(), "not a TFRecord file (it starts with b'species,', not a record "
                                               "header); export it as TFRecord of tf.train.Example, or leave it out "
                                               "of data.source"),
]
LATER_RECORD = [
    (lambda good, sizes: good[:sum(sizes[:200]) + 30],
     "not a readable TFRecord file (record 201: truncated, the file ends inside it)"),
    (lambda good, sizes: flip_byte(good, sum(sizes[:250]) + 20),
     "not a readable TFRecord file (record 251: corrupted — CRC mismatch)"),
    # TensorFlow itself reads this one as 200 whole records, the rest silently lost
    (lambda good, sizes: good[:sum(sizes[:200]) + 5],
     "not a readable TFRecord file (record 201: truncated, the file ends inside its length header)"),
]


def damaged_penguins(tmp_path: Path, damage) -> str:
    sizes = penguin_tfrecords(tmp_path / "good.tfrecord")
    source = tmp_path / "penguins.tfrecord"
    source.write_bytes(damage((tmp_path / "good.tfrecord").read_bytes(), sizes))
    return str(source)


def expected_line(source: str, what: str) -> str:
    return f"data.source: {source}: {what}" + ("" if what.endswith("data.source") else f"; {FIX}")


@pytest.mark.parametrize("damage, what", [*FIRST_RECORD, *LATER_RECORD])
def test_each_kind_of_tfrecord_damage_is_named_with_its_record(tmp_path, damage, what):
    """In-process, every kind (the function the run's preflight, ingest and init read through);
    the two tests below run one of each place through the command."""
    from components.contracts.errors import GpupipeError
    from components.sources.records import tfrecord_batches

    source = damaged_penguins(tmp_path, damage)
    with pytest.raises(GpupipeError) as err:
        sum(batch.num_rows for batch in tfrecord_batches(source))
    assert str(err.value) == expected_line(source, what)
    no_tf_internals(str(err.value))


@pytest.mark.parametrize("damage, what", FIRST_RECORD[:1])
def test_a_tfrecord_file_broken_in_its_first_record_is_one_line_before_anything_runs(tmp_path, damage, what):
    source = damaged_penguins(tmp_path, damage)
    out = gpupipe_run(tmp_path, penguins(**{"data.source": source, "data.format": "tfrecord"}))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and lines == [f"error: {expected_line(source, what)}"], out.stderr
    no_tf_internals(out.stderr + out.stdout)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("damage, what", LATER_RECORD[2:])  # the truncation TensorFlow itself reads as whole
def test_a_tfrecord_file_broken_in_a_later_record_stops_ingest_in_one_line(tmp_path, damage, what, capfd,
                                                                           monkeypatch):
    """The run itself in process (its tasks are processes of their own, their output on the
    terminal's descriptors); the preflight reads the first record, which is whole."""
    source = damaged_penguins(tmp_path, damage)
    code, out, err = gpupipe_run_in_process(tmp_path, penguins(**{"data.source": source, "data.format": "tfrecord"}),
                                            capfd, monkeypatch)
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert code == 1 and errors == [f"error: ingest: {expected_line(source, what)}"], out
    assert (tmp_path / "runs").exists()  # found by the ingest step, not before the run
    no_tf_internals(err + out)


def test_gpupipe_init_on_a_broken_tfrecord_file_is_one_line(tmp_path, capsys):
    """The command's own error handling, in process (the subprocess tests above show the same
    handler prints no traceback)."""
    from pipelines.cli import main

    source = damaged_penguins(tmp_path, LATER_RECORD[1][0])
    code = main(["init", source, "--label", "species", "-o", str(tmp_path / "c.yaml")])
    out, err = capsys.readouterr()
    assert code == 1 and err.strip().splitlines() == [f"error: {expected_line(source, LATER_RECORD[1][1])}"], err
    no_tf_internals(err + out)
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("name, damage, what", [
    ("penguins.tfrecord.gz", lambda gz, plain, sizes: gz[:len(gz) // 2],
     "not a readable TFRecord file (record {n}: truncated, the gzip stream ends inside it)"),
    ("penguins.tfrecord.gz", lambda gz, plain, sizes: __import__("gzip").compress(plain[:sum(sizes[:300]) + 30]),
     "not a readable TFRecord file (record 301: truncated, the file ends inside it)"),
    ("penguins.tfrecord.gz", lambda gz, plain, sizes: __import__("gzip").compress(plain[:sum(sizes[:300]) + 5]),
     "not a readable TFRecord file (record 301: truncated, the file ends inside its length header)"),
    ("penguins.tfrecord.gz", lambda gz, plain, sizes: gz[:-8] + bytes([gz[-8] ^ 0xFF]) + gz[-7:],
     "a corrupted gzip stream (CRC check failed"),
    ("penguins.tfrecord.gz", lambda gz, plain, sizes: plain,
     "not gzip-compressed, though its name ends in .gz (it is a plain TFRecord file); rename it without .gz, or "
     "compress it"),
    ("penguins.tfrecord", lambda gz, plain, sizes: gz,
     "not a TFRecord file (it starts with b'\\x1f\\x8b\\x08\\x00\\x00\\x00\\x00\\x00', not a record header; it is "
     "gzip-compressed); name it .tfrecord.gz"),
])
def test_gzip_tfrecord_files_cut_short_or_misnamed_say_so(tmp_path, name, damage, what):
    """In-process (the same function the run's preflight and ingest read through)."""
    from components.contracts.errors import GpupipeError
    from components.sources.records import tfrecord_batches

    penguin_tfrecords(tmp_path / "good.tfrecord.gz", gzip=True)
    sizes = penguin_tfrecords(tmp_path / "good.tfrecord")
    source = tmp_path / name
    source.write_bytes(damage((tmp_path / "good.tfrecord.gz").read_bytes(), (tmp_path / "good.tfrecord").read_bytes(),
                              sizes))
    with pytest.raises(GpupipeError) as err:
        sum(batch.num_rows for batch in tfrecord_batches(str(source)))
    pattern = re.escape(f"data.source: {source}: {what}").replace(re.escape("{n}"), "[0-9]+")
    assert re.match(pattern, str(err.value)), str(err.value)
    no_tf_internals(str(err.value))


def test_tensorflows_message_keeps_no_op_internals():
    from components.sources.tfrecord_check import plain

    assert plain("{{function_node __wrapped__IteratorGetNext_output_types_1_device_/job:localhost/replica:0/task:0/"
                 "device:CPU:0}} corrupted record at 12 [Op:IteratorGetNext] name: \nmore") == "corrupted record at 12"
    assert plain("truncated record at 41975 [[{{node IteratorGetNext}}]]") == "truncated record at 41975"
