"""A launcher pod deleted mid-run (issue #35, acceptance 3): no KFP backend lets Argo retry a
deleted pod (pipelines/remote/recover.py), so the run fails with its JobSet training on, and
the run's follower retries the run through KFP's Retry; the task's new pod re-attaches to the
JobSet, and the run succeeds.

Every part but gpupipe's is a FIXTURE: the KFP v2beta1/v1beta1 run API
(tests/fixtures/kfp_api.py) over the run's Argo Workflow and KFP's Retry of it
(tests/fixtures/argo_run.py), and the Kubernetes API (tests/fixtures/k8s_api.py) holding the
JobSet and the Workflow; the launcher (run_training_job), the follower (watch_run, `gpupipe
submit --watch`) and the clients (kfp.Client, kubernetes) are the real ones. Time in the
launcher is a simulated clock (test_launcher_semantics.FakeClock)."""
import threading

import pytest

from components.train.launch import WORKFLOW_ENV, job_name, run_training_job
from tests.fixtures.argo_run import ArgoRun
from tests.fixtures.kfp_api import KfpApiFixture
from tests.test_launcher_semantics import COMMAND, DONE, RUNNING, FakeClock, launch, with_clock

pytestmark = pytest.mark.unit
WORKFLOW = "ctr-abc12"
BEFORE, AFTER = ("fingerprint", "ingest", "validate"), ("evaluate", "push", "report")
DISPLAY = {"ingest": "Ingest data", "train": "Train model", "push": "Push model"}


class ClockEvent(threading.Event):
    """The launcher's `stopping` event (its SIGTERM) whose wait passes simulated time."""

    def __init__(self, clock: FakeClock):
        super().__init__()
        self.clock = clock

    def wait(self, timeout=None) -> bool:
        self.clock.sleep(timeout or 0)
        return self.is_set()


def kfp_run(kfp: KfpApiFixture, cluster) -> tuple:
    """A run of configs/ctr.yaml with its tasks before train done: its Workflow both in KFP's
    keeping and in the cluster (where the launcher reads whether the run was cancelled)."""
    argo = ArgoRun(WORKFLOW)
    for task in BEFORE:
        argo.start(task)
        argo.succeed(task)
    run_id = "run-1"
    kfp.state.runs[run_id] = {"run_id": run_id, "display_name": "ctr", "state": "RUNNING",
                              "created_at": "2026-12-05T12:00:00Z", "finished_at": "1970-01-01T00:00:00Z"}
    kfp.state.argo[run_id], kfp.state.display_names = argo, DISPLAY
    cluster.objects[("default", "workflows", WORKFLOW)] = argo.workflow
    return run_id, argo


