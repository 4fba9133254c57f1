"""A timestamp column from init to serving (issue #37, the datetime part): `gpupipe init`
proposes it as datetime (with the format it read when the column is not ISO 8601) and still
leaves an ID out; a column whose values do not parse stops ingest in one line naming the
column, an example and the format key; and ingest, validate and train on a small table give a
SavedModel whose serving_default takes the raw timestamp strings (steps one after another,
without kfp: tests/test_steps_together.py's way), scored by predict's own reader too."""
import csv
import datetime as dt
from pathlib import Path

import numpy as np
import pytest
import yaml

from components.contracts.errors import GpupipeError
from components.ingest.logic import ingest_data
from components.ingest.settings import DataSettings

pytestmark = pytest.mark.unit

START = dt.datetime(2021, 1, 1)


def _events(n: int, seed: int = 3):
    """(timestamps, a number, labels): the label is 'late' for an afternoon or evening hour, with 5% noise."""
    rng = np.random.default_rng(seed)
    times = [START + dt.timedelta(minutes=int(m)) for m in rng.integers(0, 60 * 24 * 600, n)]
    noise = rng.random(n) < 0.05
    labels = ["late" if (t.hour >= 13) != flip else "early" for t, flip in zip(times, noise)]
    return times, rng.normal(size=n).round(3), labels


def write_table(path: Path, header, rows) -> str:
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([header, *rows])
    return str(path)


def test_init_proposes_timestamps_as_datetime_with_the_format_it_read_and_leaves_an_id_out(tmp_path):
    from pipelines.config import parse_config
    from pipelines.init import propose, render

    times, x, labels = _events(300)
    rows = [[t.isoformat(sep=" "), t.strftime("%d/%m/%Y %H:%M"), f"u{i:05d}", t.strftime("%Y-%m-%d") if i % 7 else "",
             x[i], labels[i]] for i, t in enumerate(times)]
    data = write_table(tmp_path / "events.csv", ["created", "shipped on", "user", "day", "x", "label"], rows)
    p = propose(data, "label")
    assert p.features["datetime"] == ["created", "shipped on", "day"]
    assert p.numeric == ["x"] and [c for c, _ in p.left_out] == ["user"]
    assert p.settings == {"shipped on": {"format": "%d/%m/%Y %H:%M"}}
    assert p.notes["created"] == "300 of 300 sampled values read as ISO 8601 (YYYY-MM-DD[ T]HH:MM[:SS][Z|+HH:MM])"
    assert p.notes["shipped on"] == "300 of 300 sampled values read as the format '%d/%m/%Y %H:%M' (its format, below)"
    text = render(p, "gpupipe init", "c.yaml")
    assert '    - {name: "shipped on", format: "%d/%m/%Y %H:%M"}  # the model\'s input: shipped_on' in text
    config = parse_config(yaml.safe_load(text))
    declared = {name: setting for name, kind, setting in config.data.declared() if kind.name == "datetime"}
    assert declared["shipped on"].format == "%d/%m/%Y %H:%M" and declared["created"].format is None


def test_a_datetime_column_that_does_not_parse_stops_ingest_in_one_line(tmp_path):
    times, x, labels = _events(200)
    rows = [[t.strftime("%d/%m/%Y %H:%M") if i % 10 else "", x[i], labels[i]] for i, t in enumerate(times)]
    data = write_table(tmp_path / "t.csv", ["created", "x", "label"], rows)
    settings = DataSettings(source=data, label="label", numeric_features=["x"], datetime_features=["created"])
    with pytest.raises(GpupipeError) as err:
        ingest_data(settings, str(tmp_path / "ex"))
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"data.datetime_features: 180 of 180 values of column 'created' in {data} (100.0%, over "
                           "max_unparsed 0.01) do not parse as ISO 8601 (YYYY-MM-DD[ T]HH:MM[:SS][Z|+HH:MM]), such as '")
    assert line.endswith("set the entry's format to how they are written (e.g. {name: created, format: "
                         "\"%d/%m/%Y %H:%M\"}: %Y %m %d %H %M %S), or fix those cells")
    # With its format the same column ingests; a few bad values under max_unparsed pass as missing.
    rows[3][0] = "31/02/2021 10:00"
    write_table(tmp_path / "t.csv", ["created", "x", "label"], rows)
    manifest = ingest_data(DataSettings(source=data, label="label", numeric_features=["x"],
                                        datetime_features=[{"name": "created", "format": "%d/%m/%Y %H:%M"}]),
                           str(tmp_path / "ok"))
    assert manifest["features"] == {"x": "numeric", "created": "datetime"}


