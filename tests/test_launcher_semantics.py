"""The launcher on the cluster's terms (issue #35, acceptance 3, 4, 6 and 8), through the real
`kubernetes` client against the Kubernetes API FIXTURE (tests/fixtures/k8s_api.py) and the
JobSet controller FIXTURE (tests/fixtures/jobset_controller.py): no Kubernetes, Argo or JobSet
runs on these machines.
- SIGTERM to a launcher whose run goes on (an eviction, a drain) leaves the JobSet, and the
  next attempt re-attaches to it; a cancelled run's (KFP's terminate patch, Argo's shutdown,
  a deleted Workflow) deletes it.
- 60 s of 503s while following end with no DELETE.
- A JobSet that waits 23 h suspended in Kueue, then runs, is not deleted at hour 24.
- A worker that exits 2 (a config or data error) runs once.
- The compiled train task of a launcher has no KFP retry (Argo would not retry a deleted pod,
  and the SDK's 3600 s cap would kill a retried one)."""
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from components.contracts.errors import GpupipeError
from components.train import follow, kube
from components.train.launch import WORKFLOW_ENV, Launch, job_manifest, run_training_job
from tests.fixtures.http import write_kubeconfig

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
RUNNING = [{"type": "StartupPolicyCompleted", "status": "True", "reason": "AllReplicatedJobsStarted",
            "message": "replicated jobs started"}]
DONE = [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed"}]
COMMAND = ["python", "-m", "components.train", "--examples", "x"]


def launch(ctr_config, **update) -> Launch:
    """configs/ctr.yaml's JobSet, as its compiled train task carries it."""
    from pipelines.factory import launch_json

    return Launch.from_json(launch_json(ctr_config)).model_copy(update=update)


def launch_argument_json(config) -> str:
    from pipelines.factory import launch_json

    return launch_json(config)


def workflow(name: str, **spec) -> dict:
    """The run's Argo Workflow as the API returns it (argoproj.io/v1alpha1)."""
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": name, "namespace": "default"},
            "spec": {"entrypoint": "entrypoint", **spec}, "status": {"phase": "Running"}}


