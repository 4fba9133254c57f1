"""Push's settings: the config's `serving:` section."""
from __future__ import annotations

import math
import re
from typing import Dict, List, Literal, Optional

from pydantic import Field, field_validator, model_validator

from components.contracts.pods import Toleration, check_labels, quantity_value
from components.contracts.settings import Strict

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# KServe's InferenceService names (a DNS-1035 label): a letter first.
MODEL_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


# The one GPU resource both servers take: TF Serving's -gpu images are CUDA builds
# (tensorflow/serving tensorflow_serving/tools/docker/Dockerfile.gpu, FROM nvidia/cuda), and KServe
# knows a GPU predictor by this limit only (kserve v0.15.2 pkg/utils/utils.go IsGPUEnabled,
# constants.NvidiaGPUResourceType).
SERVING_ACCELERATOR = "nvidia.com/gpu"


class ServerResources(Strict):
    """CPU, memory and GPUs of each model server pod (KServe predictor or TF Serving
    Deployment), and the nodes it runs on, as training.pods has them."""

    cpu_request: str = "500m"
    cpu_limit: str = "2"
    memory_request: str = "1Gi"
    memory_limit: str = "2Gi"
    accelerator: Optional[str] = Field(
        None, description=f"GPU resource name of the server pods: {SERVING_ACCELERATOR} (TF Serving's GPU images are "
                          "CUDA builds)")
    gpus: int = Field(0, ge=0, le=1, description="GPUs per server pod, 0 or 1: TensorFlow places a SavedModel's ops "
                                                 "on the first GPU it sees, so a second one would sit idle; add "
                                                 "replicas instead. 1: TF Serving's -gpu image, batching sized to "
                                                 "the GPU, no CPU autoscaling target")
    node_selector: Dict[str, str] = Field(default_factory=dict, description="e.g. cloud.google.com/gke-accelerator: "
                                                                            "nvidia-l4")
    tolerations: List[Toleration] = Field(default_factory=list)

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, v: Dict[str, str]) -> Dict[str, str]:
        return check_labels(v, "serving.resources.node_selector")

    @model_validator(mode="after")
    def _gpus_need_accelerator(self) -> "ServerResources":
        if self.gpus and not self.accelerator:
            raise ValueError(f"gpus is set but accelerator is not; add accelerator: {SERVING_ACCELERATOR}")
        if self.accelerator and not self.gpus:
            raise ValueError("accelerator is set but gpus is 0; set gpus: 1")
        if self.accelerator and self.accelerator != SERVING_ACCELERATOR:
            raise ValueError(f"accelerator {self.accelerator}: the TF Serving GPU images are CUDA builds and KServe "
                             f"knows a GPU predictor by {SERVING_ACCELERATOR} only; use accelerator: "
                             f"{SERVING_ACCELERATOR}")
        return self

    def cpu_cores(self) -> int:
        """The whole cores the server may use (its CPU limit, rounded up; at least 1)."""
        return max(1, math.ceil(quantity_value(self.cpu_limit) or 1))


class Autoscaling(Strict):
    """Replicas of the model server and what scales them."""

    min_replicas: int = Field(1, ge=0, description="0 lets KServe (Knative) scale to zero; TF Serving keeps >= 1")
    max_replicas: int = Field(3, ge=1)
    metric: Literal["cpu", "memory", "concurrency", "rps"] = Field(
        "cpu", description="cpu/memory: utilisation percent (HPA; both ways to serve); concurrency/rps: in-flight "
                           "requests or requests per second per pod (Knative; KServe only)")
    target: int = Field(80, ge=1, description="the metric's target per pod")

    @model_validator(mode="after")
    def _max_at_least_min(self) -> "Autoscaling":
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas {self.max_replicas} is below min_replicas {self.min_replicas}")
        return self


# Batching unset, by the server's kind. CPU: gpupipe's defaults. GPU: TF Serving's own advice
# (tensorflow/serving tensorflow_serving/batching/README.md, "GPU: One Approach"): a batch size
# in the hundreds, a timeout of a few milliseconds, num_batch_threads the number of CPU cores
# (the threads that feed the one GPU), and for online serving max_enqueued_batches equal to
# num_batch_threads ("Overall Guidelines"). None: the server's cores.
CPU_BATCHING = {"max_batch_size": 32, "batch_timeout_micros": 2000, "max_enqueued_batches": 100,
                "num_batch_threads": 4}
GPU_BATCHING = {"max_batch_size": 128, "batch_timeout_micros": 5000, "max_enqueued_batches": None,
                "num_batch_threads": None}


