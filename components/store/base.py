"""The serving base: `<base>/<model>/<integer version>/` plus `<base>/models.config`, on a
local disk, gs:// or s3:// through the storage layer (components/contracts/storage), with the
same operations for all three and no branch on the scheme.

TF Serving loads every integer directory that holds `saved_model.pb` as a version, so a
version must appear whole: on a disk it is staged under a non-numeric name and renamed; on an
object store every other file is uploaded first and `saved_model.pb` last. A version's number
is claimed first with a create-only marker (`.claims/<N>`: a write conditional on the object
being absent), so two pushes never share a number.

Beside the versions: `<model>/versions.json` (the state record, components/store/states.py)
and `<model>/releases/<N>/<N>/`, a copy of each version alone under a prefix of its own
(KServe's TensorFlow runtime serves the highest version under its storageUri, so it is
pointed at one release). The small files (models.config, the state record) are changed by
read-change-write with a precondition: the write carries the token of what was read (the
GCS generation, the S3 ETag, the local inode and mtime) and a conflict re-reads and
re-applies the change (a bounded number of times).
"""
from __future__ import annotations

import os
import random
import tempfile
import time
from typing import Callable, List, Optional, Tuple

from components.contracts import storage
from components.contracts.errors import GpupipeError
from components.contracts.storage import Conflict

SAVED_MODEL_PB = "saved_model.pb"
MODELS_CONFIG = "models.config"
RECORD_FILE = "versions.json"
RELEASES_DIR = "releases"
CLAIMS_DIR = ".claims"
UPDATE_ATTEMPTS = 30  # read-change-write tries before a conflict is reported


class ServingStore:
    """One model's versions under a serving base."""

    def __init__(self, base: str, model_name: str):
        self.base = base.rstrip("/") if storage.is_remote(base) else base
        self.model_name = model_name

    # -- paths -----------------------------------------------------------------------
    def _join(self, *parts: str) -> str:
        return storage.join(self.base, *parts)

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
        found = set()
        for entry in storage.list_prefix(self.model_root):
            head = storage.relative(entry, self.model_root).split("/")
            if len(head) == 2 and head[0].isdigit() and head[1] == SAVED_MODEL_PB:
                found.add(int(head[0]))
        return sorted(found)

    def claim_version(self) -> int:
        """The next free version number, claimed for this push alone (create-only marker)."""
        version = max(self.versions(), default=0) + 1
        while True:
            if storage.create(self._join(self.model_name, CLAIMS_DIR, str(version))) and \
                    not storage.exists(storage.join(self.version_path(version), SAVED_MODEL_PB)):
                return version
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
        try:
            storage.put_tree(model_dir, target, last=SAVED_MODEL_PB)
        except storage.StorageError:  # the store refused or failed (credentials, permission, throttled): as it says
            raise
        except GpupipeError:
            raise GpupipeError(f"serving.base: {target} already exists though its number was claimed by this "
                               "push; something else writes there, remove it") from None

    def remove_version(self, version: int) -> None:
        """Deletes a version (`saved_model.pb` first, or the whole directory at once on a
        disk, so it stops being a version at once) and its release copy."""
        for path in (self.version_path(version), self.release_path(version)):
            storage.delete_prefix(path, first=SAVED_MODEL_PB)

    def download_version(self, version: int, into: Optional[str] = None) -> str:
        """A local directory holding the version (the version itself when local)."""
        if not storage.is_remote(self.base):
            return self.version_path(version)
        return storage.local_dir(self.version_path(version),
                                 into or tempfile.mkdtemp(prefix=f"gpupipe-{self.model_name}-{version}-"))

    # -- small files -------------------------------------------------------------------
    def _read(self, location: str) -> Optional[str]:
        """A small text file, None when absent."""
        for attempt in range(UPDATE_ATTEMPTS):
            try:
                return self._read_versioned(location)[0]
            except Conflict:  # replaced between its metadata and its bytes: read the new one
                time.sleep(random.uniform(0, min(0.02 * 2 ** attempt, 1.0)))
        raise GpupipeError(f"{location}: changed {UPDATE_ATTEMPTS} times while being read; try again")

    def _read_versioned(self, location: str) -> Tuple[Optional[str], object]:
        """(text or None, the token of what was read: storage.ABSENT when absent)."""
        data, token = storage.read_versioned(location)
        return (None if data is None else data.decode("utf-8")), token

    def _write_small(self, location: str, text: str, token: object) -> None:
        """Writes a small file in one step, only if it is still at `token` (ABSENT: only if
        absent), else Conflict."""
        storage.write_text(location, text, if_match=token)

    def update_small(self, location: str, change: Callable[[Optional[str]], Optional[str]], what: str) -> Optional[str]:
        """Read-change-write of a small file that other pushes may change at the same time:
        `change(text or None)` returns the new text (None: leave it). The write is conditional
        on the token read and a conflict starts over. Returns the text now in the file."""
        for attempt in range(UPDATE_ATTEMPTS):
            try:
                text, token = self._read_versioned(location)
                new = change(text)
                if new is None or new == text:
                    return text
                self._write_small(location, new, token)
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