def sigterm_the_launcher(tmp_path, ctr_config, cluster, url, run: str) -> subprocess.CompletedProcess:
    """The train task's launcher in its own process (as the task runs it), in run `run`'s
    Workflow; SIGTERM once it follows its JobSet."""
    script = ("import sys\nfrom components.train.launch import Launch, run_training_job\n"
              f"run_training_job(Launch.from_json(sys.argv[1]), {COMMAND!r}, poll_seconds=0.05)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, launch_argument_json(ctr_config)], cwd=tmp_path,
                            env={**os.environ, "KUBECONFIG": write_kubeconfig(tmp_path / "kubeconfig", url), WORKFLOW_ENV: run},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not any(m == "GET" and "/jobsets/" in p for m, p in list(cluster.requests)) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.terminate()
    out = proc.communicate(timeout=60)[0]
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


def test_sigterm_without_a_cancel_leaves_the_jobset_and_the_next_attempt_reattaches(tmp_path, ctr_config):
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    with kubernetes_api([RUNNING]) as (url, cluster):
        cluster.objects[("default", "workflows", "ctr-abc12")] = workflow("ctr-abc12")  # the run goes on
        out = sigterm_the_launcher(tmp_path, ctr_config, cluster, url, "ctr-abc12")
        assert out.returncode == 143, out.stdout
        assert "not cancelled (an eviction or a drain): leaving JobSet default/gpupipe-train-" in out.stdout
        assert cluster.deleted == [] and not [m for m, _ in cluster.requests if m == "DELETE"]
        (job,) = [k for k in cluster.objects if k[1] == "jobsets"]
        # the next attempt of the task (the run's Retry: the same Workflow, so the same name)
        cluster.conditions = [RUNNING, DONE]
        os.environ[WORKFLOW_ENV] = "ctr-abc12"
        try:
            reason = run_training_job(launch(ctr_config), COMMAND, api=custom_objects_api(url), poll_seconds=0.01)
        finally:
            del os.environ[WORKFLOW_ENV]
        assert reason == "AllJobsCompleted: jobset completed"
        assert [k for k in cluster.objects if k[1] == "jobsets"] == [job] and cluster.deleted == []


@pytest.mark.parametrize("cancel", [
    {"activeDeadlineSeconds": 0},  # KFP's terminate (backend resource_manager.go, util.GetTerminatePatch)
    {"shutdown": "Terminate"},  # Argo's terminate
    None,  # the run deleted: its Workflow is gone
], ids=["kfp-terminate", "argo-shutdown", "workflow-deleted"])
def test_sigterm_of_a_cancelled_run_deletes_the_jobset(tmp_path, ctr_config, cancel):
    from tests.fixtures.k8s_api import kubernetes_api

    with kubernetes_api([RUNNING]) as (url, cluster):
        if cancel is not None:
            cluster.objects[("default", "workflows", "ctr-abc12")] = workflow("ctr-abc12", **cancel)
        out = sigterm_the_launcher(tmp_path, ctr_config, cluster, url, "ctr-abc12")
    assert out.returncode == 143, out.stdout
    assert "SIGTERM: the run was cancelled: deleting JobSet default/gpupipe-train-" in out.stdout
    assert [k[1] for k in cluster.deleted] == ["jobsets"]


class FakeClock:
    """time.monotonic and time.sleep for the launcher's modules: sleeping advances the clock at
    once, and `on_tick(now)` lets the test act at a given time (Kueue admitting the JobSet)."""

    def __init__(self, on_tick=lambda now: None):
        self.now, self.on_tick = 0.0, on_tick

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.on_tick(self.now)


def with_clock(monkeypatch, clock: FakeClock) -> None:
    for module in (follow, kube):
        monkeypatch.setattr(module, "time", clock)


def test_sixty_seconds_of_503s_while_following_end_with_no_delete(ctr_config, monkeypatch):
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    clock = FakeClock()
    with_clock(monkeypatch, clock)
    with kubernetes_api([RUNNING, RUNNING, DONE]) as (url, cluster):
        started = {}

        def outage(now):  # 503 from the first poll on, until 60 s have passed
            if now >= 1.0 and "at" not in started:
                started["at"] = now
            with cluster.lock:
                cluster.faults = [("GET", 503)] if "at" in started and now - started["at"] < 60 else []

        clock.on_tick = outage
        manifest = job_manifest(launch(ctr_config), "gpupipe-train-blip", "team-a", COMMAND)
        reason = follow.follow_job(manifest, custom_objects_api(url), poll_seconds=1.0, workflow="ctr-abc12",
                                   workflow_namespace="team-a")
    gets = sum(1 for m, p in cluster.requests if m == "GET")
    assert reason == "AllJobsCompleted: jobset completed"
    assert gets > kube.API_ATTEMPTS  # more 503s than one call's old attempts: followed through them
    assert cluster.deleted == [] and not [m for m, _ in cluster.requests if m == "DELETE"]


def test_a_jobset_suspended_23_hours_then_running_is_not_deleted_at_hour_24(ctr_config, monkeypatch):
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    hour = 3600.0
    shape = launch(ctr_config).shape
    assert shape.timeout_seconds == 24 * hour
    with kubernetes_api([RUNNING]) as (url, cluster):
        manifest = job_manifest(launch(ctr_config), "gpupipe-train-queued", "team-a", COMMAND)
        key = ("team-a", "jobsets", "gpupipe-train-queued")

        def kueue(now):  # suspended at creation (Kueue's webhook), admitted at 23 h, done after 3 h of running
            with cluster.lock:
                job = cluster.objects.get(key)
                if job is None:
                    return
                job["spec"]["suspend"] = now < 23 * hour
                if now >= 26 * hour:
                    cluster.status[key] = {"conditions": DONE}

        clock = FakeClock(kueue)
        with_clock(monkeypatch, clock)
        manifest["spec"]["suspend"] = True
        reason = follow.follow_job(manifest, custom_objects_api(url), poll_seconds=600.0,
                                   timeout_seconds=shape.timeout_seconds, workflow="ctr-abc12",
                                   workflow_namespace="team-a")
        assert reason == "AllJobsCompleted: jobset completed" and clock.now >= 26 * hour
        assert cluster.deleted == []

        # the same job never admitted-then-running past 24 h of running is stopped, and deleted
        cluster.objects.pop(key)
        cluster.status.pop(key)
        clock.now, clock.on_tick = 0.0, lambda now: None
        with pytest.raises(GpupipeError) as err:
            follow.follow_job(job_manifest(launch(ctr_config), "gpupipe-train-queued", "team-a", COMMAND),
                              custom_objects_api(url), poll_seconds=600.0, timeout_seconds=shape.timeout_seconds,
                              workflow="ctr-abc12", workflow_namespace="team-a")
        assert "did not finish within the train task's timeout (86400 s admitted, time queued not counted)" in str(
            err.value)
        assert clock.now == pytest.approx(24 * hour, abs=600) and cluster.deleted == [key]


@pytest.mark.parametrize("exit_code, pods", [(2, 1), (1, 4)], ids=["config-error-once", "crash-restarts"])
def test_a_worker_that_exits_2_runs_once_and_a_crash_restarts(tmp_path, ctr_config, exit_code, pods):
    """max_restarts 3: a crash (exit 1) runs 1 + 3 pods; exit 2 fails the Job by its
    podFailurePolicy and the JobSet by its FailJobSet rule, after one pod."""
    from tests.fixtures.jobset_controller import JobSetController
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    command = ["python", "-c", f"import sys; sys.exit({exit_code})", "--backup-dir", str(tmp_path / "backup")]
    with kubernetes_api([RUNNING]) as (url, cluster):
        controller = JobSetController(cluster, kills=[], timeout=60)
        controller.start()
        with pytest.raises(GpupipeError) as err:
            run_training_job(launch(ctr_config, workers=1, max_restarts=3), command, api=custom_objects_api(url),
                             poll_seconds=0.02)
        controller.join(timeout=60)
    assert controller.error is None
    assert [p["exit"] for p in controller.pods] == [exit_code] * pods
    reason = "FailJobSetFailurePolicyAction" if exit_code == 2 else "ReachedMaxRestarts"
    assert f"failed ({reason}: " in str(err.value)


def test_the_compiled_launcher_task_has_no_kfp_retry_and_a_single_pod_train_task_keeps_it():
    from pipelines.config import parse_config

    def train_retry(raw) -> dict:
        from pipelines.cli.compile_ import compile_to_text

        (spec,) = [d for d in yaml.safe_load_all(compile_to_text(parse_config(raw))) if "root" in d]
        return spec["root"]["dag"]["tasks"]["train"].get("retryPolicy")

    ctr = yaml.safe_load((ROOT / "configs" / "ctr.yaml").read_text())
    assert train_retry(ctr) is None
    ctr["training"]["pods"]["launcher"] = "pod"
    ctr["training"]["pods"]["workers"] = 1
    assert train_retry(ctr) == {"maxRetryCount": 3, "backoffDuration": "120s", "backoffFactor": 2.0,
                                "backoffMaxDuration": "3600s"}
