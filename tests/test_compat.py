"""The workarounds of pinned libraries' private names (components/contracts/compat/): each was
read on the versions MEASURED_ON says; a pin that moves fails here, loudly, before a
workaround silently stops working. And no product code outside the compat package uses
unittest, assigns into a library, or reaches a library's private names (`tf_keras.src`,
`tensorflow.python`, `x._name`, an override of a library class's private method, kfp's
`_KFP_RUNTIME` or one of its module paths written as a string)."""
import ast
import importlib
import importlib.metadata
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from components.contracts import compat

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
COMPAT = "components/contracts/compat/"


@pytest.mark.parametrize("package", sorted(compat.MEASURED_ON))
def test_the_installed_version_is_the_one_the_workarounds_were_measured_on(package):
    installed = importlib.metadata.version(package)
    assert installed == compat.MEASURED_ON[package], (
        f"{package} is {installed}, the workarounds in components/contracts/compat/ were read on "
        f"{compat.MEASURED_ON[package]}: read them again against {installed}'s source, then update MEASURED_ON")


def test_the_kfp_hooks_are_still_there():
    from kfp.dsl import pipeline_task
    from kfp.local import subprocess_task_handler, task_dispatcher

    # the resource setters still name their caller through the module's `inspect`
    assert "inspect.stack()" in inspect.getsource(pipeline_task.PipelineTask)
    # the dispatcher still looks the SubprocessRunner's handler up by that module attribute, per task
    assert "subprocess_task_handler.SubprocessTaskHandler" in inspect.getsource(task_dispatcher)
    with compat.kfp_local_task_handler(dict):
        assert subprocess_task_handler.SubprocessTaskHandler is dict
    assert subprocess_task_handler.SubprocessTaskHandler.__name__ == "SubprocessTaskHandler"
    # the handler runs each command through the module's run_local_subprocess(full_command=...)
    from kfp.local import executor_input_utils, pipeline_orchestrator

    from components.contracts.compat.kfp import kfp_local_run_name, kfp_local_task_runner

    assert "run_local_subprocess(full_command=" in inspect.getsource(subprocess_task_handler.SubprocessTaskHandler.run)
    with kfp_local_task_runner(len):
        assert subprocess_task_handler.run_local_subprocess is len
    assert subprocess_task_handler.run_local_subprocess.__name__ == "run_local_subprocess"
    # the run's folder is named once, through the module attribute, from the pipeline's name
    assert "executor_input_utils.get_local_pipeline_resource_name(" in inspect.getsource(pipeline_orchestrator)
    with kfp_local_run_name(lambda default, name: f"{default(name)}-claimed"):
        assert re.fullmatch(r"p-[\d-]+-claimed", executor_input_utils.get_local_pipeline_resource_name("p"))
    assert executor_input_utils.get_local_pipeline_resource_name.__name__ == "get_local_pipeline_resource_name"
    before = pipeline_task.inspect
    with compat.kfp_setters_without_source():
        assert pipeline_task.inspect.stack()[0].code_context is None  # no source lines read

        def set_cpu_limit(stack):  # as kfp's setters ask for their caller's name
            return stack()[1][3]

        def a_pipeline_function(stack):
            return set_cpu_limit(stack)

        # the same caller names as inspect's own stack
        assert a_pipeline_function(pipeline_task.inspect.stack) == a_pipeline_function(inspect.stack) == (
            "a_pipeline_function")
    assert pipeline_task.inspect is before


def test_the_kfp_client_timeout_hook_is_still_there():
    import kfp
    from kfp_server_api import rest

    # why it is needed: without a _request_timeout the request goes out with no timeout at all
    assert "timeout = None" in inspect.getsource(rest.RESTClientObject.request)
    client = compat.kfp.kfp_client_with_deadlines(kfp.Client(host="http://127.0.0.1:9", namespace="team-a"))
    apis = [client._run_api, client._experiment_api, client._pipelines_api, client._upload_api,
            client._recurring_run_api, client._healthz_api]
    assert {id(api.api_client.rest_client) for api in apis} == {id(client._run_api.api_client.rest_client)}
    assert client._run_api.api_client.rest_client.pool_manager.connection_pool_kw["retries"].total == 2
    run_api = compat.kfp.kfp_run_api(client)  # the Retry call and the ApiClient pipelines/remote/recover.py uses
    assert callable(run_api.run_service_retry_run) and callable(run_api.api_client.call_api)


