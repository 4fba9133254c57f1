"""`gpupipe upload/submit/schedule/runs` through the real kfp.Client against a KFP v2beta1
REST API FIXTURE (tests/fixtures/kfp_api.py): a Kubeflow cluster cannot run here."""
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.kfp_api import KfpApiFixture

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def gpupipe(*args, env_extra=None):
    import os

    env = {**os.environ, "GITHUB_SHA": "0123456789abcdef0123", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.fixture
def kfp_api():
    with KfpApiFixture() as server:
        yield server


def test_submit_uploads_a_named_version_and_starts_a_run(kfp_api):
    out = gpupipe("submit", "configs/penguins.yaml", "--host", kfp_api.url, "--experiment", "nightly",
                  env_extra={"KFP_TOKEN": "test-token-value"})
    assert out.returncode == 0, out.stderr
    state = kfp_api.state
    assert [p["display_name"] for p in state.pipelines.values()] == ["penguins"]
    names = sorted(v["display_name"] for v in state.versions.values())
    assert "v0.1.0-0123456789ab" in names
    uploads = [r for r in state.requests if r.path == "/apis/v2beta1/pipelines/upload_version"]
    assert uploads[0].query["name"] == ["v0.1.0-0123456789ab"]
    compiled = (ROOT / "pipelines" / "compiled" / "penguins.yaml").read_text()
    assert uploads[0].package == compiled  # the same YAML CI checks in
    assert [e["display_name"] for e in state.experiments.values()] == ["nightly"]
    (run,) = state.runs.values()
    version = next(v for v in state.versions.values() if v["display_name"] == "v0.1.0-0123456789ab")
    assert run["pipeline_version_reference"]["pipeline_version_id"] == version["pipeline_version_id"]
    assert f"started run {run['run_id']} of penguins version v0.1.0-0123456789ab" in out.stdout
    assert all(r.headers.get("authorization") == "Bearer test-token-value" for r in state.requests)


def test_upload_reuses_an_existing_version(kfp_api):
    assert gpupipe("upload", "configs/penguins.yaml", "--host", kfp_api.url).returncode == 0
    again = gpupipe("upload", "configs/penguins.yaml", "--host", kfp_api.url)
    assert again.returncode == 0 and "already there: penguins version v0.1.0-0123456789ab" in again.stdout
    assert len([v for v in kfp_api.state.versions.values() if v["display_name"] == "v0.1.0-0123456789ab"]) == 1


def test_scheduling_twice_leaves_one_recurring_run(kfp_api):
    first = gpupipe("schedule", "configs/penguins.yaml", "--host", kfp_api.url, "--cron", "0 3 * * *",
                    "--max-concurrency", "2", "--no-catchup")
    assert first.returncode == 0, first.stderr
    second = gpupipe("schedule", "configs/penguins.yaml", "--host", kfp_api.url, "--cron", "30 4 * * 1")
    assert second.returncode == 0, second.stderr
    (job,) = kfp_api.state.recurring_runs.values()
    assert job["display_name"] == "penguins-schedule"
    assert job["trigger"]["cron_schedule"]["cron"] == "0 30 4 * * 1"
    deletes = [r for r in kfp_api.state.requests if r.method == "DELETE"]
    assert len(deletes) == 1 and "replacing" in second.stdout
    creates = [r.body for r in kfp_api.state.requests if r.method == "POST" and r.path == "/apis/v2beta1/recurringruns"]
    assert int(creates[0]["max_concurrency"]) == 2 and creates[0]["no_catchup"] is True
    assert creates[1]["no_catchup"] is False


def test_runs_lists_recent_runs(kfp_api):
    assert gpupipe("submit", "configs/penguins.yaml", "--host", kfp_api.url).returncode == 0
    out = gpupipe("runs", "--host", kfp_api.url)
    assert out.returncode == 0 and "PENDING" in out.stdout and "penguins v0.1.0-0123456789ab" in out.stdout
    listing = [r for r in kfp_api.state.requests if r.method == "GET" and r.path == "/apis/v2beta1/runs"][-1]
    assert listing.query["sort_by"] == ["created_at desc"]


def test_bad_cron_and_unreachable_host_are_one_line():
    out = gpupipe("schedule", "configs/penguins.yaml", "--host", "http://127.0.0.1:9", "--cron", "every day")
    assert out.returncode == 2 and out.stderr.strip().startswith("error: --cron 'every day': not a cron expression")
    out = gpupipe("submit", "configs/penguins.yaml", "--host", "http://127.0.0.1:9")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "error: --host http://127.0.0.1:9: cannot reach the KFP API" in out.stderr
