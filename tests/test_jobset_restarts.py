"""GPU training as a JobSet on a shared pool, against the Kubernetes API FIXTURE
(tests/fixtures/k8s_api.py, driven through the real kubernetes client) with a JobSet controller
FIXTURE (tests/fixtures/jobset_controller.py: the pod is a local process of the pod template's
command). The JobSet's pod is killed twice, a preemption (SIGTERM) then a lost node (SIGKILL),
and the JobSet's failurePolicy restarts it each time; training resumes from the backup to the
full step count. Between the two, the train task's own pod is lost too: its retry, named for
the same run, re-attaches to the running JobSet instead of starting a second one."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import PENGUIN_COLUMNS, ROOT, penguin_settings

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("jobset-restarts")]
LONG = dict(epochs=120, checkpoint_steps=25, hidden_units=[64, 64], early_stopping=None)  # 1,080 steps: kills mid-run
LAUNCHER = ("import json, sys\nfrom components.train.launch import Launch, run_training_job\n"
            "print(run_training_job(Launch.from_json(sys.argv[1]), json.loads(sys.argv[2]), poll_seconds=0.1))\n")


def test_a_jobset_killed_twice_resumes_from_its_backup_and_a_retried_launcher_reattaches(
        tmp_path, penguins_config, penguin_examples, penguin_validation):
    from components.train.launch import Launch, job_name
    from pipelines.factory import launch_json
    from tests.fixtures.http import write_kubeconfig
    from tests.fixtures.jobset_controller import JobSetController
    from tests.fixtures.k8s_api import kubernetes_api

    launch = Launch.from_json(launch_json(penguins_config))  # one GPU worker: a JobSet of one pod
    assert (launch.kind, launch.workers, launch.max_restarts) == ("jobset", 1, 2)
    settings = penguin_settings(**LONG)
    model, backup, report = tmp_path / "model", tmp_path / "backup", tmp_path / "report"
    command = ["python", "-m", "components.train", "--examples", penguin_examples, "--statistics",
               penguin_validation["statistics"], "--model-dir", str(model), "--columns",
               PENGUIN_COLUMNS.model_dump_json(), "--settings", settings.model_dump_json(), "--backup-dir",
               str(backup), "--report-dir", str(report)]
    (tmp_path / "scratch").mkdir()
    with kubernetes_api([[]]) as (url, cluster):
        env = {**os.environ, "KUBECONFIG": write_kubeconfig(tmp_path / "kubeconfig", url), "PYTHONPATH": str(ROOT),
               "GPUPIPE_WORKFLOW": "penguins-run-7f3a9"}  # the run's Argo Workflow, by the downward API

        def launcher():
            return subprocess.Popen([sys.executable, "-c", LAUNCHER, launch.model_dump_json(), json.dumps(command)],
                                    cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)

        controller = JobSetController(cluster, [signal.SIGTERM, signal.SIGKILL], env={
            "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2", "GPUPIPE_SCRATCH_DIR": str(tmp_path / "scratch"),
            "GOOGLE_APPLICATION_CREDENTIALS": None})
        controller.start()
        first = launcher()
        deadline = time.monotonic() + 300
        while len(controller.pods) < 1 and time.monotonic() < deadline:  # the first pod preempted, a second runs
            assert controller.error is None, controller.error
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)  # the train task's pod is lost with its node
        first.wait(timeout=30)
        retry = launcher()  # KFP's retry of the train task: a new pod, the same run
        output = retry.communicate(timeout=600)[0]
        controller.join(timeout=600)
    assert controller.error is None, controller.error
    assert retry.returncode == 0, output
    name = job_name({"GPUPIPE_WORKFLOW": "penguins-run-7f3a9"})
    assert f"re-attached to JobSet default/{name}: created by an earlier attempt of this task" in output
    assert "AllJobsCompleted" in output
    # one JobSet, created once (the retry's create was a 409), never deleted
    posts = [path for method, path in cluster.requests if method == "POST"]
    assert posts == ["/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"] * 2
    assert list(cluster.objects) == [("default", "jobsets", name)] and cluster.deleted == []
    assert "ownerReferences" not in cluster.objects[("default", "jobsets", name)]["metadata"]
    # the pods: preempted (checkpoint and exit 143), lost (SIGKILL), then done
    assert controller.pods == [{"signal": signal.SIGTERM, "exit": 143}, {"signal": signal.SIGKILL, "exit": -9},
                               {"signal": None, "exit": 0}]
    trained = json.loads((report / "report.json").read_text())
    assert trained["resumes"] == 2 and trained["preemptions"] == 1
    assert trained["optimizer_steps"] == LONG["epochs"] * trained["steps_per_epoch"]
    assert (model / "saved_model.pb").is_file() and not backup.exists()
