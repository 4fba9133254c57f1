"""The first error a new cluster user meets: an object store without credentials (or with
refused ones). Each case runs the real `gpupipe` command as a subprocess in a scrubbed
environment (no Google or AWS credentials of any kind, the GCE metadata server on a closed
loopback port, every HTTP(S) proxy on a closed loopback port so that nothing can leave the
machine) and expects stderr to be exactly one `error:` line naming the URI and the fix,
exit code 1, no traceback."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.gcs import free_port

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "penguins.yaml"
GOOGLE_FIX = ("set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file (on a workstation: `gcloud auth "
              "application-default login`), or in the cluster name a Secret holding one in "
              "storage.gcs.credentials_secret, or give the pods' Kubernetes service account a Google service account "
              "(Workload Identity) with roles/storage.objectAdmin on")
AWS_FIX = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (in the cluster: the keys of the Kubernetes Secret "
           "storage.s3.credentials_secret names; on EKS without keys: an IAM role for the pods' service account)")


def closed_port() -> int:
    """A loopback port nothing listens on (connections are refused at once)."""
    return free_port()


def scrubbed_env(home: Path, **extra: str) -> dict:
    """No credentials anywhere a client looks, and nowhere to send traffic but loopback."""
    home.mkdir(parents=True, exist_ok=True)
    dead = f"127.0.0.1:{closed_port()}"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           # google-auth: no ADC file, no gcloud config, a metadata server that refuses at once
           "CLOUDSDK_CONFIG": str(home / "gcloud"), "GCE_METADATA_HOST": dead, "GCE_METADATA_IP": dead,
           "GCE_METADATA_DETECT_RETRIES": "1",
           # botocore: no shared files, no instance metadata
           "AWS_SHARED_CREDENTIALS_FILE": str(home / "aws-credentials"), "AWS_CONFIG_FILE": str(home / "aws-config"),
           "AWS_EC2_METADATA_DISABLED": "true",
           # anything that would still try a non-loopback host goes to a closed loopback port
           "HTTPS_PROXY": f"http://{dead}", "HTTP_PROXY": f"http://{dead}", "https_proxy": f"http://{dead}",
           "http_proxy": f"http://{dead}", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env.update(extra)
    for name in env:
        assert not name.startswith(("GOOGLE_APPLICATION", "STORAGE_EMULATOR")) or name in extra
    return env


def gpupipe(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_error_line(out: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout, out.stderr
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), (out.returncode, out.stderr)
    return lines[0]


def test_run_with_a_gs_source_and_no_google_credentials(tmp_path):
    out = gpupipe(scrubbed_env(tmp_path / "home"), "run", str(CONFIG), "--data-source",
                  "gs://gpupipe-data/penguins.csv", "--runs-dir", str(tmp_path / "runs"), "--serving-base",
                  str(tmp_path / "serving"))
    line = one_error_line(out)
    assert line == f"error: gs://gpupipe-data/penguins.csv: no Google credentials found; {GOOGLE_FIX} gpupipe-data"
    assert not (tmp_path / "serving").exists()


def test_run_with_an_s3_source_and_no_aws_keys(tmp_path, monkeypatch):
    """The data is there on a real S3 server (moto on loopback); only the keys are missing."""
    from components.contracts import storage
    from tests.fixtures.s3 import s3_server

    with s3_server(monkeypatch) as bucket:
        source = f"s3://{bucket}/data/penguins.csv"
        storage.upload_file(str(ROOT / "data" / "penguins.csv"), source)
        assert storage.exists(source)  # with the keys, it reads
        env = scrubbed_env(tmp_path / "home", AWS_ENDPOINT_URL_S3=os.environ["AWS_ENDPOINT_URL_S3"],
                           AWS_REGION="us-east-1", GPUPIPE_S3_ADDRESSING_STYLE="path")
        out = gpupipe(env, "run", str(CONFIG), "--data-source", source, "--runs-dir", str(tmp_path / "runs"),
                      "--serving-base", str(tmp_path / "serving"))
    assert one_error_line(out) == f"error: {source}: no S3 credentials found; {AWS_FIX}"


@pytest.mark.parametrize("command", [["versions"], ["manifest", "kserve"]])
def test_serving_base_on_gs_and_no_google_credentials(tmp_path, command):
    base = "gs://gpupipe-models/serving"
    started = time.monotonic()
    out = gpupipe(scrubbed_env(tmp_path / "home"), *command, str(CONFIG), "--serving-base", base)
    line = one_error_line(out)
    assert line.startswith(f"error: {base}/penguins/"), line  # the object it tried to read, under the base
    assert line.endswith(f": no Google credentials found; {GOOGLE_FIX} gpupipe-models"), line
    assert time.monotonic() - started < 60


def test_refused_google_credentials_are_one_line(tmp_path):
    """A service-account key whose token endpoint (loopback) answers invalid_grant: the key
    is revoked or rotated. The message says the credentials were refused, not missing."""
    from tests.fixtures.google_oauth import GoogleTokenFixture

    with GoogleTokenFixture() as tokens:
        tokens.refuse = True
        key = tokens.key_file(tmp_path)
        env = scrubbed_env(tmp_path / "home", GOOGLE_APPLICATION_CREDENTIALS=str(key))
        out = gpupipe(env, "versions", str(CONFIG), "--serving-base", "gs://gpupipe-models/serving")
    line = one_error_line(out)
    assert line.startswith("error: gs://gpupipe-models/serving/penguins/"), line
    assert ": the Google credentials were refused (invalid_grant: Invalid JWT Signature.); renew the key file " \
           "GOOGLE_APPLICATION_CREDENTIALS names" in line, line


def test_the_scrubbed_environment_reaches_nothing_but_loopback(tmp_path):
    """The guard itself: a request to a public host in that environment goes to the closed
    loopback proxy and fails at once (so the cases above cannot have asked the internet)."""
    code = ("import requests, sys\n"
            "try:\n    requests.get('https://storage.googleapis.com/', timeout=5)\n"
            "except requests.exceptions.ProxyError:\n    sys.exit(3)\n")
    out = subprocess.run([sys.executable, "-c", code], env=scrubbed_env(tmp_path / "home"), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 3, out.stderr


def test_a_task_without_google_credentials_fails_in_one_line_of_the_summary(tmp_path):
    """Local data, a gs:// serving base: the run starts, and its first task that reads the
    base (fingerprint) fails; the summary's one error line names the step, the URI and the
    fix (the task's traceback stays in the run's log). `--cold`: the task is a new Python
    started in the scrubbed environment, as a pod runs its command, not a fork of a warm
    server that imports every step's libraries (TensorFlow, TFDV) for steps this run never
    reaches; the summary is the same either way."""
    base = "gs://gpupipe-models/serving"
    out = gpupipe(scrubbed_env(tmp_path / "home"), "run", str(CONFIG), "--serving-base", base, "--runs-dir",
                  str(tmp_path / "runs"), "--cold", timeout=300)
    assert out.returncode == 1 and "Traceback" not in out.stdout and "Traceback" not in out.stderr, out.stderr
    errors = [line for line in out.stdout.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: fingerprint: {base}/penguins: no Google credentials found; {GOOGLE_FIX} "
                      "gpupipe-models"], out.stdout
