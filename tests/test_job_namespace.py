"""`training.pods.job_namespace` (issue #35, acceptance 5): the launched jobs run in their own
namespace (team-a-jobs) while the run's pods stay in team-a. What gpupipe writes for it is
checked against the rules the cluster enforces, read from upstream:
- RBAC (kubernetes pkg/registry/rbac/validation/rule.go): a RoleBinding grants its Role's
  rules only in the RoleBinding's own namespace, to the subjects it names (a ServiceAccount by
  name and namespace);
- Kueue (pkg/cache/clusterqueue.go, pkg/webhooks): a workload is admitted through the
  LocalQueue of its own namespace, whose ClusterQueue's namespaceSelector must match that
  namespace's labels (the API server labels every namespace kubernetes.io/metadata.name);
- a pod with no serviceAccountName runs as its namespace's `default`, token mounted.
Every object also validates against its schema (tests/fixtures/k8s_schema.py)."""
import pytest

from components.train import launch as launch_module
from components.train.launch import Launch, job_manifest, with_task_service_account
from pipelines.factory import launch_json
from pipelines.manifests import launcher_rbac, tenant_manifests
from tests.fixtures.configs import with_pods
from tests.fixtures.k8s_schema import assert_valid

pytestmark = pytest.mark.unit
RUN_NS, JOB_NS, RUNNER = "team-a", "team-a-jobs", "default-editor"


def allowed(objects: list, namespace: str, sa_namespace: str, sa: str, group: str, resource: str, verb: str) -> bool:
    """Kubernetes RBAC for a namespaced request by ServiceAccount `sa_namespace/sa`: some
    RoleBinding in `namespace` names it and refers to a Role in `namespace` whose rule covers it."""
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects if o["kind"] == "Role"}
    for binding in (o for o in objects if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == namespace):
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa and s.get("namespace") == sa_namespace
                   for s in binding["subjects"]):
            continue
        role = roles.get((namespace, binding["roleRef"]["name"]))
        if role and any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                        for r in role["rules"]):
            return True
    return False


def selects(selector: dict, labels: dict) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions In/NotIn/Exists/DoesNotExist)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        present, value = e["key"] in labels, labels.get(e["key"])
        ok = {"In": present and value in e.get("values", []), "NotIn": not present or value not in e.get("values", []),
              "Exists": present, "DoesNotExist": not present}[e["operator"]]
        if not ok:
            return False
    return True


@pytest.fixture
def config(ctr_config):
    """configs/ctr.yaml (a JobSet of two GPU workers), queued in `gpus`, its jobs in team-a-jobs."""
    from pipelines.config import parse_config

    raw = ctr_config.model_dump(exclude_none=True)
    raw["cluster"]["queue"] = "gpus"
    raw["training"]["pods"]["job_namespace"] = JOB_NS
    return parse_config(raw)


def test_manifest_rbac_grants_the_runner_the_jobs_in_the_job_namespace(config):
    objects = launcher_rbac(config, RUN_NS, RUNNER)
    for obj in objects:
        assert_valid(obj)
    for verb in ("create", "get", "delete"):
        assert allowed(objects, JOB_NS, RUN_NS, RUNNER, "jobset.x-k8s.io", "jobsets", verb)
        assert not allowed(objects, RUN_NS, RUN_NS, RUNNER, "jobset.x-k8s.io", "jobsets", verb)  # nothing wider
    assert allowed(objects, RUN_NS, RUN_NS, RUNNER, "argoproj.io", "workflows", "get")  # the run's Workflow
    assert not allowed(objects, JOB_NS, JOB_NS, RUNNER, "jobset.x-k8s.io", "jobsets", "create")  # not a same-named SA
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    assert account["metadata"]["namespace"] == JOB_NS and account["automountServiceAccountToken"] is False
    # before: everything in the run's namespace, so the jobs could not be created in team-a-jobs
    same = launcher_rbac(with_pods(config, job_namespace=None), RUN_NS, RUNNER)
    assert not allowed(same, JOB_NS, RUN_NS, RUNNER, "jobset.x-k8s.io", "jobsets", "create")


def test_manifest_tenant_queues_the_job_namespace_and_kueue_admits_it(config):
    objects = tenant_manifests(config, RUN_NS, gpu_quota=4)
    for obj in objects:
        assert_valid(obj)
    namespaces = {o["metadata"]["name"]: {**o["metadata"].get("labels", {}), "kubernetes.io/metadata.name":
                                          o["metadata"]["name"]} for o in objects if o["kind"] == "Namespace"}
    assert set(namespaces) == {RUN_NS, JOB_NS}
    (local_queue,) = [o for o in objects if o["kind"] == "LocalQueue"]
    assert local_queue["metadata"]["namespace"] == JOB_NS  # where the JobSet is, so where Kueue looks
    (cluster_queue,) = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert local_queue["spec"]["clusterQueue"] == cluster_queue["metadata"]["name"]
    assert selects(cluster_queue["spec"]["namespaceSelector"], namespaces[JOB_NS])
    assert not selects(cluster_queue["spec"]["namespaceSelector"], {"kubernetes.io/metadata.name": "team-b"})
    (quota,) = [o for o in objects if o["kind"] == "ResourceQuota"]
    assert quota["metadata"]["namespace"] == JOB_NS  # the GPU pods' namespace
    assert allowed(objects, JOB_NS, RUN_NS, RUNNER, "jobset.x-k8s.io", "jobsets", "create")
    # the JobSet the launcher creates there names that LocalQueue
    job = job_manifest(Launch.from_json(launch_json(config)), "gpupipe-train-1", JOB_NS, ["python"])
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == local_queue["metadata"]["name"]


def test_the_workers_in_the_job_namespace_name_their_service_account(config, monkeypatch):
    monkeypatch.setattr(launch_module, "current_namespace", lambda: RUN_NS)  # the task's pod
    launch = with_task_service_account(Launch.from_json(launch_json(config)), JOB_NS, RUNNER)
    job = job_manifest(launch, "gpupipe-train-1", JOB_NS, ["python"])
    assert_valid(job)
    pod = job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    accounts = [o for o in launcher_rbac(config, RUN_NS, RUNNER) if o["kind"] == "ServiceAccount"]
    assert pod["serviceAccountName"] == accounts[0]["metadata"]["name"] and pod["automountServiceAccountToken"] is False
