"""GPU training as a JobSet on a shared pool, against the Kubernetes API FIXTURE
(tests/fixtures/k8s_api.py, driven through the real kubernetes client) with a JobSet controller
FIXTURE (tests/fixtures/jobset_controller.py: the pod is a local process of the pod template's
command). The JobSet's pod is killed twice, a preemption (SIGTERM) then a lost node (SIGKILL),
and the JobSet's failurePolicy restarts it each time; training resumes from the backup to the
full step count. Between the two, the train task's own pod is lost too: its retry, named for
the same run, re-attaches to the running JobSet instead of starting a second one, and follows
it through the second restart to the end. Each pod runs the pod template's command through
the session's warm server (conftest's `warm_python`: its training process is forked from a
process that imported TensorFlow, and the controller's SIGKILL reaches it as well as the
shim); the kills land at fixed points of training (a few steps past a new checkpoint), not
after a sleep."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import PENGUIN_COLUMNS, ROOT, penguin_settings

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("jobset-restarts")]
# 270 steps, a checkpoint every 25, every epoch run (no early stopping): the first pod is
# preempted a few steps past its first checkpoint (step 25), the second killed a few steps past
# its own first one (about 25 steps after it resumed), and the third trains the rest.
LONG = dict(epochs=30, checkpoint_steps=25, hidden_units=[64, 64], early_stopping=None)
# The train task's launcher. It imports first, then waits for its go (a line on stdin): the
# retry is started with the first, and sent on once the first is lost.
LAUNCHER = ("import json, sys\nimport kubernetes.client, kubernetes.config\n"
            "from components.train.launch import Launch, run_training_job\nsys.stdin.readline()\n"
            "print(run_training_job(Launch.from_json(sys.argv[1]), json.loads(sys.argv[2]), poll_seconds=0.25))\n")


def test_a_jobset_killed_twice_resumes_from_its_backup_and_a_retried_launcher_reattaches(
        tmp_path, penguins_config, penguin_examples, penguin_validation, warm_python):
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
                                    cwd=tmp_path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)

        def go(process):
            process.stdin.write("go\n")
            process.stdin.flush()

        def retry_attached(pod: int) -> bool:  # the second pod is killed once the retry follows the JobSet
            if pod == 0:
                return True
            assert retry.poll() is None, "the retried launcher ended before it read the JobSet"
            with cluster.lock:
                methods = [method for method, _ in cluster.requests]
            posts = [i for i, method in enumerate(methods) if method == "POST"]
            return len(posts) == 2 and "GET" in methods[posts[1]:]  # the first launcher is gone by then

        python, warm_env = warm_python
        controller = JobSetController(cluster, [signal.SIGTERM, signal.SIGKILL], python=python, hold=retry_attached,
                                      env={**warm_env, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
                                           "GPUPIPE_SCRATCH_DIR": str(tmp_path / "scratch"),
                                           "GOOGLE_APPLICATION_CREDENTIALS": None})
        controller.start()
        first, retry = launcher(), launcher()  # the retry: KFP's retry of the train task, a new pod, the same run
        go(first)
        deadline = time.monotonic() + 300
        while len(controller.pods) < 1 and time.monotonic() < deadline:  # the first pod preempted, a second runs
            assert controller.error is None, controller.error
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)  # the train task's pod is lost with its node
        first.wait(timeout=30)
        first.stdin.close()
        first.stdout.close()
        go(retry)
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
