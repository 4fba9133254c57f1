"""Opening local paths and gs:// URIs the same way (google-cloud-storage for gs://)."""
from __future__ import annotations

import os
from typing import BinaryIO

from components.contracts.errors import GpupipeError


def is_gcs(uri: str) -> bool:
    return uri.startswith("gs://")


def split_gcs(uri: str) -> tuple[str, str]:
    """gs://bucket/a/b -> ("bucket", "a/b")."""
    bucket, _, name = uri[len("gs://"):].partition("/")
    if not bucket:
        raise GpupipeError(f"{uri}: not a gs://bucket/path URI")
    return bucket, name


def gcs_client():
    # Imported here: google-cloud-storage is only needed for gs:// paths.
    from google.cloud import storage

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="gpupipe-local", credentials=AnonymousCredentials())
    return storage.Client()


def open_for_reading(uri: str, what: str) -> BinaryIO:
    """Opens a local file or a gs:// object for streaming reads; a missing one is a
    GpupipeError naming `what` (the config key) and the path."""
    if is_gcs(uri):
        bucket_name, name = split_gcs(uri)
        blob = gcs_client().bucket(bucket_name).blob(name)
        if not blob.exists():
            raise GpupipeError(f"{what}: {uri} does not exist; check the bucket and object name")
        return blob.open("rb")
    if not os.path.isfile(uri):
        raise GpupipeError(f"{what}: file not found: {uri}; fix the path (relative paths start at the working directory)")
    return open(uri, "rb")


def _blobs(uri: str):
    bucket, prefix = split_gcs(uri.rstrip("/") + "/")
    return bucket, prefix, list(gcs_client().list_blobs(bucket, prefix=prefix))


def download_prefix(uri: str, into: str) -> int:
    """Every object under the gs:// prefix `uri`, into the local directory `into` (same
    relative paths). Returns how many."""
    _, prefix, blobs = _blobs(uri)
    for blob in blobs:
        target = os.path.join(into, blob.name[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        blob.download_to_filename(target)
    return len(blobs)


def upload_tree(local_dir: str, uri: str, last: str = "") -> None:
    """Makes the gs:// prefix `uri` hold exactly the files of `local_dir`: uploads every file
    (the one named `last` after all others, so a reader that goes by it never sees it before
    what it names), then deletes the objects that are no longer there."""
    bucket_name, prefix, before = _blobs(uri)
    bucket = gcs_client().bucket(bucket_name)
    files = sorted((os.path.relpath(os.path.join(d, n), local_dir) for d, _, names in os.walk(local_dir)
                    for n in names), key=lambda rel: (os.path.basename(rel) == last, rel))
    for rel in files:
        bucket.blob(prefix + rel.replace(os.sep, "/")).upload_from_filename(os.path.join(local_dir, rel))
    kept = {prefix + rel.replace(os.sep, "/") for rel in files}
    for blob in before:
        if blob.name not in kept:
            blob.delete()


def delete_prefix(uri: str) -> None:
    for blob in _blobs(uri)[2]:
        blob.delete()
