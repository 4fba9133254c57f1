"""The multi-worker path: the JobSet and TFJob manifests a config produces, TF_CONFIG for a
JobSet worker, and following a job to its end against a Kubernetes API FIXTURE (an
in-memory CustomObjectsApi stand-in: no cluster runs here)."""
import json
import re

import pytest

from components.contracts.errors import GpupipeError
from components.train.launch import (API_TIMEOUT, INDEX_ENV, WORKERS_ENV, Launch, follow_job, job_manifest, job_state,
                                     tf_config_from_env)
from pipelines.factory import launch_json
from tests.fixtures.configs import with_pods

pytestmark = pytest.mark.unit
COMMAND = ["python", "-m", "components.train", "--examples", "gs://b/examples"]


def ctr_launch(ctr_config, **update) -> Launch:
    config = with_pods(ctr_config, **update)
    return Launch.from_json(launch_json(config))


def worker_pod(manifest: dict) -> dict:
    if manifest["kind"] == "TFJob":
        return manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    return manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("kind", ["jobset", "tfjob"])
def test_multi_worker_config_becomes_a_job_of_gpu_workers(ctr_config, kind):
    manifest = job_manifest(ctr_launch(ctr_config, launcher=kind), "gpupipe-train-test", "team-a", COMMAND)
    pod = worker_pod(manifest)
    container = pod["containers"][0]
    assert container["image"] == ctr_config.images.gpu_image and container["command"] == COMMAND
    assert container["resources"] == {"requests": {"cpu": "8", "memory": "32G"},
                                      "limits": {"cpu": "8", "memory": "32G", "nvidia.com/gpu": "2"}}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TF_USE_LEGACY_KERAS"] == "1" and env["GOOGLE_APPLICATION_CREDENTIALS"] == "/var/secrets/gcs/key.json"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["imagePullSecrets"] == [{"name": "gpupipe-registry"}]
    assert {"name": "secret-0", "secret": {"secretName": "gpupipe-gcs-key"}} in pod["volumes"]
    # Each worker's disk input cache: an emptyDir the size of training.disk_cache_budget_mb.
    assert {"name": "gpupipe-scratch", "emptyDir": {"sizeLimit": "20480Mi"}} in pod["volumes"]
    assert {"name": "gpupipe-scratch", "mountPath": "/gpupipe-scratch"} in container["volumeMounts"]
    assert env["GPUPIPE_SCRATCH_DIR"] == "/gpupipe-scratch"
    # /tmp on an emptyDir, so the root filesystem is read-only (Pod Security "restricted")
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["activeDeadlineSeconds"] == 24 * 3600
    if kind == "tfjob":
        assert manifest["apiVersion"] == "kubeflow.org/v1" and container["name"] == "tensorflow"
        worker = manifest["spec"]["tfReplicaSpecs"]["Worker"]
        # OnFailure, so the operator's backoffLimit counts restarts (it ignores ExitCode's), one per worker
        assert worker["replicas"] == 2 and worker["restartPolicy"] == "OnFailure"
        assert manifest["spec"]["runPolicy"]["backoffLimit"] == 3 * 2
    else:
        assert manifest["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
        job = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]
        assert (job["parallelism"], job["completions"], job["completionMode"]) == (2, 2, "Indexed")
        assert manifest["spec"]["failurePolicy"] == {"maxRestarts": 3, "rules": [
            {"name": "non-retryable-exit", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}]}
        assert job["podFailurePolicy"] == {"rules": [{"action": "FailJob", "onExitCodes": {
            "containerName": "trainer", "operator": "In", "values": [2]}}]} and pod["restartPolicy"] == "Never"
        assert env[WORKERS_ENV] == ("gpupipe-train-test-worker-0-0.gpupipe-train-test:2222,"
                                    "gpupipe-train-test-worker-0-1.gpupipe-train-test:2222")


def test_cpu_training_and_launcher_pod_launch_no_job(penguins_config):
    def with_training(**update):
        return with_pods(penguins_config, **update)

    assert launch_json(with_training(gpus=0, accelerator=None)) == ""
    assert launch_json(with_training(launcher="pod")) == ""
    assert Launch.from_json(launch_json(penguins_config)).workers == 1  # one GPU: a JobSet of one


def test_a_jobset_worker_builds_tf_config_from_its_index():
    env = {WORKERS_ENV: "a-worker-0-0.a:2222,a-worker-0-1.a:2222", INDEX_ENV: "1"}
    assert json.loads(tf_config_from_env(env)) == {
        "cluster": {"worker": ["a-worker-0-0.a:2222", "a-worker-0-1.a:2222"]}, "task": {"type": "worker", "index": 1}}
    assert tf_config_from_env({"TF_CONFIG": "{}", **env}) is None  # an operator's TF_CONFIG wins
    assert tf_config_from_env({}) is None


