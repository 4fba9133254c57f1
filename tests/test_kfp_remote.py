"""`gpupipe upload/submit/schedule/runs` through the real kfp.Client against a KFP v2beta1
REST API FIXTURE (tests/fixtures/kfp_api.py): a Kubeflow cluster cannot run here."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.kfp_api import KfpApiFixture

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def gpupipe(*args, env_extra=None, process=False):
    """`gpupipe ARGS` with the environment CI gives it: in this process through the CLI's
    `main` (stdout, stderr and the exit code it returns), or with `process=True` as a new
    process from the shell (the first test: the entry point end to end)."""
    import contextlib
    import io
    import os
    from unittest import mock

    env = {**os.environ, "GITHUB_SHA": "0123456789abcdef0123", **(env_extra or {})}
    if process:
        return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=300, env=env)
    from pipelines.cli import main

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), contextlib.chdir(ROOT), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse on a malformed command line
            code = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture
def kfp_api():
    with KfpApiFixture() as server:
        yield server


def test_submit_uploads_a_named_version_and_starts_a_run(kfp_api):
    out = gpupipe("submit", "configs/penguins.yaml", "--host", kfp_api.url, "--experiment", "nightly",
                  env_extra={"KFP_TOKEN": "test-token-value"}, process=True)
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
    kfp_api.state.run_states = [("PENDING", None, None)]
    assert gpupipe("submit", "configs/penguins.yaml", "--host", kfp_api.url).returncode == 0
    out = gpupipe("runs", "--host", kfp_api.url)
    assert out.returncode == 0 and "PENDING" in out.stdout and "penguins v0.1.0-0123456789ab" in out.stdout
    listing = [r for r in kfp_api.state.requests if r.method == "GET" and r.path == "/apis/v2beta1/runs"][-1]
    assert listing.query["sort_by"] == ["created_at desc"]


def test_runs_shows_state_duration_and_the_version_each_run_pushed(kfp_api, tmp_path):
    """Three runs: one pushed version 4 (the serving store records the run that pushed each
    version), one ended without a push (the push task ran, the gate said no), one failed
    before push; the newest first, durations from the API's timestamps."""
    import json
    import re

    from components.store.base import ServingStore
    from components.store.served import MODEL_FILE

    for _ in range(3):
        assert gpupipe("submit", "configs/penguins.yaml", "--host", kfp_api.url).returncode == 0
    pushed, unblessed, failed = sorted(kfp_api.state.runs, key=lambda r: kfp_api.state.runs[r]["created_at"])
    t = "2026-11-30T12:{:02d}:{:02d}Z".format
    kfp_api.finish_run(pushed, "SUCCEEDED", t(12, 30), [("Train model", "SUCCEEDED", t(3, 0), t(9, 0)),
                                                       ("Push to serving", "SUCCEEDED", t(11, 0), t(12, 20))])
    kfp_api.finish_run(unblessed, "SUCCEEDED", t(9, 5), [("Push to serving", "SUCCEEDED", t(8, 0), t(9, 0))])
    kfp_api.finish_run(failed, "FAILED", t(4, 0), [("Validate data (TFDV)", "FAILED", t(3, 0), t(4, 0))])
    serving = tmp_path / "serving"
    version = Path(ServingStore(str(serving), "penguins").version_path(4))
    (version / "assets.extra" / "gpupipe").mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    (version / "assets.extra" / "gpupipe" / MODEL_FILE).write_text(json.dumps({"digest": "d", "run_id": pushed}))

    out = gpupipe("runs", "--host", kfp_api.url, "--serving-base", str(serving), "--model", "penguins")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    expected = [(failed, "FAILED", "2m00s", "-"), (unblessed, "SUCCEEDED", "8m05s", "not pushed"),
                (pushed, "SUCCEEDED", "12m30s", "version 4")]
    assert len(lines) == 3
    for line, (run_id, run_state, took, what) in zip(lines, expected):
        assert re.fullmatch(rf"2026-11-30 12:0\d:00\+00:00\s+{run_state}\s+{took}\s+{what}\s+{run_id}  penguins "
                            r"v0\.1\.0-0123456789ab", line), line
    without_store = gpupipe("runs", "--host", kfp_api.url)
    assert without_store.returncode == 0
    assert [line.split()[4:6] for line in without_store.stdout.splitlines()] == [
        ["-", failed], ["push", "SUCCEEDED"], ["push", "SUCCEEDED"]]