def test_a_launcher_pod_deleted_five_minutes_in_ends_with_one_jobset_reattached_and_the_run_succeeding(
        ctr_config, monkeypatch, capsys):
    from pipelines.remote import connect, watch_run
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    monkeypatch.setenv(WORKFLOW_ENV, WORKFLOW)
    key = ("default", "jobsets", job_name({WORKFLOW_ENV: WORKFLOW}))
    attempts, ended = [], []

    with kubernetes_api([RUNNING]) as (url, cluster), KfpApiFixture("2.14.0") as kfp:
        run_id, argo = kfp_run(kfp, cluster)

        def kubelet_and_jobset(now):
            if now >= 300 and len(attempts) == 1 and not attempts[0].is_set():
                attempts[0].set()  # the pod deleted five minutes in: the kubelet's SIGTERM
            if now >= 2 * 3600:  # the JobSet finishes after two hours, past the SDK's one-hour retry cap
                with cluster.lock:
                    cluster.status[key] = {"conditions": DONE}

        clock = FakeClock(kubelet_and_jobset)
        with_clock(monkeypatch, clock)

        watching = threading.Event()  # the watch saw the run before its pod fails (a slow machine's first poll)

        def pod():  # the train task's pod, as Argo starts it for the run and again after a Retry
            watching.wait(60)
            argo.start("train")
            stopping = ClockEvent(clock)
            attempts.append(stopping)
            try:
                run_training_job(launch(ctr_config), COMMAND, api=custom_objects_api(url), poll_seconds=60.0,
                                 stopping=stopping)
            except SystemExit as exit_:
                ended.append(exit_.code)
                argo.lose_pod("train")  # its pod gone: Argo marks the node Error, "pod deleted"
                return
            ended.append(0)
            argo.succeed("train")
            for task in AFTER:
                argo.start(task)
                argo.succeed(task)
            argo.finish("Succeeded")

        threads = [threading.Thread(target=pod)]
        kfp.state.on_retry = lambda _: (threads.append(threading.Thread(target=pod)), threads[-1].start())
        threads[0].start()
        lines = []
        final = watch_run(connect(kfp.url), run_id, poll_seconds=0.02, timeout_seconds=120,
                          report=lambda line: (lines.append(line), watching.set()), lost_pod_retries=3)
        for thread in threads:
            thread.join(timeout=60)
        out = capsys.readouterr().out

        assert final.state == "SUCCEEDED" and ended == [143, 0]
        assert [k for k in cluster.objects if k[1] == "jobsets"] == [key] and cluster.deleted == []
        assert sum(1 for m, p in cluster.requests if m == "POST" and "/jobsets" in p) == 2  # the second: 409
        assert "SIGTERM, the run not cancelled (an eviction or a drain): leaving JobSet" in out
        assert f"re-attached to JobSet {key[0]}/{key[2]}: created by an earlier attempt of this task" in out
        assert clock.now >= 2 * 3600
        retries = [c for c in kfp.calls() if c == f"POST /apis/v2beta1/runs/{run_id}:retry"]
        assert len(retries) == 1
        assert f"run {run_id}: the train task's pod was deleted (Argo node {WORKFLOW}.root.train.executor: " \
               "'pod deleted'); retrying the run (KFP Retry, 1 of 3)" in " ".join(lines)
        assert [line.split(": ")[-1] for line in lines if line.count(":") == 1] == ["RUNNING", "FAILED", "RUNNING",
                                                                                    "SUCCEEDED"]


def test_a_run_that_failed_on_its_own_is_not_retried(ctr_config):
    """A train task that failed (its job failed for good, exit 1) and a run whose train pod
    was deleted while another step failed on its own: no Retry."""
    from pipelines.remote import connect, watch_run
    from tests.fixtures.k8s_api import kubernetes_api

    with kubernetes_api([RUNNING]) as (_, cluster), KfpApiFixture("2.14.0") as kfp:
        run_id, argo = kfp_run(kfp, cluster)
        argo.start("train")
        argo.fail("train", "Error (exit code 1)")
        final = watch_run(connect(kfp.url), run_id, poll_seconds=0.01, report=lambda line: None, lost_pod_retries=3)
        assert final.state == "FAILED" and not [c for c in kfp.calls() if c.endswith(":retry")]

        argo.node(f"{WORKFLOW}.root.train.executor").update(phase="Error", message="pod deleted")
        argo.start("ingest")  # another step's own failure in the same run
        argo.fail("ingest", "Error (exit code 2)")
        final = watch_run(connect(kfp.url), run_id, poll_seconds=0.01, report=lambda line: None, lost_pod_retries=3)
        assert final.state == "FAILED" and not [c for c in kfp.calls() if c.endswith(":retry")]


def test_a_retry_kfp_refuses_is_one_line_and_the_failed_run(ctr_config):
    """The train pod deleted, but the Workflow's node status offloaded to a database: KFP
    refuses the Retry (util/workflow.go CanRetry); the follower says so and returns the run."""
    from pipelines.remote import connect, watch_run
    from tests.fixtures.k8s_api import kubernetes_api

    with kubernetes_api([RUNNING]) as (_, cluster), KfpApiFixture("2.14.0") as kfp:
        run_id, argo = kfp_run(kfp, cluster)
        argo.start("train")
        argo.lose_pod("train")
        argo.workflow["status"]["offloadNodeStatusVersion"] = "fnv:123"
        lines = []
        final = watch_run(connect(kfp.url), run_id, poll_seconds=0.01, report=lines.append, lost_pod_retries=3)
    assert final.state == "FAILED" and not [c for c in kfp.calls() if c.endswith(":retry")]
    assert lines[-1] == f"run {run_id}: its node status is offloaded to Argo's database, which KFP's Retry refuses; " \
                        "not retried"


