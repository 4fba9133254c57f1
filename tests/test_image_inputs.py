"""Image data from every source, and every bad image a user can hand in: each ends in one line
naming the file or the class and the fix, before anything trains or is pushed. Ingest and
train run in process (their logic, what the tasks call); the six bad inputs of acceptance 4
also go through `gpupipe run`."""
import contextlib
import csv
import io
import json
import struct
import zlib
from pathlib import Path

import pytest

from components.contracts.errors import GpupipeError
from components.sources.example_images import write_shapes

SMALL = {"name": "image", "image_size": [16, 16]}


@pytest.fixture
def shapes(tmp_path) -> Path:
    folder = tmp_path / "shapes"
    write_shapes(str(folder), per_class=12, size=16)
    return folder


def ingest(source, tmp_path, **data):
    from components.ingest.logic import ingest_data
    from components.ingest.settings import DataSettings

    settings = DataSettings(**{"source": str(source), "label": "label", "image_features": [SMALL], **data})
    return ingest_data(settings, str(tmp_path / "examples"))


def png_of_size(width: int, height: int) -> bytes:
    """A PNG whose header says width x height (a decompression bomb's header, a few bytes of data)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + chunk(b"IEND", b""))


@pytest.mark.parametrize("case, damage, expected", [
    ("truncated JPEG", lambda good: good[:len(good) // 2], "is a JPEG image cut short (no end-of-image marker)"),
    ("a text file named .jpg", lambda good: b"name,size\nphoto,12\n",
     "is not a JPEG, PNG, GIF or BMP image (it starts with b'name,siz')"),
    ("a zero-byte file", lambda good: b"", "is empty (0 bytes)"),
    ("an image over the pixel limit", lambda good: png_of_size(20_000, 20_000),
     "is 20000x20000 pixels (400,000,000), over max_pixels (89,478,485"),
])
def test_a_bad_image_file_is_one_line_naming_the_file(shapes, tmp_path, case, damage, expected):
    bad = shapes / "square" / "0003.jpg"
    bad.write_bytes(damage(bad.read_bytes()))
    with pytest.raises(GpupipeError) as err:
        ingest(shapes, tmp_path)
    line = str(err.value)
    assert line.startswith(f"data.image_features: {bad} {expected}") and "\n" not in line, line
    assert not (tmp_path / "examples" / "manifest.json").exists()


def test_an_empty_class_folder_and_a_single_class_are_one_line_naming_the_class(shapes, tmp_path):
    (shapes / "hexagon").mkdir()
    with pytest.raises(GpupipeError, match=f"data.source: class folder {shapes}/hexagon holds no images "
                                           r"\(.jpg, .jpeg, .png, .bmp, .gif\); add images to it or remove it$"):
        ingest(shapes, tmp_path)
    for cls in ("hexagon", "square", "triangle"):
        for f in (shapes / cls).glob("*"):
            f.unlink()
        (shapes / cls).rmdir()
    with pytest.raises(GpupipeError, match=rf"data.source: {shapes} has one class folder \(circle\); an image "
                                           "classifier needs a folder per class, at least 2"):
        ingest(shapes, tmp_path)


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def _single_class(shapes: Path) -> None:
    for cls in ("square", "triangle"):
        for f in (shapes / cls).glob("*"):
            f.unlink()
        (shapes / cls).rmdir()


FIX = "remove it, or replace it with a whole image (png, jpeg, gif, bmp)"
RUN_CASES = {  # acceptance 4's six cases: what is done to the shapes folder, the line that ends the run
    "truncated JPEG": (lambda s: _cut(s / "circle" / "0001.jpg"),
                       "data.image_features: {s}/circle/0001.jpg is a JPEG image cut short (no end-of-image marker); "
                       + FIX),
    "a text file named .jpg": (lambda s: (s / "circle" / "0001.jpg").write_text("name,size\nphoto,12\n"),
                               "data.image_features: {s}/circle/0001.jpg is not a JPEG, PNG, GIF or BMP image (it "
                               "starts with b'name,siz'); " + FIX),
    "a zero-byte file": (lambda s: (s / "circle" / "0001.jpg").write_bytes(b""),
                         "data.image_features: {s}/circle/0001.jpg is empty (0 bytes); " + FIX),
    "an empty class folder": (lambda s: (s / "hexagon").mkdir(),
                              "data.source: class folder {s}/hexagon holds no images (.jpg, .jpeg, .png, .bmp, "
                              ".gif); add images to it or remove it"),
    "a single class": (_single_class, "data.source: {s} has one class folder (circle); an image classifier needs a "
                                      "folder per class, at least 2; add a folder of images for each other class "
                                      "(ROOT/<class>/*.jpg)"),
    "an image over the pixel limit": (lambda s: (s / "circle" / "0001.png").write_bytes(png_of_size(20_000, 20_000)),
                                      "data.image_features: {s}/circle/0001.png is 20000x20000 pixels (400,000,000), "
                                      "over max_pixels (89,478,485: a decompression bomb, or a scan too large to "
                                      "train on); resize it, or raise max_pixels in the data.image_features entry "
                                      "of 'image'"),
}


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_through_gpupipe_run_each_bad_input_stops_the_run_in_one_line_and_pushes_nothing(shapes, tmp_path, case):
    from pipelines.cli import main

    damage, expected = RUN_CASES[case]
    damage(shapes)
    config = tmp_path / "shapes.yaml"
    config.write_text(json.dumps({"name": "shapes", "data": {"source": str(shapes), "label": "label",
                                                              "image_features": [SMALL]},
                                  "training": {"model": "cnn", "epochs": 1},
                                  "serving": {"base": str(tmp_path / "serving"), "model_name": "shapes"}}))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", str(config), "--runs-dir", str(tmp_path / "runs")])
    assert code == 1
    # the run's summary (a task's error) or the check before any task starts (a folder's): one line
    said = out.getvalue() + err.getvalue()
    lines = [line for line in said.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].endswith(expected.format(s=shapes)), said
    assert "Traceback" not in said
    assert not (tmp_path / "serving").exists()


def test_other_files_in_the_tree_are_counted_left_out_and_said(shapes, tmp_path):
    (shapes / "README.txt").write_text("made by write_shapes")
    (shapes / "circle" / "notes.csv").write_text("a,b\n")
    manifest = ingest(shapes, tmp_path)
    assert manifest["notes"] == [f"2 file(s) under {shapes} left out, not images in a class folder (README.txt, "
                                 "circle/notes.csv)"]
    assert manifest["rows"]["train"] + manifest["rows"]["eval"] == 36
    assert [f["uri"] for f in manifest["files"]] == [f"{shapes}/{c}" for c in ("circle", "square", "triangle")]


def test_duplicate_files_land_on_the_same_side_of_the_split(shapes, tmp_path):
    """The split hashes each file's bytes, never its class or name."""
    import tensorflow as tf

    original = (shapes / "circle" / "0000.jpg").read_bytes()
    for i in range(6):
        (shapes / "square" / f"copy{i}.jpg").write_bytes(original)  # the same bytes under another class
    ingest(shapes, tmp_path)
    sides = []
    for split in ("train", "eval"):
        for record in tf.data.TFRecordDataset(sorted((tmp_path / "examples" / split).glob("*.gz")), "GZIP"):
            image = tf.io.parse_single_example(record, {"image": tf.io.FixedLenFeature([], tf.string)})["image"]
            if image.numpy() == original:
                sides.append(split)
    assert len(sides) == 7 and len(set(sides)) == 1


