"""What a serving base holds beyond the model files: the version now served (label
`stable` in models.config, else the newest), retention, rollback, and the files stored
with each version for the next run (statistics and schema: the drift baseline; metrics;
TF Serving warmup requests)."""
from __future__ import annotations

import json
import os
from typing import List, Optional, Tuple

from components.contracts.errors import GpupipeError
from components.store import models_config
from components.store.base import ServingStore

# Inside each version directory (TF Serving reads only tf_serving_warmup_requests here).
EXTRA_DIR = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"
GPUPIPE_DIR = "gpupipe"
METRICS_FILE = "metrics.json"
MODEL_FILE = "model.json"  # the model's digest and the run that pushed it: a retried push finds its version


def served_version_number(base: str, model_name: str) -> Optional[int]:
    """The version now served: the `stable` label in models.config when it names a whole
    version, else the newest version; None when there is none."""
    store = ServingStore(base, model_name)
    versions = store.versions()
    if not versions:
        return None
    stable = models_config.labels(store.read_models_config(), model_name).get(models_config.STABLE)
    return stable if stable in versions else versions[-1]


def served_version(base: str, model_name: str) -> Optional[Tuple[int, str]]:
    """(version, local directory) of the model now served (see served_version_number)."""
    version = served_version_number(base, model_name)
    if version is None:
        return None
    return version, ServingStore(base, model_name).download_version(version)


def gpupipe_file(version_dir: str, name: str) -> str:
    return os.path.join(version_dir, EXTRA_DIR, GPUPIPE_DIR, name)


def set_labels(store: ServingStore, labels: dict) -> str:
    base_path = store.model_root if store.model_root.startswith("gs://") else os.path.abspath(store.model_root)
    text = models_config.set_labels(store.read_models_config(), store.model_name, base_path, labels)
    store.write_models_config(text)
    return text


def current_labels(store: ServingStore) -> dict:
    return models_config.labels(store.read_models_config(), store.model_name)


def _stored_json(store: ServingStore, version: int, name: str) -> dict:
    """A JSON file stored with a version under assets.extra/gpupipe/ ({} when absent)."""
    return json.loads(store.read_text(f"{version}/{EXTRA_DIR}/{GPUPIPE_DIR}/{name}") or "{}")


def version_of(store: ServingStore, digest: str, run_id: str) -> Optional[int]:
    """The newest whole version that run `run_id` pushed of the model with this digest."""
    for version in reversed(store.versions()):
        if _stored_json(store, version, MODEL_FILE) == {"digest": digest, "run_id": run_id}:
            return version
    return None


def apply_retention(store: ServingStore, keep: int, protect: Optional[set] = None) -> List[int]:
    """Deletes all but the newest `keep` versions, never one that a label points at nor
    one in `protect`. Returns the deleted versions."""
    versions = store.versions()
    protected = set(current_labels(store).values()) | set(protect or ())
    doomed = [v for v in versions[:-keep] if v not in protected] if keep < len(versions) else []
    for v in doomed:
        store.remove_version(v)
    return doomed


def rollback(base: str, model_name: str, to: Optional[int] = None) -> Tuple[Optional[int], int]:
    """Points `stable` at version `to` (default: the newest version older than the current
    stable one). Returns (previous stable, new stable)."""
    store = ServingStore(base, model_name)
    versions = store.versions()
    if not versions:
        raise GpupipeError(f"serving.base: no versions of {model_name} under {base}; nothing to roll back to")
    labels = current_labels(store)
    current = labels.get(models_config.STABLE, versions[-1])
    if to is None:
        older = [v for v in versions if v < current]
        if not older:
            raise GpupipeError(f"rollback: version {current} is the oldest of {model_name}; pass --to VERSION")
        to = older[-1]
    if to not in versions:
        raise GpupipeError(f"rollback --to {to}: no such version of {model_name} (versions: "
                           f"{', '.join(map(str, versions))})")
    set_labels(store, {models_config.STABLE: to})
    return current, to


def version_records(store: ServingStore) -> List[dict]:
    """What is recorded of each whole version, oldest first: its labels, the model's digest,
    the KFP run that pushed it and the evaluation metrics it was blessed with."""
    by_version: dict = {}
    for label, version in current_labels(store).items():
        by_version.setdefault(version, []).append(label)
    records = []
    for version in store.versions():
        model = _stored_json(store, version, MODEL_FILE)
        metrics = _stored_json(store, version, METRICS_FILE)
        records.append({"version": version, "labels": sorted(by_version.get(version, [])),
                        "digest": model.get("digest", ""), "run_id": model.get("run_id", ""), "metrics": metrics})
    return records
