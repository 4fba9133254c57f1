"""The base of every step's settings model, the names columns take, and the storage settings.

A step's settings are one pydantic model: the config file holds it as a section, the
pipeline passes it to the step as one JSON parameter, and the step reads it back with
`model_validate_json`. No field is listed by hand anywhere in between.
"""
from __future__ import annotations

import keyword
import re
import unicodedata
from typing import Dict, List, Literal, Optional, Tuple, Type, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from components.contracts.storage import retry, s3, schemes

S = TypeVar("S", bound="Strict")
# What a feature may be called as written: it names the SavedModel's inputs, which
# TensorFlow holds to Python's rule for parameter names (an ASCII letter first, then
# letters, digits and '_'; not a keyword). TensorFlow renames 'a.b' and 'a-b' to 'a_b' in
# the signature on its own, and refuses '_id', 'café' and 'class'.
TF_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_]+")


def takes_as_written(column: str) -> bool:
    return bool(TF_NAME_RE.match(column)) and not keyword.iskeyword(column)


def safe_name(column: str) -> str:
    """The name a column has in the examples, the schema, the feature specs and the
    SavedModel's inputs. A name TensorFlow takes is kept as written; any other loses its
    accents (é -> e), has each run of characters other than ASCII letters, digits and '_'
    replaced by one '_' and '_' trimmed from both ends, gets 'f_' in front when what is
    left is empty or does not start with a letter, and '_' behind when it is a Python
    keyword: 'bill length (mm)' -> 'bill_length_mm', 'education-num' -> 'education_num',
    'Größe' -> 'Gro_e', '_id' -> 'id', '2nd' -> 'f_2nd', 'class' -> 'class_'. A safe name
    maps to itself."""
    if takes_as_written(column):
        return column
    plain = "".join(c for c in unicodedata.normalize("NFKD", column) if not unicodedata.combining(c))
    safe = _UNSAFE_RUN.sub("_", plain).strip("_")
    safe = safe if safe[:1].isascii() and safe[:1].isalpha() else f"f_{safe}"
    return f"{safe}_" if keyword.iskeyword(safe) else safe


class Strict(BaseModel):
    """Unknown keys are errors; settings do not change once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def from_json(cls: Type[S], text: str) -> S:
        """The settings from the JSON parameter the pipeline passed ("" or "{}": the defaults)."""
        return cls.model_validate_json(text or "{}")

    @classmethod
    def part_of(cls: Type[S], model: BaseModel) -> S:
        """This model's fields, taken from a larger model that has them all."""
        return cls.model_validate(model.model_dump(include=set(cls.model_fields)))


# -- object storage -----------------------------------------------------------------------
# The names under which AWS SDKs (boto3 in the steps, TF Serving's and KServe's S3 clients)
# read S3 credentials; the pods get them from a Kubernetes Secret, never as values.
ACCESS_KEY_ENV = s3.ACCESS_KEY_ENV
SECRET_KEY_ENV = s3.SECRET_KEY_ENV
_OBJECT_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def check_secret_name(name: str) -> str:
    """A Kubernetes Secret's name (a DNS subdomain), never the secret itself; else ValueError."""
    if not _OBJECT_NAME_RE.match(name):
        raise ValueError(f"'{name}' is not a Kubernetes Secret name (the name, never the secret itself)")
    return name


_SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


def check_secret_key(key: str) -> str:
    """A key inside a Kubernetes Secret's data (a file's name when mounted)."""
    if not _SECRET_KEY_RE.match(key):
        raise ValueError(f"'{key}' is not a key of a Kubernetes Secret (letters, digits, '-', '_' and '.')")
    return key


_REGION_RE = re.compile(r"^[a-z0-9][-a-z0-9]*$")


