"""`gpupipe doctor` (issue #26, acceptance 4) against a Kubernetes API FIXTURE
(tests/fixtures/cluster_api.py: CRDs, Kueue queues, Secrets and access reviews on loopback,
shaped as the API server returns them) and a KFP API FIXTURE (tests/fixtures/kfp_api.py),
both reached through the real `kubernetes` and KFP clients from a kubeconfig written here.
No cluster runs on these machines."""
import os
from unittest import mock

import pytest
import yaml
from pathlib import Path

from pipelines.cli import main
from tests.fixtures.cluster_api import (JOBSET_CRD, KSERVE_CRD, KUEUE_CRDS, KUEUE_DEFAULT_FRAMEWORKS, TFJOB_CRD,
                                        cluster_api, cluster_queue, crd, kueue_manager_config, local_queue, node,
                                        secret, write_kubeconfig)
from tests.fixtures.gcs import free_port
from tests.fixtures.kfp_api import KfpApiFixture

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
NS = "team-a"
RUNNER = f"system:serviceaccount:{NS}:default-editor"  # the pipeline's ServiceAccount in a Kubeflow profile
SECRETS = ("gpupipe-gcs-key", "gpupipe-registry", "gpupipe-minio", "gpupipe-webhook")
VERBS = ("create", "get", "delete")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def config(tmp_path) -> str:
    """configs/ctr.yaml (two workers, a JobSet) queued in gpus, with every Secret a config can name."""
    data = yaml.safe_load((ROOT / "configs" / "ctr.yaml").read_text())
    data["cluster"].update(queue="gpus")
    data["storage"]["s3"] = {"endpoint": "http://minio.minio:9000", "credentials_secret": "gpupipe-minio"}
    data["notify"] = {"webhook_secret": "gpupipe-webhook"}
    path = tmp_path / "ctr.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def complete(state, token: str = "runner-token", user: str = RUNNER) -> None:
    """Everything the config needs, with the caller being the pipeline's ServiceAccount."""
    state.add_crds(JOBSET_CRD, TFJOB_CRD, *KUEUE_CRDS, KSERVE_CRD)
    state.add(local_queue(NS, "gpus", NS), cluster_queue(NS))
    state.add(*(secret(NS, name) for name in SECRETS if name != "gpupipe-registry"),
              secret(NS, "gpupipe-registry", "kubernetes.io/dockerconfigjson", {".dockerconfigjson": "e30="}))
    state.user(token, user, ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"])
    state.grant(user, NS, "jobset.x-k8s.io", "jobsets", *VERBS)
    state.grant(user, NS, "", "secrets", "get")
    state.grant(user, "", "apiextensions.k8s.io", "customresourcedefinitions", "get")
    state.add(kueue_manager_config(KUEUE_DEFAULT_FRAMEWORKS))
    state.grant(user, "kueue-system", "", "configmaps", "get")
    # the T4 pool configs/ctr.yaml trains on, tainted as GKE taints GPU nodes, and a CPU node
    state.nodes += [node(f"gke-t4-{i}", {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"},
                         {"nvidia.com/gpu": "4"}, [GPU_TAINT]) for i in range(2)]
    state.nodes.append(node("gke-cpu-0"))
    state.grant(user, "", "", "nodes", "list")


@pytest.fixture
def kfp():
    with KfpApiFixture(version="2.14.0") as server:  # the config's notify.webhook_secret needs 2.14.0
        yield server


@pytest.fixture
def cluster(tmp_path):
    with cluster_api() as (url, state):
        complete(state)
        yield url, state, write_kubeconfig(tmp_path / "kubeconfig", url, "runner-token", namespace=NS)


def doctor(capsys, config, kfp_url, kubeconfig, *extra):
    with mock.patch.dict(os.environ, {k: v for k, v in os.environ.items()
                                      if not k.startswith(("KFP_", "KUBECONFIG", "KUBERNETES_"))}, clear=True):
        code = main(["doctor", config, "--host", kfp_url, "--kubeconfig", kubeconfig, *extra])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert all(line.startswith(("ok: ", "error: ", "warning: ")) for line in lines), out
    return code, lines, err


def errors(lines):
    return [line for line in lines if line.startswith("error: ")]


def test_a_complete_cluster_passes_every_check(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    code, lines, err = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 0, lines
    assert err == ""
    assert [line.split(" ")[1] for line in lines] == [
        "KFP", "Kubernetes", "JobSet", "Kueue", "KServe", "LocalQueue", "Kueue", "Secret", "image", "Secret",
        "Secret", "training.pods:", "RBAC"]
    assert lines[0].endswith("backend 2.14.0 (notify.webhook_secret needs 2.14.0 or later)")
    assert f"as {RUNNER}; the run's namespace {NS}" in lines[1]  # the context's namespace
    assert "workloads.kueue.x-k8s.io, localqueues.kueue.x-k8s.io, clusterqueues.kueue.x-k8s.io" in lines[3]
    assert lines[5] == f"ok: LocalQueue {NS}/gpus (cluster.queue), ClusterQueue {NS}"
    assert lines[6] == ("ok: Kueue integrations.frameworks (kueue-system/kueue-manager-config): Kueue manages "
                        "jobset.x-k8s.io/jobset")
    assert lines[8] == f"ok: image pull Secret gpupipe-registry (cluster.image_pull_secrets) in {NS}"
    assert lines[-1] == (f"ok: RBAC as {RUNNER} (SelfSubjectAccessReview): may create, get, delete "
                         f"jobsets.jobset.x-k8s.io in {NS}")
    assert lines[-2] == ("ok: training.pods: 2 nvidia.com/gpu per pod: 2 node(s) labelled "
                         "cloud.google.com/gke-accelerator=nvidia-tesla-t4 advertise nvidia.com/gpu (allocatable up to 4)")
    # Secrets asked for as metadata only: no answer carried their data
    secret_requests = [r for r in state.requests if "/secrets/" in r[1]]
    assert len(secret_requests) == 4 and all("as=PartialObjectMetadata" in r[2] for r in secret_requests)
    assert state.secret_data_sent == 0
    assert {(r["verb"], r["resource"], r["namespace"]) for r in state.reviews} == {
        (v, "jobsets", NS) for v in VERBS}


def test_no_jobset_crd_is_one_error(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    del state.crds["jobsets.jobset.x-k8s.io"]
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    assert errors(lines) == [
        "error: JobSet CRD jobsets.jobset.x-k8s.io is not installed (training.pods.workers 2, training.pods.launcher jobset): "
        "install JobSet: kubectl apply --server-side -f "
        "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"]


def test_a_tfjob_config_needs_the_tfjob_crd_and_its_verbs(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    data = yaml.safe_load(Path(config).read_text())
    data["training"]["pods"]["launcher"] = "tfjob"
    Path(config).write_text(yaml.safe_dump(data))
    del state.crds["tfjobs.kubeflow.org"]
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    found = errors(lines)
    assert len(found) == 3
    assert found[0].startswith("error: TFJob CRD tfjobs.kubeflow.org is not installed (training.pods.workers 2, "
                               "training.pods.launcher tfjob): install the training-operator")
    assert found[1].startswith("error: Kueue integrations.frameworks (kueue-system/kueue-manager-config) lacks "
                               "kubeflow.org/tfjob")  # the default configuration's
    assert found[2].startswith(f"error: RBAC as {RUNNER} (SelfSubjectAccessReview): may not create, get, delete "
                               f"tfjobs.kubeflow.org in {NS}")
    assert not any("JobSet" in line for line in lines)


def test_a_crd_without_the_version_gpupipe_writes_is_refused(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    old = dict(JOBSET_CRD, spec={**JOBSET_CRD["spec"], "versions": [
        {**JOBSET_CRD["spec"]["versions"][0], "name": "v1alpha1"}]})
    state.add_crds(old)
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    assert errors(lines) == [
        "error: JobSet CRD jobsets.jobset.x-k8s.io does not serve v1alpha2, the version gpupipe writes (it serves "
        "v1alpha1): upgrade to JobSet: kubectl apply --server-side -f "
        "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"]


def test_no_local_queue_is_one_error(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    del state.objects[("kueue.x-k8s.io", "localqueues", NS, "gpus")]
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    assert errors(lines) == [
        f"error: LocalQueue gpus (cluster.queue) is not in namespace {NS}: gpupipe manifest tenant {config} "
        f"--team {NS} --gpu-quota N | kubectl apply -f - (docs/gpu-pool.md), or set cluster.queue to a LocalQueue of "
        f"that namespace (kubectl -n {NS} get localqueues)"]


def test_a_local_queue_without_its_cluster_queue_is_one_error(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    del state.objects[("kueue.x-k8s.io", "clusterqueues", "", NS)]
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    assert errors(lines) == [
        f"error: LocalQueue {NS}/gpus points at ClusterQueue {NS}, which does not exist, so Kueue admits nothing "
        f"from it: gpupipe manifest tenant {config} --team {NS} --gpu-quota N | kubectl apply -f - (docs/gpu-pool.md)"]


@pytest.mark.parametrize("served, version", [(["v1beta2", "v1beta1"], "v1beta2"), (["v1beta1"], "v1beta1"),
                                             (["v1beta2"], "v1beta2")],
                         ids=["kueue-0.19", "kueue-before-0.15", "kueue-without-v1beta1"])
def test_kueue_objects_are_read_in_v1beta2_where_it_is_served(capsys, config, kfp, cluster, served, version):
    """API discovery of kueue.x-k8s.io/v1beta2 decides the version doctor reads the LocalQueue
    and ClusterQueue in: v1beta2 on Kueue v0.19 (v1beta1 is deprecated there), v1beta1 on a
    Kueue before v0.15; a Kueue that dropped v1beta1 still passes."""
    url, state, kubeconfig = cluster
    for definition in state.crds.values():
        if definition["spec"]["group"] == "kueue.x-k8s.io":
            for v in definition["spec"]["versions"]:
                v["served"] = v["name"] in served
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 0, lines
    assert f"LocalQueue {NS}/gpus (cluster.queue), ClusterQueue {NS}" in "\n".join(lines)
    kueue = [path for _, path, _ in state.requests if path.startswith("/apis/kueue.x-k8s.io/")]
    assert f"/apis/kueue.x-k8s.io/{version}/namespaces/{NS}/localqueues/gpus" in kueue
    assert f"/apis/kueue.x-k8s.io/{version}/clusterqueues/{NS}" in kueue
    assert not [p for p in kueue if ("/localqueues/" in p or "/clusterqueues/" in p) and f"/{version}/" not in p]


def test_no_kueue_is_one_error_and_no_queue_lookup(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    for name in ("workloads", "localqueues", "clusterqueues"):
        del state.crds[f"{name}.kueue.x-k8s.io"]
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    found = errors(lines)
    assert len(found) == 1 and found[0].startswith(
        "error: Kueue CRD workloads.kueue.x-k8s.io is not installed (cluster.queue gpus): install Kueue: ")
    assert not any("localqueues/" in path for _, path, _ in state.requests)


@pytest.mark.parametrize("name, line", [
    ("gpupipe-gcs-key", f"error: Secret gpupipe-gcs-key (storage.gcs.credentials_secret) is not in namespace {NS}: "
                        f"kubectl -n {NS} create secret generic gpupipe-gcs-key --from-file=key.json=sa-key.json"),
    ("gpupipe-registry", f"error: image pull Secret gpupipe-registry (cluster.image_pull_secrets) is not in namespace "
                         f"{NS}: kubectl -n {NS} create secret docker-registry gpupipe-registry "
                         "--docker-server=ghcr.io --docker-username=USER --docker-password=TOKEN"),
    ("gpupipe-minio", f"error: Secret gpupipe-minio (storage.s3.credentials_secret) is not in namespace {NS}: "
                      f"kubectl -n {NS} create secret generic gpupipe-minio --from-literal=AWS_ACCESS_KEY_ID=ACCESS_KEY "
                      "--from-literal=AWS_SECRET_ACCESS_KEY=SECRET_KEY"),
    ("gpupipe-webhook", f"error: Secret gpupipe-webhook (notify.webhook_secret) is not in namespace {NS}: "
                        f"kubectl -n {NS} create secret generic gpupipe-webhook "
                        "--from-literal=url=https://hooks.slack.com/services/..."),
])
def test_a_missing_secret_is_one_error(capsys, config, kfp, cluster, name, line):
    url, state, kubeconfig = cluster
    del state.secrets[(NS, name)]
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    assert errors(lines) == [line]


def test_the_service_account_that_cannot_delete_jobsets_is_one_error(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    state.revoke(RUNNER, NS, "jobset.x-k8s.io", "jobsets", "delete")
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    assert errors(lines) == [
        f"error: RBAC as {RUNNER} (SelfSubjectAccessReview): may not delete jobsets.jobset.x-k8s.io in {NS}, which "
        f"the train task's launcher does: gpupipe manifest rbac {config} --namespace {NS} --service-account "
        "default-editor | kubectl apply -f -"]


def test_as_a_user_it_names_the_identity_and_checks_the_service_account(capsys, config, kfp, cluster, tmp_path):
    """Run as a person: the SelfSubjectAccessReview says whose rights it checked; --service-account
    asks a SubjectAccessReview for the pipeline's ServiceAccount, which here may not delete."""
    url, state, _ = cluster
    state.user("alice-token", "alice@example.com")
    state.grant("alice@example.com", NS, "jobset.x-k8s.io", "jobsets", *VERBS)
    state.grant("alice@example.com", NS, "", "secrets", "get")
    state.grant("alice@example.com", "", "authorization.k8s.io", "subjectaccessreviews", "create")
    state.revoke(RUNNER, NS, "jobset.x-k8s.io", "jobsets", "delete")
    kubeconfig = write_kubeconfig(tmp_path / "alice", url, "alice-token")
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig, "--namespace", NS, "--service-account",
                            "default-editor")
    assert code == 1
    assert "ok: RBAC as alice@example.com (SelfSubjectAccessReview): may create, get, delete" in "\n".join(lines)
    assert errors(lines) == [
        f"error: RBAC as {RUNNER} (SubjectAccessReview): may not delete jobsets.jobset.x-k8s.io in {NS}, which the "
        f"train task's launcher does: gpupipe manifest rbac {config} --namespace {NS} --service-account "
        "default-editor | kubectl apply -f -"]
    assert {r["user"] for r in state.reviews if r["kind"] == "SubjectAccessReview"} == {RUNNER}


def test_a_person_without_the_verbs_is_told_to_check_the_service_account(capsys, config, kfp, cluster, tmp_path):
    url, state, _ = cluster
    state.user("bob-token", "bob@example.com")
    state.grant("bob@example.com", NS, "", "secrets", "get")
    kubeconfig = write_kubeconfig(tmp_path / "bob", url, "bob-token", namespace=NS)
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    (line,) = errors(lines)
    assert line.startswith("error: RBAC as bob@example.com (SelfSubjectAccessReview): may not create, get, delete")
    assert line.endswith("this checked your own identity: pass --service-account SA to check the pipeline's")


def test_without_crd_access_api_discovery_tells(capsys, config, kfp, cluster):
    """A tenant may not read CRDs: what the API server serves (discovery) says whether they are there."""
    url, state, kubeconfig = cluster
    state.revoke(RUNNER, "", "apiextensions.k8s.io", "customresourcedefinitions", "get")
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 0, lines
    assert lines[2] == "ok: JobSet CRD jobsets.jobset.x-k8s.io (training.pods.workers 2, training.pods.launcher jobset)"
    assert ("GET", "/apis/jobset.x-k8s.io/v1alpha2", "application/json") in state.requests
    del state.crds["jobsets.jobset.x-k8s.io"]
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    assert errors(lines) == [
        "error: JobSet CRD jobsets.jobset.x-k8s.io is not installed, or does not serve v1alpha2 (training.pods.workers 2, "
        "training.pods.launcher jobset; API discovery of jobset.x-k8s.io/v1alpha2, as CRDs may not be read): install "
        "JobSet: kubectl apply --server-side -f "
        "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"]


def test_a_namespace_admin_checks_the_service_account_with_a_local_review(capsys, config, kfp, cluster, tmp_path):
    """Not allowed SubjectAccessReviews (cluster-wide), a namespace's admin asks a
    LocalSubjectAccessReview in the namespace."""
    url, state, _ = cluster
    state.user("carol-token", "carol@example.com")
    for grant in [(NS, "", "secrets", "get"), (NS, "jobset.x-k8s.io", "jobsets", *VERBS),
                  (NS, "authorization.k8s.io", "localsubjectaccessreviews", "create")]:
        state.grant("carol@example.com", *grant)
    kubeconfig = write_kubeconfig(tmp_path / "carol", url, "carol-token", namespace=NS)
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig, "--service-account", "default-editor")
    assert code == 0, lines
    assert lines[-1] == (f"ok: RBAC as {RUNNER} (LocalSubjectAccessReview): may create, get, delete "
                         f"jobsets.jobset.x-k8s.io in {NS}")
    state.revoke(RUNNER, NS, "jobset.x-k8s.io", "jobsets", "get")
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig, "--service-account", "default-editor")
    assert code == 1
    assert errors(lines) == [
        f"error: RBAC as {RUNNER} (LocalSubjectAccessReview): may not get jobsets.jobset.x-k8s.io in {NS}, which the "
        f"train task's launcher does: gpupipe manifest rbac {config} --namespace {NS} --service-account "
        "default-editor | kubectl apply -f -"]


def test_a_crd_not_established_is_one_error(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    state.add_crds(crd("serving.kserve.io", "inferenceservices", "InferenceService", ["v1beta1"], established=False))
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    (line,) = errors(lines)
    assert line.startswith("error: KServe CRD inferenceservices.serving.kserve.io is not established (the initial "
                           "names have not been accepted): check the API server's events (kubectl describe crd "
                           "inferenceservices.serving.kserve.io), or reinstall: install KServe")


def test_the_job_namespace_holds_the_local_queue_and_the_workers_secrets(capsys, config, kfp, cluster):
    """training.pods.job_namespace: the JobSet runs there, so Kueue looks for the LocalQueue there and
    the workers mount the storage and pull Secrets there; the webhook stays the run's."""
    url, state, kubeconfig = cluster
    data = yaml.safe_load(Path(config).read_text())
    data["training"]["pods"]["job_namespace"] = "gpu-jobs"
    Path(config).write_text(yaml.safe_dump(data))
    state.grant(RUNNER, "gpu-jobs", "jobset.x-k8s.io", "jobsets", *VERBS)
    state.grant(RUNNER, "gpu-jobs", "", "secrets", "get")
    state.add(local_queue("gpu-jobs", "gpus", NS), *(secret("gpu-jobs", name) for name in SECRETS[:2]))
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    assert "ok: LocalQueue gpu-jobs/gpus (cluster.queue), ClusterQueue team-a" in lines
    assert errors(lines) == [
        "error: Secret gpupipe-minio (storage.s3.credentials_secret) is not in namespace gpu-jobs: kubectl -n "
        "gpu-jobs create secret generic gpupipe-minio --from-literal=AWS_ACCESS_KEY_ID=ACCESS_KEY "
        "--from-literal=AWS_SECRET_ACCESS_KEY=SECRET_KEY"]
    assert not any("gpupipe-webhook" in line and "gpu-jobs" in line for line in lines)
    assert lines[-1].endswith("jobsets.jobset.x-k8s.io in gpu-jobs")


@pytest.mark.parametrize("review", [False, "forbidden"], ids=["before-1.28", "refused"])
def test_without_self_subject_review_it_names_the_kubeconfig_user(capsys, config, kfp, cluster, review):
    url, state, kubeconfig = cluster
    state.self_subject_review = review
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 0, lines
    assert "as the kubeconfig's user (context fixture;" in lines[1]
    assert lines[-1].startswith("ok: RBAC as the user of context fixture (SelfSubjectAccessReview)")


def test_refused_credentials_are_one_line(capsys, config, kfp, cluster, tmp_path):
    url, state, _ = cluster
    kubeconfig = write_kubeconfig(tmp_path / "stale", url, "expired-token")
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    assert lines[0].startswith("ok: KFP")
    assert lines[1:] == [f"error: Kubernetes API at {url} (kubeconfig {kubeconfig}, context fixture): refused the "
                         "credentials (401: Unauthorized); refresh them (e.g. gcloud container clusters "
                         "get-credentials) or pass --kubeconfig/--context"]


def test_secrets_it_may_not_read_are_one_line_each(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    state.revoke(RUNNER, NS, "", "secrets", "get")
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1
    found = errors(lines)
    assert len(found) == 4
    assert found[0] == (f"error: Secret gpupipe-gcs-key (storage.gcs.credentials_secret) in {NS}: the Kubernetes API "
                        f"refused (403: secrets \"gpupipe-gcs-key\" is forbidden: User \"{RUNNER}\" cannot get "
                        f"resource \"secrets\" in API group \"\" in the namespace \"{NS}\"); ask for get on "
                        f"secrets in {NS}, or check with kubectl -n {NS} get secret gpupipe-gcs-key")


def test_a_kfp_that_does_not_say_its_version_warns(capsys, config, cluster):
    url, state, kubeconfig = cluster
    with KfpApiFixture(version="unknown") as kfp:
        code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 0
    assert lines[0] == (f"warning: --host {kfp.url}: the KFP API does not say its version (tag_name 'unknown'); "
                        "notify.webhook_secret needs KFP 2.14.0 or later")


@pytest.mark.parametrize("version", ["2.4.0", "2.5.0"])
def test_kfp_before_2_14_is_one_error_for_a_config_with_a_webhook_secret(capsys, config, cluster, version):
    """The exit handler compiles to taskFinalStatus, which KFP 2.5.0's argocompiler refuses."""
    url, state, kubeconfig = cluster
    with KfpApiFixture(version=version) as old:
        code, lines, _ = doctor(capsys, config, old.url, kubeconfig)
    assert code == 1
    assert errors(lines) == [
        f"error: KFP: --host {old.url}: KFP backend {version} is older than 2.14.0, which notify.webhook_secret "
        "needs (the exit handler's final status, kubeflow/pipelines #11953); upgrade Kubeflow Pipelines to 2.14.0 "
        "or later, or drop notify.webhook_secret"]


def test_unreachable_apis_are_one_line_each(capsys, config, tmp_path):
    closed = f"http://127.0.0.1:{free_port()}"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", closed, "runner-token")
    code, lines, err = doctor(capsys, config, closed, kubeconfig)
    assert code == 1
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"error: KFP: --host {closed}: cannot reach the KFP API (")
    assert lines[1].startswith(f"error: Kubernetes API at {closed} (kubeconfig {kubeconfig}, context fixture): "
                               "unreachable (connection refused); check that the context names the cluster")
    assert "Traceback" not in err


def test_serving_with_tf_serving_needs_no_kserve(capsys, config, kfp, cluster):
    url, state, kubeconfig = cluster
    del state.crds["inferenceservices.serving.kserve.io"]
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    assert code == 1 and errors(lines)[0].startswith("error: KServe CRD inferenceservices.serving.kserve.io is not "
                                                     "installed")
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig, "--serving", "tfserving")
    assert code == 0 and not any("KServe" in line for line in lines)


def _penguins(tmp_path, **training) -> str:
    data = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    data["training"]["pods"].update(training)
    path = tmp_path / "penguins.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("training", [{"gpus": 0, "accelerator": None}, {"launcher": "pod"}], ids=["cpu", "pod"])
def test_training_in_the_task_pod_needs_no_launcher(capsys, kfp, cluster, tmp_path, training):
    """configs/penguins.yaml on CPUs, or with launcher: pod, trains in the task's own pod: no
    JobSet, no queue, no RBAC check."""
    url, state, kubeconfig = cluster
    state.crds.clear()
    code, lines, _ = doctor(capsys, _penguins(tmp_path, **training), kfp.url, kubeconfig, "--serving", "none")
    assert code == 0, lines
    gpus = ["training.pods:"] if "launcher" in training else []  # the pod's GPU is still looked for on the nodes
    assert [line.split(" ")[1] for line in lines] == ["KFP", "Kubernetes", "Secret", "image", *gpus]
    assert not [r for r in state.requests if "customresourcedefinitions" in r[1] or "accessreviews" in r[1]]


def test_one_gpu_worker_runs_as_a_jobset(capsys, kfp, cluster, tmp_path):
    """GPU training on one worker is a JobSet too (pipelines/factory.py launched): its CRD and verbs."""
    url, state, kubeconfig = cluster
    del state.crds["jobsets.jobset.x-k8s.io"]
    code, lines, _ = doctor(capsys, _penguins(tmp_path, gpus=1), kfp.url, kubeconfig, "--serving", "none")
    assert code == 1
    assert errors(lines) == [
        "error: JobSet CRD jobsets.jobset.x-k8s.io is not installed (training.pods.workers 1, training.pods.launcher jobset): "
        "install JobSet: kubectl apply --server-side -f "
        "https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml"]
    assert lines[-1].startswith(f"ok: RBAC as {RUNNER} (SelfSubjectAccessReview): may create, get, delete jobsets")


def priority_class(name: str, value: int) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
            "metadata": {"name": name, "uid": f"uid-wpc-{name}", "resourceVersion": "31", "generation": 1,
                         "creationTimestamp": "2026-11-30T09:00:00Z"}, "value": value}


def test_the_priority_classes_the_jobs_name_must_exist_and_trials_rank_below_production(capsys, kfp, cluster,
                                                                                        tmp_path):
    """cluster.priority and training.tune.priority_class: Kueue makes no Workload for a job whose
    WorkloadPriorityClass does not exist (it stays suspended), and trials must rank below
    production runs to be preempted by them."""
    url, state, kubeconfig = cluster
    data = yaml.safe_load((ROOT / "configs" / "ctr.yaml").read_text())
    data["cluster"].update(queue="gpus", priority="production")
    data["training"]["tune"] = {"trials": 4}
    data["cluster"].pop("image_pull_secrets", None)
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump(data))
    code, lines, _ = doctor(capsys, str(path), kfp.url, kubeconfig)
    assert code == 1
    assert [e for e in errors(lines) if "WorkloadPriorityClass" in e] == [
        "error: WorkloadPriorityClass production (cluster.priority) does not exist, so Kueue makes no Workload for "
        "the job and it stays suspended: ask the cluster's administrator to create it, or unset cluster.priority",
        "error: WorkloadPriorityClass gpupipe-tuning (training.tune.priority_class) does not exist, so Kueue makes "
        f"no Workload for the job and it stays suspended: gpupipe manifest tenant {path} --team T --gpu-quota N | "
        "kubectl apply -f -"]
    state.add(priority_class("production", 1000), priority_class("gpupipe-tuning", 1000))
    code, lines, _ = doctor(capsys, str(path), kfp.url, kubeconfig)
    assert "ok: WorkloadPriorityClass production (cluster.priority), value 1000" in lines
    assert [e for e in errors(lines) if "priority" in e] == [
        "error: training.tune.priority_class gpupipe-tuning has value 1000, not below production's 1000, so trials "
        "are not preempted by production runs: give it a lower value (gpupipe manifest tenant writes -100)"]
    state.add(priority_class("gpupipe-tuning", -100))
    code, lines, _ = doctor(capsys, str(path), kfp.url, kubeconfig)
    assert code == 0, errors(lines)
    assert "ok: WorkloadPriorityClass gpupipe-tuning (training.tune.priority_class), value -100" in lines


def test_trials_in_the_task_pod_need_no_tuning_priority_class(capsys, kfp, cluster, tmp_path):
    """With launcher: pod the trials train one after another in the task's own pod and carry no
    WorkloadPriorityClass, so doctor asks for none."""
    url, state, kubeconfig = cluster
    data = yaml.safe_load((ROOT / "configs" / "ctr.yaml").read_text())
    data["cluster"].update(queue="gpus")
    data["training"]["tune"] = {"trials": 4}
    data["training"]["pods"].update(launcher="pod", workers=1)
    path = tmp_path / "in-pod.yaml"
    path.write_text(yaml.safe_dump(data))
    code, lines, _ = doctor(capsys, str(path), kfp.url, kubeconfig)
    assert not [line for line in lines if "WorkloadPriorityClass" in line or "priority_class" in line], lines


# -- the accelerators the GPU pods ask for (issue #40) -------------------------------------------
def gpu_serving_config(config: str, tmp_path, **resources) -> str:
    """The ctr config serving on one L4 GPU per pod (tolerating GKE's GPU taint)."""
    data = yaml.safe_load(Path(config).read_text())
    data["serving"]["resources"] = {"gpus": 1, "accelerator": "nvidia.com/gpu",
                                    "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}], **resources}
    path = tmp_path / "ctr-gpu-serving.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def l4_nodes(state, gpus: str = "1", taints=None):
    state.nodes += [node("gke-l4-0", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, {"nvidia.com/gpu": gpus},
                         [GPU_TAINT] if taints is None else taints)]


def accelerator_lines(lines):
    return [line for line in lines if "per pod:" in line]


def test_gpu_serving_finds_its_labelled_nodes_with_the_gpu(capsys, config, kfp, cluster, tmp_path):
    url, state, kubeconfig = cluster
    l4_nodes(state)
    code, lines, _ = doctor(capsys, gpu_serving_config(config, tmp_path), kfp.url, kubeconfig)
    assert code == 0, lines
    assert accelerator_lines(lines)[-1] == (
        "ok: serving.resources: 1 nvidia.com/gpu per pod: 1 node(s) labelled cloud.google.com/gke-accelerator="
        "nvidia-l4 advertise nvidia.com/gpu (allocatable up to 1)")
    assert ("GET", "/api/v1/nodes?labelSelector=cloud.google.com%2Fgke-accelerator%3Dnvidia-l4", "application/json") \
        in state.requests
    # serving with nothing (--serving none): the serving pods are not looked for
    code, lines, _ = doctor(capsys, gpu_serving_config(config, tmp_path), kfp.url, kubeconfig, "--serving", "none")
    assert [line for line in lines if "serving.resources" in line] == []


def test_no_node_with_the_label_is_one_error(capsys, config, kfp, cluster, tmp_path):
    url, state, kubeconfig = cluster
    code, lines, _ = doctor(capsys, gpu_serving_config(config, tmp_path), kfp.url, kubeconfig)
    assert code == 1
    assert errors(lines) == [
        "error: serving.resources: 1 nvidia.com/gpu per pod: no node labelled cloud.google.com/gke-accelerator="
        "nvidia-l4: label the GPU pool's nodes (kubectl label nodes NODE cloud.google.com/gke-accelerator=nvidia-l4) "
        "or fix serving.resources.node_selector"]


def test_labelled_nodes_without_the_device_plugin_are_one_error(capsys, config, kfp, cluster, tmp_path):
    url, state, kubeconfig = cluster
    state.nodes.append(node("gke-l4-0", {"cloud.google.com/gke-accelerator": "nvidia-l4"}))  # no nvidia.com/gpu
    code, lines, _ = doctor(capsys, gpu_serving_config(config, tmp_path), kfp.url, kubeconfig)
    (line,) = errors(lines)
    assert line.startswith("error: serving.resources: 1 nvidia.com/gpu per pod: the 1 node(s) labelled "
                           "cloud.google.com/gke-accelerator=nvidia-l4 advertise at most 0 nvidia.com/gpu "
                           "(status.allocatable): install the GPU device plugin")
    assert "custom-columns=NAME:.metadata.name,GPUS:.status.allocatable.nvidia\\.com/gpu" in line


def test_a_taint_the_pods_do_not_tolerate_is_one_error_and_the_gpus_own_a_warning(capsys, config, kfp, cluster,
                                                                                  tmp_path):
    url, state, kubeconfig = cluster
    l4_nodes(state, taints=[GPU_TAINT, {"key": "pool", "value": "inference", "effect": "NoExecute"}])
    code, lines, _ = doctor(capsys, gpu_serving_config(config, tmp_path), kfp.url, kubeconfig)
    assert errors(lines) == [
        "error: serving.resources: 1 nvidia.com/gpu per pod: every node labelled cloud.google.com/gke-accelerator="
        "nvidia-l4 with nvidia.com/gpu has a taint the pods do not tolerate (pool=inference:NoExecute): add them to "
        "serving.resources.tolerations (key, operator, value, effect)"]
    # tolerating the pool's taint but not the GPU's: GKE's admission plugin adds that one, elsewhere it is missing
    fixed = gpu_serving_config(config, tmp_path, tolerations=[
        {"key": "pool", "operator": "Equal", "value": "inference", "effect": "NoExecute"}])
    code, lines, _ = doctor(capsys, fixed, kfp.url, kubeconfig)
    assert code == 0
    (warning,) = [line for line in lines if line.startswith("warning: serving.resources")]
    assert "tainted nvidia.com/gpu=present:NoSchedule" in warning and "ExtendedResourceToleration" in warning


def test_nodes_it_may_not_list_are_a_warning_not_a_failure(capsys, config, kfp, cluster, tmp_path):
    url, state, kubeconfig = cluster
    state.revoke(RUNNER, "", "", "nodes", "list")
    code, lines, _ = doctor(capsys, gpu_serving_config(config, tmp_path), kfp.url, kubeconfig)
    assert code == 0
    warnings = [line for line in lines if line.startswith("warning: ") and "per pod" in line]
    assert len(warnings) == 2 and all("403" in w and "ask for list on nodes" in w and w.endswith("(not checked)")
                                      for w in warnings)


def test_a_kueue_that_does_not_manage_the_launchers_kind_is_one_error_and_an_unreadable_config_a_warning(
        capsys, config, kfp, cluster, tmp_path):
    """training.pods.launcher: tfjob under a Kueue whose integrations.frameworks lacks
    kubeflow.org/tfjob (as v0.19.2's default configuration): the TFJobs bypass the queue and the
    quota. Kueue's ConfigMap unreadable: a warning, not a pass."""
    url, state, kubeconfig = cluster
    data = yaml.safe_load(Path(config).read_text())
    data["training"]["pods"]["launcher"] = "tfjob"
    tfjob = tmp_path / "tfjob.yaml"
    tfjob.write_text(yaml.safe_dump(data))
    state.grant(RUNNER, NS, "kubeflow.org", "tfjobs", *VERBS)
    code, lines, _ = doctor(capsys, str(tfjob), kfp.url, kubeconfig)
    (line,) = [x for x in lines if "integrations.frameworks" in x]
    assert code == 1 and line == (
        "error: Kueue integrations.frameworks (kueue-system/kueue-manager-config) lacks kubeflow.org/tfjob: Kueue does "
        "not manage the launcher's jobs, so they bypass cluster.queue and the team's quota; add it there and restart "
        "kueue-controller-manager, or use training.pods.launcher: jobset")
    state.revoke(RUNNER, "kueue-system", "", "configmaps", "get")
    code, lines, _ = doctor(capsys, config, kfp.url, kubeconfig)
    (line,) = [x for x in lines if "integrations.frameworks" in x]
    assert code == 0 and line.startswith("warning: Kueue integrations.frameworks (kueue-system/kueue-manager-config): "
                                         "the Kubernetes API refused (403: ") and "not checked" in line