def test_bad_cron_and_unreachable_host_are_one_line():
    out = gpupipe("schedule", "configs/penguins.yaml", "--host", "http://127.0.0.1:9", "--cron", "every day")
    assert out.returncode == 1 and out.stderr.strip().startswith("error: --cron 'every day': not a cron expression")
    out = gpupipe("submit", "configs/penguins.yaml", "--host", "http://127.0.0.1:9")
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
    assert "error: --host http://127.0.0.1:9: cannot reach the KFP API" in out.stderr


def test_submit_watch_follows_a_run_that_succeeds_with_typed_parameters(kfp_api):
    kfp_api.state.run_states = [("PENDING", None, None), ("RUNNING", None, None), ("SUCCEEDED", None, None)]
    out = gpupipe("submit", "configs/penguins.yaml", "--host", kfp_api.url, "--watch", "--poll", "0.05",
                  "--param", "epochs=3", "--param", "data_source=gs://b/new.csv")
    assert out.returncode == 0, out.stderr
    (run,) = kfp_api.state.runs.values()
    assert run["runtime_config"]["parameters"] == {"epochs": 3, "data_source": "gs://b/new.csv"}
    assert f"  {kfp_api.url}/#/runs/details/{run['run_id']}" in out.stdout.splitlines()
    assert [line.split(": ")[1] for line in out.stdout.splitlines() if line.startswith("  run ")] == [
        "PENDING", "RUNNING", "SUCCEEDED"]


def test_submit_watch_of_a_failed_run_exits_1_naming_the_task(kfp_api):
    kfp_api.state.run_states = [("RUNNING", None, None),
                                ("FAILED", "Validate data (TFDV)", "data validation found 1 anomaly")]
    out = gpupipe("submit", "configs/penguins.yaml", "--host", kfp_api.url, "--watch", "--poll", "0.05")
    assert out.returncode == 1
    run_id = next(iter(kfp_api.state.runs))
    assert out.stderr.strip().splitlines() == [
        f"error: run {run_id} FAILED at Validate data (TFDV): data validation found 1 anomaly"]


@pytest.mark.parametrize("param, message", [
    ("epochs=three", "error: --param epochs=three: epochs takes a int, e.g. epochs=40"),
    ("batch=3", "error: --param batch=3: give NAME=VALUE with NAME one of data_source, epochs, eval_threshold, "
                "serving_base, learning_rate"),
])
def test_a_bad_run_parameter_is_one_line_before_anything_is_uploaded(kfp_api, param, message):
    out = gpupipe("submit", "configs/penguins.yaml", "--host", kfp_api.url, "--param", param)
    assert out.returncode == 1 and out.stderr.strip().splitlines() == [message]
    assert not kfp_api.state.requests


def test_a_failed_schedule_create_keeps_the_old_schedule(kfp_api):
    assert gpupipe("schedule", "configs/penguins.yaml", "--host", kfp_api.url, "--cron", "0 3 * * *").returncode == 0
    (old,) = kfp_api.state.recurring_runs
    kfp_api.state.fail_next_recurring_create = True
    out = gpupipe("schedule", "configs/penguins.yaml", "--host", kfp_api.url, "--cron", "30 4 * * 1")
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1
    assert "KFP refused to create it" in out.stderr and "1 earlier schedule(s) left running" in out.stderr
    assert list(kfp_api.state.recurring_runs) == [old]  # still there, still on its old cron
    assert not [r for r in kfp_api.state.requests if r.method == "DELETE"]


