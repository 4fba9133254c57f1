"""`gpupipe manifest kserve --restricted`: the ClusterStorageContainer that makes KServe's
storage-initializer pass the Pod Security Standards' "restricted" profile. It validates
against KServe's CRD (tests/fixtures/crds/), KServe's injector would pick it for the
InferenceService's storageUri (the matching below mirrors KServe's), and the pod KServe
builds from it, the predictor with this container as its init container, passes
tests/test_pod_security.py's restricted checks, where KServe's default injection fails them."""
import copy
import shlex
from pathlib import Path

import pytest
import yaml

from components.contracts.errors import GpupipeError
from pipelines.cli import main
from pipelines.config import load_config
from pipelines.manifests import kserve_inference_service, kserve_s3_access
from pipelines.manifests.storage_container import restricted_storage_container
from tests.fixtures.k8s_schema import assert_valid, validation_errors
from tests.test_pod_security import predictor_pod, restricted_problems

pytestmark = pytest.mark.compile
ROOT = Path(__file__).resolve().parents[1]
MINIO = ROOT / "configs" / "penguins-minio.yaml"
KSERVE = "kserve/kserve v0.15.2"

# KServe's own default ClusterStorageContainer (KSERVE config/storagecontainers/default.yaml, as the
# release YAML installs it), and the same from its Helm chart (charts/kserve-resources/templates/
# clusterstoragecontainer.yaml with values.yaml's kserve.storage.containerSecurityContext).
DEFAULT = {"metadata": {"name": "default"}, "spec": {
    "container": {"name": "storage-initializer", "image": "kserve/storage-initializer:v0.15.2",
                  "resources": {"requests": {"memory": "100Mi", "cpu": "100m"},
                                "limits": {"memory": "1Gi", "cpu": "1"}}},
    "supportedUriFormats": [{"prefix": p} for p in ("gs://", "s3://", "hdfs://", "hf://", "webhdfs://")] + [
        {"regex": "https://(.+?).blob.core.windows.net/(.+)"}, {"regex": "https://(.+?).file.core.windows.net/(.+)"},
        {"regex": "https?://(.+)/(.+)"}],
    "workloadType": "initContainer"}}
HELM_DEFAULT = copy.deepcopy(DEFAULT)
HELM_DEFAULT["spec"]["container"]["securityContext"] = {
    "allowPrivilegeEscalation": False, "privileged": False, "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}


def storage_container_for(uri: str, containers: list):
    """The spec.container KServe's injector merges for `uri`, as KSERVE states it:
    pkg/webhook/admission/pod/storage_initializer_injector.go GetContainerSpecForStorageUri
    (the first listed that is not disabled, workloadType initContainer, and supports the URI)
    and pkg/apis/serving/v1alpha1/storage_container_types.go IsStorageUriSupported (a prefix
    by strings.HasPrefix, else a regex by regexp.MatchString: found anywhere, unanchored)."""
    import re

    for sc in containers:
        if sc.get("disabled") or sc["spec"].get("workloadType", "initContainer") != "initContainer":
            continue
        for fmt in sc["spec"]["supportedUriFormats"]:
            if fmt.get("prefix") and uri.startswith(fmt["prefix"]) or (
                    not fmt.get("prefix") and fmt.get("regex") and re.search(fmt["regex"], uri)):
                return sc["spec"]["container"]
    return None


MERGE_KEYS = {"env": "name", "volumeMounts": "mountPath", "ports": "containerPort"}  # core/v1 Container's patchMergeKey


def strategic_merge(original: dict, patch: dict) -> dict:
    """mergeContainerSpecs (KSERVE storage_initializer_injector.go): a strategic merge patch of
    the injector's container by the ClusterStorageContainer's; maps merge, the lists with a
    merge key merge by it, other lists and values are replaced."""
    out = copy.deepcopy(original)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = strategic_merge(out[key], value)
        elif key in MERGE_KEYS and isinstance(out.get(key), list):
            merged = out[key]
            for item in value:
                same = [i for i, e in enumerate(merged) if e[MERGE_KEYS[key]] == item[MERGE_KEYS[key]]]
                if same:
                    merged[same[0]] = strategic_merge(merged[same[0]], item)
                else:
                    merged.append(copy.deepcopy(item))
        else:
            out[key] = copy.deepcopy(value)
    return out


def credential_builder_s3_env(annotations: dict, secret: str) -> list:
    """What KServe's credential builder adds for an S3 Secret holding AWS_SECRET_ACCESS_KEY
    (KSERVE pkg/credentials/s3/s3_secret.go BuildSecretEnvs, with inferenceservice-config's
    s3AccessKeyIDName/s3SecretAccessKeyName, and utils.go BuildS3EnvVars on its annotations)."""
    env = [{"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": var}}}
           for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")]
    ann = {k.removeprefix("serving.kserve.io/"): v for k, v in annotations.items()}
    if "s3-endpoint" in ann:
        if "s3-usehttps" in ann:
            env.append({"name": "S3_USE_HTTPS", "value": ann["s3-usehttps"]})
        scheme = "http" if ann.get("s3-usehttps") == "0" else "https"
        env += [{"name": "S3_ENDPOINT", "value": ann["s3-endpoint"]},
                {"name": "AWS_ENDPOINT_URL", "value": f"{scheme}://{ann['s3-endpoint']}"}]
    env += [{"name": name, "value": ann[key]} for key, name in (
        ("s3-verifyssl", "S3_VERIFY_SSL"), ("s3-region", "AWS_DEFAULT_REGION"),
        ("s3-usevirtualbucket", "S3_USER_VIRTUAL_BUCKET")) if key in ann]
    return env


