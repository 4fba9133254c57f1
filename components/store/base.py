"""The serving base: `<base>/<model>/<integer version>/` plus `<base>/models.config`,
on a local disk or on gs://, with the same operations for both.

TF Serving loads every integer directory that holds `saved_model.pb` as a version, so a
version must appear whole: locally it is staged under a non-numeric name and renamed;
on gs:// every other file is uploaded first and `saved_model.pb` last. A version's number
is claimed first with a create-only marker (`.claims/<N>`: `if_generation_match=0` on
gs://, `mkdir` locally), so two pushes never share a number.

Beside the versions: `<model>/versions.json` (the state record, components/store/states.py)
and `<model>/releases/<N>/<N>/`, a copy of each version alone under a prefix of its own
(KServe's TensorFlow runtime serves the highest version under its storageUri, so it is
pointed at one release). The small files (models.config, the state record) are changed
by read-change-write with a precondition: on gs:// the write carries
`if_generation_match=<the generation read>` and a conflict re-reads and re-applies the
change (a bounded number of times); locally the change runs under an exclusive `flock`
of `<base>/.gpupipe.lock` and the file is replaced by a rename.
"""
from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import tempfile
import time
import uuid
from typing import Callable, List, Optional, Tuple

from components.contracts.errors import GpupipeError
from components.contracts.storage import download_prefix, gcs_client, is_gcs, split_gcs

SAVED_MODEL_PB = "saved_model.pb"
MODELS_CONFIG = "models.config"
RECORD_FILE = "versions.json"
RELEASES_DIR = "releases"
CLAIMS_DIR = ".claims"
LOCK_FILE = ".gpupipe.lock"
UPDATE_ATTEMPTS = 30  # read-change-write tries before a conflict is reported


class Conflict(Exception):
    """Another writer changed the file between this read and this write."""


