"""KServe's storage initializer under the Pod Security Standards' "restricted" profile: a
ClusterStorageContainer (`gpupipe manifest kserve --restricted`).

KServe (v0.15.2) pulls the model into the predictor's pod with an init container,
storage-initializer, which its pod webhook injects with no securityContext of its own
(pkg/webhook/admission/pod/storage_initializer_injector.go, InjectStorageInitializer), so a
namespace enforcing "restricted" refuses the pod. The webhook then merges into that init
container (a strategic merge, this object's fields winning) the spec.container of the first
ClusterStorageContainer it lists that is not disabled, has workloadType initContainer and
one of whose spec.supportedUriFormats matches the storageUri (a prefix, or a regex found in
it: pkg/apis/serving/v1alpha1/storage_container_types.go, IsStorageUriSupported).
"""
from __future__ import annotations

from components.contracts.errors import GpupipeError
from components.contracts.pods import restricted_container_security
from components.contracts.settings import ACCESS_KEY_ENV, SECRET_KEY_ENV
from components.contracts.storage import schemes
from components.store.base import RELEASES_DIR, ServingStore
from pipelines.config import PipelineConfig
from pipelines.manifests.common import object_labels, s3_settings, served_base
from pipelines.manifests.kserve import KSERVE_GCS_KEY, kserve_s3_annotations

# The KServe release gpupipe's InferenceService and CRD fixtures follow (doctor installs its chart).
KSERVE_VERSION = "v0.15.2"
# kserve v0.15.2 config/storagecontainers/: default.yaml's container, whose image kustomization.yaml
# names kserve/storage-initializer:latest and the release (hack/generate-install.sh) tags with the
# version; its resources, which inferenceservice-config's storageInitializer repeats. The default has
# no args: the injector sets them (the storageUri and /mnt/models), and a container's args here
# would replace them.
STORAGE_INITIALIZER = "storage-initializer"
STORAGE_INITIALIZER_IMAGE = f"kserve/storage-initializer:{KSERVE_VERSION}"
STORAGE_INITIALIZER_RESOURCES = {"requests": {"memory": "100Mi", "cpu": "100m"},
                                 "limits": {"memory": "1Gi", "cpu": "1"}}
# python/storage-initializer.Dockerfile: `useradd kserve -u 1000`, `USER 1000`.
STORAGE_INITIALIZER_UID = 1000
# pkg/credentials/gcs/gcs_secret.go: where the credential builder mounts a GCS key, and its variable.
GCS_CREDENTIALS_DIR, GCS_CREDENTIALS_ENV = "/var/secrets/", "GOOGLE_APPLICATION_CREDENTIALS"


def storage_container_base(config: PipelineConfig, serving_base: str = "") -> str:
    """The serving base a ClusterStorageContainer serves: gs:// or s3://. A local path is
    not served by KServe; a pvc:// base KServe v0.15.2 mounts into the model container itself
    (inferenceservice-config's enableDirectPvcVolumeMount, on by default), with no init container."""
    base = (serving_base or config.serving.base).rstrip("/")
    downloaded = schemes.downloaded_by("kserve")
    if base.startswith("pvc://"):
        raise GpupipeError(f"manifest kserve --restricted: serving base {base} is a PVC, which KServe mounts into the "
                           "predictor with no storage-initializer to secure; drop --restricted, or serve from "
                           f"{schemes.named(downloaded)} (--serving-base)")
    return served_base(config, serving_base, downloaded,
                       f"KServe serves no local path: pass --serving-base {schemes.examples(downloaded)}")


def storage_container_prefix(config: PipelineConfig, base: str) -> str:
    """The storageUri prefix the container serves: this model's releases (the InferenceService's
    storageUri is `<model>/releases/<N>`), so other models' pods keep their own initializer."""
    return f"{ServingStore(base, config.serving.model_name).model_root}/{RELEASES_DIR}/"


def storage_container_name(config: PipelineConfig) -> str:
    """Cluster-scoped, so the serving namespace is part of the name."""
    srv = config.serving
    return "-".join(p for p in (srv.namespace, srv.model_name, STORAGE_INITIALIZER) if p)


