"""A task's process: its start imports TensorFlow without the Google API client, which
TensorFlow's import brings and gpupipe never uses (components.import_tensorflow), and it
ends without the interpreter's last garbage collection over everything alive
(components/__init__.py: _no_final_collection): after TensorFlow's import that collection
took 0.7-0.9 s of each train, evaluate and push task on 2 cores. The exit code, a
failure's traceback and the other exit handlers stay as they were."""
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

# an exit handler registered before `components`: it runs after components' own (last in, first out)
BEFORE = "import atexit, gc; atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0)); "


def _task(code: str):
    return subprocess.run([sys.executable, "-c", BEFORE + "import components; " + code], capture_output=True,
                          text=True, timeout=60)


def test_a_tasks_objects_are_frozen_at_exit_after_every_other_exit_handler():
    out = _task("print('done')")
    assert out.returncode == 0 and out.stdout.splitlines() == ["done", "frozen at exit: True"], out


def test_the_exit_code_and_a_failures_traceback_are_the_tasks():
    assert _task("import sys; sys.exit(3)").returncode == 3
    failed = _task("raise ValueError('bad row 7')")
    assert failed.returncode == 1 and "ValueError: bad row 7" in failed.stderr
    assert failed.stdout.strip() == "frozen at exit: True"


def test_tensorflow_imports_without_the_google_api_client():
    """The Google API client is not imported with TensorFlow (0.4-0.5 s of each train,
    evaluate and push task's start), and a later import of it works as usual."""
    code = ("import sys, components; components.import_tensorflow(); import tensorflow as tf; "
            "print('googleapiclient' in sys.modules); "
            "import googleapiclient.discovery; print(tf.constant(2).numpy())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[:2] == ["False", "2"], out.stdout


def test_ingest_imports_tensorflow_without_tf_keras():
    """keras=False (ingest builds no model) leaves tf_keras out of TensorFlow's import (0.45 s);
    a later import of it works, and registers its optimizers with it."""
    code = ("import sys, components; components.import_tensorflow(keras=False); import tensorflow as tf; "
            "print('tf_keras' in sys.modules); "
            "import tf_keras; print(tf_keras.optimizers.Adam().get_config()['name']); "
            "print(tf.constant(3).numpy())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[:3] == ["False", "Adam", "3"], out.stdout
