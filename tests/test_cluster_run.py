"""The compiled pipeline as a cluster runs it: the YAML file `gpupipe compile` writes,
loaded back and run under kfp.local from an empty working directory, with nothing typed
in: its data source and serving base are the cluster defaults of the config, on GCS (the
gcp-storage-emulator FIXTURE, a real GCS JSON API server on loopback) and on S3 (moto's
server mode FIXTURE, the S3 REST protocol MinIO and Ceph speak, on loopback). The tasks are
forked from a warm server, as `gpupipe run` starts them (pipelines/warm.py: the same command
in a process of its own, with its own environment, working directory and exit code); every
task starting cold, a new Python as each pod is, is proven by `./dev image-test`
(images/image_test.py: this same compiled YAML, each task in a container of the CPU image,
against the GCS emulator)."""
import os
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[1]


def _run_compiled(tmp_path, monkeypatch, config_path: Path) -> Path:
    """`gpupipe compile` on the config, then its YAML file loaded back and run from an empty
    pod directory; the pod directory returned (the test checks it stayed empty)."""
    from kfp import components, local
    from kfp.local import pipeline_orchestrator

    from pipelines.cli import main
    from pipelines.warm import warm_tasks

    # `gpupipe compile` itself (its main, in process: the same parser, config checks and compiler)
    assert main(["compile", str(config_path), "--output-dir", str(tmp_path / "compiled")]) == 0
    pod = tmp_path / "pod"  # the task's working directory: empty, and lost after the run
    pod.mkdir()
    monkeypatch.chdir(pod)
    pipeline = components.load_component_from_file(str(tmp_path / "compiled" / f"{config_path.stem}.yaml"))
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "artifacts"))
    # The entry point kfp.local itself calls for a pipeline; a loaded YAML has no Python to call.
    # Each task is forked from the warm server (the module docstring: cold tasks are the image test's).
    with warm_tasks():
        pipeline_orchestrator.run_local_pipeline(pipeline_spec=pipeline.pipeline_spec, arguments={})
    return pod


def _cluster_config(tmp_path, name: str, root: str, data_source: str, **sections) -> Path:
    """The example config as a cluster runs it: data and serving base in the bucket, no GPU here
    (with a GPU the train task launches a JobSet, tests/test_jobset_restarts.py); `sections`
    updates (or adds) top-level sections."""
    raw = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())
    raw["name"] = f"{name}-cluster"
    raw["cluster"].update(data_source=data_source, serving_base=f"{root}/serving")
    del raw["pipeline_root"]  # kfp.local keeps artifacts on local disk; the test gives it a directory
    raw["training"]["pods"].update(gpus=0, accelerator=None)
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    config = tmp_path / f"{name}-cluster.yaml"
    config.write_text(yaml.safe_dump(raw))
    return config


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_the_compiled_yaml_pushes_a_whole_version_to_the_bucket_and_leaves_the_pod_empty(tmp_path, monkeypatch,
                                                                                          scheme):
    from components.contracts import storage
    from tests.fixtures.gcs import gcs_emulator
    from tests.fixtures.s3 import s3_server

    with (gcs_emulator if scheme == "gs" else s3_server)(monkeypatch) as bucket:
        root = f"{scheme}://{bucket}"
        storage.upload_file(str(ROOT / "data" / "penguins.csv"), f"{root}/data/penguins.csv")
        # on S3 the store's settings, compiled into every task's environment
        store = {"s3": {"endpoint": os.environ["AWS_ENDPOINT_URL_S3"], "region": "us-east-1"}} if scheme == "s3" else None
        config = _cluster_config(tmp_path, "penguins", root, f"{root}/data/penguins.csv",
                                 **({"storage": store} if store else {}))
        pod = _run_compiled(tmp_path, monkeypatch, config)

        objects = sorted(e.uri[len(root) + 1:] for e in storage.list_prefix(f"{root}/serving"))
        assert "serving/penguins/1/saved_model.pb" in objects and "serving/models.config" in objects
        assert any(name.startswith("serving/penguins/1/variables/") for name in objects)
        assert "serving/penguins/1/assets.extra/gpupipe/stats.pb" in objects
        assert os.listdir(pod) == [], "a task wrote into its working directory"
        pushed = next((tmp_path / "artifacts").glob("penguins-cluster-*/push/summary"))
        assert pushed.read_text().startswith("# Pushed version 1")
        page = next((tmp_path / "artifacts").glob("penguins-cluster-*/report/page")).read_text()  # the HTML artifact
        assert f"Pushed version 1: {scheme}://" in page and 'id="plot-loss"' in page


def test_the_compiled_image_yaml_reads_class_folders_from_the_bucket_and_pushes_an_image_model(tmp_path,
                                                                                               monkeypatch):
    """configs/digits.yaml compiled, its images in class folders on the GCS emulator: ingest lists
    and reads the bucket's folders, train decodes the bytes, and the pushed SavedModel takes
    encoded images. Three digits of 40 images each and 100 short epochs (4 steps each) keep the run short; the
    example's own accuracy (>= 0.97 on all ten digits) is tests/test_image_data.py's."""
    from components.contracts import storage
    from components.sources.example_images import write_digits
    from tests.fixtures.gcs import gcs_emulator

    digits = tmp_path / "digits"
    write_digits(str(digits))
    with gcs_emulator(monkeypatch) as bucket:
        root = f"gs://{bucket}"
        for label in ("0", "1", "7"):
            for path in sorted((digits / label).iterdir())[:40]:
                storage.upload_file(str(path), f"{root}/data/digits/{label}/{path.name}")
        storage.upload_file(str(digits / "0" / sorted(os.listdir(digits / "0"))[0]), f"{root}/data/digits/README.png.txt")
        config = _cluster_config(tmp_path, "digits", root, f"{root}/data/digits",
                                 training={"epochs": 100, "early_stopping": None}, evaluation={"threshold": 0.5})
        pod = _run_compiled(tmp_path, monkeypatch, config)

        objects = sorted(e.uri[len(root) + 1:] for e in storage.list_prefix(f"{root}/serving"))
        assert "serving/digits/1/saved_model.pb" in objects, objects
        assert os.listdir(pod) == [], "a task wrote into its working directory"
        manifest = next((tmp_path / "artifacts").glob("digits-cluster-*/ingest/*/manifest.json"))
        ingested = yaml.safe_load(manifest.read_text())
        assert ingested["format"] == "images"
        assert sum(sum(c.values()) for c in ingested["classes"].values()) == 120
        assert sorted(next(iter(ingested["classes"].values()))) == ["0", "1", "7"]
        assert ingested["notes"] == [f"1 file(s) under {root}/data/digits left out, not images in a class folder "
                                     "(README.png.txt)"]
        pushed = next((tmp_path / "artifacts").glob("digits-cluster-*/push/summary"))
        assert pushed.read_text().startswith("# Pushed version 1")
