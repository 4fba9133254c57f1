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
