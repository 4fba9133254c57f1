"""The workarounds of pinned libraries' private names (components/contracts/compat/): each
was read on the versions MEASURED_ON says; a pin that moves fails here, loudly, before a
workaround silently stops working. And nothing outside the compat module (and the training
step's own, listed there) patches a library or uses unittest."""
import ast
import importlib.metadata
import inspect
import re
from pathlib import Path

import pytest

from components.contracts import compat

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", sorted(compat.MEASURED_ON))
def test_the_installed_version_is_the_one_the_workarounds_were_measured_on(package):
    installed = importlib.metadata.version(package)
    assert installed == compat.MEASURED_ON[package], (
        f"{package} is {installed}, the workarounds in components/contracts/compat/ were read on "
        f"{compat.MEASURED_ON[package]}: read them again against {installed}'s source, then update MEASURED_ON")


def test_the_hooks_the_workarounds_use_are_still_there():
    from kfp.dsl import pipeline_task
    from kfp.local import subprocess_task_handler, task_dispatcher

    # the resource setters still name their caller through the module's `inspect`
    assert "inspect.stack()" in inspect.getsource(pipeline_task.PipelineTask)
    # the dispatcher still looks the SubprocessRunner's handler up by that module attribute, per task
    assert "subprocess_task_handler.SubprocessTaskHandler" in inspect.getsource(task_dispatcher)
    with compat.kfp_local_task_handler(dict):
        assert subprocess_task_handler.SubprocessTaskHandler is dict
    assert subprocess_task_handler.SubprocessTaskHandler.__name__ == "SubprocessTaskHandler"
    before = pipeline_task.inspect
    with compat.kfp_setters_without_source():
        assert pipeline_task.inspect.stack()[0].code_context is None  # no source lines read
    assert pipeline_task.inspect is before


def test_patched_environ_puts_back_what_was_there(monkeypatch):
    import os

    monkeypatch.setenv("GPUPIPE_COMPAT_A", "a")
    monkeypatch.delenv("GPUPIPE_COMPAT_B", raising=False)
    with compat.patched_environ({"GPUPIPE_COMPAT_A": "x", "GPUPIPE_COMPAT_B": "y"}):
        assert (os.environ["GPUPIPE_COMPAT_A"], os.environ["GPUPIPE_COMPAT_B"]) == ("x", "y")
    assert os.environ["GPUPIPE_COMPAT_A"] == "a" and "GPUPIPE_COMPAT_B" not in os.environ


# The training step's workarounds not yet moved here (compat's docstring names them).
NOT_YET_MOVED = {"components/train/runtime.py", "components/train/accumulation.py", "components/train/model.py"}


def test_no_product_code_outside_compat_uses_unittest_or_assigns_into_a_library():
    offenders = []
    for path in sorted([*(ROOT / "components").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")]):
        rel = str(path.relative_to(ROOT))
        if path.name.startswith("test_") or rel.startswith("components/contracts/compat/") or rel in NOT_YET_MOVED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names
                    if (getattr(node, "module", None) or alias.name).split(".")[0] in ("kfp", "tensorflow", "tf_keras")}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and re.match(
                    r"^unittest", getattr(node, "module", None) or node.names[0].name):
                offenders.append(f"{rel}:{node.lineno} imports unittest")
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id in imported:
                        offenders.append(f"{rel}:{node.lineno} assigns {target.value.id}.{target.attr}")
    assert offenders == []