class FakeCustomObjectsApi:
    """FIXTURE: records the created and deleted jobs and reports the given status conditions in turn."""

    def __init__(self, statuses):
        self.created, self.deleted, self.statuses = [], [], list(statuses)
        self.timeouts = set()  # the _request_timeout of every call (the real client's per-request timeout)

    def create_namespaced_custom_object(self, group, version, namespace, plural, body, _request_timeout=None):
        self.timeouts.add(_request_timeout)
        self.created.append((group, version, namespace, plural, body))

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, _request_timeout=None):
        self.timeouts.add(_request_timeout)
        conditions = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"metadata": {"name": name}, "status": {"conditions": conditions}}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, body=None,
                                        _request_timeout=None):
        self.timeouts.add(_request_timeout)
        self.deleted.append((namespace, plural, name))


def test_following_a_jobset_to_success(ctr_config):
    api = FakeCustomObjectsApi([
        [{"type": "StartupPolicyInProgress", "status": "True"}],
        [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed"}],
    ])
    manifest = job_manifest(ctr_launch(ctr_config), "gpupipe-train-test", "team-a", COMMAND)
    assert follow_job(manifest, api, poll_seconds=0) == "AllJobsCompleted: jobset completed"
    group, version, namespace, plural, body = api.created[0]
    assert (group, version, plural, namespace) == ("jobset.x-k8s.io", "v1alpha2", "jobsets", "team-a")
    assert api.deleted == []  # a finished job holds no GPU; its pods' logs stay readable
    assert api.timeouts == {API_TIMEOUT}  # no call without its timeout


def test_a_failed_tfjob_fails_the_task_with_the_operators_reason_and_is_deleted(ctr_config):
    api = FakeCustomObjectsApi([[{"type": "Failed", "status": "True", "reason": "TFJobFailed",
                                  "message": "TFJob gpupipe-train-test has failed because 1 Worker replica(s) failed."}]])
    manifest = job_manifest(ctr_launch(ctr_config, launcher="tfjob"), "gpupipe-train-test", "team-a", COMMAND)
    with pytest.raises(GpupipeError, match="failed \\(TFJobFailed: TFJob gpupipe-train-test has failed because 1 "
                                           "Worker replica\\(s\\) failed.\\)"):
        follow_job(manifest, api, poll_seconds=0)
    assert api.deleted == [("team-a", "tfjobs", "gpupipe-train-test")]


def test_job_state_reads_conditions():
    assert job_state({}) == ("Pending", "")
    assert job_state({"status": {"conditions": [{"type": "Running", "status": "True", "message": "up"}]}}) == \
        ("Running", "up")


# ---------------------------------------------------------------- against the Kubernetes API FIXTURE
# (tests/fixtures/k8s_api.py: an HTTP server speaking the custom-objects REST API; the real
# kubernetes client talks to it, as the train task's launcher does on a cluster)

RUNNING = [{"type": "StartupPolicyCompleted", "status": "True"}]


def test_the_launcher_creates_follows_and_deletes_a_failed_job_through_the_kubernetes_api(ctr_config):
    from components.train.launch import run_training_job
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    failed = [{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed"}]
    with kubernetes_api([RUNNING, RUNNING, failed]) as (url, cluster):
        with pytest.raises(GpupipeError, match=r"training.pods.workers: JobSet default/gpupipe-train-\w+ failed "
                                               r"\(FailedJobs: jobset failed\)"):
            run_training_job(ctr_launch(ctr_config), COMMAND, api=custom_objects_api(url), poll_seconds=0.01)
    methods = [m for m, _ in cluster.requests]
    assert methods[0] == "POST" and methods.count("GET") == 3 and methods[-1] == "DELETE"
    assert cluster.requests[0][1] == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
    assert len(cluster.deleted) == 1 and not cluster.objects


def test_the_launcher_leaves_a_completed_job_for_its_logs(ctr_config):
    from components.train.launch import run_training_job
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    done = [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed"}]
    with kubernetes_api([RUNNING, done]) as (url, cluster):
        reason = run_training_job(ctr_launch(ctr_config), COMMAND, api=custom_objects_api(url), poll_seconds=0.01)
        assert reason == "AllJobsCompleted: jobset completed"
        assert cluster.deleted == [] and len(cluster.objects) == 1


def test_sigterm_to_the_launcher_outside_a_kfp_run_deletes_the_job_and_exits_143(tmp_path, ctr_config):
    """No Argo Workflow to ask (not a KFP run: the job is owned by the task's pod) and SIGTERM:
    the job goes (tests/test_launcher_semantics.py: inside a KFP run, only on a cancel).
    The launcher runs as the task runs it, in its own process, with the kubernetes client
    configured from a kubeconfig that points at the fixture."""
    import os
    import subprocess
    import sys
    import time

    from tests.fixtures.k8s_api import kubernetes_api

    launch = ctr_launch(ctr_config, launcher="tfjob")
    script = ("import sys\nfrom components.train.launch import Launch, run_training_job\n"
              f"run_training_job(Launch.from_json(sys.argv[1]), {COMMAND!r}, poll_seconds=0.05)\n")
    with kubernetes_api([RUNNING]) as (url, cluster):
        from tests.fixtures.http import write_kubeconfig

        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
        proc = subprocess.Popen([sys.executable, "-c", script, launch.model_dump_json()], cwd=tmp_path,
                                env={**os.environ, "KUBECONFIG": kubeconfig}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while not any(m == "GET" for m, _ in list(cluster.requests)) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.terminate()  # SIGTERM
        output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 143, output
    assert [key[1] for key in cluster.deleted] == ["tfjobs"] and not cluster.objects
    assert "(or is not a KFP run): deleting TFJob default/gpupipe-train-" in output


def _verb(method: str, path: str) -> str:
    """The RBAC verb of one request to the Kubernetes API (the API server's request info)."""
    named = path.split("?")[0].rstrip("/").count("/") > 6  # /apis/<g>/<v>/namespaces/<ns>/<plural>/<name>
    if method == "GET":
        return "watch" if "watch=" in path else ("get" if named else "list")
    return {"POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection"}[method]


def test_the_launcher_role_grants_exactly_the_verbs_the_launcher_calls(ctr_config, monkeypatch):
    """Every request the launcher sends the Kubernetes API fixture, on the way to success, to
    a failure and to a cancelled run's SIGTERM, maps to an RBAC verb on a resource; the Role
    gpupipe prints grants those and no others."""
    import threading

    from components.train.launch import LAUNCHER_VERBS, WORKFLOW_ENV, WORKFLOW_VERBS, run_training_job
    from pipelines.manifests import launcher_rbac
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    used = {}
    done = [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "ok"}]
    failed = [{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed"}]
    cancelled = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "penguins-x7"},
                 "spec": {"activeDeadlineSeconds": 0}, "status": {"phase": "Running"}}  # KFP's terminate
    for conditions, workflow in (([RUNNING, done], ""), ([RUNNING, failed], ""), ([RUNNING], "penguins-x7")):
        monkeypatch.setenv(WORKFLOW_ENV, workflow)
        stopping = threading.Event()
        with kubernetes_api(conditions) as (url, cluster):
            if workflow:
                cluster.objects[("default", "workflows", workflow)] = cancelled
                stopping.set()  # SIGTERM at the first poll
            try:
                run_training_job(ctr_launch(ctr_config), COMMAND, api=custom_objects_api(url), poll_seconds=0.01,
                                 stopping=stopping)
            except (GpupipeError, SystemExit):
                pass
        for method, path in cluster.requests:
            used.setdefault(path.split("?")[0].split("/")[6], set()).add(_verb(method, path))
    assert used == {"jobsets": set(LAUNCHER_VERBS), "workflows": set(WORKFLOW_VERBS)}
    assert set(LAUNCHER_VERBS) == {"create", "get", "delete"} and set(WORKFLOW_VERBS) == {"get"}
    rules = launcher_rbac(ctr_config, "team-a", "default-editor")[0]["rules"]
    assert {rule["resources"][0]: set(rule["verbs"]) for rule in rules} == used
    assert [rule["apiGroups"] for rule in rules] == [["jobset.x-k8s.io"], ["argoproj.io"]]
    assert _verb("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/a/jobsets?watch=true") == "watch"
    assert _verb("GET", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/a/jobsets") == "list"


def test_workers_default_to_the_tasks_service_account_without_its_token(ctr_config, tmp_path, monkeypatch):
    import base64

    from components.train import launch as launch_module
    from components.train.launch import task_service_account, with_task_service_account

    def token(sub: str) -> str:
        body = base64.urlsafe_b64encode(json.dumps({"sub": sub}).encode()).decode().rstrip("=")
        path = tmp_path / "token"
        path.write_text(f"e30.{body}.signature")
        return str(path)

    assert task_service_account(token("system:serviceaccount:team-a:default-editor")) == "default-editor"
    assert task_service_account(token("user:alice")) is None
    assert task_service_account(str(tmp_path / "none")) is None  # outside a pod
    monkeypatch.setattr(launch_module, "current_namespace", lambda: "team-a")
    plain = ctr_launch(ctr_config)
    assert plain.shape.service_account is None
    pod = worker_pod(job_manifest(with_task_service_account(plain, "team-a", "default-editor"), "j", "team-a",
                                  COMMAND))
    assert pod["serviceAccountName"] == "default-editor" and pod["automountServiceAccountToken"] is False
    from tests.fixtures.k8s_schema import assert_valid

    assert_valid(job_manifest(with_task_service_account(plain, "team-a", "default-editor"), "j", "team-a", COMMAND))
    # another namespace (training.pods.job_namespace) has no such account: the workers' own, which
    # `manifest rbac` writes there, tokenless (not that namespace's `default`); a configured one stays
    other = with_task_service_account(plain, "team-b", "default-editor").shape
    assert (other.service_account, other.automount_token) == ("gpupipe-workers", False)
    configured = plain.model_copy(update={"shape": plain.shape.model_copy(update={"service_account": "trainer"})})
    assert with_task_service_account(configured, "team-a", "default-editor") == configured
    assert "automountServiceAccountToken" not in worker_pod(job_manifest(configured, "j", "team-a", COMMAND))


# -- JobSet's admission webhook, beyond the CRD's schema ------------------------------------------
JOBSET_WEBHOOK = "kubernetes-sigs/jobset v0.12.0, pkg/webhooks/jobset_webhook.go"
_DNS1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def jobset_refusals(jobset: dict) -> list:
    """What JobSet's webhook refuses on create (JOBSET_WEBHOOK, ValidateCreate): a network
    subdomain that is not a DNS-1123 subdomain and a DNS-1035 label of at most 63 characters;
    replicas x parallelism above MaxInt32; generated Job names (`<jobset>-<rjob>-<last index>`,
    placement.GenJobName) and, for Indexed Jobs, the longest pod name (GenPodName plus the 5
    random characters, `<jobset>-<rjob>-<job index>-<pod index>-abcde`) that are not DNS-1035
    labels of at most 63; successPolicy targets that name no replicated job."""
    import re

    def label(value: str) -> bool:
        return len(value) <= 63 and re.match(_DNS1035, value) is not None

    refused, spec, name = [], jobset["spec"], jobset["metadata"]["name"]
    subdomain = spec.get("network", {}).get("subdomain", "")
    if subdomain and not (len(subdomain) <= 253 and re.match(_DNS1123_SUBDOMAIN, subdomain) and label(subdomain)):
        refused.append(f"spec.network.subdomain {subdomain!r}")
    names = set()
    for rjob in spec["replicatedJobs"]:
        names.add(rjob["name"])
        job = rjob["template"]["spec"]
        if job.get("parallelism", 1) * rjob["replicas"] > 2 ** 31 - 1:
            refused.append(f"replicas x parallelism of {rjob['name']}")
        if not label(f"{name}-{rjob['name']}-{rjob['replicas'] - 1}"):
            refused.append(f"job names of {rjob['name']}")
        if job.get("completionMode") == "Indexed" and "completions" in job:
            pod = f"{name}-{rjob['name']}-{rjob['replicas'] - 1}-{job['completions'] - 1}-abcde"
            if not label(pod):
                refused.append(f"pod names of {rjob['name']}")
    refused += [f"successPolicy target {t}" for t in spec.get("successPolicy", {}).get("targetReplicatedJobs", [])
                if t not in names]
    return refused


@pytest.mark.parametrize("workers", [1, 2, 64])
def test_every_jobset_the_launcher_creates_passes_jobsets_webhook_and_its_crd(ctr_config, workers):
    from components.train.launch import job_name
    from tests.fixtures.k8s_schema import assert_valid

    launch = ctr_launch(ctr_config, workers=workers)
    for env in ({"GPUPIPE_WORKFLOW": "penguins-cluster-9xk2p-3412998"}, {}):  # named for the run, or not
        manifest = job_manifest(launch, job_name(env), "team-a", COMMAND)
        assert jobset_refusals(manifest) == [], manifest["metadata"]["name"]
        assert_valid(manifest)
        assert manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpupipe"


def test_the_jobset_rule_refuses_what_its_webhook_refuses(ctr_config):
    manifest = job_manifest(ctr_launch(ctr_config), "gpupipe-train-" + "a" * 50, "team-a", COMMAND)
    assert jobset_refusals(manifest) == ["spec.network.subdomain '" + manifest["spec"]["network"]["subdomain"] + "'",
                                         "job names of worker", "pod names of worker"]
    manifest["spec"]["successPolicy"]["targetReplicatedJobs"] = ["workers"]
    assert "successPolicy target workers" in jobset_refusals(manifest)


def test_the_job_name_is_the_runs_so_a_retry_finds_it():
    from components.train.launch import job_name

    run = {"GPUPIPE_WORKFLOW": "penguins-cluster-9xk2p"}
    assert job_name(run) == job_name(dict(run)) != job_name({"GPUPIPE_WORKFLOW": "penguins-cluster-b7m4q"})
    assert job_name({}) != job_name({})  # without the run's name, a new job per attempt


def test_a_retried_launcher_adopts_the_running_job_and_replaces_a_failed_one(ctr_config):
    from components.train.launch import create_or_adopt
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    manifest = job_manifest(ctr_launch(ctr_config), "gpupipe-train-run1", "team-a", COMMAND)
    args = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
    failed = [{"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts", "message": "jobset failed"}]
    with kubernetes_api([RUNNING, failed]) as (url, cluster):
        api = custom_objects_api(url)
        assert create_or_adopt(api, manifest, *args) is True   # the first attempt creates it
        assert create_or_adopt(api, manifest, *args) is False  # a retry finds it running: follows it
        assert create_or_adopt(api, manifest, *args) is True   # it failed meanwhile: made anew
    assert [m for m, _ in cluster.requests] == ["POST", "POST", "GET", "POST", "GET", "DELETE", "POST"]
    assert cluster.deleted == [("team-a", "jobsets", "gpupipe-train-run1")] and len(cluster.objects) == 1
    foreign = {**manifest, "metadata": {**manifest["metadata"], "labels": {}}}
    with kubernetes_api([RUNNING]) as (url, cluster):
        api = custom_objects_api(url)
        create_or_adopt(api, foreign, *args)
        with pytest.raises(GpupipeError, match="exists and is not gpupipe's; delete it"):
            create_or_adopt(api, manifest, *args)


def test_the_launcher_takes_its_job_to_completion_through_a_flaky_api(ctr_config):
    """The API FIXTURE answers 503 and drops the connection on create, then 500, a dropped
    connection and 429 while the job is followed: each is tried again, and the job is
    created once and followed to its end."""
    from components.train.launch import run_training_job
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    done = [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed"}]
    with kubernetes_api([RUNNING, RUNNING, done]) as (url, cluster):
        cluster.faults = [("POST", 503), ("POST", 0), ("GET", 500), ("GET", 0), ("GET", 429)]
        reason = run_training_job(ctr_launch(ctr_config), COMMAND, api=custom_objects_api(url), poll_seconds=0.01)
    assert reason == "AllJobsCompleted: jobset completed"
    assert [m for m, _ in cluster.requests].count("POST") == 3 and len(cluster.objects) == 1
    assert cluster.faults == [] and cluster.deleted == []


def test_a_job_that_exists_on_create_is_adopted_and_an_api_that_stays_down_is_one_line(ctr_config, monkeypatch):
    from components.train import launch as launcher
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    manifest = job_manifest(ctr_launch(ctr_config), "gpupipe-train-run9", "team-a", COMMAND)
    done = [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed"}]
    with kubernetes_api([done]) as (url, cluster):
        cluster.objects[("team-a", "jobsets", "gpupipe-train-run9")] = manifest  # the first attempt's, still there
        cluster.faults = [("GET", 503)]
        assert follow_job(manifest, custom_objects_api(url), poll_seconds=0.01) == "AllJobsCompleted: jobset completed"
        assert [m for m, _ in cluster.requests][:1] == ["POST"] and len(cluster.objects) == 1

    from components.train import kube

    monkeypatch.setattr(kube, "API_ATTEMPTS", 3)
    with kubernetes_api([done]) as (url, cluster):
        cluster.faults = [("POST", 503)] * 3
        with pytest.raises(GpupipeError) as err:
            launcher.create_or_adopt(custom_objects_api(url), manifest, "jobset.x-k8s.io", "v1alpha2", "jobsets",
                                     attempts=1)
    assert re.match(r"training: the Kubernetes API failed 3 times in \d+ s while the launcher created "
                    r"JobSet team-a/gpupipe-train-run9 \(HTTP 503", str(err.value)), str(err.value)
