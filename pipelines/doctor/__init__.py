"""`gpupipe doctor CONFIG --host URL` (pipelines/cli/doctor.py): what a platform engineer checks before a config's first
Run on a cluster, one line each: `ok: ...`, or `error: <what>: <the fix>` (a kubectl command,
a config key, an install step). Exit 1 when any check fails.

The checks, and what each asks of which API (the shapes as the Kubernetes API server answers
them, kubernetes/api and apiextensions-apiserver):

- KFP: `GET <host>/apis/v2beta1/healthz` and the backend's release against 2.5.0
  (pipelines/remote/ check_reachable and check_kfp_version, the same as upload and submit).
- Who the Kubernetes API takes us for: `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`
  (status.userInfo.username; Kubernetes 1.28 and later, else the kubeconfig's user is named).
- The CRDs the config needs: `GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/<name>`,
  with the version gpupipe writes among spec.versions[].served and the Established condition:
  JobSet (training.pods.workers > 1, training.pods.launcher jobset), TFJob (workers > 1, launcher tfjob),
  Kueue's Workload, LocalQueue and ClusterQueue (cluster.queue), KServe's InferenceService
  (`--serving kserve`, the default: `gpupipe manifest kserve`).
- cluster.queue: the LocalQueue in the run's namespace and the ClusterQueue its spec.clusterQueue
  names, and the WorkloadPriorityClasses the config names: `kueue.x-k8s.io/v1beta2` where API
  discovery (`GET /apis/kueue.x-k8s.io/v1beta2`) lists it, else `v1beta1` (deprecated in Kueue
  v0.19; v1beta2 is served from v0.15); Kueue's CRDs must serve either.
- The Secrets the config names, in the run's namespace: storage.gcs.credentials_secret,
  cluster.image_pull_secrets, storage.s3.credentials_secret, notify.webhook_secret. Asked for as
  PartialObjectMetadata (`Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1`):
  the API server sends the metadata only, never the data.
- The launcher's verbs (components/train/launch.py LAUNCHER_VERBS) on its JobSets or TFJobs:
  `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews` as the identity doctor runs as,
  and with `--service-account SA` a SubjectAccessReview for system:serviceaccount:<ns>:<SA>.
- The accelerators the config's GPU pods ask for (training.pods, serving.resources):
  `GET /api/v1/nodes?labelSelector=<node selector>`, each node's status.allocatable and
  spec.taints against the pods' tolerations (pipelines/doctor/accelerators.py).
"""
from __future__ import annotations

from pipelines.doctor.accelerators import accelerator_lines
from pipelines.doctor.checks import (DEFAULT_NAMESPACE, DOCS, JOBSET, KSERVE, KUEUE_CRDS, TFJOB, cluster_lines,
                                     crd_line, kfp_lines, launcher_kind, named_secrets, needed_crds, queue_lines,
                                     rbac_lines, secret_lines)
from pipelines.doctor.cluster import METADATA_ONLY, Cluster, Unreachable
from pipelines.doctor.line import Line

__all__ = ["accelerator_lines", "DEFAULT_NAMESPACE", "DOCS", "JOBSET", "KSERVE", "KUEUE_CRDS", "TFJOB", "cluster_lines", "crd_line",
           "kfp_lines", "launcher_kind", "named_secrets", "needed_crds", "queue_lines", "rbac_lines", "secret_lines",
           "METADATA_ONLY", "Cluster", "Unreachable", "Line"]