def test_submit_watch_retries_a_lost_train_pod_up_to_training_pods_retries_then_exits_1():
    """`gpupipe submit --watch` (its own process): the train task's pod is deleted in every
    attempt; the follower retries training.pods.retries (3) times, then exits 1 naming it."""
    from tests.test_kfp_remote import gpupipe

    with KfpApiFixture("2.14.0") as kfp:
        def create(run_id):
            argo = ArgoRun(f"ctr-{run_id[:5]}")
            kfp.state.argo[run_id], kfp.state.display_names = argo, DISPLAY
            argo.start("ingest")
            argo.succeed("ingest")
            lose(run_id)

        def lose(run_id):
            argo = kfp.state.argo[run_id]
            argo.start("train")
            argo.lose_pod("train")

        kfp.state.on_create, kfp.state.on_retry = create, lose
        out = gpupipe("submit", "configs/ctr.yaml", "--host", kfp.url, "--watch", "--poll", "0.02")
    assert out.returncode == 1, out.stderr
    (run_id,) = kfp.state.runs
    assert [c for c in kfp.calls() if c.endswith(":retry")] == [f"POST /apis/v2beta1/runs/{run_id}:retry"] * 3
    assert "retrying the run (KFP Retry, 3 of 3)" in out.stdout and "(KFP Retry, 4 of" not in out.stdout
    assert out.stderr.strip().splitlines() == [f"error: run {run_id} FAILED at Train model"]


def test_watch_follows_a_run_started_elsewhere_and_retries_its_lost_train_pod():
    """`gpupipe watch RUN_ID --config C`: a run started from the UI or a schedule, not by
    `submit --watch`; its train pod is deleted once, the follower retries the run, the retry
    finishes it, exit 0."""
    from tests.test_kfp_remote import gpupipe

    with KfpApiFixture("2.14.0") as kfp:
        argo = ArgoRun("ctr-ui123")
        for task in BEFORE:
            argo.start(task)
            argo.succeed(task)
        argo.start("train")
        argo.lose_pod("train")
        run_id = "run-from-the-ui"
        kfp.state.runs[run_id] = {"run_id": run_id, "display_name": "ctr", "state": "FAILED",
                                  "created_at": "2026-12-05T12:00:00Z", "finished_at": "1970-01-01T00:00:00Z"}
        kfp.state.argo[run_id], kfp.state.display_names = argo, DISPLAY

        def finish(_):
            argo.start("train")
            argo.succeed("train")
            for task in AFTER:
                argo.start(task)
                argo.succeed(task)
            argo.finish("Succeeded")

        kfp.state.on_retry = finish
        out = gpupipe("watch", run_id, "--host", kfp.url, "--config", "configs/ctr.yaml", "--poll", "0.02")
        unknown = gpupipe("watch", "no-such-run", "--host", kfp.url, "--retries", "1", "--poll", "0.02")
        calls = kfp.calls()
    assert out.returncode == 0, out.stderr
    assert [c for c in calls if c.endswith(":retry")] == [f"POST /apis/v2beta1/runs/{run_id}:retry"]
    assert "retrying the run (KFP Retry, 1 of 3)" in out.stdout and f"run {run_id}: SUCCEEDED" in out.stdout
    assert unknown.returncode != 0 and unknown.stderr.strip().splitlines() == [
        f"error: watch: no run no-such-run at {kfp.url}; `gpupipe runs --host {kfp.url}` lists the recent runs and "
        "their ids"]