def kserve_s3_env(annotations: dict, secret: str, access_key: str, secret_key: str) -> list:
    """The environment KServe's credential builder gives the storage initializer for an S3
    Secret carrying `annotations` (serving.kserve.io/s3-*, unprefixed): pkg/credentials/s3/
    s3_secret.go BuildSecretEnvs (the two keys by secretKeyRef) and utils.go BuildS3EnvVars.
    The keys are read under the names the Secret holds them as, so KServe's
    inferenceservice-config needs no s3AccessKeyIDName for them."""
    env = [{"name": ACCESS_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": secret, "key": access_key}}},
           {"name": SECRET_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": secret, "key": secret_key}}}]
    endpoint = annotations.get("s3-endpoint")
    if endpoint:
        https = annotations.get("s3-usehttps")
        if https is not None:
            env.append({"name": "S3_USE_HTTPS", "value": https})
        scheme = "http" if https == "0" else "https"
        env += [{"name": "S3_ENDPOINT", "value": endpoint},
                {"name": "AWS_ENDPOINT_URL", "value": f"{scheme}://{endpoint}"}]
    for key, name in (("s3-verifyssl", "S3_VERIFY_SSL"), ("s3-region", "AWS_DEFAULT_REGION"),
                      ("s3-usevirtualbucket", "S3_USER_VIRTUAL_BUCKET")):
        if annotations.get(key):
            env.append({"name": name, "value": annotations[key]})
    return env


def storage_initializer_env(config: PipelineConfig, base: str) -> list:
    """The credentials the InferenceService's storage initializer already gets from the
    predictor's ServiceAccount (kserve_s3_access, kserve_gcs_access): for an s3:// base with
    storage.s3.credentials_secret, the keys and the Secret's s3-* annotations as environment;
    for a gs:// base with storage.gcs.credentials_secret (no Workload Identity), the key file
    KServe mounts from it. Nothing else: the pods' own identity (IRSA, Workload Identity)."""
    if base.startswith("s3://"):
        s3 = s3_settings(config)
        if not s3.credentials_secret:
            return []
        return kserve_s3_env(kserve_s3_annotations(config), s3.credentials_secret, s3.access_key_key,
                             s3.secret_key_key)
    if config.storage.gcs.credentials_secret and not config.serving.service_account:
        return [{"name": GCS_CREDENTIALS_ENV, "value": GCS_CREDENTIALS_DIR + KSERVE_GCS_KEY}]
    return []


def restricted_storage_container(config: PipelineConfig, serving_base: str = "") -> dict:
    """A ClusterStorageContainer whose storage-initializer runs as the "restricted" profile asks
    (non-root as the image's uid, no privilege escalation, every capability dropped, seccomp
    RuntimeDefault, set on the container since KServe's pod has no securityContext of its
    own; the root file system stays writable, which the profile allows), with KServe's image
    and resources, the credentials environment, for this model's releases under the serving base."""
    base = storage_container_base(config, serving_base)
    container = {"name": STORAGE_INITIALIZER, "image": STORAGE_INITIALIZER_IMAGE,
                 "resources": STORAGE_INITIALIZER_RESOURCES,
                 "securityContext": restricted_container_security(pod_level=False, uid=STORAGE_INITIALIZER_UID,
                                                                  read_only_root=False)}
    env = storage_initializer_env(config, base)
    if env:
        container["env"] = env
    return {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterStorageContainer",
            "metadata": {"name": storage_container_name(config), "labels": object_labels(config)},
            "spec": {"container": container,
                     "supportedUriFormats": [{"prefix": storage_container_prefix(config, base)}],
                     "workloadType": "initContainer"}}


def storage_container_notes(config: PipelineConfig, serving_base: str = "") -> list:
    """What the user does for the ClusterStorageContainer to be the one KServe merges: KServe's
    own `default` matches every gs:// and s3:// URI too, and the webhook lists them from its
    cache in no fixed order (controller-runtime's CacheReader.List), so it must be disabled."""
    base = storage_container_base(config, serving_base)
    scheme = base.split("://", 1)[0]
    return [f"note: ClusterStorageContainer {storage_container_name(config)} is cluster-scoped (a cluster admin "
            f"applies it), and KServe's own ClusterStorageContainer default also matches {scheme}://, and KServe's "
            "webhook takes whichever it lists first (in no fixed order): disable that one, kubectl patch clusterstoragecontainer default --type merge -p "
            "'{\"disabled\": true}' (other models' storage initializer then comes from inferenceservice-config's "
            "storageInitializer, the same image and resources)"]
