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
    deadline = 3.0
    point_at(monkeypatch, silent_endpoint, deadline)
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
    deadline = 5
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
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", str(config), "--runs-dir", str(tmp_path / "runs"),
                          "--serving-base", base], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Traceback" not in out.stdout + out.stderr, out.stderr
    step = re.search(r"^  fingerprint FAILURE\s+([0-9.]+)s$", out.stdout, re.M)
    assert step and float(step.group(1)) < deadline, out.stdout
    errors = [line for line in out.stdout.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out.stdout
    assert errors[0].startswith(f"error: fingerprint: {base}/penguins: cannot reach {silent_endpoint.url} after ")
    assert "check storage.s3.endpoint (AWS_ENDPOINT_URL_S3)" in errors[0]
    assert errors[0].endswith("or raise storage.retry.read_timeout_seconds and storage.retry.deadline_seconds")
    print(f"fingerprint failed in {step.group(1)} s (deadline {deadline} s): {errors[0]}")
