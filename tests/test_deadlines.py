"""Deadlines (issue #39, point 5): a storage endpoint that accepts connections and never
answers (tests/fixtures/faults.py `Blackhole`, a real listening socket) fails the operation, and the step, within
storage.retry.deadline_seconds, in one line naming the endpoint and the keys to change; the
attempts alone would have held it longer."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from components.contracts import storage
from tests.fixtures.faults import Blackhole

ROOT = Path(__file__).resolve().parents[1]
READ_TIMEOUT = 0.5


@pytest.fixture
def silent_endpoint():
    """FIXTURE: a loopback socket that accepts connections and never answers."""
    with Blackhole() as endpoint:
        yield endpoint


def point_at(monkeypatch, endpoint: Blackhole, deadline: float, attempts: int = 5) -> None:
    for name, value in {"AWS_ENDPOINT_URL_S3": endpoint.url, "AWS_REGION": "us-east-1",
                        "GPUPIPE_S3_ADDRESSING_STYLE": "path", "AWS_ACCESS_KEY_ID": "gpupipe-test",
                        "AWS_SECRET_ACCESS_KEY": "gpupipe-test-secret", "AWS_EC2_METADATA_DISABLED": "true",
                        "STORAGE_EMULATOR_HOST": endpoint.url, "GPUPIPE_STORAGE_ATTEMPTS": str(attempts),
                        "GPUPIPE_STORAGE_DEADLINE": str(deadline), "GPUPIPE_STORAGE_CONNECT_TIMEOUT": str(READ_TIMEOUT),
                        "GPUPIPE_STORAGE_READ_TIMEOUT": str(READ_TIMEOUT)}.items():
        monkeypatch.setenv(name, value)


def timed_failure(call):
    started = time.monotonic()
    with pytest.raises(storage.StorageError) as err:
        call()
    return time.monotonic() - started, str(err.value)


@pytest.mark.parametrize("uri", ["s3://gpupipe-data/penguins.csv", "gs://gpupipe-data/penguins.csv"])
def test_a_silent_endpoint_fails_the_operation_within_the_deadline(monkeypatch, silent_endpoint, uri):
    deadline = 4.0
    point_at(monkeypatch, silent_endpoint, deadline)
    from components.contracts.storage import gcs, s3

    (s3 if uri.startswith("s3://") else gcs).client()  # made before the clock starts: the SDK's import is not a try
    seconds, message = timed_failure(lambda: storage.read_bytes(uri))
    print(f"{uri}: failed after {seconds:.2f} s, {silent_endpoint.accepted} connections, deadline {deadline} s")
    assert seconds < deadline
    assert 2 <= silent_endpoint.accepted < 5  # it retried, and the deadline (not the attempts) stopped it
    assert "\n" not in message and message.startswith(f"{uri}: cannot reach ")
    assert "(no answer within the read timeout)" in message
    assert f"storage.retry.deadline_seconds ({deadline:g} s) left no time for another try" in message
    assert message.endswith("or raise storage.retry.read_timeout_seconds and storage.retry.deadline_seconds")
    if uri.startswith("s3://"):
        assert f"cannot reach {silent_endpoint.url} " in message and "check storage.s3.endpoint (AWS_ENDPOINT_URL_S3)" \
            in message


def test_without_the_deadline_the_attempts_alone_hold_the_call_longer(monkeypatch, silent_endpoint):
    """The same endpoint with a deadline far away: every attempt waits out its read timeout,
    which is what the deadline above cut short."""
    point_at(monkeypatch, silent_endpoint, deadline=600, attempts=5)
    seconds, message = timed_failure(lambda: storage.read_bytes("s3://gpupipe-data/penguins.csv"))
    print(f"no deadline: failed after {seconds:.2f} s, {silent_endpoint.accepted} connections")
    assert silent_endpoint.accepted == 5 and seconds >= 5 * READ_TIMEOUT
    assert " after 5 tries in " in message and "left no time" not in message


def test_a_step_reading_a_silent_s3_endpoint_fails_within_its_deadline(tmp_path, silent_endpoint):
    """`gpupipe run` with the serving base on an S3 endpoint that never answers: fingerprint,
    the first step that reads the base, fails within storage.retry.deadline_seconds, the
    summary's one error line naming the step, the endpoint and the keys."""
    deadline = 8
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["storage"] = {"s3": {"endpoint": silent_endpoint.url},
                      "retry": {"attempts": 5, "deadline_seconds": deadline, "connect_timeout_seconds": 1,
                                "read_timeout_seconds": 1}}
    config = tmp_path / "penguins-silent-s3.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUPIPE_STORAGE_", "STORAGE_EMULATOR"))}
    env.update(AWS_ACCESS_KEY_ID="gpupipe-test", AWS_SECRET_ACCESS_KEY="gpupipe-test-secret",
               AWS_EC2_METADATA_DISABLED="true")
    base = "s3://gpupipe-models/serving"
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", str(config), "--runs-dir",
                          str(tmp_path / "runs"), "--serving-base", base], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stdout + out.stderr, out.stderr
    step = re.search(r"^  fingerprint FAILURE\s+([0-9.]+)s$", out.stdout, re.M)
    assert step and float(step.group(1)) < deadline, out.stdout
    errors = [line for line in out.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out.stdout
    assert errors[0].startswith(f"error: fingerprint: {base}/penguins: cannot reach {silent_endpoint.url} after ")
    assert "check storage.s3.endpoint (AWS_ENDPOINT_URL_S3)" in errors[0]
    assert errors[0].endswith("or raise storage.retry.read_timeout_seconds and storage.retry.deadline_seconds")
    print(f"fingerprint failed in {step.group(1)} s (deadline {deadline} s): {errors[0]}")


def test_the_train_launchers_kubernetes_calls_end_within_their_deadline(monkeypatch, tmp_path, silent_endpoint):
    """The launcher's client (kubernetes_api: the kube config here, as outside a pod) on an API
    server that accepts and never answers: each request times out (API_TIMEOUT), and the
    retries stop when another would end past API_DEADLINE, in one line."""
    from components.contracts.errors import GpupipeError
    from components.train import kube as launch
    from tests.fixtures.http import write_kubeconfig

    deadline = 3.0
    from kubernetes.config import kube_config

    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", silent_endpoint.url)
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)  # read from KUBECONFIG at import
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(launch, "API_TIMEOUT", (READ_TIMEOUT, READ_TIMEOUT))
    monkeypatch.setattr(launch, "API_DEADLINE", deadline)
    api = launch.kubernetes_api()
    started = time.monotonic()
    with pytest.raises(GpupipeError) as err:
        launch.with_retries(lambda: api.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "team-a",
                                                                     "jobsets", "train-1"),
                            "followed JobSet team-a/train-1")
    seconds = time.monotonic() - started
    print(f"Kubernetes API: failed after {seconds:.2f} s, {silent_endpoint.accepted} connections: {err.value}")
    assert seconds < deadline and 2 <= silent_endpoint.accepted < launch.API_ATTEMPTS
    assert str(err.value).startswith(f"training: the Kubernetes API failed {silent_endpoint.accepted} times in ")
    assert "while the launcher followed JobSet team-a/train-1" in str(err.value) and "\n" not in str(err.value)


