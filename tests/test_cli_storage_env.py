"""A command on a config reaches its object store as the config's tasks do: `gpupipe versions`
with the S3 endpoint only in the config's storage.s3 (moto's server mode, a FIXTURE for MinIO
and Ceph), and the environment is as it was after the command."""
import os
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def test_versions_reads_an_s3_serving_base_through_the_configs_storage_settings(tmp_path, monkeypatch, capsys):
    from components.contracts import storage
    from components.contracts.blessing import Blessing
    from components.push.logic import push_model
    from components.push.settings import ServingSettings
    from pipelines.cli import main
    from tests.fixtures.s3 import s3_server

    with s3_server(monkeypatch) as bucket:
        endpoint = os.environ["AWS_ENDPOINT_URL_S3"]
        model = tmp_path / "model"
        model.mkdir()
        (model / "saved_model.pb").write_bytes(b"a SavedModel's bytes")
        assert push_model(ServingSettings(base=f"s3://{bucket}/serving", model_name="penguins"), str(model),
                          Blessing(True, "accuracy", 1.0, 0.0, ["test"])).version == 1
        raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
        raw["storage"] = {"s3": {"endpoint": endpoint, "region": "us-east-1"}}
        config = tmp_path / "penguins-s3.yaml"
        config.write_text(yaml.safe_dump(raw))
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3")  # the endpoint is the config's alone now
        capsys.readouterr()
        code = main(["versions", str(config), "--serving-base", f"s3://{bucket}/serving"])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert out.out.split()[:2] == ["1", "stable"]
        assert "AWS_ENDPOINT_URL_S3" not in os.environ  # put back as it was
