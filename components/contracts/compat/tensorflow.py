"""TensorFlow 2.16.2's private names (components/contracts/compat/__init__.py, MEASURED_ON)."""
from __future__ import annotations

# The modules whose functions autograph leaves as they are (graph code already).
GRAPH_CODE_MODULES = ("tf_keras", "components")


def graph_code_without_autograph() -> None:
    """Tells autograph to leave tf_keras and gpupipe's own code as it is; the train step
    calls it before it builds a model (never at import). Idempotent.

    tf.function converts the Python of every function it calls unless the function's module
    is on TensorFlow's do-not-convert list, which names `keras` but not `tf_keras`. So the
    first epoch converted all of tf_keras' train step and layer code, and our own layers:
    15.6 s of the first epoch of a small model against 0.6 s without (measured on the
    penguins table, 2 cores, the same losses to the last digit). Both are graph code
    already (tf_keras uses tf.cond where it branches on tensors). A custom model's module
    (training.custom_model) is still converted. There is no public switch for a module, so
    this prepends to autograph's rules (tensorflow/python/autograph/core/config.py
    CONVERSION_RULES, a tuple of config_lib rules read on every conversion)."""
    from tensorflow.python.autograph.core import config as autograph_config
    from tensorflow.python.autograph.core import config_lib

    rules = autograph_config.CONVERSION_RULES
    if not any(isinstance(r, config_lib.DoNotConvert) and r.matches("tf_keras") for r in rules):
        autograph_config.CONVERSION_RULES = tuple(config_lib.DoNotConvert(m) for m in GRAPH_CODE_MODULES) + rules


def runtime_started() -> bool:
    """Whether TensorFlow's runtime (the eager context and its thread pools, which tf.data and
    every op start) has started in this process: a fork after that can deadlock, a fork before
    it is safe. False where TensorFlow is not imported. There is no public query; the eager
    context's `_initialized` flag (tensorflow/python/eager/context.py) is set by its
    `ensure_initialized`."""
    import sys

    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return bool(context.context()._initialized)