@pytest.fixture(scope="module")
def timestamp_model(tmp_path_factory):
    """ingest -> validate -> train on 600 rows whose label is the hour of a '%d/%m/%Y %H:%M' column."""
    from components.kinds import Columns
    from components.train.logic import train_model
    from components.validate.logic import run_validation
    from conftest import penguin_settings

    tmp = tmp_path_factory.mktemp("timestamps")
    times, x, labels = _events(600)
    rows = [[t.strftime("%d/%m/%Y %H:%M") if i % 25 else "", x[i], labels[i]] for i, t in enumerate(times)]
    data = write_table(tmp / "t.csv", ["created", "x", "label"], rows)
    columns = dict(label="label", numeric_features=["x"],
                   datetime_features=[{"name": "created", "format": "%d/%m/%Y %H:%M"}])
    ex = str(tmp / "ex")
    ingest_data(DataSettings(source=data, **columns), ex)
    result = run_validation(ex, "label", str(tmp / "s"), str(tmp / "c"), str(tmp / "a"), str(tmp / "r.html"))
    train_model(ex, str(tmp / "s"), str(tmp / "m"), Columns(**columns),
                penguin_settings(task="binary", epochs=40, hidden_units=[32], learning_rate=0.01))
    return tmp, data, Columns(**columns), result


def test_serving_default_answers_raw_timestamp_strings(timestamp_model):
    import tensorflow as tf

    tmp, _, _, _ = timestamp_model
    serve = tf.saved_model.load(str(tmp / "m")).signatures["serving_default"]
    assert serve.structured_input_signature[1]["created"].dtype == tf.string
    hours = [2, 5, 8, 17, 20, 23]  # hours well away from the boundary (13:00)
    out = serve(created=tf.constant([f"0{h % 9 + 1}/03/2022 {h}:30" for h in hours] + ["", "not a time"]),
                x=tf.zeros([len(hours) + 2]))
    classes = [c.decode() for c in out["classes"].numpy()]
    assert classes[:len(hours)] == ["late" if h >= 13 else "early" for h in hours]
    assert out["probabilities"].shape == (len(hours) + 2, 2)


def test_validate_passes_and_predict_scores_every_raw_row(timestamp_model):
    from components.predict.logic import Scorer, score_file
    from components.sources import readers

    tmp, data, columns, result = timestamp_model
    assert result.ok, result.problems
    rows = list(score_file(Scorer(str(tmp / "m")), readers.resolve(data, "auto")[0], columns, None, ["", "NA"]))
    assert len(rows) == 600
    truth = [r[2] for r in csv.reader(open(data, encoding="utf-8"))][1:]
    accuracy = np.mean([r["classes"] == t for r, t in zip(rows, truth)])
    assert accuracy > 0.85, accuracy


def _split_times(examples_dir: str, split: str, column: str):
    import tensorflow as tf

    from components.contracts.examples import split_files

    times = []
    for record in tf.data.TFRecordDataset(split_files(examples_dir, split), compression_type="GZIP"):
        example = tf.train.Example.FromString(record.numpy())
        value = example.features.feature[column].bytes_list.value
        times.append(dt.datetime.strptime(value[0].decode(), "%d/%m/%Y %H:%M") if value else None)
    return times


def test_split_by_time_puts_the_newest_rows_in_eval_and_the_manifest_states_the_cut_off(tmp_path):
    times, x, labels = _events(500)
    rows = [[t.strftime("%d/%m/%Y %H:%M") if i % 50 else "", x[i], labels[i]] for i, t in enumerate(times)]
    data = write_table(tmp_path / "t.csv", ["created", "x", "label"], rows)
    columns = dict(source=data, label="label", numeric_features=["x"],
                   datetime_features=[{"name": "created", "format": "%d/%m/%Y %H:%M"}])
    manifest = ingest_data(DataSettings(**columns, split={"by": "time", "key": "created", "eval_percent": 20}),
                           str(tmp_path / "ex"))
    known = sorted(t for i, t in enumerate(times) if i % 50)  # 490 with a time; 10 missing go to train
    cutoff = known[len(known) * 80 // 100]
    assert manifest["split"] == {"rule": "time", "key": "created", "eval_percent": 20,
                                 "cutoff": cutoff.strftime("%Y-%m-%d %H:%M:%S")}
    train, evaluated = _split_times(str(tmp_path / "ex"), "train", "created"), \
        _split_times(str(tmp_path / "ex"), "eval", "created")
    assert len(evaluated) == manifest["rows"]["eval"] == sum(t >= cutoff for t in known) and 95 <= len(evaluated) <= 100
    assert min(evaluated) == cutoff and max(t for t in train if t) < cutoff and train.count(None) == 10
    with pytest.raises(ValueError, match="split.by time needs split.key to name the time column, one of "
                                         r"data.datetime_features \(created\); now x"):
        DataSettings(**columns, split={"by": "time", "key": "x"})
