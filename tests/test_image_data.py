"""An image folder end to end as a new user goes: `gpupipe examples digits`, `gpupipe init
DIR`, `gpupipe run` on the written config with no edits (through the CLI's main in process;
its tasks through kfp.local, forked from the session's warm server), then the pushed
version answering a TF Serving REST request (tests/fixtures/tf_serving_rest.py, a FIXTURE
speaking TF Serving's REST predict protocol over a loopback HTTP server) and `gpupipe
predict` on a folder."""
import base64
import contextlib
import io
import json
import os
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("digits")]
CHINA = Path(__import__("sklearn").__file__).parent / "datasets" / "images" / "china.jpg"  # 427x640 RGB photo


def cli(*args: str):
    """`gpupipe ARGS` through its main in process: (exit code, stdout, stderr)."""
    from pipelines.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """examples -> init -> run, in a fresh working directory, as the README's guide says."""
    home = tmp_path_factory.mktemp("digits")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(home)
        assert cli("examples", "digits", "data/digits")[0] == 0
        code, out, err = cli("init", "data/digits")
        assert code == 0, err
        code, summary, err = cli("run", "configs/digits.yaml")
        assert code == 0, summary + err
    return home, out, summary


def test_init_on_the_digits_folder_proposes_a_config_that_runs_unedited_to_097(digits_run):
    home, init_out, summary = digits_run
    assert init_out.startswith("wrote configs/digits.yaml: an image classifier of 10 classes (1797 images), 8x8x1 "
                               "pixels, model cnn")
    text = (home / "configs" / "digits.yaml").read_text()
    assert "image_size: [8, 8]" in text and "channels: 1" in text and "model: cnn" in text
    assert "pushed version 1:" in summary
    run = next(p for p in (home / "runs").glob("digits-*") if p.is_dir())  # not the -last.log link
    blessing = json.loads((run / "evaluate" / "blessing" / "blessing.json").read_text())
    assert blessing["blessed"] and blessing["value"] >= 0.97, blessing
    metrics = blessing["metrics"]
    assert metrics["top_5_accuracy"] >= metrics["accuracy"] and "precision/7" in metrics and "recall/7" in metrics
    evaluation = json.loads((run / "evaluate" / "blessing" / "evaluation.json").read_text())
    assert evaluation["classes"] == [str(d) for d in range(10)] and len(evaluation["confusion_matrix"]) == 10
    manifest = json.loads((run / "ingest" / "examples" / "manifest.json").read_text())
    assert manifest["format"] == "images" and manifest["features"] == {"image": "image"}
    assert sum(manifest["classes"]["train"].values()) + sum(manifest["classes"]["eval"].values()) == 1797
    # the run report's grid: each mistake's image with its true and predicted class
    wrong = evaluation["misclassified"]
    page = (run / "report.html").read_text()
    assert page.count("<figure><img src='data:image/png;base64,") == len(wrong)
    assert all(f"true {m['true']}<br>predicted {m['predicted']}" in page for m in wrong)


def test_the_pushed_version_answers_a_rest_request_of_b64_images_of_any_size(digits_run):
    from tests.fixtures.tf_serving_rest import rest_tf_serving

    home, _, _ = digits_run
    digit = sorted((home / "data" / "digits" / "7").iterdir())[0].read_bytes()
    photo = CHINA.read_bytes()  # a JPEG photograph 640x427 in colour: decoded to 8x8 grey inside the model
    body = {"instances": [{"b64": base64.b64encode(digit).decode()}, {"b64": base64.b64encode(photo).decode()}]}
    with rest_tf_serving(str(home / "serving"), "digits") as (served, url):
        request = urllib.request.Request(f"{url}/v1/models/digits/versions/1:predict", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        answer = json.loads(urllib.request.urlopen(request, timeout=60).read())
    first, second = answer["predictions"]
    assert first["classes"] == "7" and second["classes"] in [str(d) for d in range(10)]
    np.testing.assert_allclose([sum(first["probabilities"]), sum(second["probabilities"])], 1.0, rtol=1e-5)

    # the second signature takes the decoded pixels: the same image, the same answer
    import tensorflow as tf

    model = tf.saved_model.load(str(home / "serving" / "digits" / "1"))
    pixels = tf.cast(tf.io.decode_png(digit, channels=1), tf.float32)[None]
    decoded = model.signatures["serving_decoded"](image=pixels)
    assert decoded["classes"].numpy()[0].decode() == "7"


def test_predict_scores_a_folder_one_row_per_file_in_order(digits_run, tmp_path):
    home, _, _ = digits_run
    for cls in ("3", "8"):
        (tmp_path / "new" / cls).mkdir(parents=True)
        for f in sorted((home / "data" / "digits" / cls).iterdir())[:4]:
            (tmp_path / "new" / cls / f.name).write_bytes(f.read_bytes())
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(home)
        code, out, err = cli("predict", "configs/digits.yaml", "--data", str(tmp_path / "new"), "--output",
                             str(tmp_path / "scores.csv"))
    assert code == 0, err
    import csv

    rows = list(csv.DictReader((tmp_path / "scores.csv").open()))
    files = [f"{c}/{f.name}" for c in ("3", "8") for f in sorted((tmp_path / "new" / c).iterdir())]
    assert [r["file"] for r in rows] == files
    assert sum(r["classes"] == r["file"][0] for r in rows) >= 7