def kserve_pod(isvc: dict, containers: list, credentials_env: list = ()) -> dict:
    """The predictor's pod after KServe's webhook (InjectStorageInitializer): the shared
    emptyDir kserve-provision-location, the init container it builds (inferenceservice-config's
    storageInitializer image and resources, args the storageUri and /mnt/models, the
    credentials the ServiceAccount's Secret gives), merged with the matching
    ClusterStorageContainer's container, and the model container reading /mnt/models."""
    uri = isvc["spec"]["predictor"]["model"]["storageUri"]
    pod = predictor_pod(isvc)
    mount = {"name": "kserve-provision-location", "mountPath": "/mnt/models"}
    init = {"name": "storage-initializer", "image": "kserve/storage-initializer:v0.15.2", "args": [uri, "/mnt/models"],
            "terminationMessagePolicy": "FallbackToLogsOnError", "volumeMounts": [{**mount, "readOnly": False}],
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m", "memory": "100Mi"}}}
    if credentials_env:
        init["env"] = list(credentials_env)
    chosen = storage_container_for(uri, containers)
    pod["initContainers"] = [strategic_merge(init, chosen) if chosen else init]
    pod["containers"][0].setdefault("volumeMounts", []).append({**mount, "readOnly": True})
    pod["volumes"] = [*pod.get("volumes", []), {"name": "kserve-provision-location", "emptyDir": {}}]
    return pod


@pytest.fixture
def minio():
    return load_config(MINIO)


def test_the_storage_container_validates_against_kserves_crd(penguins_config, minio):
    for config, base in ((penguins_config, "gs://b/serving"), (minio, "s3://models/serving")):
        csc = restricted_storage_container(config, base)
        assert_valid(csc)
        assert "namespace" not in csc["metadata"]  # cluster-scoped
    broken = copy.deepcopy(csc)
    broken["spec"]["container"]["securityContex"] = broken["spec"]["container"].pop("securityContext")
    assert any("securityContex" in e for e in validation_errors(broken))
    broken = copy.deepcopy(csc)
    broken["spec"]["supportedUriFormats"] = "s3://"
    assert any("is not of type 'array'" in e for e in validation_errors(broken))


def test_kserves_injector_picks_it_for_the_models_releases_only(penguins_config):
    csc = restricted_storage_container(penguins_config, "gs://b/serving")
    ours = csc["spec"]["container"]
    canaries = penguins_config.model_copy(update={"serving": penguins_config.serving.model_copy(
        update={"canary_percent": 20})})
    for canary in (None, 4):
        isvc = kserve_inference_service(canaries, "gs://b/serving", 3, canary)
        uri = isvc["spec"]["predictor"]["model"]["storageUri"]
        assert storage_container_for(uri, [csc]) is ours, uri
        assert storage_container_for(uri, [{**DEFAULT, "disabled": True}, csc]) is ours
        # KServe's default matches as well, and the webhook lists from its cache in no fixed order:
        # whichever comes first is merged, hence the note to disable the default
        assert storage_container_for(uri, [DEFAULT, csc]) is DEFAULT["spec"]["container"]
    for other in ("gs://b/serving/ctr/releases/3", "gs://b/other/penguins/releases/3", "s3://b/serving/penguins/"
                  "releases/3", "gs://b/serving/penguins/3"):
        assert storage_container_for(other, [csc]) is None, other
    assert storage_container_for("gs://b/serving/penguins/releases/3", [{**csc, "disabled": True}]) is None
    local_model_job = copy.deepcopy(csc)
    local_model_job["spec"]["workloadType"] = "localModelDownloadJob"
    assert storage_container_for("gs://b/serving/penguins/releases/3", [local_model_job]) is None
    # the regex form, unanchored as Go's regexp.MatchString
    assert storage_container_for("https://acct.blob.core.windows.net/c/m", [DEFAULT]) is DEFAULT["spec"]["container"]
    assert storage_container_for("pvc://claim/m", [DEFAULT]) is None


def test_the_pod_kserve_builds_with_it_passes_the_restricted_profile_and_the_default_does_not(penguins_config, minio):
    for config, base in ((penguins_config, "gs://b/serving"), (minio, "s3://models/serving")):
        csc = restricted_storage_container(config, base)
        for mode in ("Serverless", "RawDeployment"):
            isvc = kserve_inference_service(config, base, 3, mode=mode)
            pod = kserve_pod(isvc, [{**DEFAULT, "disabled": True}, csc])
            assert restricted_problems(pod) == [], (base, mode)
            init = pod["initContainers"][0]
            assert init["securityContext"]["runAsUser"] == 1000  # the image's USER, not root
            assert init["args"] == [isvc["spec"]["predictor"]["model"]["storageUri"], "/mnt/models"]
            assert init["image"] == "kserve/storage-initializer:v0.15.2"
            assert_valid({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "penguins-predictor"}, "spec": pod})
    isvc = kserve_inference_service(penguins_config, "gs://b/serving", 3)
    assert restricted_problems(kserve_pod(isvc, [])) == restricted_problems(kserve_pod(isvc, [DEFAULT])) == [
        "container storage-initializer must set securityContext.allowPrivilegeEscalation=false",
        'container storage-initializer must set securityContext.capabilities.drop=["ALL"]',
        "pod or container storage-initializer must set securityContext.runAsNonRoot",
        "pod or container storage-initializer must set securityContext.seccompProfile"]
    assert restricted_problems(kserve_pod(isvc, [HELM_DEFAULT])) == [
        "pod or container storage-initializer must set securityContext.seccompProfile"]