def test_a_table_of_image_paths_numbers_and_categories_trains_one_model_over_all(shapes, tmp_path):
    import numpy as np
    import tensorflow as tf

    from components.kinds import Columns
    from components.train.logic import train_model
    from components.train.settings import TrainSettings

    table = tmp_path / "photos" / "table.csv"
    table.parent.mkdir()
    rng = np.random.default_rng(0)
    with table.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["photo", "weight", "colour", "label"])
        for cls in ("circle", "square", "triangle"):
            for path in sorted((shapes / cls).iterdir()):
                relative = Path("..") / "shapes" / cls / path.name  # relative to the table's folder
                out.writerow([relative.as_posix(), f"{rng.normal():.3f}", rng.choice(["red", "blue"]), cls])
    columns = dict(label="label", numeric_features=["weight"], categorical_features=["colour"],
                   image_features=[{"name": "photo", "image_size": [16, 16]}])
    manifest = ingest(table, tmp_path, **{**columns, "image_features": columns["image_features"]})
    assert manifest["features"] == {"weight": "numeric", "colour": "categorical", "photo": "image"}
    stats = tmp_path / "examples" / "statistics"
    report = train_model(str(tmp_path / "examples"), str(stats), str(tmp_path / "model"), Columns(**columns),
                         TrainSettings(model="cnn", epochs=2, batch_size=8))
    assert report.to_dict()["epochs_run"] == 2
    serve = tf.saved_model.load(str(tmp_path / "model")).signatures["serving_default"]
    assert sorted(serve.structured_input_signature[1]) == ["colour", "photo", "weight"]
    image = (shapes / "circle" / "0000.jpg").read_bytes()
    answer = serve(photo=tf.constant([image]), weight=tf.constant([0.5]), colour=tf.constant(["red"]))
    assert answer["probabilities"].shape == (1, 3)

    (table.parent / "table.csv").write_text("photo,weight,colour,label\nmissing.jpg,1,red,circle\n")
    with pytest.raises(GpupipeError, match=r"data.image_features: column 'photo' row 1 of .*table.csv names "
                                           r"missing.jpg, not found at .*photos/missing.jpg; fix the path"):
        ingest(table, tmp_path / "again", **columns)


