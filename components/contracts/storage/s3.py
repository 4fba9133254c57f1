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

Retries: botocore's `standard` mode (exponential backoff with jitter, a retry quota), with
storage.retry's attempts and timeouts (retry.py); each retry is counted and logged from
the client's `request-created` event. botocore retries a request until its answer's
headers; a body that breaks while streaming (a reset, a read timeout) is fetched again
here, from where it broke for a range read, whole for a small object. A conditional write
whose replay meets a 412 caused by its own lost first try (the object's `gpupipe-write`
metadata names this write) has succeeded. `classify` turns what is left into one-line
StorageErrors.
"""
from __future__ import annotations

import functools
import json
import os
import random
import time
import uuid
from typing import List, Optional

from components.contracts.errors import GpupipeError
from components.contracts.storage import retry, schemes, split
from components.contracts.storage.backend import ABSENT, ANY, Conflict, Entry, ObjectStore
from components.contracts.storage.retry import StorageError

ENDPOINT_ENV = "AWS_ENDPOINT_URL_S3"
REGION_ENV = "AWS_REGION"
ADDRESSING_ENV = "GPUPIPE_S3_ADDRESSING_STYLE"
CONDITIONAL_ENV = "GPUPIPE_S3_CONDITIONAL_WRITES"
LOCK_SECONDS_ENV = "GPUPIPE_S3_LOCK_SECONDS"
LOCK_SETTLE_ENV = "GPUPIPE_S3_LOCK_SETTLE"
ACCESS_KEY_ENV = "AWS_ACCESS_KEY_ID"  # from the Secret storage.s3.credentials_secret names
SECRET_KEY_ENV = "AWS_SECRET_ACCESS_KEY"
READ_BLOCK = 4 << 20
WRITE_ID = "gpupipe-write"  # user metadata of a conditional write: which write made this version of the object


def _endpoint() -> str:
    return os.environ.get(ENDPOINT_ENV) or os.environ.get("AWS_ENDPOINT_URL") or ""


def _settings() -> tuple:
    endpoint = _endpoint()
    region = os.environ.get(REGION_ENV) or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    style = os.environ.get(ADDRESSING_ENV) or ("path" if endpoint else "auto")
    return (endpoint, region, style, os.environ.get(ACCESS_KEY_ENV, ""), os.environ.get(SECRET_KEY_ENV, ""),
            retry.policy())


def _count_retry(request, **_):
    """botocore's request-created event: a try after the first is a retry."""
    tries = request.context.get("retries", {})
    attempt = int(tries.get("attempt", 1))
    request.context.setdefault("gpupipe_started", time.monotonic())  # the first try's start: this request's deadline
    if attempt > 1:
        why = request.context.get("gpupipe_last_fault", "a transient fault")
        op = retry.current()
        retry.note_retry("s3", op.uri if op is not None else request.url, why, attempt, retry.policy().attempts)


def _remember_fault(response=None, caught_exception=None, request_dict=None, attempts=1, **_):
    """botocore's needs-retry event (before its retry handler decides): what went wrong, for
    the log line of the retry; and False (no retry: botocore takes the first answer that is
    not None) when another try would not end within storage.retry.deadline_seconds of the
    storage operation's start (of this request's, outside one: s3transfer's threads)."""
    if request_dict is None:
        return None
    if caught_exception is not None:
        why = retry.connection_reason(caught_exception)
    elif response is not None and int(response[0].status_code) >= 400:
        why = f"HTTP {response[0].status_code} {response[1].get('Error', {}).get('Code', '')}".strip()
    else:
        return None
    context = request_dict["context"]
    context["gpupipe_last_fault"] = why
    op = retry.current()
    started = op.started if op is not None else context.get("gpupipe_started", time.monotonic())
    if attempts < retry.policy().attempts and not retry.another_try_fits(started, min(2.0 ** (attempts - 1), 20.0)):
        return False
    return None


