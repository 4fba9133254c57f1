"""Google Cloud Storage through google-cloud-storage. Tokens are object generations; a
conditional write sends `ifGenerationMatch` (0: only if absent), which GCS checks
atomically. STORAGE_EMULATOR_HOST points the client at an emulator (anonymous).

Every request takes a `Retry` (google-api-core's, which google-cloud-storage uses) built
per operation from retry.policy(): the library's own predicate of what is transient (429,
5xx, connection errors, timeouts), exponential backoff with jitter, bounded by the
attempts and the deadline, each retry counted and logged. The media operations (uploads,
downloads) are called inside that Retry with the library's own retry off, because
google-cloud-storage hands a Retry given to them to google-resumable-media as a strategy
of times only (its predicate, our bound of attempts and our count would be lost): such an
operation is repeated whole. A read stream reads the listed generation by ranges, each
range retried on its own (a broken read resumes where it broke). Writes are retried too:
an unconditional write puts the whole object (a replay leaves the same bytes), and a
conditional one that finds, on its replay, a 412 caused by its own first try (the
object's `gpupipe-write` metadata names this write) has succeeded. `classify` turns what
is left into one-line StorageErrors."""
from __future__ import annotations

import functools
import os
import time
import uuid
from typing import List, Optional

from components.contracts.storage import retry, schemes, split
from components.contracts.storage.backend import ABSENT, ANY, Conflict, Entry, ObjectStore
from components.contracts.storage.retry import StorageError

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
READ_CHUNK = 8 << 20  # a read stream's request size
WRITE_ID = "gpupipe-write"  # custom metadata of a conditional write: which write made this generation


@functools.lru_cache(maxsize=4)
def _client(emulator: str):
    from google.cloud import storage  # imported here: only gs:// needs it

    if emulator:
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="gpupipe-local", credentials=AnonymousCredentials())
    return storage.Client()


def client():
    return _client(os.environ.get(EMULATOR_ENV, ""))


def _blob(uri: str):
    bucket, name = split(uri)
    return client().bucket(bucket).blob(name)


def _retry(uri: str):
    """A Retry for one operation on `uri` (the library's predicate, our bounds and count)."""
    from google.api_core.retry import Retry
    from components.contracts.compat.gcs import should_retry

    p = retry.policy()
    tries = [1]
    op = retry.current()
    started = op.started if op is not None else time.monotonic()

    def transient(err) -> bool:
        if not should_retry(err) or tries[0] >= p.attempts:
            return False
        if not retry.another_try_fits(started, min(retry.INITIAL_BACKOFF * 2 ** (tries[0] - 1), retry.MAX_BACKOFF)):
            return False
        tries[0] += 1
        retry.note_retry("gs", uri, _fault(err), tries[0], p.attempts)
        return True

    return Retry(predicate=transient, initial=retry.INITIAL_BACKOFF, maximum=retry.MAX_BACKOFF, multiplier=2.0,
                 timeout=p.deadline)


def _fault(err) -> str:
    """A retried fault in a few words, for the log."""
    from google.api_core.exceptions import GoogleAPICallError

    if isinstance(err, GoogleAPICallError):
        return f"HTTP {err.code} ({retry.short(_reason(err), 100)})"
    return retry.connection_reason(err)


def _kw(uri: str) -> dict:
    p = retry.policy()
    return {"retry": _retry(uri), "timeout": (p.connect_timeout, p.read_timeout)}


def _media(uri: str, call, *args, **kwargs):
    """A media operation (upload, download) repeated whole by our Retry; the library's own
    retry off (module doc)."""
    p = retry.policy()
    return _retry(uri)(call)(*args, retry=None, timeout=(p.connect_timeout, p.read_timeout), **kwargs)


