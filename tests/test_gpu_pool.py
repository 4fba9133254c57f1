"""The shared GPU pool: Kueue's queue and priority labels on the GPU workload only, a
team's share of the pool as manifests that validate against their schemas (core objects
and Kueue's CRDs), and spot training."""
import json

import pytest
import yaml

from components.train.launch import Launch, job_manifest
from pipelines.cli import compile_to_text
from pipelines.config import parse_config
from pipelines.factory import launch_json
from pipelines.manifests import tenant_manifests
from tests.fixtures.k8s_schema import assert_valid, validation_errors
from tests.fixtures.configs import with_pods

pytestmark = pytest.mark.compile
QUEUED = {"kueue.x-k8s.io/queue-name": "gpus", "kueue.x-k8s.io/priority-class": "nightly"}


def with_cluster(config, **training):
    raw = config.model_dump(exclude_none=True)
    raw["cluster"].update(queue="gpus", priority="nightly")
    raw["training"]["pods"] = {**raw["training"].get("pods", {}), **training}
    return parse_config(raw)


def pod_labels(docs, executor: str) -> dict:
    k8s = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor]
    return k8s.get("podMetadata", {}).get("labels", {})


def test_a_single_worker_run_queues_its_jobset_and_no_kfp_task(penguins_config):
    config = with_cluster(penguins_config)
    docs = list(yaml.safe_load_all(compile_to_text(config)))
    executors = sorted(docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"])
    for executor in executors:
        assert not set(QUEUED) & set(pod_labels(docs, executor)), executor
    job = job_manifest(Launch.from_json(launch_json(config)), "gpupipe-train-1", "team-a", ["python"])
    assert {k: job["metadata"]["labels"][k] for k in QUEUED} == QUEUED
    assert job["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 1
    assert_valid(job)


def test_launcher_pod_queues_the_train_pod_itself(penguins_config):
    config = with_cluster(penguins_config)
    config = with_pods(config, launcher="pod")
    docs = list(yaml.safe_load_all(compile_to_text(config)))
    assert pod_labels(docs, "exec-train") == QUEUED


@pytest.mark.parametrize("kind", ["jobset", "tfjob"])
def test_a_multi_worker_run_queues_the_job_as_one_unit_not_its_pods_or_the_launcher(ctr_config, kind):
    config = with_cluster(ctr_config, launcher=kind)
    docs = list(yaml.safe_load_all(compile_to_text(config)))
    assert not set(QUEUED) & set(pod_labels(docs, "exec-train"))  # the launcher holds no GPU
    job = job_manifest(Launch.from_json(launch_json(config)), "gpupipe-train-1", "team-a", ["python"])
    assert {k: job["metadata"]["labels"][k] for k in QUEUED} == QUEUED
    template = (job["spec"]["tfReplicaSpecs"]["Worker"]["template"] if kind == "tfjob" else
                job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    assert not set(QUEUED) & set(template["metadata"]["labels"])
    assert_valid(job)


@pytest.mark.parametrize("api", ["v1beta2", "v1beta1"])
def test_a_teams_share_of_the_pool_validates_against_the_kueue_and_core_schemas(ctr_config, api):
    """Against Kueue v0.19.2's published schemas of either version (tests/fixtures/crds): the
    one field gpupipe writes that v1beta2 renamed is the ClusterQueue's cohort (cohortName)."""
    docs = tenant_manifests(with_cluster(ctr_config), "team-a", gpu_quota=4, spot_gpu_quota=8, borrowing_limit=4,
                            kueue_api=api)
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Namespace", "ResourceQuota", "LimitRange", "ResourceFlavor", "ResourceFlavor", "ClusterQueue",
                     "LocalQueue", "Role", "RoleBinding"]
    for doc in docs:
        assert_valid(doc)
    queue = docs[kinds.index("ClusterQueue")]["spec"]
    on_demand, spot = queue["resourceGroups"][0]["flavors"]
    # ctr's worker: 2 GPUs, 8 CPUs, 32G: per 4 GPUs 16 CPUs and 64G.
    assert on_demand["resources"] == [
        {"name": "cpu", "nominalQuota": "16", "borrowingLimit": "16"},
        {"name": "memory", "nominalQuota": "64G", "borrowingLimit": "64G"},
        {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 4}]
    assert spot["name"] == "gpupipe-spot" and spot["resources"][2]["nominalQuota"] == 8
    assert queue[{"v1beta2": "cohortName", "v1beta1": "cohort"}[api]] == "gpupipe-pool"
    assert queue["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert {d["apiVersion"] for d in docs if "kueue" in d["apiVersion"]} == {f"kueue.x-k8s.io/{api}"}
    other = {"v1beta2": "v1beta1", "v1beta1": "v1beta2"}[api]  # the other version's schema refuses the cohort field
    moved = {**docs[kinds.index("ClusterQueue")], "apiVersion": f"kueue.x-k8s.io/{other}"}
    assert any("cohort" in e and "not allowed" in e for e in validation_errors(moved))
    assert docs[kinds.index("LocalQueue")]["metadata"] == {
        "name": "gpus", "namespace": "team-a", "labels": {"app.kubernetes.io/managed-by": "gpupipe",
                                                          "gpupipe/tenant": "team-a"}}
    assert docs[1]["spec"]["hard"] == {"requests.nvidia.com/gpu": "16"}
    spot_flavor = docs[4]["spec"]
    assert spot_flavor["nodeLabels"]["cloud.google.com/gke-spot"] == "true"


def test_two_teams_share_one_cohort_and_the_flavors(ctr_config):
    a = tenant_manifests(ctr_config, "team-a", gpu_quota=4, borrowing_limit=4)
    b = tenant_manifests(ctr_config, "team-b", gpu_quota=2, borrowing_limit=6)
    queues = [next(d for d in docs if d["kind"] == "ClusterQueue") for docs in (a, b)]
    assert {q["spec"]["cohortName"] for q in queues} == {"gpupipe-pool"}
    flavors = [[d for d in docs if d["kind"] == "ResourceFlavor"] for docs in (a, b)]
    assert flavors[0] == flavors[1]  # cluster-scoped: the same objects, applied twice without change


def test_a_spot_config_compiles_with_the_spot_selector_toleration_and_more_retries(penguins_config):
    raw = penguins_config.model_dump(exclude_none=True)
    raw["training"].update(checkpoint_steps=200)
    raw["training"]["pods"].update(spot=True, retries=2)
    config = parse_config(raw)
    assert (config.training.pods.retries, config.training.checkpoint_steps) == (5, 50)
    docs = list(yaml.safe_load_all(compile_to_text(config)))
    launch = Launch.from_json(launch_json(config))
    assert launch.shape.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                                          "cloud.google.com/gke-spot": "true"}
    assert {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true",
            "effect": "NoSchedule"} in [t.model_dump() for t in launch.shape.tolerations]
    # a preempted spot node restarts the JobSet, five times, from the backup
    assert launch.max_restarts == 5
    assert job_manifest(launch, "gpupipe-train-1", "team-a", ["python"])["spec"]["failurePolicy"]["maxRestarts"] == 5
    settings = json.loads(docs[0]["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["settings"]
                          ["runtimeValue"]["constant"])
    assert settings["checkpoint_steps"] == 50 and settings["pods"]["spot"] is True


# -- Kueue's ClusterQueue webhook, beyond the CRD's schema ----------------------------------------
KUEUE_WEBHOOK = "kubernetes-sigs/kueue v0.19.2, pkg/webhooks/clusterqueue_webhook.go"


def cluster_queue_refusals(queue: dict) -> list:
    """What Kueue refuses in a ClusterQueue (KUEUE_WEBHOOK, ValidateClusterQueue ->
    validateClusterQueueSpec, and the CEL rules of apis/kueue/v1beta2/clusterqueue_types.go; a v1beta1
    object is converted to v1beta2 first, its cohort becoming cohortName):
    - validateResourceGroups: each covered resource a valid label key (common.go
      validateResourceName), none covered twice, no flavor named twice across groups;
    - the ResourceGroup CEL rule: every flavor lists as many resources as coveredResources;
    - validateFlavorQuotas: resources[i].name == coveredResources[i]; nominalQuota and
      borrowingLimit not negative (validateResourceQuantity); a borrowingLimit only with a
      cohort (validateLimit: "must be nil when cohort is empty"); a lendingLimit not above the
      nominalQuota (validateLendingLimit);
    - validatePreemption: not reclaimWithinCohort Never with borrowWithinCohort.policy other
      than Never;
    - validateTotalFlavors, validateTotalCoveredResources: at most 256 of each."""
    from kubernetes.utils import parse_quantity

    from components.contracts.pods import LABEL_KEY_RE

    spec, problems = queue["spec"], []
    has_cohort = bool(spec.get("cohortName") or spec.get("cohort"))  # v1beta2, v1beta1 (converted to v1beta2)
    seen_resources, seen_flavors = set(), set()
    groups = spec.get("resourceGroups", [])
    for i, group in enumerate(groups):
        covered = group["coveredResources"]
        for name in covered:
            if not LABEL_KEY_RE.match(name):
                problems.append(f"resourceGroups[{i}].coveredResources: {name} is not a label key")
            if name in seen_resources:
                problems.append(f"resourceGroups[{i}].coveredResources: {name} duplicated")
            seen_resources.add(name)
        for flavor in group["flavors"]:
            where = f"resourceGroups[{i}].flavors[{flavor['name']}]"
            if flavor["name"] in seen_flavors:
                problems.append(f"{where}: flavor duplicated")
            seen_flavors.add(flavor["name"])
            if len(flavor["resources"]) != len(covered):
                problems.append(f"{where}: flavors must have the same number of resources as the coveredResources")
            for name, quota in zip(covered, flavor["resources"]):
                if quota["name"] != name:
                    problems.append(f"{where}.{quota['name']}: must match the name in coveredResources")
                if parse_quantity(quota["nominalQuota"]) < 0:
                    problems.append(f"{where}.{name}.nominalQuota: must be greater than or equal to 0")
                if "borrowingLimit" in quota:
                    if not has_cohort:
                        problems.append(f"{where}.{name}.borrowingLimit: must be nil when cohort is empty")
                    if parse_quantity(quota["borrowingLimit"]) < 0:
                        problems.append(f"{where}.{name}.borrowingLimit: must be greater than or equal to 0")
                if "lendingLimit" in quota and parse_quantity(quota["lendingLimit"]) > \
                        parse_quantity(quota["nominalQuota"]):
                    problems.append(f"{where}.{name}.lendingLimit: must be less than or equal to the nominalQuota")
    preemption = spec.get("preemption", {})
    if preemption.get("reclaimWithinCohort") == "Never" and \
            preemption.get("borrowWithinCohort", {}).get("policy", "Never") != "Never":
        problems.append("preemption: reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")
    if sum(len(g["flavors"]) for g in groups) > 256 or sum(len(g["coveredResources"]) for g in groups) > 256:
        problems.append("resourceGroups: more than 256 flavors or covered resources")
    return problems


@pytest.mark.parametrize("quota, spot, borrow", [(4, 8, 4), (4, 0, None), (2, 0, 0), (1, 1, 0), (0, 4, 2)])
def test_a_teams_cluster_queue_passes_kueues_webhook_and_names_its_flavors(ctr_config, quota, spot, borrow):
    docs = tenant_manifests(with_cluster(ctr_config), "team-a", gpu_quota=quota, spot_gpu_quota=spot,
                            borrowing_limit=borrow)
    (queue,) = [d for d in docs if d["kind"] == "ClusterQueue"]
    assert cluster_queue_refusals(queue) == []
    # every flavor the queue names is one of the ResourceFlavors printed beside it (else Kueue
    # leaves the queue inactive, FlavorNotFound)
    flavors = {d["metadata"]["name"] for d in docs if d["kind"] == "ResourceFlavor"}
    assert {f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]} == flavors
    for doc in docs:
        assert_valid(doc)


def test_the_kueue_rule_refuses_what_its_webhook_refuses(ctr_config):
    import copy

    (queue,) = [d for d in tenant_manifests(ctr_config, "team-a", 4, borrowing_limit=2) if d["kind"] == "ClusterQueue"]
    no_cohort = copy.deepcopy(queue)
    del no_cohort["spec"]["cohortName"]
    assert "resourceGroups[0].flavors[gpupipe-on-demand].nvidia.com/gpu.borrowingLimit: must be nil when cohort is " \
           "empty" in cluster_queue_refusals(no_cohort)
    negative = copy.deepcopy(queue)
    negative["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = -1
    assert cluster_queue_refusals(negative) == [
        "resourceGroups[0].flavors[gpupipe-on-demand].nvidia.com/gpu.nominalQuota: must be greater than or equal to 0"]
    swapped = copy.deepcopy(queue)
    swapped["spec"]["resourceGroups"][0]["coveredResources"].reverse()
    assert any("must match the name in coveredResources" in p for p in cluster_queue_refusals(swapped))
    short = copy.deepcopy(queue)
    short["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    assert any("same number of resources" in p for p in cluster_queue_refusals(short))


def test_a_borrowing_limit_of_0_is_written_and_unset_is_no_limit(ctr_config, capsys):
    from pipelines.cli import main

    def gpu_quota(docs) -> dict:
        (queue,) = [d for d in docs if d["kind"] == "ClusterQueue"]
        return queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]

    never = gpu_quota(tenant_manifests(ctr_config, "team-a", 4, borrowing_limit=0))
    assert [r.get("borrowingLimit") for r in never] == ["0", "0Gi", 0]
    unlimited = gpu_quota(tenant_manifests(ctr_config, "team-a", 4))
    assert all("borrowingLimit" not in r for r in unlimited)
    # through the command line: --borrowing-limit 0 is 0, not "unset"
    assert main(["manifest", "tenant", "configs/ctr.yaml", "--team", "team-a", "--gpu-quota", "4",
                 "--borrowing-limit", "0"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert gpu_quota(docs)[2] == {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 0}
    assert main(["manifest", "tenant", "configs/ctr.yaml", "--team", "team-a", "--gpu-quota", "4"]) == 0
    assert "borrowingLimit" not in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (dict(gpu_quota=-1), "manifest tenant --gpu-quota -1: a GPU count is 0 or more"),
    (dict(gpu_quota=2, borrowing_limit=-2), "manifest tenant --borrowing-limit -2: a GPU count is 0 or more"),
    (dict(gpu_quota=2, cohort=""), "manifest tenant --cohort '': not a Kueue cohort name"),
    (dict(gpu_quota=2, cohort="Team_Pool"), "manifest tenant --cohort 'Team_Pool': not a Kueue cohort name"),
])
def test_what_kueue_would_refuse_is_refused_in_one_line(ctr_config, args, message):
    from components.contracts.errors import GpupipeError

    with pytest.raises(GpupipeError) as err:
        tenant_manifests(ctr_config, "team-a", **args)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def _requests(pods: list) -> dict:
    """What Kueue counts for a workload: the sum of its pods' container requests."""
    from kubernetes.utils import parse_quantity

    total: dict = {}
    for pod, count in pods:
        for container in pod["containers"]:
            for name, value in container["resources"].get("requests", container["resources"].get("limits", {})).items():
                total[name] = total.get(name, 0) + parse_quantity(value) * count
            for name, value in container["resources"].get("limits", {}).items():
                if name not in container["resources"].get("requests", {}):  # a limit alone is the request
                    total[name] = total.get(name, 0) + parse_quantity(value) * count
    return total


@pytest.mark.parametrize("workers", [1, 2])
def test_a_teams_quota_is_what_its_jobset_pods_request(ctr_config, workers):
    """`manifest tenant --gpu-quota N` with N the job's GPUs admits exactly one run's JobSet:
    the ClusterQueue's nominal cpu, memory and GPUs equal the sum of its pods' requests."""
    from kubernetes.utils import parse_quantity

    config = with_cluster(ctr_config)
    config = with_pods(config, workers=workers)
    job = job_manifest(Launch.from_json(launch_json(config)), "gpupipe-train-1", "team-a", ["python"])
    replicated = job["spec"]["replicatedJobs"][0]["template"]["spec"]
    needed = _requests([(replicated["template"]["spec"], replicated["parallelism"])])
    gpus = config.training.pods.gpus * workers
    queue = next(d for d in tenant_manifests(config, "team-a", gpu_quota=gpus) if d["kind"] == "ClusterQueue")
    quota = {r["name"]: parse_quantity(str(r["nominalQuota"]))
             for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert quota == {"cpu": needed["cpu"], "memory": needed["memory"], "nvidia.com/gpu": needed["nvidia.com/gpu"]}


def test_with_launcher_pod_the_quota_counts_argos_wait_sidecar(penguins_config):
    from kubernetes.utils import parse_quantity

    config = with_cluster(penguins_config)
    pod = with_pods(config, launcher="pod")
    quota = lambda c: {r["name"]: parse_quantity(str(r["nominalQuota"])) for r in next(  # noqa: E731
        d for d in tenant_manifests(c, "team-a", gpu_quota=1) if d["kind"] == "ClusterQueue")
        ["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    jobset, in_pod = quota(config), quota(pod)
    assert in_pod["cpu"] - jobset["cpu"] == parse_quantity("250m")
    assert in_pod["memory"] - jobset["memory"] == parse_quantity("512Mi")


def test_a_tuning_config_gets_its_trials_priority_class_below_production(ctr_config):
    """With training.tune the team's objects include the trials' WorkloadPriorityClass (valid
    against Kueue's CRD), below 0, Kueue's priority of a workload naming no class; without
    tune there is none. The trials' JobSets name it (components/train/launch.py)."""
    from components.train.launch import trial_launch

    plain = tenant_manifests(ctr_config, "team-a", gpu_quota=4)
    assert "WorkloadPriorityClass" not in [d["kind"] for d in plain]
    raw = ctr_config.model_dump(exclude_none=True)
    raw["training"]["tune"] = {"trials": 4, "priority_class": "team-a-tuning"}
    tuned = parse_config(raw)
    docs = tenant_manifests(tuned, "team-a", gpu_quota=4)
    classes = [d for d in docs if d["kind"] == "WorkloadPriorityClass"]
    assert len(classes) == 1 and len(docs) == len(plain) + 1
    assert_valid(classes[0])
    assert classes[0]["metadata"]["name"] == "team-a-tuning" and "namespace" not in classes[0]["metadata"]
    assert classes[0]["value"] < 0
    queue = next(d for d in docs if d["kind"] == "ClusterQueue")
    assert queue["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    trial = trial_launch(Launch.from_json(launch_json(tuned)), "0", tuned.training.tune.priority_class)
    assert trial.labels["kueue.x-k8s.io/priority-class"] == classes[0]["metadata"]["name"]
    # launcher: pod trains (and tunes) in the task's own pod: no trial names the class
    in_pod = tenant_manifests(with_pods(tuned, launcher="pod", workers=1), "team-a", gpu_quota=4)
    assert "WorkloadPriorityClass" not in [d["kind"] for d in in_pod]
