"""What a user sees from `gpupipe` when the input is wrong: one line, non-zero exit, no traceback."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def gpupipe(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def config_with(tmp_path, edit) -> str:
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    edit(raw)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize("command", ["run", "compile"])
def test_misspelt_key(tmp_path, command):
    bad = config_with(tmp_path, lambda c: c["training"].update(epocs=3))
    out = gpupipe(command, bad, "--output-dir" if command == "compile" else "--runs-dir", str(tmp_path / "o"))
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [f"error: {bad}: training.epocs: unknown key "
                                               "(check its spelling; pipelines/config.py lists the options)"]


def one_line_error(out) -> str:
    """A user error: exit code 1 and exactly one line on stderr, no traceback."""
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    return lines[0]


def test_missing_data_file(tmp_path):
    bad = config_with(tmp_path, lambda c: c["data"].update(source="data/no-such.csv"))
    line = one_line_error(gpupipe("run", bad, "--runs-dir", str(tmp_path / "runs")))
    assert line.startswith("error: data.source: file not found: ") and "no-such.csv" in line
    assert not (tmp_path / "runs").exists()  # nothing started


@pytest.mark.parametrize("make", [lambda p: str(p / "no-such.csv"), lambda p: (p / "empty").mkdir() or str(p / "empty")],
                         ids=["missing", "empty-directory"])
def test_init_names_its_own_argument_not_a_config_key(tmp_path, capsys, make):
    """`gpupipe init` has no config yet: a source it cannot read names the command's DATA
    argument, not data.source."""
    from pipelines.cli import main

    source = make(tmp_path)
    assert main(["init", source, "--label", "species", "--output", str(tmp_path / "c.yaml")]) == 1
    line, = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: gpupipe init DATA: ")
    assert source in line and "data.source" not in line and not (tmp_path / "c.yaml").exists()


def test_label_absent_from_data(tmp_path):
    bad = config_with(tmp_path, lambda c: c["data"].update(label="specis"))
    line = one_line_error(gpupipe("run", bad, "--runs-dir", str(tmp_path / "runs")))
    assert "data.label: column 'specis' not found in" in line and "species" in line


def test_compile_check_names_the_stale_file(tmp_path):
    out_dir = tmp_path / "compiled"
    assert gpupipe("compile", "configs/penguins.yaml", "--output-dir", str(out_dir)).returncode == 0
    assert gpupipe("compile", "--check", "configs/penguins.yaml", "--output-dir", str(out_dir)).returncode == 0
    edited = config_with(tmp_path, lambda c: c["training"].update(epochs=7))
    out = gpupipe("compile", "--check", edited, "--output-dir", str(out_dir))
    assert out.returncode == 1
    assert f"stale compiled pipeline(s): {out_dir / 'penguins.yaml'}" in out.stderr


def test_rollback_command_moves_stable(tmp_path):
    from components.store import served
    from components.store.base import ServingStore

    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"pb")
    store = ServingStore(str(tmp_path / "serving"), "penguins")
    for _ in range(3):
        store.add_version(str(model))
    served.set_labels(store, {"stable": 3})
    out = gpupipe("rollback", "configs/penguins.yaml", "--serving-base", str(tmp_path / "serving"))
    assert out.returncode == 0, out.stderr
    assert "penguins: stable moved from version 3 to version 2" in out.stdout
    assert served.current_labels(store) == {"stable": 2}
    out = gpupipe("rollback", "configs/penguins.yaml", "--serving-base", str(tmp_path / "serving"), "--to", "9")
    assert out.returncode == 1 and "rollback --to 9: no such version of penguins (versions: 1, 2, 3)" in out.stderr


def test_schema_command_writes_the_inferred_schema_for_review(tmp_path):
    out = gpupipe("schema", "configs/penguins.yaml", "--output", str(tmp_path / "penguins.schema.pbtxt"))
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "penguins.schema.pbtxt").read_text()
    assert 'name: "species"' in text and 'name: "island"' in text and "min_fraction: 1.0" in text
    assert "validation.schema_file" in out.stdout
    # the curated schema is then used by validate
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["validation"]["schema_file"] = str(tmp_path / "penguins.schema.pbtxt")
    from components.validate.settings import ValidationSettings
    from pipelines.config import parse_config

    # What the validate task gets: the config's section as JSON, read back by the step.
    passed = ValidationSettings.from_json(parse_config(raw).validation.model_dump_json())
    assert passed.schema_file == str(tmp_path / "penguins.schema.pbtxt")


@pytest.mark.parametrize("edit, expected", [
    (lambda c: c["cluster"].pop("serving_base"),
     "error: serving.base: 'serving' is a path inside the pod, lost with it on the cluster; set "
     "cluster.serving_base: gs://BUCKET/PATH or s3://BUCKET/PATH"),
    (lambda c: c["cluster"].update(data_source="/mnt/data/penguins.csv"),
     "error: cluster.data_source: '/mnt/data/penguins.csv' is a path inside the pod, lost with it on the cluster; "
     "set cluster.data_source: gs://BUCKET/PATH or s3://BUCKET/PATH"),
    (lambda c: c["validation"].update(schema_file="configs/penguins.schema.pbtxt"),
     "error: validation.schema_file: 'configs/penguins.schema.pbtxt' is a path inside the pod, lost with it on the "
     "cluster; upload the file and set validation.schema_file: gs://BUCKET/PATH or s3://BUCKET/PATH"),
    (lambda c: c.update(pipeline_root="runs"),
     "error: pipeline_root: 'runs' is not an object-store URI; give gs://BUCKET/PATH (or s3://, minio://), or "
     "remove it for the installation's default"),
])
def test_compile_refuses_a_cluster_location_a_pod_would_lose(tmp_path, edit, expected):
    bad = config_with(tmp_path, edit)
    assert one_line_error(gpupipe("compile", bad, "--output-dir", str(tmp_path / "o"))) == expected
    assert not (tmp_path / "o").exists()


def test_versions_lists_state_labels_metric_and_lineage(tmp_path, capsys):
    from components.contracts.blessing import Blessing
    from components.push.logic import push_model
    from components.push.settings import ServingSettings
    from pipelines.cli import main

    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"pb")
    (model / "variables" / "variables.index").write_bytes(b"i")
    base = str(tmp_path / "serving")
    lineage = {"run_name": "nightly-1", "pipeline": "penguins", "gpupipe_version": "0.1.0", "image": "img:1",
               "data_fingerprint": "d1g3st", "config_digest": "c0ffee" * 4}
    push_model(ServingSettings(base=base, model_name="penguins"), str(model),
               Blessing(True, "accuracy", 1.0, 0.0, ["accuracy ok"], metrics={"accuracy": 0.97}),
               run_id="run-a", lineage=lineage)
    (model / "saved_model.pb").write_bytes(b"pb2")
    second = push_model(ServingSettings(base=base, model_name="penguins", canary_percent=10), str(model),
                        Blessing(True, "accuracy", 1.0, 0.0, ["ok"], metrics={"accuracy": 0.98}),
                        run_id="run-b")
    assert main(["versions", "configs/penguins.yaml", "--serving-base", base]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[:5] for line in lines if not line.startswith("      ")] == [
        ["1", "stable", "stable", "accuracy", "0.9700"], ["2", "canary", "canary", "accuracy", "0.9800"]]
    assert lines[0].endswith("run run-a") and second.version == 2
    assert lines[1].split() == ["run", "name", "nightly-1", "pipeline", "penguins", "gpupipe", "0.1.0", "image",
                                "img:1", "data", "d1g3st", "config", "c0ffeec0ffee", "pushed", lines[1].split()[-1]]
    assert lines[2].strip() == "blessed: accuracy ok"
    assert lines[-1].strip() == "canary: canary for 10% of the traffic"


def test_promote_and_abort_from_the_command_line(tmp_path, capsys):
    from components.contracts.blessing import Blessing
    from components.push.logic import push_model
    from components.push.settings import ServingSettings
    from pipelines.cli import main

    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"pb")
    model_dir, CONFIG = str(model), str(ROOT / "configs" / "penguins.yaml")

    base = str(tmp_path / "serving")
    for _ in range(2):
        push_model(ServingSettings(base=base, model_name="penguins", canary_percent=0), model_dir,
                   Blessing(True, "accuracy", 1.0, 0.0, ["ok"]))
    push_model(ServingSettings(base=base, model_name="penguins", canary_percent=50), model_dir,
               Blessing(True, "accuracy", 1.0, 0.0, ["ok"]))
    assert main(["promote", CONFIG, "--serving-base", base]) == 0
    assert capsys.readouterr().out.startswith("penguins: canary version 3 is now stable (previous stable 2, kept for "
                                              "rollback)")
    push_model(ServingSettings(base=base, model_name="penguins", canary_percent=50), model_dir,
               Blessing(True, "accuracy", 1.0, 0.0, ["ok"]))
    assert main(["abort", CONFIG, "--serving-base", base]) == 0
    assert capsys.readouterr().out.strip() == ("penguins: canary version 4 aborted (marked failed, label and files "
                                               "removed); stable stays version 3")
    assert main(["abort", CONFIG, "--serving-base", base]) == 1
    assert capsys.readouterr().err.startswith("error: abort: penguins has no canary version under ")


def test_rollback_further_back_has_tf_serving_load_the_version_before_stable_moves(tmp_path, capsys, monkeypatch):
    from components.contracts.blessing import Blessing
    from components.push import smoke
    from components.push.logic import push_model
    from components.push.settings import ServingSettings
    from components.store import models_config, served
    from components.store.base import ServingStore
    from pipelines.cli import main

    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"pb")
    base, config = str(tmp_path / "serving"), str(ROOT / "configs" / "penguins.yaml")
    for _ in range(4):
        push_model(ServingSettings(base=base, model_name="penguins"), str(model),
                   Blessing(True, "accuracy", 1.0, 0.0, ["ok"]))  # stable 4, previous stable 3 (loaded too)
    store = ServingStore(base, "penguins")

    def served_now():
        (entry,) = models_config.parse(store.read_models_config()).model_config_list.config
        return list(entry.model_version_policy.specific.versions), dict(entry.version_labels)

    assert served.rollback_needs_loading(base, "penguins", None) is None  # 3 is loaded: the label may move
    seen = []
    monkeypatch.setattr(smoke, "wait_until_available", lambda channel, name, version, timeout: seen.append(
        (name, version, served_now())))
    assert main(["rollback", config, "--serving-base", base, "--to", "1", "--endpoint", "127.0.0.1:8500"]) == 0
    # models.config named version 1 (unlabelled) while stable still pointed at 4, then stable moved
    assert seen == [("penguins", 1, ([1, 3, 4], {"stable": 4}))]
    assert served_now() == ([1, 4], {"stable": 1})
    assert capsys.readouterr().out.splitlines()[0] == ("penguins: waiting for 127.0.0.1:8500 to load version 1 "
                                                       "before stable moves onto it")