class ServingStore:
    """One model's versions under a serving base."""

    def __init__(self, base: str, model_name: str):
        self.base = base.rstrip("/") if is_gcs(base) else base
        self.model_name = model_name

    # -- paths -----------------------------------------------------------------------
    def _join(self, *parts: str) -> str:
        return "/".join([self.base, *parts]) if is_gcs(self.base) else os.path.join(self.base, *parts)

    @property
    def model_root(self) -> str:
        return self._join(self.model_name)

    def version_path(self, version: int) -> str:
        return self._join(self.model_name, str(version))

    def release_path(self, version: int) -> str:
        """A prefix holding version `version` alone (`<release>/<version>/saved_model.pb`)."""
        return self._join(self.model_name, RELEASES_DIR, str(version))

    @property
    def models_config_path(self) -> str:
        return self._join(MODELS_CONFIG)

    @property
    def record_path(self) -> str:
        return self._join(self.model_name, RECORD_FILE)

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

    def claim_version(self) -> int:
        """The next free version number, claimed for this push alone (create-only marker)."""
        version = max(self.versions(), default=0) + 1
        if is_gcs(self.base):
            from google.api_core.exceptions import PreconditionFailed

            bucket_name, prefix = split_gcs(self.model_root)
            bucket = gcs_client().bucket(bucket_name)
            while True:
                try:
                    bucket.blob(f"{prefix}/{CLAIMS_DIR}/{version}").upload_from_string(b"", if_generation_match=0)
                    return version
                except PreconditionFailed:
                    version += 1
        claims = os.path.join(self.model_root, CLAIMS_DIR)
        os.makedirs(claims, exist_ok=True)
        while True:
            try:
                os.mkdir(os.path.join(claims, str(version)))  # atomic; fails if taken
                if not os.path.exists(self.version_path(version)):
                    return version
            except FileExistsError:
                pass
            version += 1

    def add_version(self, model_dir: str, version: Optional[int] = None) -> int:
        """Copies `model_dir` in as version `version` (default: the next claimed number),
        whole or not at all, and its release copy before it."""
        if not os.path.isfile(os.path.join(model_dir, SAVED_MODEL_PB)):
            raise GpupipeError(f"model: {model_dir} has no {SAVED_MODEL_PB}; it is not a SavedModel, retrain it")
        version = self.claim_version() if version is None else version
        self._copy_in(model_dir, self._join(self.model_name, RELEASES_DIR, str(version), str(version)))
        self._copy_in(model_dir, self.version_path(version))
        return version

    def _copy_in(self, model_dir: str, target: str) -> None:
        if is_gcs(target):
            bucket_name, prefix = split_gcs(target)
            bucket = gcs_client().bucket(bucket_name)
            files = [os.path.relpath(os.path.join(d, n), model_dir) for d, _, names in os.walk(model_dir)
                     for n in names]
            # saved_model.pb last: until it lands, TF Serving does not see a version.
            for rel in sorted(files, key=lambda rel: (rel == SAVED_MODEL_PB, rel)):
                bucket.blob(f"{prefix}/{rel.replace(os.sep, '/')}").upload_from_filename(os.path.join(model_dir, rel))
            return
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        staging = os.path.join(parent, f".staging-{uuid.uuid4().hex}")
        shutil.copytree(model_dir, staging)
        try:
            os.rename(staging, target)  # atomic; the number is this push's claim
        except OSError as err:
            if err.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise GpupipeError(f"serving.base: {target} already exists though its number was claimed by this "
                                   "push; something else writes there, remove it") from None
            raise
        finally:
            if os.path.exists(staging):
                shutil.rmtree(staging, ignore_errors=True)

    def remove_version(self, version: int) -> None:
        """Deletes a version (`saved_model.pb` first so it stops being a version at once)
        and its release copy."""
        for path in (self.version_path(version), self.release_path(version)):
            if is_gcs(self.base):
                bucket_name, prefix = split_gcs(path + "/")
                bucket = gcs_client().bucket(bucket_name)
                blobs = sorted(gcs_client().list_blobs(bucket_name, prefix=prefix),
                               key=lambda b: not b.name.endswith("/" + SAVED_MODEL_PB))
                for blob in blobs:
                    bucket.blob(blob.name).delete()
            elif os.path.exists(path):
                trash = os.path.join(os.path.dirname(path), f".deleting-{version}-{uuid.uuid4().hex}")
                os.rename(path, trash)  # atomic: the version disappears whole
                shutil.rmtree(trash, ignore_errors=True)

    def download_version(self, version: int, into: Optional[str] = None) -> str:
        """A local directory holding the version (the version itself when local)."""
        if not is_gcs(self.base):
            return self.version_path(version)
        into = into or tempfile.mkdtemp(prefix=f"gpupipe-{self.model_name}-{version}-")
        download_prefix(self.version_path(version), into)
        return into

    # -- small files -------------------------------------------------------------------
    def _read(self, location: str) -> Optional[str]:
        """A small text file (local path or gs:// URI), None when absent."""
        for attempt in range(UPDATE_ATTEMPTS):
            try:
                return self._read_versioned(location)[0]
            except Conflict:  # replaced between its metadata and its bytes: read the new one
                time.sleep(random.uniform(0, min(0.02 * 2 ** attempt, 1.0)))
        raise GpupipeError(f"{location}: changed {UPDATE_ATTEMPTS} times while being read; try again")

    def _read_versioned(self, location: str) -> Tuple[Optional[str], Optional[int]]:
        """(text or None, the generation read: 0 when absent on gs://, None locally)."""
        if is_gcs(location):
            from google.api_core.exceptions import NotFound, PreconditionFailed

            bucket_name, name = split_gcs(location)
            blob = gcs_client().bucket(bucket_name).get_blob(name)
            if blob is None:
                return None, 0
            generation = blob.generation  # before the download, which resets it from the response's headers
            try:  # the bytes of exactly the generation whose number we keep
                return blob.download_as_text(if_generation_match=generation), generation
            except (NotFound, PreconditionFailed):
                raise Conflict(location) from None
        return (open(location, encoding="utf-8").read() if os.path.isfile(location) else None), None

    def _write_small(self, location: str, text: str, generation: Optional[int]) -> None:
        """Writes a small file in one step; on gs:// only if it is still at `generation`
        (0: only if absent), else Conflict."""
        if is_gcs(location):
            from google.api_core.exceptions import PreconditionFailed

            bucket_name, name = split_gcs(location)
            try:
                gcs_client().bucket(bucket_name).blob(name).upload_from_string(
                    text, content_type="text/plain", if_generation_match=generation)
            except PreconditionFailed:
                raise Conflict(location) from None
            return
        os.makedirs(os.path.dirname(location) or ".", exist_ok=True)
        tmp = f"{location}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, location)  # TF Serving may poll the file at any moment

    @contextlib.contextmanager
    def _local_lock(self):
        if is_gcs(self.base):
            yield
            return
        import fcntl

        os.makedirs(self.base, exist_ok=True)
        with open(os.path.join(self.base, LOCK_FILE), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def update_small(self, location: str, change: Callable[[Optional[str]], Optional[str]], what: str) -> Optional[str]:
        """Read-change-write of a small file that other pushes may change at the same time:
        `change(text or None)` returns the new text (None: leave it). On gs:// the write is
        conditional on the generation read and a conflict starts over; locally it runs under
        the base's lock. Returns the text now in the file."""
        with self._local_lock():
            for attempt in range(UPDATE_ATTEMPTS):
                try:
                    text, generation = self._read_versioned(location)
                    new = change(text)
                    if new is None or new == text:
                        return text
                    self._write_small(location, new, generation)
                    return new
                except Conflict:
                    time.sleep(random.uniform(0, min(0.02 * 2 ** attempt, 1.0)))
        raise GpupipeError(f"{what}: {location} was changed by other writers {UPDATE_ATTEMPTS} times in a row while "
                           "this push updated it; run the push again")

    def read_text(self, relative: str) -> Optional[str]:
        """A small file under the model's root (e.g. `3/assets.extra/...`), None when absent."""
        return self._read(self._join(self.model_name, *relative.split("/")))

    # -- models.config ----------------------------------------------------------------
    def read_models_config(self) -> Optional[str]:
        return self._read(self.models_config_path)

    def update_models_config(self, change: Callable[[Optional[str]], Optional[str]]) -> Optional[str]:
        return self.update_small(self.models_config_path, change, "models.config")

    def write_models_config(self, text: str) -> None:
        """Replaces models.config whatever it holds (an operator's repair; pushes use
        update_models_config)."""
        self.update_models_config(lambda _: text)
