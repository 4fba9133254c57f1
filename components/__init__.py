"""gpupipe components: the pipeline's steps, side by side, one sub-package each (their order
and wiring are the step registry's, pipelines/steps.py); notify, the exit handler that tells
a webhook how a run on the cluster ended; predict, the scoring pipeline's one task.

A step's sub-package holds `logic.py` (plain functions, importable without kfp) and
`component.py` (the thin `@dsl.component` wrapper), with `settings.py` when it has a config
section; they stand on `contracts/` (and `sources/`, `store/`), never on each other
(docs/architecture.md).
"""
import os

# tf.keras in TF 2.16 is Keras 3, which breaks multi-worker training (docs/architecture.md, "The
# pinned stack"); this must be set before TensorFlow is first imported in any process.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
