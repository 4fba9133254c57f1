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

# A local run's task (pipelines/stopping.py: run_task) names a file for its peak RSS: the
# process's own high-water mark (VmHWM), written as it exits. Not ru_maxrss: a child's counts
# the RSS of the process it was forked from, here the whole `gpupipe run`.
PEAK_RSS_ENV = "GPUPIPE_PEAK_RSS_FILE"


def _write_peak_rss(path: str) -> None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            kb = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
        with open(path, "w", encoding="ascii") as f:
            f.write(kb)
    except (OSError, StopIteration, IndexError):  # not Linux: no figure
        pass


if os.environ.get(PEAK_RSS_ENV):
    import atexit

    atexit.register(_write_peak_rss, os.environ[PEAK_RSS_ENV])
