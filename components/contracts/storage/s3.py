"""S3-compatible object stores (AWS S3, MinIO, Ceph RGW) through boto3; `minio://` (KFP's
name for its MinIO artifact store) is the same protocol.

Where the server is, from the environment the pod (or `gpupipe run`) sets from the config's
`storage.s3` section (pipelines/config.py renders it; components/contracts/settings.py
`StorageSettings`):
  AWS_ENDPOINT_URL_S3         the endpoint (MinIO: http://minio.NAMESPACE:9000); unset: AWS
  AWS_REGION                  the region (default us-east-1)
  GPUPIPE_S3_ADDRESSING_STYLE path | virtual | auto (default: path when an endpoint is set)
  GPUPIPE_S3_CONDITIONAL_WRITES  1 (default) | 0 for servers without If-Match/If-None-Match
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: from a Kubernetes Secret (never in the YAML)

Tokens are ETags. A conditional write sends `If-Match: <etag>` (`If-None-Match: *` for
create-only), which AWS S3 (since 2024), MinIO and Ceph RGW check atomically; 412 or 409
is a Conflict. With GPUPIPE_S3_CONDITIONAL_WRITES=0 the write instead runs under a lock
object `<key>.lock` holding an owner and an expiry (GPUPIPE_S3_LOCK_SECONDS, default 60):
take it when absent or expired, wait GPUPIPE_S3_LOCK_SETTLE seconds, read it back and own it
only if it still names this writer; then compare the ETag, write, release. Without a
conditional write no lock is airtight: two writers that both find the lock free within the
settle time can both take it, so the settle time must exceed the store's write latency; an
expired lock (a writer killed while holding it) is taken over after its expiry.
"""
from __future__ import annotations

import functools
import io
import json
import os
import random
import time
import uuid
from typing import BinaryIO, List, Optional

from components.contracts.errors import GpupipeError
from components.contracts.storage import ABSENT, ANY, Conflict, Entry, split

ENDPOINT_ENV = "AWS_ENDPOINT_URL_S3"
REGION_ENV = "AWS_REGION"
ADDRESSING_ENV = "GPUPIPE_S3_ADDRESSING_STYLE"
CONDITIONAL_ENV = "GPUPIPE_S3_CONDITIONAL_WRITES"
LOCK_SECONDS_ENV = "GPUPIPE_S3_LOCK_SECONDS"
LOCK_SETTLE_ENV = "GPUPIPE_S3_LOCK_SETTLE"
ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"  # from the Secret storage.s3.credentials_secret names
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"
READ_BLOCK = 4 << 20


def _settings() -> tuple:
    endpoint = os.environ.get(ENDPOINT_ENV) or os.environ.get("AWS_ENDPOINT_URL") or ""
    region = os.environ.get(REGION_ENV) or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    style = os.environ.get(ADDRESSING_ENV) or ("path" if endpoint else "auto")
    return endpoint, region, style, os.environ.get(ACCESS_KEY_ENV, ""), os.environ.get(SECRET_KEY_ENV, "")


@functools.lru_cache(maxsize=4)
def _client(endpoint: str, region: str, style: str, key: str, secret: str):
    import boto3  # imported here: only s3:// needs it
    from botocore.config import Config

    if style not in ("path", "virtual", "auto"):
        raise GpupipeError(f"storage.s3.addressing_style: {style!r} is not path, virtual or auto; fix it")
    config = Config(s3={"addressing_style": style}, retries={"max_attempts": 5, "mode": "standard"},
                    connect_timeout=10, read_timeout=60)
    return boto3.session.Session().client("s3", endpoint_url=endpoint or None, region_name=region, config=config)


def client():
    return _client(*_settings())


def _errors():
    from botocore.exceptions import ClientError

    return ClientError


def _code(err) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _status(err) -> int:
    return int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _missing(err) -> bool:
    return _status(err) == 404 or _code(err) in ("NoSuchKey", "404", "NotFound")


class _RangeReader(io.RawIOBase):
    """A seekable read-only view of one object by HTTP Range requests (Parquet seeks)."""

    def __init__(self, bucket: str, key: str, size: int):
        self.bucket, self.key, self.size, self.pos = bucket, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer) -> int:
        if self.pos >= self.size or not len(buffer):
            return 0
        end = min(self.pos + len(buffer), self.size) - 1
        data = client().get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={self.pos}-{end}")["Body"].read()
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