@pytest.mark.parametrize("cron, reason", [
    ("61 3 * * *", "61 is outside 0-59 in the minute field"),
    ("0 24 * * *", "24 is outside 0-23 in the hour field"),
    ("0 3 * 13 *", "13 is outside 1-12 in the month field"),
    ("0 3 * * 7", "7 is outside 0-6 in the day of week field"),
    ("*/0 3 * * *", "step '0' in the minute field is not a positive number"),
])
def test_cron_fields_are_checked_against_their_ranges(cron, reason):
    out = gpupipe("schedule", "configs/penguins.yaml", "--host", "http://127.0.0.1:9", "--cron", cron)
    assert out.returncode == 1
    assert out.stderr.strip() == f"error: --cron '{cron}': {reason}; e.g. '0 3 * * *' is 03:00 daily"


def test_a_host_without_scheme_and_the_version():
    out = gpupipe("runs", "--host", "kubeflow.example.com/pipeline")
    assert out.returncode == 1 and out.stderr.strip() == (
        "error: --host 'kubeflow.example.com/pipeline': give the KFP API's URL with its scheme, e.g. "
        "https://kubeflow.example.com/pipeline")
    version = gpupipe("--version")
    assert version.returncode == 0 and version.stdout.strip() == "gpupipe 0.1.0"


def test_the_token_never_travels_in_clear_text_nor_to_another_host(monkeypatch):
    """Over plain http to another machine the token is refused; a redirect to another host
    (here 127.0.0.2, a second loopback address) does not carry it."""
    import threading
    from http.server import ThreadingHTTPServer

    from components.contracts.errors import GpupipeError
    from pipelines.remote import check_reachable
    from tests.fixtures.gcs import free_port
    from tests.fixtures.http import JsonHandler

    seen = {}

    class Elsewhere(JsonHandler):
        def do_GET(self):
            seen["authorization"] = self.headers.get("Authorization")
            self.send_response(200)
            self.end_headers()

    other = ThreadingHTTPServer(("127.0.0.2", free_port()), Elsewhere)

    class Redirecting(Elsewhere):
        def do_GET(self):
            seen["first"] = self.headers.get("Authorization")
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.2:{other.server_address[1]}/apis/v2beta1/healthz")
            self.end_headers()

    first = ThreadingHTTPServer(("127.0.0.1", free_port()), Redirecting)
    for server in (first, other):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("KFP_TOKEN", "secret-token")
    try:
        check_reachable(f"http://127.0.0.1:{first.server_address[1]}")
        assert seen == {"first": "Bearer secret-token", "authorization": None}
        with pytest.raises(GpupipeError, match="a KFP token is set and would travel in clear text; use the https://"):
            check_reachable("http://kubeflow.example.com/pipeline")
    finally:
        for server in (first, other):
            server.shutdown()
            server.server_close()


def test_schedules_pause_resume_list_and_delete(kfp_api):
    assert gpupipe("schedule", "configs/penguins.yaml", "--host", kfp_api.url, "--cron", "0 3 * * *").returncode == 0
    (job_id,) = kfp_api.state.recurring_runs
    paused = gpupipe("schedule", "pause", "configs/penguins.yaml", "--host", kfp_api.url)
    assert paused.returncode == 0 and paused.stdout.strip() == f"paused {job_id}"
    assert kfp_api.state.recurring_runs[job_id]["status"] == "DISABLED"
    listed = gpupipe("schedule", "list", "--host", kfp_api.url)
    assert listed.returncode == 0 and listed.stdout.split() == ["DISABLED", "0", "0", "3", "*", "*", "*", job_id,
                                                                "penguins-schedule"]
    assert gpupipe("schedule", "resume", "configs/penguins.yaml", "--host", kfp_api.url).returncode == 0
    assert kfp_api.state.recurring_runs[job_id]["status"] == "ENABLED"
    deleted = gpupipe("schedule", "delete", "configs/penguins.yaml", "--host", kfp_api.url)
    assert deleted.returncode == 0 and deleted.stdout.strip() == f"deleted {job_id}"
    assert not kfp_api.state.recurring_runs
    again = gpupipe("schedule", "delete", "configs/penguins.yaml", "--host", kfp_api.url)
    assert again.returncode == 1 and again.stdout.strip() == "no schedule of penguins in experiment gpupipe"


