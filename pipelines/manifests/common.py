"""What the serving manifests share: the labels and metadata every object carries, the model
server's resources, and the serving base a server reads (a URI, never a local path).
"""
from __future__ import annotations

from components.contracts.errors import GpupipeError
from components.contracts.settings import S3Settings
from pipelines.config import PipelineConfig


def object_labels(config: PipelineConfig) -> dict:
    return {"app.kubernetes.io/name": config.serving.model_name, "app.kubernetes.io/managed-by": "gpupipe",
            "gpupipe/pipeline": config.name}


def object_metadata(config: PipelineConfig, name: str) -> dict:
    metadata = {"name": name, "labels": object_labels(config)}
    if config.serving.namespace:
        metadata["namespace"] = config.serving.namespace
    return metadata


def server_resources(config: PipelineConfig) -> dict:
    r = config.serving.resources
    return {"requests": {"cpu": r.cpu_request, "memory": r.memory_request},
            "limits": {"cpu": r.cpu_limit, "memory": r.memory_limit}}


def served_base(config: PipelineConfig, serving_base: str, schemes: tuple, fix: str) -> str:
    base = (serving_base or config.serving.base).rstrip("/")
    if not base.startswith(schemes):
        raise GpupipeError(f"serving.base: '{base}' is a local path and the model server needs a URI it can read; "
                           f"{fix}")
    return base


def s3_settings(config: PipelineConfig) -> S3Settings:
    return config.storage.s3 or S3Settings()  # no storage.s3: AWS S3 with its defaults
