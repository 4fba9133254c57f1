"""Google Cloud Storage through google-cloud-storage. Tokens are object generations; a
conditional write sends `ifGenerationMatch` (0: only if absent), which GCS checks
atomically. STORAGE_EMULATOR_HOST points the client at an emulator (anonymous)."""
from __future__ import annotations

import functools
import os
from typing import BinaryIO, List, Optional

from components.contracts.storage import ABSENT, ANY, Conflict, Entry, split


@functools.lru_cache(maxsize=4)
def _client(emulator: str):
    from google.cloud import storage  # imported here: only gs:// needs it

    if emulator:
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="gpupipe-local", credentials=AnonymousCredentials())
    return storage.Client()


def client():
    return _client(os.environ.get("STORAGE_EMULATOR_HOST", ""))


def _blob(uri: str):
    bucket, name = split(uri)
    return client().bucket(bucket).blob(name)


class GCSBackend:
    def stat(self, uri: str) -> Optional[Entry]:
        bucket, name = split(uri)
        if not name:
            return None
        blob = client().bucket(bucket).get_blob(name)
        return None if blob is None else Entry(uri, int(blob.size or 0), str(blob.generation or ""))

    def scan(self, uri_prefix: str) -> List[Entry]:
        """Every object whose name starts with the prefix (not only at a `/`)."""
        bucket, prefix = split(uri_prefix)
        return [Entry(f"gs://{bucket}/{b.name}", int(b.size or 0), str(b.generation or ""))
                for b in client().list_blobs(bucket, prefix=prefix) if not b.name.endswith("/")]

    def list(self, uri: str) -> List[Entry]:
        return self.scan(uri.rstrip("/") + "/")

    def open_read(self, entry: Entry) -> BinaryIO:
        return _blob(entry.uri).open("rb")

    def read_versioned(self, uri: str):
        from google.api_core.exceptions import NotFound, PreconditionFailed

        bucket, name = split(uri)
        blob = client().bucket(bucket).get_blob(name)
        if blob is None:
            return None, ABSENT
        generation = blob.generation  # before the download, which resets it from the response's headers
        try:  # the bytes of exactly the generation whose number we keep
            return blob.download_as_bytes(if_generation_match=generation), generation
        except (NotFound, PreconditionFailed):
            raise Conflict(uri) from None

    def write(self, uri: str, data: bytes, if_match: object = ANY) -> None:
        from google.api_core.exceptions import PreconditionFailed

        generation = 0 if if_match is ABSENT else if_match
        try:
            _blob(uri).upload_from_string(data, content_type="application/octet-stream",
                                          if_generation_match=generation)
        except PreconditionFailed:
            raise Conflict(uri) from None

    def delete(self, uri: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            _blob(uri).delete()
        except NotFound:
            pass

    def upload_file(self, local_path: str, uri: str) -> None:
        _blob(uri).upload_from_filename(local_path)

    def download_file(self, uri: str, local_path: str) -> None:
        _blob(uri).download_to_filename(local_path)


BACKEND = GCSBackend()