def test_tfrecords_with_encoded_image_bytes_ingest_like_a_folder(shapes, tmp_path):
    import tensorflow as tf

    records = tmp_path / "shapes.tfrecord"
    with tf.io.TFRecordWriter(str(records)) as writer:
        for cls in ("circle", "square", "triangle"):
            for path in sorted((shapes / cls).iterdir()):
                feature = {"image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[path.read_bytes()])),
                           "label": tf.train.Feature(bytes_list=tf.train.BytesList(value=[cls.encode()]))}
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    from_records = ingest(records, tmp_path / "a")
    from_folder = ingest(shapes, tmp_path / "b")
    assert from_records["rows"] == from_folder["rows"] and from_records["classes"] == from_folder["classes"]


def test_beam_ingests_a_folder_file_by_file_to_the_same_rows(shapes, tmp_path):
    from components.ingest.beam import ingest_data_beam
    from components.ingest.settings import DataSettings

    settings = DataSettings(source=str(shapes), label="label", engine="beam", image_features=[SMALL])
    beam = ingest_data_beam(settings, str(tmp_path / "beam"))
    local = ingest(shapes, tmp_path)
    assert beam["rows"] == local["rows"] and beam["classes"] == local["classes"] and beam["files"] == local["files"]


def test_the_drift_of_image_sizes_against_the_served_version_is_measured(tmp_path):
    from components.contracts.statistics import load_statistics
    from components.validate.logic import validate_examples

    write_shapes(str(tmp_path / "small"), per_class=10, size=16)
    write_shapes(str(tmp_path / "large"), per_class=10, size=48)
    ingest(tmp_path / "small", tmp_path / "s")
    ingest(tmp_path / "large", tmp_path / "l")
    served = load_statistics(str(tmp_path / "s" / "examples" / "statistics"), "train")
    result = validate_examples(str(tmp_path / "l" / "examples"), "label", baseline_stats=served,
                               baseline_name="served version 1")
    drifted = " ".join(result.drift)
    assert "feature 'image__height'" in drifted and "feature 'image__width'" in drifted
    assert "feature 'image'" not in drifted  # the bytes themselves are not compared (image_domain)
    assert result.schema.feature[[f.name for f in result.schema.feature].index("image")].HasField("image_domain")


def test_the_input_casts_whole_batches_without_augmentation_and_augments_each_image_with_it(shapes, tmp_path):
    """Without augmentation (or outside training) the cached uint8 images become float32 one
    batch at a time, the same pixels every epoch; with it each training image changes its own way."""
    import numpy as np

    from components.contracts.examples import examples_pattern
    from components.contracts.statistics import load_statistics
    from components.kinds import Columns, specs_from_statistics
    from components.train.data import make_dataset

    def epochs(augment: dict):
        feature = {**SMALL, "augment": augment}
        ingest(shapes, tmp_path / str(bool(augment)), image_features=[feature])
        examples = tmp_path / str(bool(augment)) / "examples"
        stats = load_statistics(str(examples / "statistics"), "train")
        specs = specs_from_statistics(stats, Columns(label="label", image_features=[feature]))
        it = iter(make_dataset(examples_pattern(str(examples), "train"), specs, 4, shuffle=True, seed=1,
                               repeat=True, cache="memory"))
        steps = -(-int(stats.num_examples) // 4)
        out = []
        for _ in range(2):
            batches = [next(it) for _ in range(steps)]
            assert all(x["image"].dtype.name == "float32" and x["image"].shape[1:] == (16, 16, 3) for x, _ in batches)
            out.append(sorted(x.tobytes() for b, _ in batches for x in b["image"].numpy()))
        return out

    plain = epochs({})
    assert plain[0] == plain[1]  # the same images, reordered
    augmented = epochs({"flip": True, "brightness": 0.2})
    assert augmented[0] != augmented[1] and len(augmented[0]) == len(plain[0])
    assert np.frombuffer(plain[0][0], np.float32).max() <= 255.0
