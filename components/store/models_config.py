"""TF Serving's model config file (`--model_config_file`): which versions each model
serves and the `stable` / `canary` labels clients can address."""
from __future__ import annotations

from typing import Dict, Iterable, Optional

from components.contracts.errors import GpupipeError

STABLE = "stable"
CANARY = "canary"


def parse(text: Optional[str]):
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = model_server_config_pb2.ModelServerConfig()
    if text:
        try:
            text_format.Parse(text, config)
        except text_format.ParseError as err:
            raise GpupipeError(f"models.config: not a TF Serving model config ({err}); fix or remove the file") from None
    return config


def labels(text: Optional[str], model_name: str) -> Dict[str, int]:
    """The version labels of `model_name` in a models.config text ({} when absent)."""
    for entry in parse(text).model_config_list.config:
        if entry.name == model_name:
            return dict(entry.version_labels)
    return {}


def set_labels(text: Optional[str], model_name: str, base_path: str, new_labels: Dict[str, int],
               versions: Iterable[int] = ()) -> str:
    """models.config text with `model_name` serving exactly the labelled versions and
    `versions` (no entry for it when there are none); other models in the file are kept as
    they are."""
    from google.protobuf import text_format

    config = parse(text)
    entries = config.model_config_list.config
    entry = next((e for e in entries if e.name == model_name), None)
    served = sorted(set(new_labels.values()) | set(versions))
    if not served:
        if entry is not None:
            entries.remove(entry)
        return text_format.MessageToString(config)
    if entry is None:
        entry = entries.add()
        entry.name = model_name
    entry.base_path = base_path
    entry.model_platform = "tensorflow"
    entry.model_version_policy.Clear()
    entry.model_version_policy.specific.versions.extend(served)
    entry.version_labels.clear()
    for label, version in sorted(new_labels.items()):
        entry.version_labels[label] = version
    return text_format.MessageToString(config)
