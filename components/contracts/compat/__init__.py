"""Where gpupipe reaches into a pinned library beyond its public API: every such workaround
lives in this package, says the version it was read and measured on (MEASURED_ON), and is
applied only where it is needed, for as long as it is needed (context managers, or a
subclass a step chooses to use; never at import). tests/test_compat.py fails when an
installed version differs from MEASURED_ON and checks that each workaround's hook still
exists, so a moved pin is read again before it ships; it also fails when a private name of a
library (`tf_keras.src`, `tensorflow.python`, `x._name`, an override of a private method)
appears outside this package.

- `compat.kfp` (importable from here): `kfp_setters_without_source` (kfp's resource setters
  name their caller through `inspect.stack()`, seconds per compile in a process that imported
  TensorFlow), `kfp_local_task_handler` / `kfp_local_subprocess_handler` (kfp.local's
  SubprocessRunner's task handler, looked up when each task starts), `kfp_local_task_runner`
  (the function that runs a task's command, for a process group of its own) and
  `kfp_local_run_name` (what names a local run's folder, for one claimed, not guessed); and kfp's executor
  command (`EXECUTOR_MODULE`, `EXECUTOR_ENV` with its private `_KFP_RUNTIME`, the flags,
  `executor_argument`), which the warm task start and the local task cache read;
  `kfp_client_with_deadlines` (kfp.Client's requests carry no timeout unless given one: every
  request of the Client gets a (connect, read) timeout and bounded tries); `kfp_run_api` (the
  Client's RunServiceApi, for a run's Retry and its v1beta1 details, which the Client lacks);
- `compat.tensorflow`: `graph_code_without_autograph` (autograph's conversion rules);
  `runtime_started` (the eager context's private `_initialized`: whether a fork is still safe);
- `compat.tf_keras`: the optimizers that override private OptimizerV2 methods (`Adam`'s
  dense apply of embedding gradients, `GradientAccumulation`), `create_optimizer_slots`,
  and `BackupAndRestore` with a public `backup_now` and an `after_backup` hook;
- `compat.beam`: Beam's TFRecord sink class, for ingest's gzip-level sink;
- `compat.tfdv`: TFDV's in-memory statistics generators without the top-k generator's byte-length
  counters (Beam metrics, which nothing reads outside a pipeline: a Python loop over the values),
  and TFDV's statistics imported without google.api_core's read of every distribution's metadata
  (a Python-version warning's package name);
- `compat.gcs`: google-cloud-storage's retry predicate, for the storage layer's counted retries;
- `compat.keras_tuner`: an Oracle's state directory, without a Tuner;
- here: `patched_attribute`, `patched_environ`: set a module attribute or environment
  variables for the duration of a block and put them back (what the warm task start needs of
  sys and os.environ), without unittest in product code.

The library modules (TensorFlow, tf_keras, Beam, Keras Tuner) are imported only by the code that uses them
(`from components.contracts.compat.tf_keras import ...`): importing this package loads none.
"""
from __future__ import annotations

import contextlib
import os
from typing import Dict, Iterator

from components.contracts.compat.kfp import (kfp_local_subprocess_handler, kfp_local_task_handler,  # noqa: F401
                                             kfp_setters_without_source)

# The versions each workaround here was read and measured on (requirements-hashed.lock).
MEASURED_ON = {"kfp": "2.13.0", "tensorflow": "2.16.2", "tf-keras": "2.16.0", "apache-beam": "2.61.0",
               "keras-tuner": "1.4.7", "google-cloud-storage": "2.19.0",
               "tensorflow-data-validation": "1.16.1"}


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
