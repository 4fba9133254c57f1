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


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_the_compiled_yaml_pushes_a_whole_version_to_the_bucket_and_leaves_the_pod_empty(tmp_path, monkeypatch,
                                                                                          scheme):
    from kfp import components, local
    from kfp.local import pipeline_orchestrator

    from components.contracts import storage
    from pipelines.cli import main
    from pipelines.warm import warm_tasks
    from tests.fixtures.gcs import gcs_emulator
    from tests.fixtures.s3 import s3_server

    with (gcs_emulator if scheme == "gs" else s3_server)(monkeypatch) as bucket:
        root = f"{scheme}://{bucket}"
        storage.upload_file(str(ROOT / "data" / "penguins.csv"), f"{root}/data/penguins.csv")
        raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
        raw["name"] = "penguins-cluster"
        raw["cluster"].update(data_source=f"{root}/data/penguins.csv", serving_base=f"{root}/serving")
        if scheme == "s3":  # the store's settings, compiled into every task's environment
            raw["storage"] = {"s3": {"endpoint": os.environ["AWS_ENDPOINT_URL_S3"], "region": "us-east-1"}}
        del raw["pipeline_root"]  # kfp.local keeps artifacts on local disk; the test gives it a directory
        # No GPU here: the train task trains in its own pod (with a GPU it launches a JobSet,
        # tests/test_jobset_restarts.py)
        raw["training"]["pods"].update(gpus=0, accelerator=None)
        config = tmp_path / "penguins-cluster.yaml"
        config.write_text(yaml.safe_dump(raw))
        # `gpupipe compile` itself (its main, in process: the same parser, config checks and compiler)
        assert main(["compile", str(config), "--output-dir", str(tmp_path / "compiled")]) == 0

        pod = tmp_path / "pod"  # the task's working directory: empty, and lost after the run
        pod.mkdir()
        monkeypatch.chdir(pod)
        pipeline = components.load_component_from_file(str(tmp_path / "compiled" / "penguins-cluster.yaml"))
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "artifacts"))
        # The entry point kfp.local itself calls for a pipeline; a loaded YAML has no Python to call.
        # Each task is forked from the warm server (the module docstring: cold tasks are the image test's).
        with warm_tasks():
            pipeline_orchestrator.run_local_pipeline(pipeline_spec=pipeline.pipeline_spec, arguments={})

        objects = sorted(e.uri[len(root) + 1:] for e in storage.list_prefix(f"{root}/serving"))
        assert "serving/penguins/1/saved_model.pb" in objects and "serving/models.config" in objects
        assert any(name.startswith("serving/penguins/1/variables/") for name in objects)
        assert "serving/penguins/1/assets.extra/gpupipe/stats.pb" in objects
        assert os.listdir(pod) == [], "a task wrote into its working directory"
        pushed = next((tmp_path / "artifacts").glob("penguins-cluster-*/push/summary"))
        assert pushed.read_text().startswith("# Pushed version 1")
        page = next((tmp_path / "artifacts").glob("penguins-cluster-*/report/page")).read_text()  # the HTML artifact
        assert f"Pushed version 1: {scheme}://" in page and 'id="plot-loss"' in page