class S3Settings(Strict):
    """Where the S3-compatible store is (AWS S3, MinIO, Ceph RGW) and how to reach it:
    endpoint, region, addressing style, whether it checks conditional writes, and the
    Kubernetes Secret (by name only) holding the access keys. It renders the environment
    components/contracts/storage/s3.py reads: one call for every compiled task, the
    multi-worker job's workers (pipelines/pods.py) and the kfp.local tasks of a local run."""

    endpoint: Optional[str] = Field(
        None, description="the S3 API's URL, e.g. http://minio.minio:9000 (MinIO, Ceph RGW); unset: AWS S3")
    region: str = Field("us-east-1", description="the region (MinIO and Ceph accept any; us-east-1 is theirs)")
    addressing_style: Optional[Literal["path", "virtual", "auto"]] = Field(
        None, description="bucket in the path (MinIO, Ceph) or in the host name (AWS); default: path when an "
                          "endpoint is set, else auto")
    conditional_writes: bool = Field(
        True, description="the server checks If-Match/If-None-Match (AWS S3, MinIO, Ceph RGW); false: pushes take "
                          "a lock object instead (components/contracts/storage/s3.py)")
    lock_seconds: int = Field(60, ge=5, description="with conditional_writes: false, the lock object's expiry")
    credentials_secret: Optional[str] = Field(
        None, description="name of the Kubernetes Secret holding the access key and secret key (the name, never "
                          "the keys); unset: the pods' own identity (e.g. IRSA on EKS)")
    access_key_key: str = Field(ACCESS_KEY_ENV, description="the access key's key inside that Secret (KFP's "
                                                            "mlpipeline-minio-artifact: accesskey)")
    secret_key_key: str = Field(SECRET_KEY_ENV, description="the secret key's key inside that Secret (KFP's "
                                                            "mlpipeline-minio-artifact: secretkey)")

    @field_validator("endpoint")
    @classmethod
    def _url(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        parts = urlsplit(v)
        try:
            parts.port
        except ValueError:
            parts = None
        if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname
                or parts.path.strip("/") or parts.query or parts.username):
            raise ValueError(f"'{v}' is not an http:// or https:// URL of the S3 API (scheme, host and port only, "
                             "e.g. http://minio.minio:9000)")
        return v.rstrip("/")

    @field_validator("region")
    @classmethod
    def _region(cls, v: str) -> str:
        if not _REGION_RE.match(v):
            raise ValueError(f"'{v}' is not a region name (lowercase letters, digits and '-', e.g. us-east-1)")
        return v

    @field_validator("credentials_secret")
    @classmethod
    def _secret_name(cls, v: Optional[str]) -> Optional[str]:
        return v if v is None else check_secret_name(v)

    @field_validator("access_key_key", "secret_key_key")
    @classmethod
    def _data_key(cls, v: str) -> str:
        return check_secret_key(v)

    @model_validator(mode="after")
    def _two_keys(self) -> "S3Settings":
        if self.access_key_key == self.secret_key_key:
            raise ValueError(f"access_key_key and secret_key_key are both '{self.access_key_key}'; name the two "
                             "different keys of the Secret")
        return self

    @property
    def style(self) -> str:
        """The addressing style in effect."""
        return self.addressing_style or ("path" if self.endpoint else "auto")

    @property
    def uses_https(self) -> bool:
        return not self.endpoint or self.endpoint.startswith("https://")

    @property
    def host_port(self) -> Optional[str]:
        """The endpoint without its scheme (host:port), what TF Serving's and KServe's S3
        clients take; None for AWS S3 (their default)."""
        return self.endpoint.split("://", 1)[1] if self.endpoint else None

    def environment(self) -> Dict[str, str]:
        """The non-secret environment the storage layer's S3 backend reads."""
        env = {s3.REGION_ENV: self.region, s3.ADDRESSING_ENV: self.style,
               s3.CONDITIONAL_ENV: "1" if self.conditional_writes else "0"}
        if self.endpoint:
            env[s3.ENDPOINT_ENV] = self.endpoint
        if not self.conditional_writes:
            env[s3.LOCK_SECONDS_ENV] = str(self.lock_seconds)
        return env

    def secret_environment(self) -> Dict[str, Tuple[str, str]]:
        """The credentials as environment variable -> (Secret name, key in it); {} without
        credentials_secret."""
        if not self.credentials_secret:
            return {}
        return {ACCESS_KEY_ENV: (self.credentials_secret, self.access_key_key),
                SECRET_KEY_ENV: (self.credentials_secret, self.secret_key_key)}