def test_the_autograph_rules_hook_is_still_there():
    from tensorflow.python.autograph.core import config, config_lib
    from tensorflow.python.autograph.impl import conversion

    from components.contracts.compat.tensorflow import graph_code_without_autograph

    # autograph reads the module's rules on every conversion decision
    assert "config.CONVERSION_RULES" in inspect.getsource(conversion)
    before = config.CONVERSION_RULES
    try:
        graph_code_without_autograph()
        graph_code_without_autograph()  # idempotent
        rules = config.CONVERSION_RULES
        assert len(rules) == len(before) + 2 if not any(
            isinstance(r, config_lib.DoNotConvert) and r.matches("tf_keras") for r in before) else rules == before
        assert [isinstance(r, config_lib.DoNotConvert) and r.matches(m) for r, m in zip(rules, ("tf_keras", "components"))] \
            == [True, True]
    finally:
        config.CONVERSION_RULES = before


def test_the_runtime_started_hook_is_still_there():
    """compat.tensorflow.runtime_started reads the eager context's private flag: in a new
    process it is False before any op runs (TensorFlow imported or not) and True after one."""
    code = ("import os; os.environ['TF_CPP_MIN_LOG_LEVEL']='3'\n"
            "from components.contracts.compat.tensorflow import runtime_started\n"
            "before_import = runtime_started()\n"
            "import tensorflow as tf\n"
            "imported = runtime_started()\n"
            "tf.constant(1) + 1\n"
            "print(before_import, imported, runtime_started())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.stdout.split() == ["False", "False", "True"], out.stderr[-2000:]


def test_the_tf_keras_hooks_are_still_there():
    import tf_keras
    from tf_keras.src.callbacks import BackupAndRestore
    from tf_keras.src.optimizers.legacy import optimizer_v2

    from components.contracts.compat import tf_keras as keras_compat

    base = optimizer_v2.OptimizerV2
    # Adam's override: the base class routes an IndexedSlices gradient through this method
    assert "self._resource_apply_sparse_duplicate_indices(" in inspect.getsource(base)
    assert "_resource_apply_dense" in vars(tf_keras.optimizers.legacy.Adam)
    # GradientAccumulation's overrides and reads, as LossScaleOptimizer has them
    for name in ("_create_all_weights", "_compute_gradients", "_aggregate_gradients", "_restore_slot_variable",
                 "_create_or_restore_slot_variable", "_get_hyper", "_HAS_AGGREGATE_GRAD"):
        assert hasattr(base, name), name
    assert "_hyper" in vars(tf_keras.optimizers.legacy.SGD(0.1))
    assert callable(optimizer_v2._var_key)
    assert hasattr(tf_keras.src.mixed_precision.loss_scale_optimizer.LossScaleOptimizer, "_optimizer") or \
        "self._optimizer" in inspect.getsource(tf_keras.src.mixed_precision.loss_scale_optimizer)
    # BackupAndRestore saves through _backup, from its step and epoch ends
    for method in (BackupAndRestore.on_train_batch_end, BackupAndRestore.on_epoch_end):
        assert "self._backup(" in inspect.getsource(method)
    assert list(inspect.signature(BackupAndRestore._backup).parameters) == ["self", "epoch", "batch"]
    assert issubclass(keras_compat.BackupAndRestore, tf_keras.callbacks.BackupAndRestore)


def test_the_optimizer_slots_are_made_before_the_first_step():
    import tensorflow as tf

    from components.contracts.compat.tf_keras import Adam, create_optimizer_slots

    variable = tf.Variable(tf.zeros([3, 2]))
    optimizer = Adam(0.1)
    create_optimizer_slots(optimizer, [variable])
    assert sorted(optimizer.get_slot_names()) == ["m", "v"] and optimizer.get_slot(variable, "m").shape == [3, 2]


def test_the_gcs_retry_predicate_hook_is_still_there():
    """The predicate the library's DEFAULT_RETRY uses: it retries a 503 and a dropped
    connection, not a 404 or a 403."""
    import requests
    from google.api_core import exceptions

    from components.contracts.compat.gcs import should_retry

    assert should_retry(exceptions.ServiceUnavailable("busy")) and should_retry(requests.ConnectionError("reset"))
    assert not should_retry(exceptions.NotFound("gone")) and not should_retry(exceptions.Forbidden("no"))


def test_the_beam_sink_hook_is_still_there():
    from components.contracts.compat.beam import TFRecordSink

    assert list(inspect.signature(TFRecordSink.__init__).parameters) == [
        "self", "file_path_prefix", "coder", "file_name_suffix", "num_shards", "shard_name_template",
        "compression_type"]
    assert "open" in vars(TFRecordSink.__mro__[1]) or hasattr(TFRecordSink, "open")


def test_the_tfdv_length_counters_hook_is_still_there(monkeypatch):
    """The top-k sketch generator still reads its sampling rate from that attribute: with the
    random draw below TFDV's 0.01, its own generators walk a string column into Beam
    counters and compat's do not; the statistics are the same."""
    import apache_beam as beam
    import numpy as np
    import pyarrow as pa
    import tensorflow_data_validation as tfdv
    from tensorflow_data_validation.statistics import stats_impl

    from components.contracts.compat.tfdv import in_memory_generators

    counted = []
    real_counter = beam.metrics.Metrics.counter
    monkeypatch.setattr(beam.metrics.Metrics, "counter", lambda ns, name: counted.append(name) or real_counter(ns, name))
    monkeypatch.setattr(np.random, "random", lambda: 0.005)
    batch = pa.RecordBatch.from_arrays([pa.array([[b"a"], [b"bb"], None, [b"a"]]), pa.array([[1.0], None, [2.5], [3.0]],
                                                                                               pa.list_(pa.float32()))],
                                       ["c", "x"])
    options = tfdv.StatsOptions()

    def statistics(generators):
        partial = stats_impl.generate_partial_statistics_in_memory(batch, options, generators)
        return stats_impl.extract_statistics_output(partial, generators)

    theirs = statistics(stats_impl.get_generators(options, in_memory=True))
    assert any(name.startswith("binary_scalar_len_") for name in counted)
    counted.clear()
    ours = statistics(in_memory_generators(options))
    assert not any(name.startswith("binary_scalar_len_") for name in counted), counted
    assert ours == theirs and ours.datasets[0].num_examples == 4


def test_the_google_version_check_hook_is_still_there():
    """google.api_core's version check still names its package through
    importlib.metadata.packages_distributions; import_statistics imports TFDV's statistics
    with it answering nothing, and puts it back (in a new process: google.api_core not yet
    imported there)."""
    from google.api_core import _python_version_support

    assert "metadata.packages_distributions()" in inspect.getsource(_python_version_support)
    code = ("import importlib.metadata as m; real = m.packages_distributions\n"
            "from components.contracts.compat.tfdv import import_statistics; import_statistics()\n"
            "import sys; assert 'tensorflow_data_validation.statistics.stats_impl' in sys.modules\n"
            "assert 'google.api_core' in sys.modules and m.packages_distributions is real\n"
            "from google.api_core import _python_version_support as v\n"
            "read = v._cached_packages_distributions.cache_info().misses  # (0 outside the warning's window)\n"
            "assert not read or v._cached_packages_distributions() == {}; print('ok', read)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr[-2000:]


def test_the_keras_tuner_hook_is_still_there():
    import keras_tuner

    from components.contracts.compat.keras_tuner import set_oracle_project_dir

    assert list(inspect.signature(keras_tuner.Oracle._set_project_dir).parameters) == [
        "self", "directory", "project_name"]
    oracle = keras_tuner.oracles.RandomSearchOracle(objective="loss", max_trials=1)
    set_oracle_project_dir(oracle, "/tmp/gpupipe-oracle", "oracle")
    assert oracle._project_dir == "/tmp/gpupipe-oracle/oracle"


def test_importing_compat_loads_no_library():
    code = ("import sys, components.contracts.compat; "
            "print(sorted(m for m in ('tensorflow', 'tf_keras', 'kfp', 'apache_beam') if m in sys.modules))")
    import subprocess

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_patched_environ_puts_back_what_was_there(monkeypatch):
    import os

    monkeypatch.setenv("GPUPIPE_COMPAT_A", "a")
    monkeypatch.delenv("GPUPIPE_COMPAT_B", raising=False)
    with compat.patched_environ({"GPUPIPE_COMPAT_A": "x", "GPUPIPE_COMPAT_B": "y"}):
        assert (os.environ["GPUPIPE_COMPAT_A"], os.environ["GPUPIPE_COMPAT_B"]) == ("x", "y")
    assert os.environ["GPUPIPE_COMPAT_A"] == "a" and "GPUPIPE_COMPAT_B" not in os.environ


# ---- nothing outside compat reaches into a library --------------------------------------------

FIRST_PARTY = {"components", "pipelines", "bench", "tests", "images", "conftest"}
# Underscored names that are public API (namedtuple's).
PUBLIC_UNDERSCORED = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
OVERRIDABLE_DUNDERS = {"__getattribute__", "__getattr__", "__setattr__", "__delattr__"}

# Offences in files another engineer owns, waiting for them to use the compat name beside each
# (issue #28); each must still be found while its file exists, so none outlives its fix.
WAITING: dict = {}  # offences whose fix waits on another change: none


def _private(name: str) -> bool:
    return name == "__internal__" or (name.startswith("_") and not name.endswith("__"))


# kfp's names that no import shows: its private variables (`_KFP_RUNTIME`) and its module paths
# written as strings (`"kfp.dsl.executor_main"`, what a command runs); compat.kfp holds them.
_KFP_STRING = re.compile(r"_KFP_\w+|kfp(\.\w+)+")


def _private_module(module: str) -> bool:
    parts = module.split(".")
    return module.startswith("tensorflow.python") or "src" in parts[1:] or any(_private(p) for p in parts)


def _product_files(root: Path):
    for path in sorted([*(root / "components").rglob("*.py"), *(root / "pipelines").rglob("*.py")]):
        rel = path.relative_to(root).as_posix()
        if not path.name.startswith("test_") and not rel.startswith(COMPAT) and rel != COMPAT.rstrip("/") + ".py":
            yield rel, ast.parse(path.read_text(encoding="utf-8"))


def _own_private_names(files) -> set:
    """Underscored names gpupipe defines itself (outside compat): functions, classes, module
    names and attributes it assigns."""
    own = set()
    for _, tree in files:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
    return {n for n in own if _private(n)}


def _libraries(tree) -> dict:
    """Each name a file imports from a library (not the standard library, not gpupipe; compat
    counts as a library) -> (module, attribute or None)."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = (alias.name if alias.asname else
                                                                   alias.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = (node.module, alias.name)
    def library(module):
        top = module.split(".")[0]
        return module.startswith("components.contracts.compat") or (
            top not in FIRST_PARTY and top not in sys.stdlib_module_names and top != "__future__")
    return {name: where for name, where in bound.items() if library(where[0])}


def _resolve(where, chain):
    try:
        module, attribute = where
        value = importlib.import_module(module)
        for name in ([attribute] if attribute else []) + chain:
            value = getattr(value, name)
        return value
    except Exception:  # noqa: BLE001 (a base this test cannot load is not judged by it)
        return None


def _dotted(node):
    chain = []
    while isinstance(node, ast.Attribute):
        chain.insert(0, node.attr)
        node = node.value
    return (node.id, chain) if isinstance(node, ast.Name) else (None, chain)


def offences(root: Path) -> set:
    files = list(_product_files(root))
    own = _own_private_names(files)
    found = set()
    for rel, tree in files:
        libraries = _libraries(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                module = getattr(node, "module", None) or node.names[0].name
                if module.split(".")[0] == "unittest":
                    found.add(f"{rel}: imports unittest")
                for alias in node.names:
                    full = module if isinstance(node, ast.ImportFrom) else alias.name
                    if full.split(".")[0] not in FIRST_PARTY and (
                            _private_module(full) or (isinstance(node, ast.ImportFrom) and _private(alias.name))):
                        found.add(f"{rel}: imports {full}" + (f".{alias.name}" if isinstance(node, ast.ImportFrom)
                                                             else ""))
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id in libraries:
                        found.add(f"{rel}: assigns {target.value.id}.{target.attr}")
            elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in PUBLIC_UNDERSCORED:
                root_name, chain = _dotted(node)
                if root_name in libraries:
                    found.add(f"{rel}: uses {ast.unparse(node)}")
                elif not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) \
                        and node.attr not in own and not (
                        isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "super") and (
                        root_name is None or root_name not in sys.stdlib_module_names):
                    found.add(f"{rel}: uses {ast.unparse(node)} (not a gpupipe name)")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _KFP_STRING.fullmatch(node.value):
                found.add(f"{rel}: names kfp's {node.value} (components.contracts.compat.kfp holds it)")
            elif isinstance(node, ast.ClassDef):
                bases = [_resolve(libraries[name], chain) for name, chain in map(_dotted, node.bases)
                         if name in libraries]
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and (_private(item.name) or item.name in OVERRIDABLE_DUNDERS):
                        if any(base is not None and hasattr(base, item.name) for base in bases):
                            found.add(f"{rel}: {node.name} overrides {item.name}")
    return found


def test_no_product_code_outside_compat_uses_unittest_or_a_library_private_name():
    found = offences(ROOT)
    assert found - set(WAITING) == set()
    waiting = {o for o in WAITING if (ROOT / o.split(":")[0]).is_file()}
    assert waiting <= found, f"fixed, take it off WAITING: {sorted(waiting - found)}"


def test_the_check_finds_each_kind_of_private_use(tmp_path):
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "components").mkdir()
    (tmp_path / "pipelines" / "bad.py").write_text(
        "import unittest.mock\n"
        "import tensorflow as tf\n"
        "import tf_keras\n"
        "from tf_keras.src.optimizers.legacy.optimizer_v2 import _var_key\n"
        "from tensorflow.python.autograph.core import config\n"
        "tf.foo = 1\n"
        "tf.__internal__.tracking\n"
        "def build(optimizer):\n"
        "    optimizer._create_all_weights([])\n"
        "class Adam(tf_keras.optimizers.legacy.Adam):\n"
        "    def _resource_apply_dense(self, grad, var):\n"
        "        return super()._resource_apply_dense(grad, var)\n"
        "    def _own_helper(self):\n"
        "        return self._own\n"
        "    def __getattribute__(self, name):\n"
        "        return object.__getattribute__(self, name)\n"
        "EXECUTOR_ENV = {'_KFP_RUNTIME': 'true'}\n"
        "PRELOAD = ('kfp.dsl.executor_main', 'components.train.logic')\n"
        "HELP = 'runs python -m kfp.dsl.executor_main, as every task does'\n", encoding="utf-8")
    b = "pipelines/bad.py: "
    assert offences(tmp_path) == {
        b + "imports unittest", b + "imports tf_keras.src.optimizers.legacy.optimizer_v2._var_key",
        b + "imports tensorflow.python.autograph.core.config", b + "assigns tf.foo", b + "uses tf.__internal__",
        b + "uses optimizer._create_all_weights (not a gpupipe name)", b + "Adam overrides _resource_apply_dense",
        b + "Adam overrides __getattribute__",
        b + "names kfp's _KFP_RUNTIME (components.contracts.compat.kfp holds it)",
        b + "names kfp's kfp.dsl.executor_main (components.contracts.compat.kfp holds it)"}


def test_kfp_local_still_announces_each_task_in_the_lines_the_summary_reads(tmp_path, capfd):
    """gpupipe run's live summary follows kfp.local's log lines (compat.kfp_local_task_event);
    a kfp whose lines read otherwise fails here, not as a summary with no steps."""
    from kfp import dsl, local

    from components.contracts.compat.kfp import kfp_local_task_event

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def hello(word: str) -> str:
        return word

    @dsl.pipeline(name="hello")
    def pipeline(word: str = "hi"):
        hello(word=word).set_caching_options(False)

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    pipeline()
    out, err = capfd.readouterr()
    events = [e for e in map(kfp_local_task_event, (out + err).splitlines()) if e]
    assert events == [("hello", None), ("hello", "SUCCESS")], (out + err)[-2000:]
