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
# A step that runs worker processes (ingest's, components/ingest/parallel.py) writes, beside
# that file, `<its own VmHWM then> <the sum of its workers' VmHWM>` in kB (record_workers_peak_rss):
# a pod's memory is the sum of its processes', so the run's record adds them.
WORKERS_PEAK_RSS_SUFFIX = ".workers"


def import_tensorflow(keras: bool = True) -> None:
    """Imports TensorFlow (a task that trains or scores: train, evaluate, push) without the
    Google API client. TensorFlow's GCE and TPU cluster resolvers import googleapiclient when
    it is installed (tfx-bsl brings it), and its google.api_core reads every installed
    distribution's metadata as it imports: 0.4-0.5 s of each such task's start on 2 cores
    (docs/benchmarks.md, "The linear start beside TensorFlow's import"). gpupipe never uses
    those resolvers (it gives TF_CONFIG). The client is hidden for TensorFlow's import
    alone: a later `import googleapiclient` imports it as usual. (pandas, which tf_keras'
    data adapter imports, is not hidden: train's start scores and evaluate's metrics import
    it later anyway, so hiding it moved 0.4 s and saved none.)

    `keras=False` (a task that builds no model: ingest) also leaves out tf_keras, which
    TensorFlow's import loads for its optimizers' registration (an ImportError it expects):
    0.45 s of tf_keras' applications and layers. A later `import tf_keras` loads it, the
    registration with it."""
    import sys

    if "tensorflow" in sys.modules or "googleapiclient" in sys.modules:
        return
    hidden = ["googleapiclient"] + ([] if keras or "tf_keras" in sys.modules else ["tf_keras"])
    for name in hidden:
        sys.modules[name] = None  # an ImportError, which TensorFlow's import expects of both
    try:
        import tensorflow  # noqa: F401
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def vm_hwm_kb():
    """This process's peak RSS so far (VmHWM), in kB; None where /proc does not say (not Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return int(next(line.split()[1] for line in f if line.startswith("VmHWM:")))
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def release_free_memory() -> None:
    """Hands the C heap's free memory back to the system: glibc's malloc_trim (nothing where
    the C library has none). A pass whose buffers were allocated and freed by other threads
    (TensorFlow's, a thread pool's) leaves that memory in those threads' malloc arenas, so
    the RSS stays up and the next phase allocates on top of it. Evaluate at 1.98M eval rows:
    1,243 MB after its scoring pass, 937 MB after the trim (docs/benchmarks.md, "Evaluate's
    freed memory", has the step's peaks)."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols: the C library's among them
    except (AttributeError, OSError):  # not glibc (musl, macOS): its free memory stays where it is
        pass


def record_workers_peak_rss(workers_kb: int, beside_start: bool = False) -> None:
    """For the run's record of this task's peak RSS (PEAK_RSS_ENV): its worker processes' summed
    peak, with this process's own so far. `beside_start`: they ran beside this process's start
    alone and are gone (train's linear start, components/train/linear_fit.py), so the task's
    peak is the larger of its own later and its own so far plus theirs. Nothing when no run
    asked for the figure."""
    path, own = os.environ.get(PEAK_RSS_ENV), vm_hwm_kb()
    if not path or own is None:
        return
    if beside_start:
        own, workers_kb = own + int(workers_kb), 0
    try:
        with open(path + WORKERS_PEAK_RSS_SUFFIX, "w", encoding="ascii") as f:
            f.write(f"{own} {int(workers_kb)}")
    except OSError:  # the run's temporary file is gone: no figure
        pass


def _write_peak_rss(path: str) -> None:
    kb = vm_hwm_kb()
    if kb is None:
        return
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(str(kb))
    except OSError:
        pass


def _no_final_collection() -> None:
    """At exit: gc.freeze(), so the interpreter's last garbage collection skips every object
    alive by then. After TensorFlow's import that collection walks its millions of objects:
    0.7-0.9 s of each such task's end on 2 cores, 0.1 s with this (docs/benchmarks.md, "A
    task's exit, and what ingest's workers import"). The exit code, the other exit handlers
    and the modules' teardown are unchanged; only cycles of objects still alive at exit are
    left to the process's end."""
    import gc

    gc.freeze()


import atexit  # noqa: E402

atexit.register(_no_final_collection)  # first registered, last run: after every other exit handler
if os.environ.get(PEAK_RSS_ENV):
    atexit.register(_write_peak_rss, os.environ[PEAK_RSS_ENV])