@functools.lru_cache(maxsize=4)
def _client(endpoint: str, region: str, style: str, key: str, secret: str, policy: retry.Policy):
    import boto3  # imported here: only s3:// needs it
    from botocore.config import Config

    if style not in ("path", "virtual", "auto"):
        raise GpupipeError(f"storage.s3.addressing_style: {style!r} is not path, virtual or auto; fix it")
    config = Config(s3={"addressing_style": style}, retries={"total_max_attempts": policy.attempts, "mode": "standard"},
                    connect_timeout=policy.connect_timeout, read_timeout=policy.read_timeout)
    made = boto3.session.Session().client("s3", endpoint_url=endpoint or None, region_name=region, config=config)
    made.meta.events.register_first("needs-retry.s3", _remember_fault)
    made.meta.events.register("request-created.s3", _count_retry)
    return made


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


def _streaming_errors() -> tuple:
    from botocore.exceptions import (ConnectionClosedError, IncompleteReadError, ReadTimeoutError,
                                     ResponseStreamingError)
    from urllib3.exceptions import ProtocolError

    return ConnectionClosedError, IncompleteReadError, ReadTimeoutError, ResponseStreamingError, ProtocolError


def _get_body(uri: str, **request) -> tuple:
    """(bytes, ETag) of a GET whose body, should it break while streaming, is fetched again
    (botocore retries only until the answer's headers), within storage.retry's attempts."""
    attempts = retry.policy().attempts
    for attempt in range(1, attempts + 1):
        got = client().get_object(**request)
        try:
            return got["Body"].read(), got["ETag"]
        except _streaming_errors() as err:
            backoff = min(retry.MAX_BACKOFF, retry.INITIAL_BACKOFF * 2 ** (attempt - 1))
            op = retry.current()
            if attempt == attempts or (op is not None and not retry.another_try_fits(op.started, backoff)):
                raise
            retry.note_retry("s3", uri, f"the body broke while streaming ({type(err).__name__}: {err})",
                             attempt + 1, attempts)
            time.sleep(backoff * random.uniform(0.5, 1))
    raise AssertionError("unreachable")


class S3Backend(ObjectStore):
    READ_CHUNK = READ_BLOCK

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

    def read_range(self, entry: Entry, start: int, end: int) -> bytes:
        """Of the object `entry` names (412 if its ETag changed since)."""
        bucket, key = split(entry.uri)
        try:
            return _get_body(entry.uri, Bucket=bucket, Key=key, Range=f"bytes={start}-{end}", IfMatch=entry.stamp)[0]
        except _errors() as err:
            if _status(err) == 412 or _code(err) == "PreconditionFailed":
                raise Conflict(entry.uri) from None
            raise

    def read_versioned(self, uri: str):
        bucket, key = split(uri)
        try:  # the bytes and their ETag in one response
            return _get_body(uri, Bucket=bucket, Key=key)
        except _errors() as err:
            if _missing(err):
                return None, ABSENT
            raise

    def _put(self, uri: str, data: bytes, if_match: object) -> None:
        bucket, key = split(uri)
        extra = {}
        if if_match is ABSENT:
            extra["IfNoneMatch"] = "*"
        elif if_match is not ANY:
            extra["IfMatch"] = if_match
        if extra:  # names this write, so a replay can tell its own first try from another's
            extra["Metadata"] = {WRITE_ID: uuid.uuid4().hex}
        op = retry.current()
        retried_before = op.retries if op is not None else 0
        try:
            client().put_object(Bucket=bucket, Key=key, Body=data, **extra)
        except _errors() as err:
            if _status(err) in (409, 412) or _code(err) in ("PreconditionFailed", "ConditionalRequestConflict"):
                if extra and op is not None and op.retries > retried_before and \
                        self._written_by(bucket, key, extra["Metadata"][WRITE_ID]):
                    return  # our first try landed and its answer was lost: the replay's 412 is our own write
                raise Conflict(uri) from None
            raise

    def _written_by(self, bucket: str, key: str, write_id: str) -> bool:
        try:
            head = client().head_object(Bucket=bucket, Key=key)
        except _errors() as err:
            if _missing(err):
                return False
            raise
        return head.get("Metadata", {}).get(WRITE_ID) == write_id

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