class GCSSettings(Strict):
    """How the pods reach Google Cloud Storage: the Kubernetes Secret (by name only) holding a
    service-account key file, mounted into every task (pipelines/pods.py) and read by the
    model servers' manifests; unset: the pods' own identity (Workload Identity)."""

    credentials_secret: Optional[str] = Field(
        None, description="name of the Kubernetes Secret holding a GCP service-account key file (the name, never "
                          "the key); unset: the pods' own identity (Workload Identity)")
    credentials_key: str = Field("key.json", description="the key file's name inside that Secret")

    @field_validator("credentials_secret")
    @classmethod
    def _secret_name(cls, v: Optional[str]) -> Optional[str]:
        return v if v is None else check_secret_name(v)

    @field_validator("credentials_key")
    @classmethod
    def _data_key(cls, v: str) -> str:
        return check_secret_key(v)


class RetrySettings(Strict):
    """How hard the storage layer tries before a fault is an error (components/contracts/
    storage/retry.py; docs/storage.md): transient faults (429, 5xx, resets, timeouts) are
    retried by google-cloud-storage's and botocore's own retry machinery with exponential
    backoff and jitter, within these bounds."""

    attempts: int = Field(retry.DEFAULT_ATTEMPTS, ge=1, le=20,
                          description="tries per request, the first included (1: no retry)")
    deadline_seconds: float = Field(retry.DEFAULT_DEADLINE, gt=0, le=3600,
                                    description=f"all tries of one storage operation ({schemes.named()}) within this "
                                                "time: a retry starts only if it can end in time")
    connect_timeout_seconds: float = Field(retry.DEFAULT_CONNECT_TIMEOUT, gt=0, le=600,
                                           description="each try: to open the connection")
    read_timeout_seconds: float = Field(retry.DEFAULT_READ_TIMEOUT, gt=0, le=3600,
                                        description="each try: between bytes of the answer")

    def environment(self) -> Dict[str, str]:
        return {retry.ATTEMPTS_ENV: str(self.attempts), retry.DEADLINE_ENV: f"{self.deadline_seconds:g}",
                retry.CONNECT_TIMEOUT_ENV: f"{self.connect_timeout_seconds:g}",
                retry.READ_TIMEOUT_ENV: f"{self.read_timeout_seconds:g}"}


class StorageSettings(Strict):
    """The config's `storage:` section: how the storage layer reaches the object stores
    (`gcs:` and `s3:`, each with the Secret of its credentials) and how hard it retries
    (`retry:`)."""

    gcs: GCSSettings = Field(GCSSettings(), description="Google Cloud Storage: the Secret with a service-account "
                                                       "key; unset: the pods' own identity (Workload Identity)")
    s3: Optional[S3Settings] = Field(None, description="the S3-compatible store (MinIO, Ceph, AWS S3); unset: no "
                                                       "S3 environment is set")
    retry: Optional[RetrySettings] = Field(
        None, description="retries of transient storage faults: attempts, deadline_seconds, connect_timeout_seconds, "
                          f"read_timeout_seconds; unset: {retry.DEFAULT_ATTEMPTS} attempts, "
                          f"{retry.DEFAULT_DEADLINE:g} s, {retry.DEFAULT_CONNECT_TIMEOUT:g} s, "
                          f"{retry.DEFAULT_READ_TIMEOUT:g} s")

    def environment(self) -> Dict[str, str]:
        """The non-secret environment of every task, worker and local run: {} without `s3:`
        and `retry:`. The compiled tasks carry it (pipelines/pods.py); pipelines/local_run.py
        sets the same for kfp.local tasks and the run's own checks."""
        env = self.s3.environment() if self.s3 else {}
        if self.retry:
            env.update(self.retry.environment())
        return env

    def secret_environment(self) -> Dict[str, Tuple[str, str]]:
        return self.s3.secret_environment() if self.s3 else {}
