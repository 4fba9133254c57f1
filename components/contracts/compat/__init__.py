"""Where gpupipe reaches into a pinned library beyond its public API: every such workaround
lives in this package, says the version it was read and measured on (MEASURED_ON), and is
applied only where it is needed, for as long as it is needed (context managers, never
at import). tests/test_compat.py fails when an installed version differs from MEASURED_ON
and checks that each workaround's hook still exists, so a moved pin is read again before it
ships.

- `compat.kfp` (importable from here): `kfp_setters_without_source` (kfp's resource setters
  name their caller through `inspect.stack()`, seconds per compile in a process that imported
  TensorFlow), `kfp_local_task_handler` / `kfp_local_subprocess_handler` (kfp.local's
  SubprocessRunner's task handler, looked up when each task starts);
- here: `patched_attribute`, `patched_environ`: set a module attribute or environment
  variables for the duration of a block and put them back (what the warm task start needs of
  sys and os.environ), without unittest in product code.

The training step's own workarounds (TensorFlow's autograph conversion rules, tf_keras's
private optimizer and saving names) are still in components/train/runtime.py,
accumulation.py and model.py, measured on the same pins below.
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict, Iterator

from components.contracts.compat.kfp import (kfp_local_subprocess_handler, kfp_local_task_handler,  # noqa: F401
                                             kfp_setters_without_source)

# The versions each workaround here was read and measured on (requirements.lock).
MEASURED_ON = {"kfp": "2.13.0", "tensorflow": "2.16.2", "tf-keras": "2.16.0"}


@contextlib.contextmanager
def patched_attribute(owner: object, name: str, value: object) -> Iterator[None]:
    missing = object()
    before = getattr(owner, name, missing)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if before is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, before)


@contextlib.contextmanager
def patched_environ(values: Dict[str, str]) -> Iterator[None]:
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