def test_the_token_comes_from_the_environment_a_file_or_the_cluster(tmp_path, monkeypatch):
    from components.contracts.errors import GpupipeError
    from pipelines.remote import kfp_token

    in_cluster = tmp_path / "serviceaccount-token"
    monkeypatch.delenv("KFP_TOKEN", raising=False)
    monkeypatch.delenv("KFP_TOKEN_FILE", raising=False)
    assert kfp_token(in_cluster_paths=(str(in_cluster),)) is None  # kfp.Client's kube config then
    in_cluster.write_text("pod-token\n")
    assert kfp_token(in_cluster_paths=(str(in_cluster),)) == "pod-token"
    (tmp_path / "token").write_text("file-token\n")
    monkeypatch.setenv("KFP_TOKEN_FILE", str(tmp_path / "token"))
    assert kfp_token(in_cluster_paths=(str(in_cluster),)) == "file-token"
    monkeypatch.setenv("KFP_TOKEN", "env-token")
    assert kfp_token() == "env-token"
    monkeypatch.delenv("KFP_TOKEN")
    monkeypatch.setenv("KFP_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(GpupipeError, match=f"KFP_TOKEN_FILE: cannot read {tmp_path / 'missing'} "):
        kfp_token()


def test_behind_iap_the_bearer_is_a_google_id_token_for_the_client_id(kfp_api, tmp_path):
    """google-auth signs a JWT with the service account's key, the token endpoint FIXTURE
    (tests/fixtures/google_oauth.py) answers with an ID token for the IAP client id, and
    that token is the Authorization header of every request the KFP fixture sees."""
    from google.auth import jwt

    from tests.fixtures.google_oauth import GoogleTokenFixture

    client_id = "123-abc.apps.googleusercontent.com"
    with GoogleTokenFixture() as google:
        env = {"GOOGLE_APPLICATION_CREDENTIALS": str(google.key_file(tmp_path)), "KFP_TOKEN": ""}
        out = gpupipe("runs", "--host", kfp_api.url, "--iap-client-id", client_id, env_extra=env)
        assert out.returncode == 0, out.stderr
        from_env = gpupipe("runs", "--host", kfp_api.url, env_extra={**env, "KFP_IAP_CLIENT_ID": client_id})
        assert from_env.returncode == 0, from_env.stderr
    assert google.audiences == [client_id, client_id]
    assert jwt.decode(google.issued[0], verify=False)["aud"] == client_id
    assert len(google.issued) == 2 and len(kfp_api.state.requests) >= 4  # health checks, then the API calls
    assert {r.headers.get("authorization") for r in kfp_api.state.requests} == {f"Bearer {t}" for t in google.issued}


def test_without_google_credentials_iap_auth_is_one_line(kfp_api, tmp_path):
    from tests.fixtures.google_oauth import GoogleTokenFixture

    nowhere = {"GOOGLE_APPLICATION_CREDENTIALS": "", "GCE_METADATA_IP": "127.0.0.1:9",
               "GCE_METADATA_HOST": "127.0.0.1:9", "NO_GCE_CHECK": "False"}
    out = gpupipe("runs", "--host", kfp_api.url, "--iap-client-id", "123-abc", env_extra=nowhere)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("error: --iap-client-id 123-abc: no Google credentials that give an ID token (")
    assert "set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file" in out.stderr
    with GoogleTokenFixture() as google:
        google.refuse = True
        out = gpupipe("runs", "--host", kfp_api.url, "--iap-client-id", "123-abc",
                      env_extra={"GOOGLE_APPLICATION_CREDENTIALS": str(google.key_file(tmp_path))})
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("error: --iap-client-id 123-abc: Google gave no ID token for this audience (")
    assert "invalid_grant" in out.stderr
    assert not kfp_api.state.requests  # nothing reached the KFP API without a token


@pytest.mark.parametrize("command", [["upload", "configs/penguins.yaml"], ["submit", "configs/penguins.yaml"]])
def test_a_kfp_backend_older_than_2_5_0_is_refused_in_one_line(command):
    """The fixture's healthz reports tag_name as KFP's API server does; 2.4.0 cannot take the
    secretNameParameter every compiled executor carries (kubeflow/pipelines #11935)."""
    with KfpApiFixture(version="2.4.0") as old:
        out = gpupipe(*command, "--host", old.url)
        assert out.returncode == 1 and out.stdout == ""
        assert out.stderr.count("\n") == 1 and out.stderr == (
            f"error: --host {old.url}: KFP backend 2.4.0 is older than 2.5.0, which gpupipe's pipelines need "
            "(kfp-kubernetes 1.5's secretNameParameter, kubeflow/pipelines #11935); upgrade Kubeflow Pipelines to "
            "2.5.0 or later\n")
        assert old.calls() == ["GET /apis/v2beta1/healthz"]  # nothing uploaded, no run started
        assert not old.state.versions and not old.state.runs
    with KfpApiFixture(version="2.5.0") as current:
        out = gpupipe(*command, "--host", current.url)
        assert out.returncode == 0 and out.stderr == "", out.stderr
        assert current.state.versions


@pytest.mark.parametrize("command", ["upload", "submit"])
def test_a_config_with_a_webhook_secret_is_refused_by_kfp_2_5_in_one_line(command, tmp_path):
    """notify.webhook_secret compiles an exit handler (taskFinalStatus), which KFP 2.5.0's
    argocompiler/dag.go refuses ("task final status not supported yet"); 2.14.0 takes it."""
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["notify"] = {"webhook_secret": "team-a-slack"}
    config = tmp_path / "penguins.yaml"
    config.write_text(yaml.safe_dump(raw))
    with KfpApiFixture(version="2.5.0") as old:
        out = gpupipe(command, str(config), "--host", old.url)
        assert out.returncode == 1 and out.stdout == ""
        assert out.stderr == (
            f"error: --host {old.url}: KFP backend 2.5.0 is older than 2.14.0, which notify.webhook_secret needs "
            "(the exit handler's final status, kubeflow/pipelines #11953); upgrade Kubeflow Pipelines to 2.14.0 or "
            "later, or drop notify.webhook_secret\n")
        assert old.calls() == ["GET /apis/v2beta1/healthz"]
    with KfpApiFixture(version="2.14.0") as current:
        out = gpupipe(command, str(config), "--host", current.url)
        assert out.returncode == 0 and out.stderr == "", out.stderr


def test_the_kfp_version_is_read_from_healthz_and_an_unknown_one_warns():
    from components.contracts.errors import GpupipeError
    from pipelines.remote import check_kfp_version, kfp_version

    assert kfp_version({"tag_name": "2.5.0"}) == (2, 5, 0)
    assert kfp_version({"tag_name": "v2.14.3"}) == (2, 14, 3)
    assert kfp_version({"tag_name": "unknown"}) is None and kfp_version({}) is None
    for newer in ("2.5.0", "2.5.1", "2.15.0", "3.0.0"):
        check_kfp_version("https://k", {"tag_name": newer}, warn=pytest.fail)
    for older in ("2.4.0", "2.4.9", "1.8.5", "2.0.0-rc.1"):
        with pytest.raises(GpupipeError, match=f"KFP backend {older.split('-')[0]} is older than 2.5.0"):
            check_kfp_version("https://k", {"tag_name": older})
    warned = []
    check_kfp_version("https://k", {"tag_name": "unknown"}, warn=warned.append)
    assert warned == ["warning: --host https://k: the KFP API does not say its version (tag_name 'unknown'); "
                      "gpupipe's pipelines need KFP 2.5.0 or later"]
