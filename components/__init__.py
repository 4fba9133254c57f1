"""gpupipe components: the seven steps of the pipeline, side by side: fingerprint, ingest,
validate, train, evaluate, push, report; and notify, the exit handler that tells a webhook
how a run on the cluster ended.

Each step's sub-package holds `settings.py` (its config section), `logic.py` (plain
functions, importable without kfp) and `component.py` (the thin `@dsl.component` wrapper);
they stand on `contracts/` (and `sources/`, `store/`), never on each other
(docs/architecture.md).
"""
import os

# tf.keras in TF 2.16 is Keras 3, which breaks multi-worker training (docs/architecture.md, "The
# pinned stack"); this must be set before TensorFlow is first imported in any process.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
