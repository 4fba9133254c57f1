"""What several command groups share: the configs a command acts on, and the storage
settings a config's commands run with."""
from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import List

from components.contracts.errors import GpupipeError
from pipelines.config import load_config

CONFIG_DIR = Path("configs")


def config_paths(given: List[str]) -> List[Path]:
    """The configs named, else every configs/*.yaml."""
    if given:
        return [Path(p) for p in given]
    found = sorted(CONFIG_DIR.glob("*.yaml"))
    if not found:
        raise GpupipeError(f"{CONFIG_DIR}/: no *.yaml configs found; pass a config path or run from the project root")
    return found


def storage_environment(args: argparse.Namespace):
    """For a command on a config: the storage layer's settings of its `storage` section
    (storage.s3, storage.retry) as the tasks get them, for the command's duration; a
    variable already set in the shell wins."""
    from components.contracts.compat import patched_environ

    path = getattr(args, "config", None)
    if not path or not Path(path).is_file() or Path(path).suffix not in (".yaml", ".yml"):
        return contextlib.nullcontext()
    wanted = load_config(path).storage.environment()
    return patched_environ({k: v for k, v in wanted.items() if k not in os.environ})