class GCSBackend(ObjectStore):
    READ_CHUNK = READ_CHUNK

    def stat(self, uri: str) -> Optional[Entry]:
        bucket, name = split(uri)
        if not name:
            return None
        blob = client().bucket(bucket).get_blob(name, **_kw(uri))
        return None if blob is None else Entry(uri, int(blob.size or 0), str(blob.generation or ""))

    def scan(self, uri_prefix: str) -> List[Entry]:
        """Every object whose name starts with the prefix (not only at a `/`)."""
        bucket, prefix = split(uri_prefix)
        return [Entry(f"gs://{bucket}/{b.name}", int(b.size or 0), str(b.generation or ""))
                for b in client().list_blobs(bucket, prefix=prefix, **_kw(uri_prefix)) if not b.name.endswith("/")]

    def read_range(self, entry: Entry, start: int, end: int) -> bytes:
        """Of the generation `entry` names (a 412 if it was replaced since)."""
        from google.api_core.exceptions import PreconditionFailed

        generation = int(entry.stamp) if entry.stamp.isdigit() else None
        try:
            return _media(entry.uri, _blob(entry.uri).download_as_bytes, start=start, end=end,
                          if_generation_match=generation)
        except PreconditionFailed:
            raise Conflict(entry.uri) from None

    def read_versioned(self, uri: str):
        from google.api_core.exceptions import NotFound, PreconditionFailed

        bucket, name = split(uri)
        blob = client().bucket(bucket).get_blob(name, **_kw(uri))
        if blob is None:
            return None, ABSENT
        generation = blob.generation  # before the download, which resets it from the response's headers
        try:  # the bytes of exactly the generation whose number we keep
            return _media(uri, blob.download_as_bytes, if_generation_match=generation), generation
        except (NotFound, PreconditionFailed):
            raise Conflict(uri) from None

    def write(self, uri: str, data: bytes, if_match: object = ANY) -> None:
        from google.api_core.exceptions import PreconditionFailed

        generation = 0 if if_match is ABSENT else if_match
        blob = _blob(uri)
        write_id = uuid.uuid4().hex  # names this write, so a replay can tell its own first try from another's
        blob.metadata = {WRITE_ID: write_id}
        op = retry.current()
        retried_before = op.retries if op is not None else 0
        try:
            _media(uri, blob.upload_from_string, data, content_type="application/octet-stream",
                   if_generation_match=generation)
        except PreconditionFailed:
            if op is not None and op.retries > retried_before and self._written_by(uri, write_id):
                return  # our first try landed and its answer was lost: the replay's 412 is our own write
            raise Conflict(uri) from None

    def _written_by(self, uri: str, write_id: str) -> bool:
        bucket, name = split(uri)
        blob = client().bucket(bucket).get_blob(name, **_kw(uri))
        return blob is not None and (blob.metadata or {}).get(WRITE_ID) == write_id

    def delete(self, uri: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            _blob(uri).delete(**_kw(uri))
        except NotFound:
            pass

    def upload_file(self, local_path: str, uri: str) -> None:
        _media(uri, _blob(uri).upload_from_filename, local_path)

    def download_file(self, uri: str, local_path: str) -> None:
        _media(uri, _blob(uri).download_to_filename, local_path)


BACKEND = GCSBackend()


# -- faults --------------------------------------------------------------------------------
def _endpoint() -> str:
    return os.environ.get(EMULATOR_ENV) or "https://storage.googleapis.com"


def _reason(err) -> str:
    """The server's own words: api-core prefixes them with "GET <url>: ", and a media
    operation's are a JSON body whose error.message is what GCS said."""
    import json
    import re

    message = getattr(err, "message", None) or (err.args[0] if err.args and isinstance(err.args[0], str) else str(err))
    said = re.match(r"^[A-Z]+ \S+: (.*)$", message, re.S)
    if said:
        message = said.group(1)
    if message.startswith("{"):
        try:
            message = json.JSONDecoder().raw_decode(message)[0].get("error", {}).get("message") or message
        except (ValueError, AttributeError):
            pass
    return retry.short(message)


def _bucket_exists(bucket: str, uri: str) -> bool:
    """On a 404 that does not say which: is it the bucket? (True when that cannot be told.)"""
    try:
        return client().lookup_bucket(bucket, **_kw(uri)) is not None
    except Exception:  # noqa: BLE001 (the 404 is the error to report, not this look-up's)
        return True


def classify(err: BaseException, uri: str) -> Optional[StorageError]:
    """The one-line StorageError for what google-auth, google-api-core or requests raised
    (None: not a storage fault)."""
    import requests
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    bucket = uri.split("://", 1)[-1].split("/", 1)[0]
    after = retry.tries_so_far()
    if isinstance(err, auth.InvalidOperation):  # the server answered 401 to anonymous (emulator) credentials
        return StorageError(retry.CREDENTIALS_REFUSED, uri, (
            f"{uri}: the Google credentials were refused ({_endpoint()} wants credentials, and {EMULATOR_ENV} "
            f"makes the client anonymous); unset {EMULATOR_ENV} and set {CREDENTIALS_ENV} to a service-account key "
            "file"))
    if isinstance(err, auth.DefaultCredentialsError):
        return StorageError(retry.CREDENTIALS_MISSING, uri, (
            f"{uri}: no Google credentials found; set {CREDENTIALS_ENV} to a service-account key file (on a "
            "workstation: `gcloud auth application-default login`), or in the cluster name a Secret holding one in "
            f"{schemes.of('gs://').credentials_key}, or give the pods' Kubernetes service account a Google service "
            f"account (Workload Identity) with roles/storage.objectAdmin on {bucket}"))
    if isinstance(err, auth.RefreshError) or isinstance(err, api.Unauthorized):
        return StorageError(retry.CREDENTIALS_REFUSED, uri, (
            f"{uri}: the Google credentials were refused ({_reason(err)}); renew the key file {CREDENTIALS_ENV} "
            "names (or run `gcloud auth application-default login` again), or check the pods' Workload Identity "
            "binding"))
    if isinstance(err, api.Forbidden):
        return StorageError(retry.PERMISSION_DENIED, uri, (
            f"{uri}: permission denied ({_reason(err)}); grant the credentials' service account "
            f"roles/storage.objectAdmin on bucket {bucket} (roles/storage.objectViewer where it only reads)"))
    if isinstance(err, api.NotFound):
        if "bucket" in _reason(err).lower() or not _bucket_exists(bucket, uri):
            return StorageError(retry.NOT_FOUND, uri, (
                f"{uri}: bucket {bucket} does not exist; fix the bucket name, or create the bucket"))
        return StorageError(retry.NOT_FOUND, uri, f"{uri}: no such object; fix the object name")
    if isinstance(err, (api.TooManyRequests, api.InternalServerError, api.BadGateway, api.ServiceUnavailable,
                        api.GatewayTimeout)) or (isinstance(err, api.GoogleAPICallError) and err.code == 408):
        return StorageError(retry.THROTTLED, uri, (
            f"{uri}: the storage server answered {err.code} ({_reason(err)}){after}; it is overloaded or down: "
            "try again later, or raise storage.retry.attempts and storage.retry.deadline_seconds"))
    if isinstance(err, api.RetryError):  # the deadline ran out: its cause says what kept failing
        cause = err.cause if err.cause is not None else err
        return StorageError(retry.THROTTLED if isinstance(cause, api.GoogleAPICallError) else retry.UNREACHABLE, uri, (
            f"{uri}: still failing when storage.retry.deadline_seconds ran out{after} ({_reason(cause)}); check "
            f"that {_endpoint()} is reachable ({EMULATOR_ENV} for an emulator), or raise the deadline"))
    transport = isinstance(err, auth.TransportError)
    if transport or isinstance(err, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError,
                                     requests.exceptions.ChunkedEncodingError)):
        return StorageError(retry.UNREACHABLE, uri, (
            f"{uri}: cannot reach {_endpoint()}{after} ({retry.connection_reason(err)}){retry.deadline_note(err)}; "
            f"check the network and the endpoint ({EMULATOR_ENV} for an emulator), or raise "
            f"{retry.keys_to_raise(err)}"))
    return None