class Batching(Strict):
    """TF Serving's server-side batching (--enable_batching, --batching_parameters_file);
    KServe's batcher takes max_batch_size and the timeout. Unset, each is sized to the
    server: on CPU 32, 2000 µs, 100 and 4; on a GPU (serving.resources.gpus 1) 128, 5000 µs,
    and the pod's CPU cores for both num_batch_threads and max_enqueued_batches (TF Serving's
    batching guide)."""

    enabled: bool = True
    max_batch_size: Optional[int] = Field(None, ge=1, description="unset: 32 on CPU, 128 on a GPU")
    batch_timeout_micros: Optional[int] = Field(None, ge=0, description="unset: 2000 on CPU, 5000 on a GPU")
    max_enqueued_batches: Optional[int] = Field(None, ge=1, description="unset: 100 on CPU; on a GPU "
                                                                        "num_batch_threads (online serving)")
    num_batch_threads: Optional[int] = Field(None, ge=1, description="unset: 4 on CPU; on a GPU the pod's CPU "
                                                                     "cores (serving.resources.cpu_limit)")

    def sized(self, resources: ServerResources) -> Dict[str, int]:
        """The four parameters, each as set or as sized to the server."""
        defaults = GPU_BATCHING if resources.gpus else CPU_BATCHING
        sized = {name: getattr(self, name) if getattr(self, name) is not None else defaults[name]
                 for name in CPU_BATCHING}
        if sized["num_batch_threads"] is None:
            sized["num_batch_threads"] = resources.cpu_cores()
        if sized["max_enqueued_batches"] is None:
            sized["max_enqueued_batches"] = sized["num_batch_threads"]
        return sized


class ServingSettings(Strict):
    base: str = Field("serving", description="serving base directory (local path or gs:// URI)")
    model_name: str
    keep_versions: int = Field(5, ge=1, description="newest versions kept; the one labelled stable is always kept")
    endpoint: Optional[str] = Field(
        None, description="TF Serving gRPC host:port; when set, push waits for the new version and smoke-tests it")
    smoke_rows: int = Field(8, ge=1, description="eval rows sent in the smoke test and in warmup requests")
    smoke_timeout_seconds: float = Field(120.0, gt=0)
    canary_percent: int = Field(
        0, ge=0, le=100, description="0: a pushed version becomes stable; >0: it becomes the canary (label canary, "
                                     "this share of the traffic under KServe) until `gpupipe promote` or `abort`")
    push_timeout_seconds: float = Field(
        3600.0, gt=0, description="a push not finished after this long is taken as dead: the next push, promote "
                                  "or abort fails its version and drops its canary label")
    tf_serving_version: str = Field("2.16.1", description="TF Serving version of both manifests (KServe's "
                                                           "runtimeVersion, the TF Serving image's tag)")
    namespace: Optional[str] = Field(None, description="Kubernetes namespace of the KServe InferenceService")
    service_account: Optional[str] = Field(
        None, description="service account the KServe predictor reads the serving base with")

    export: Literal["float32", "float16", "int8"] = Field(
        "float32", description="the model's form beside the float32 SavedModel (which TF Serving loads): float16 or "
                               "int8 add a post-training quantized TFLite model, model.tflite, to each version "
                               "(int8: dynamic-range, int8 weights); evaluate scores it and the release gate "
                               "refuses it beyond evaluation.max_compression_drop")
    resources: ServerResources = Field(default_factory=ServerResources)
    autoscaling: Autoscaling = Field(default_factory=Autoscaling)
    batching: Batching = Field(default_factory=Batching)
    tf_serving_image: Optional[str] = Field(
        None, description="the TF Serving image of `gpupipe manifest tfserving` (default: "
                          "tensorflow/serving:<tf_serving_version>)")

    allowed_bases: List[str] = Field(
        default_factory=list, description="serving bases a run may push to (prefixes, e.g. gs://models/); the "
                                          "serving_base run parameter outside them is refused; empty: any")

    def check_base(self) -> None:
        """The serving base this run gives is one the config allows."""
        from components.contracts.errors import GpupipeError

        if self.allowed_bases and not any(self.base.rstrip("/").startswith(b.rstrip("/")) for b in self.allowed_bases):
            raise GpupipeError(f"serving_base: {self.base} is not under serving.allowed_bases "
                               f"({', '.join(self.allowed_bases)}); run with one of them or add it to the config")

    @field_validator("model_name")
    @classmethod
    def _safe_model_name(cls, v: str) -> str:
        if not MODEL_NAME_RE.match(v):
            raise ValueError(f"'{v}' is not a plain name: use lowercase letters, digits and '-', a letter first "
                             "(KServe's rule; no '/', '..')")
        return v