# -- faults --------------------------------------------------------------------------------
_REFUSED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
            "InvalidClientTokenId", "AuthorizationHeaderMalformed", "UnrecognizedClientException"}
_THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded",
              "ServiceUnavailable", "InternalError", "RequestTimeout", "503", "500", "502", "504", "429"}
_KEYS_FIX = (f"{ACCESS_KEY_ENV} and {SECRET_KEY_ENV} (in the cluster: the keys of the Kubernetes Secret "
             f"{schemes.of('s3://').credentials_key} names; on EKS without keys: an IAM role for the pods' service "
             "account)")


def classify(err: BaseException, uri: str) -> Optional[StorageError]:
    """The one-line StorageError for what botocore raised (None: not a storage fault)."""
    from botocore import exceptions as bx

    bucket = uri.split("://", 1)[-1].split("/", 1)[0]
    where = _endpoint() or "AWS S3"
    after = retry.tries_so_far()
    if isinstance(err, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return StorageError(retry.CREDENTIALS_MISSING, uri, f"{uri}: no S3 credentials found; set {_KEYS_FIX}")
    if isinstance(err, bx.ClientError):
        code, status = _code(err), _status(err)
        message = retry.short(err.response.get("Error", {}).get("Message", "") or code)
        if code in _REFUSED:
            return StorageError(retry.CREDENTIALS_REFUSED, uri, (
                f"{uri}: {where} refused the S3 credentials ({code}: {message}); check {_KEYS_FIX}, and "
                "storage.s3.region"))
        if code in ("AccessDenied", "AllAccessDisabled", "403") or status == 403:
            return StorageError(retry.PERMISSION_DENIED, uri, (
                f"{uri}: access denied ({code}: {message}); give the keys' user or role s3:GetObject, s3:PutObject, "
                f"s3:DeleteObject and s3:ListBucket on bucket {bucket}"))
        if code == "NoSuchBucket":
            return StorageError(retry.NOT_FOUND, uri, (
                f"{uri}: bucket {bucket} does not exist on {where}; fix the bucket name (or storage.s3.endpoint), "
                "or create the bucket"))
        if code in ("NoSuchKey", "404", "NotFound") or status == 404:
            return StorageError(retry.NOT_FOUND, uri, f"{uri}: no such object on {where}; fix the object name")
        if code in _THROTTLED or status == 429 or status >= 500:
            return StorageError(retry.THROTTLED, uri, (
                f"{uri}: {where} answered {status or code} ({code}: {message}){after}; it is overloaded or down: "
                "try again later, or raise storage.retry.attempts"))
        return None
    if isinstance(err, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError,
                        bx.ConnectionClosedError, bx.ProxyConnectionError, bx.HTTPClientError,
                        bx.ResponseStreamingError, bx.IncompleteReadError)):
        return StorageError(retry.UNREACHABLE, uri, (
            f"{uri}: cannot reach {where}{after} ({retry.connection_reason(err)}){retry.deadline_note(err)}; check "
            f"storage.s3.endpoint ({ENDPOINT_ENV}) and the network, or raise {retry.keys_to_raise(err)}"))
    import boto3.exceptions

    if isinstance(err, boto3.exceptions.S3UploadFailedError):  # upload_file wraps the ClientError in text
        text = str(err)
        for code in sorted(_REFUSED) + ["AccessDenied", "NoSuchBucket"]:
            if f"({code})" in text:
                fake = bx.ClientError({"Error": {"Code": code, "Message": text.rsplit(":", 1)[-1].strip()}},
                                      "PutObject")
                return classify(fake, uri)
        return StorageError(retry.THROTTLED, uri, f"{uri}: the upload failed{after} ({retry.short(text)}); try again "
                                                  "later, or raise storage.retry.attempts")
    return None
