"""gpupipe components: ingest, validate, train, evaluate, push.

Each sub-package holds `logic.py` (plain functions, importable without kfp) and
`component.py` (the thin `@dsl.component` wrapper).
"""
import os

# tf.keras in TF 2.16 is Keras 3, which breaks multi-worker training (ARCHITECTURE.md);
# this must be set before TensorFlow is first imported in any process.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
