"""The URI schemes gpupipe knows, declared once: which backend module serves each, where it
may be used, and the config key of its credentials. Every list of schemes elsewhere (the
storage layer's dispatch, the compiled pipeline's checks, the serving manifests) derives
from `SCHEMES`; a new store is one backend module plus one entry here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class Scheme:
    prefix: str  # "gs://"
    backend: str  # the module of this package that serves it ("" : none here, another program reads it)
    shared: bool  # every pod can read and write it: data sources, serving bases, baselines on the cluster
    pipeline_root: bool  # KFP's launcher stores artifacts in it
    servers: Tuple[str, ...]  # the model servers that load versions from it ("tfserving", "kserve")
    credentials_key: str  # the config key naming the Kubernetes Secret with its credentials ("": none)
    alias_of: str = ""  # the same store under another name: write it as this prefix instead


SCHEMES: Tuple[Scheme, ...] = (
    Scheme("gs://", "gcs", True, True, ("tfserving", "kserve"), "storage.gcs.credentials_secret"),
    Scheme("s3://", "s3", True, True, ("tfserving", "kserve"), "storage.s3.credentials_secret"),
    # KFP's name for its MinIO artifact store: the S3 protocol
    Scheme("minio://", "s3", False, True, (), "storage.s3.credentials_secret", alias_of="s3://"),
    # KServe mounts a PersistentVolumeClaim into the predictor itself: no backend here
    Scheme("pvc://", "", False, False, ("kserve",), ""),
)


def _prefixes(keep) -> Tuple[str, ...]:
    return tuple(s.prefix for s in SCHEMES if keep(s))


REMOTE = _prefixes(lambda s: bool(s.backend))  # object stores the storage layer reads and writes
SHARED = _prefixes(lambda s: s.shared)
PIPELINE_ROOTS = _prefixes(lambda s: s.pipeline_root)


def served_by(server: str) -> Tuple[str, ...]:
    """The schemes `server` ("tfserving", "kserve") loads a serving base from."""
    return _prefixes(lambda s: server in s.servers)


def downloaded_by(server: str) -> Tuple[str, ...]:
    """The object stores `server` downloads a serving base from (its storage initializer)."""
    return _prefixes(lambda s: server in s.servers and bool(s.backend))


def of(uri: str) -> "Scheme | None":
    """The declared scheme of `uri`, None for a local path (or an unknown scheme)."""
    return next((s for s in SCHEMES if uri.startswith(s.prefix)), None)


def named(prefixes: Tuple[str, ...] = SHARED, path: str = "") -> str:
    """'gs:// or s3://' ('gs://, s3:// or pvc://'; each followed by `path`), for a help text or
    a fix: what names the schemes outside this package reads them from here."""
    listed = [p + path for p in prefixes]
    return " or ".join(listed) if len(listed) < 3 else ", ".join(listed[:-1]) + " or " + listed[-1]


def examples(prefixes: Tuple[str, ...] = SHARED) -> str:
    """'gs://BUCKET/PATH or s3://BUCKET/PATH', for a fix in an error line."""
    return named(prefixes, "BUCKET/PATH")
