"""Push: copy a blessed SavedModel into `<serving base>/<model name>/<integer version>/`,
the layout TF Serving and KServe load.

A version directory appears whole or not at all: locally the model is copied under a
temporary non-numeric name and renamed; on gs:// every other file is uploaded first and
`saved_model.pb` last, since TF Serving takes any integer directory as a version.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import uuid
from dataclasses import asdict, dataclass
from typing import List, Optional

from components import names
from components.errors import GpupipeError, reports_errors
from components.io import gcs_client, is_gcs, split_gcs

SAVED_MODEL_PB = "saved_model.pb"


@dataclass
class PushResult:
    pushed: bool
    reason: str
    version: Optional[int] = None
    path: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


def _check_model_dir(model_dir: str) -> None:
    if not os.path.isfile(os.path.join(model_dir, SAVED_MODEL_PB)):
        raise GpupipeError(f"model: {model_dir} has no {SAVED_MODEL_PB}; it is not a SavedModel, retrain it")


def list_versions(base: str, model_name: str) -> List[int]:
    """The integer versions under `<base>/<model_name>/`, ascending."""
    if is_gcs(base):
        bucket, prefix = split_gcs(f"{base.rstrip('/')}/{model_name}/")
        found = set()
        for blob in gcs_client().list_blobs(bucket, prefix=prefix):
            head = blob.name[len(prefix):].split("/", 1)
            if len(head) == 2 and head[0].isdigit() and head[1] == SAVED_MODEL_PB:
                found.add(int(head[0]))
        return sorted(found)
    root = os.path.join(base, model_name)
    if not os.path.isdir(root):
        return []
    return sorted(int(d) for d in os.listdir(root)
                  if d.isdigit() and os.path.isfile(os.path.join(root, d, SAVED_MODEL_PB)))


def _push_local(model_dir: str, base: str, model_name: str) -> tuple[int, str]:
    root = os.path.join(base, model_name)
    os.makedirs(root, exist_ok=True)
    staging = os.path.join(root, f".staging-{uuid.uuid4().hex}")
    shutil.copytree(model_dir, staging)
    try:
        version = (max(list_versions(base, model_name), default=0)) + 1
        while True:
            target = os.path.join(root, str(version))
            try:
                os.rename(staging, target)  # atomic; fails if another push took this number
                return version, target
            except OSError as err:
                if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                version += 1
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)


def _push_gcs(model_dir: str, base: str, model_name: str) -> tuple[int, str]:
    bucket_name, prefix = split_gcs(f"{base.rstrip('/')}/{model_name}")
    bucket = gcs_client().bucket(bucket_name)
    version = max(list_versions(base, model_name), default=0) + 1
    files = []
    for dirpath, _, filenames in os.walk(model_dir):
        files += [os.path.relpath(os.path.join(dirpath, n), model_dir) for n in filenames]
    # saved_model.pb last: until it lands, TF Serving does not see a loadable version.
    files.sort(key=lambda rel: (rel == SAVED_MODEL_PB, rel))
    while True:
        marker = bucket.blob(f"{prefix}/{version}/{SAVED_MODEL_PB}")
        if not marker.exists():
            break
        version += 1
    for rel in files:
        blob = bucket.blob(f"{prefix}/{version}/{rel}")
        if rel == SAVED_MODEL_PB:
            # if_generation_match=0: only create, so two pushes never share a version.
            try:
                blob.upload_from_filename(os.path.join(model_dir, rel), if_generation_match=0)
            except Exception as err:  # google.api_core PreconditionFailed
                raise GpupipeError(f"serving.base: version {version} of {model_name} was taken during the push; rerun push") from err
        else:
            blob.upload_from_filename(os.path.join(model_dir, rel))
    return version, f"gs://{bucket_name}/{prefix}/{version}"


def push_model(model_dir: str, blessed: bool, blessing_reasons: List[str], base: str, model_name: str) -> PushResult:
    """Pushes a blessed model as the next integer version; an unblessed one is not pushed
    and the result says why."""
    if not blessed:
        return PushResult(pushed=False, reason="not blessed: " + "; ".join(blessing_reasons))
    _check_model_dir(model_dir)
    version, path = (_push_gcs if is_gcs(base) else _push_local)(model_dir, base, model_name)
    return PushResult(pushed=True, reason="blessed: " + "; ".join(blessing_reasons), version=version, path=path)


def write_result(result: PushResult, output_dir: str) -> None:
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, names.PUSH_RESULT_FILE), "w", encoding="utf-8") as f:
        json.dump(result.to_dict(), f, indent=2)


@reports_errors("push")
def run_push(model_dir: str, blessing_dir: str, base: str, model_name: str, output_dir: str) -> PushResult:
    """The push step as the component calls it: reads the blessing, pushes or not, records why."""
    from components.evaluate.logic import read_blessing

    blessing = read_blessing(blessing_dir)
    result = push_model(model_dir, blessing.blessed, blessing.reasons, base, model_name)
    write_result(result, output_dir)
    return result