def test_kfp_api_requests_time_out_and_stop_after_their_tries(silent_endpoint):
    """kfp.Client alone sends its requests with no timeout (it would wait here for ever);
    through pipelines/remote's connect (compat.kfp_client_with_deadlines) each request has
    a (connect, read) timeout and a bounded number of tries, then one line naming --host."""
    import kfp

    from components.contracts.compat.kfp import kfp_client_with_deadlines
    from components.contracts.errors import GpupipeError

    client = kfp_client_with_deadlines(kfp.Client(host=silent_endpoint.url, namespace="team-a"),
                                       timeout=(READ_TIMEOUT, READ_TIMEOUT), attempts=3)
    started = time.monotonic()
    with pytest.raises(GpupipeError) as err:
        client.get_run("run-1")
    seconds = time.monotonic() - started
    print(f"KFP API: failed after {seconds:.2f} s, {silent_endpoint.accepted} connections: {err.value}")
    assert silent_endpoint.accepted == 3 and seconds < 3 * READ_TIMEOUT + 0.5 + 1.0 + 1.0  # 3 reads, 2 backoffs
    assert str(err.value) == (f"--host {silent_endpoint.url}: the KFP API did not answer GET within 3 tries of 0.5 s "
                              "to connect and 0.5 s to read (ReadTimeoutError); check --host, the network and the "
                              "KFP API server")
