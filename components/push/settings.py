"""Push's settings: the config's `serving:` section."""
from __future__ import annotations

import re
from typing import List, Literal, Optional

from pydantic import Field, field_validator, model_validator

from components.contracts.settings import Strict

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# KServe's InferenceService names (a DNS-1035 label): a letter first.
MODEL_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


class ServerResources(Strict):
    """CPU and memory of each model server pod (KServe predictor or TF Serving Deployment)."""

    cpu_request: str = "500m"
    cpu_limit: str = "2"
    memory_request: str = "1Gi"
    memory_limit: str = "2Gi"


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


class Batching(Strict):
    """TF Serving's server-side batching (--enable_batching, --batching_parameters_file);
    KServe's batcher takes max_batch_size and the timeout."""

    enabled: bool = True
    max_batch_size: int = Field(32, ge=1)
    batch_timeout_micros: int = Field(2000, ge=0)
    max_enqueued_batches: int = Field(100, ge=1)
    num_batch_threads: int = Field(4, ge=1)


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
