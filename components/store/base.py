"""The serving base: `<base>/<model>/<integer version>/` plus `<base>/models.config`,
on a local disk or on gs://, with the same operations for both.

TF Serving loads every integer directory that holds `saved_model.pb` as a version, so a
version must appear whole: locally it is staged under a non-numeric name and renamed;
on gs:// every other file is uploaded first and `saved_model.pb` last, created only if
absent (`if_generation_match=0`) so two pushes never share a number.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
import uuid
from typing import List, Optional

from components.contracts.errors import GpupipeError
from components.contracts.storage import download_prefix, gcs_client, is_gcs, split_gcs

SAVED_MODEL_PB = "saved_model.pb"
MODELS_CONFIG = "models.config"


class ServingStore:
    """One model's versions under a serving base."""

    def __init__(self, base: str, model_name: str):
        self.base = base.rstrip("/") if is_gcs(base) else base
        self.model_name = model_name

    # -- paths -----------------------------------------------------------------------
    @property
    def model_root(self) -> str:
        return f"{self.base}/{self.model_name}" if is_gcs(self.base) else os.path.join(self.base, self.model_name)

    def version_path(self, version: int) -> str:
        return f"{self.model_root}/{version}" if is_gcs(self.base) else os.path.join(self.model_root, str(version))

    @property
    def models_config_path(self) -> str:
        return f"{self.base}/{MODELS_CONFIG}" if is_gcs(self.base) else os.path.join(self.base, MODELS_CONFIG)

    # -- versions --------------------------------------------------------------------
    def versions(self) -> List[int]:
        """Whole versions (holding saved_model.pb), ascending."""
        if is_gcs(self.base):
            bucket, prefix = split_gcs(self.model_root + "/")
            found = set()
            for blob in gcs_client().list_blobs(bucket, prefix=prefix):
                head = blob.name[len(prefix):].split("/", 1)
                if len(head) == 2 and head[0].isdigit() and head[1] == SAVED_MODEL_PB:
                    found.add(int(head[0]))
            return sorted(found)
        if not os.path.isdir(self.model_root):
            return []
        return sorted(int(d) for d in os.listdir(self.model_root)
                      if d.isdigit() and os.path.isfile(os.path.join(self.model_root, d, SAVED_MODEL_PB)))

    def add_version(self, model_dir: str) -> int:
        """Copies `model_dir` in as the next integer version, whole or not at all."""
        if not os.path.isfile(os.path.join(model_dir, SAVED_MODEL_PB)):
            raise GpupipeError(f"model: {model_dir} has no {SAVED_MODEL_PB}; it is not a SavedModel, retrain it")
        return self._add_gcs(model_dir) if is_gcs(self.base) else self._add_local(model_dir)

    def _add_local(self, model_dir: str) -> int:
        os.makedirs(self.model_root, exist_ok=True)
        staging = os.path.join(self.model_root, f".staging-{uuid.uuid4().hex}")
        shutil.copytree(model_dir, staging)
        try:
            version = max(self.versions(), default=0) + 1
            while True:
                try:
                    os.rename(staging, self.version_path(version))  # atomic; fails if taken
                    return version
                except OSError as err:
                    if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                    version += 1
        finally:
            if os.path.exists(staging):
                shutil.rmtree(staging, ignore_errors=True)

    def _add_gcs(self, model_dir: str) -> int:
        from google.api_core.exceptions import PreconditionFailed

        bucket_name, prefix = split_gcs(self.model_root)
        bucket = gcs_client().bucket(bucket_name)
        files = []
        for dirpath, _, filenames in os.walk(model_dir):
            files += [os.path.relpath(os.path.join(dirpath, n), model_dir) for n in filenames]
        # saved_model.pb last: until it lands, TF Serving does not see a version.
        files.sort(key=lambda rel: (rel == SAVED_MODEL_PB, rel))
        version = max(self.versions(), default=0) + 1
        while True:
            # Claim the number first (create-only), so no other push writes under it.
            try:
                bucket.blob(f"{prefix}/.claims/{version}").upload_from_string(b"", if_generation_match=0)
                break
            except PreconditionFailed:
                version += 1
        for rel in files:
            bucket.blob(f"{prefix}/{version}/{rel}").upload_from_filename(os.path.join(model_dir, rel))
        return version

    def remove_version(self, version: int) -> None:
        """Deletes a version, `saved_model.pb` first so it stops being a version at once."""
        if is_gcs(self.base):
            bucket_name, prefix = split_gcs(self.version_path(version) + "/")
            bucket = gcs_client().bucket(bucket_name)
            blobs = sorted(gcs_client().list_blobs(bucket_name, prefix=prefix),
                           key=lambda b: not b.name.endswith("/" + SAVED_MODEL_PB))
            for blob in blobs:
                bucket.blob(blob.name).delete()
            return
        path = self.version_path(version)
        trash = os.path.join(self.model_root, f".deleting-{version}-{uuid.uuid4().hex}")
        os.rename(path, trash)  # atomic: the version disappears whole
        shutil.rmtree(trash, ignore_errors=True)

    def download_version(self, version: int, into: Optional[str] = None) -> str:
        """A local directory holding the version (the version itself when local)."""
        if not is_gcs(self.base):
            return self.version_path(version)
        into = into or tempfile.mkdtemp(prefix=f"gpupipe-{self.model_name}-{version}-")
        download_prefix(self.version_path(version), into)
        return into

    def _read(self, location: str) -> Optional[str]:
        """A small text file (local path or gs:// URI), None when absent."""
        if is_gcs(location):
            bucket_name, name = split_gcs(location)
            blob = gcs_client().bucket(bucket_name).blob(name)
            return blob.download_as_text() if blob.exists() else None
        return open(location, encoding="utf-8").read() if os.path.isfile(location) else None

    def read_text(self, relative: str) -> Optional[str]:
        """A small file under the model's root (e.g. `3/assets.extra/...`), None when absent."""
        if is_gcs(self.base):
            return self._read(f"{self.model_root}/{relative}")
        return self._read(os.path.join(self.model_root, relative))

    # -- models.config ----------------------------------------------------------------
    def read_models_config(self) -> Optional[str]:
        return self._read(self.models_config_path)

    def write_models_config(self, text: str) -> None:
        """Replaces models.config in one step (TF Serving may poll it at any moment)."""
        if is_gcs(self.base):
            bucket_name, name = split_gcs(self.models_config_path)
            gcs_client().bucket(bucket_name).blob(name).upload_from_string(text, content_type="text/plain")
            return
        os.makedirs(self.base, exist_ok=True)
        tmp = f"{self.models_config_path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, self.models_config_path)