def test_its_credentials_are_the_ones_the_service_account_gives_the_initializer(minio, penguins_config):
    base = "s3://models/serving"
    (_account,), (annotate, *_) = kserve_s3_access(minio, base)
    words = shlex.split(annotate)
    secret = words[words.index("secret") + 1]
    annotations = dict(w.split("=", 1) for w in words if w.startswith("serving.kserve.io/"))
    given = credential_builder_s3_env(annotations, secret)
    csc = restricted_storage_container(minio, base)
    assert csc["spec"]["container"]["env"] == given
    isvc = kserve_inference_service(minio, base, 3)
    assert kserve_pod(isvc, [csc], given)["initContainers"][0]["env"] == given  # merged by name, no duplicate
    # a Secret holding the keys under other names (KFP's MinIO Secret): the container reads them by those
    s3 = minio.storage.s3.model_copy(update={"access_key_key": "accesskey", "secret_key_key": "secretkey"})
    kfp = minio.model_copy(update={"storage": minio.storage.model_copy(update={"s3": s3})})
    refs = [e["valueFrom"]["secretKeyRef"] for e in restricted_storage_container(kfp, base)["spec"]["container"]["env"]
            if "valueFrom" in e]
    assert refs == [{"name": "gpupipe-minio", "key": "accesskey"}, {"name": "gpupipe-minio", "key": "secretkey"}]
    # gs://: the key file KServe mounts from the ServiceAccount's Secret; none with Workload Identity
    gcs = restricted_storage_container(penguins_config, "gs://b/serving")["spec"]["container"]["env"]
    assert gcs == [{"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/var/secrets/gcloud-application-credentials.json"}]
    identity = penguins_config.model_copy(update={"serving": penguins_config.serving.model_copy(
        update={"service_account": "models-reader"})})
    assert "env" not in restricted_storage_container(identity, "gs://b/serving")["spec"]["container"]


def test_gpupipe_manifest_kserve_restricted_prints_it_and_the_note_on_kserves_default(capsys):
    assert main(["manifest", "kserve", str(MINIO), "--serving-base", "s3://models/serving", "--version", "2",
                 "--restricted"]) == 0
    out, err = capsys.readouterr()
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds == ["ServiceAccount", "InferenceService", "ClusterStorageContainer"]
    (note,) = [line for line in err.splitlines() if "ClusterStorageContainer" in line]
    assert "kubectl patch clusterstoragecontainer default --type merge -p '{\"disabled\": true}'" in note
    assert main(["manifest", "kserve", str(MINIO), "--serving-base", "s3://models/serving", "--version", "2"]) == 0
    assert "ClusterStorageContainer" not in capsys.readouterr().out  # only when asked


@pytest.mark.parametrize("base, message", [
    ("", "serving.base: 'serving' is a local path and the model server needs a URI it can read; KServe serves no "
         "local path: pass --serving-base gs://BUCKET/PATH or s3://BUCKET/PATH"),
    ("pvc://models/serving", "manifest kserve --restricted: serving base pvc://models/serving is a PVC, which KServe "
                             "mounts into the predictor with no storage-initializer to secure; drop --restricted, or "
                             "serve from gs:// or s3:// (--serving-base)")])
def test_a_base_with_no_storage_initializer_is_refused_in_one_line(capsys, base, message):
    with pytest.raises(GpupipeError) as err:
        restricted_storage_container(load_config(MINIO), base)
    assert str(err.value) == message
    argv = ["manifest", "kserve", str(MINIO), "--version", "2", "--restricted"]
    assert main(argv + (["--serving-base", base] if base else [])) != 0
    out, err_text = capsys.readouterr()
    assert out == "" and err_text.strip().splitlines() == [f"error: {message}"]