class S3Backend:
    def stat(self, uri: str) -> Optional[Entry]:
        bucket, key = split(uri)
        if not key:
            return None
        try:
            head = client().head_object(Bucket=bucket, Key=key)
        except _errors() as err:
            if _missing(err):
                return None
            raise
        return Entry(uri, int(head["ContentLength"]), head["ETag"])

    def scan(self, uri_prefix: str) -> List[Entry]:
        """Every object whose key starts with the prefix (not only at a `/`)."""
        bucket, prefix = split(uri_prefix)
        scheme = uri_prefix.split("://", 1)[0]
        found = []
        for page in client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found += [Entry(f"{scheme}://{bucket}/{o['Key']}", int(o["Size"]), o["ETag"])
                      for o in page.get("Contents", []) if not o["Key"].endswith("/")]
        return found

    def list(self, uri: str) -> List[Entry]:
        return self.scan(uri.rstrip("/") + "/")

    def open_read(self, entry: Entry) -> BinaryIO:
        """A seekable stream of the object `entry` (its size from the listing or stat)."""
        bucket, key = split(entry.uri)
        return io.BufferedReader(_RangeReader(bucket, key, entry.size), buffer_size=READ_BLOCK)

    def read_versioned(self, uri: str):
        bucket, key = split(uri)
        try:
            got = client().get_object(Bucket=bucket, Key=key)  # the bytes and their ETag in one response
        except _errors() as err:
            if _missing(err):
                return None, ABSENT
            raise
        return got["Body"].read(), got["ETag"]

    def _put(self, uri: str, data: bytes, if_match: object) -> None:
        bucket, key = split(uri)
        extra = {}
        if if_match is ABSENT:
            extra["IfNoneMatch"] = "*"
        elif if_match is not ANY:
            extra["IfMatch"] = if_match
        try:
            client().put_object(Bucket=bucket, Key=key, Body=data, **extra)
        except _errors() as err:
            if _status(err) in (409, 412) or _code(err) in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise Conflict(uri) from None
            raise

    def write(self, uri: str, data: bytes, if_match: object = ANY) -> None:
        if if_match is ANY or os.environ.get(CONDITIONAL_ENV, "1") != "0":
            self._put(uri, data, if_match)
            return
        with _lock_object(uri + ".lock"):
            current = self.stat(uri)
            if (ABSENT if current is None else current.stamp) != if_match:
                raise Conflict(uri)
            self._put(uri, data, ANY)

    def delete(self, uri: str) -> None:
        bucket, key = split(uri)
        client().delete_object(Bucket=bucket, Key=key)  # S3 answers 204 for a missing key too

    def upload_file(self, local_path: str, uri: str) -> None:
        bucket, key = split(uri)
        client().upload_file(local_path, bucket, key)

    def download_file(self, uri: str, local_path: str) -> None:
        bucket, key = split(uri)
        client().download_file(bucket, key, local_path)


class _lock_object:
    """The documented fallback lock for servers without conditional writes (module doc)."""

    def __init__(self, uri: str):
        self.uri, self.owner = uri, uuid.uuid4().hex
        self.ttl = float(os.environ.get(LOCK_SECONDS_ENV, "60"))
        self.settle = float(os.environ.get(LOCK_SETTLE_ENV, "0.2"))

    def _holder(self) -> Optional[dict]:
        data = BACKEND.read_versioned(self.uri)[0]
        try:
            return json.loads(data) if data else None
        except ValueError:
            return None

    def __enter__(self):
        deadline = time.time() + max(self.ttl * 2, 30)
        while time.time() < deadline:
            held = self._holder()
            if held is None or float(held.get("expires", 0)) < time.time():
                BACKEND._put(self.uri, json.dumps({"owner": self.owner, "expires": time.time() + self.ttl}).encode(),
                                 ANY)
                time.sleep(self.settle)
                if (self._holder() or {}).get("owner") == self.owner:
                    return self
            time.sleep(random.uniform(0.05, 0.3))
        raise GpupipeError(f"{self.uri}: held by another writer for over {max(self.ttl * 2, 30):.0f} s; if no push "
                           "is running, delete this lock object")

    def __exit__(self, *exc):
        if (self._holder() or {}).get("owner") == self.owner:
            BACKEND.delete(self.uri)
        return False


BACKEND = S3Backend()
