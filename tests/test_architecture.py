"""The layers hold: steps stand side by side on the shared floors (contracts, sources,
store) and never import each other; the shared floors import no step; nothing under
components/ imports pipelines/. Every import counts, also one inside a function.

And no code under components/ branches on a storage scheme: only the storage layer
(components/contracts/storage/) compares a path with "gs://", "s3://" or "minio://" or
imports a storage SDK (google-cloud-storage, boto3)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = {"contracts": {"contracts"}, "kinds": {"contracts", "kinds"}, "sources": {"contracts", "kinds", "sources"},
          "store": {"contracts", "store"}}


def steps(components: Path) -> list:
    return sorted(p.name for p in components.iterdir() if (p / "component.py").is_file())


def imported_modules(path: Path):
    """(line, dotted module) of every import in a Python file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


def violations(root: Path) -> list:
    """One line per import that crosses a wall, as `file:line imports module (rule)`."""
    components = root / "components"
    all_steps = steps(components)
    found = []
    for path in sorted(components.rglob("*.py")):
        parts = path.relative_to(components).parts
        home = parts[0] if len(parts) > 1 else None
        for line, module in imported_modules(path):
            names = module.split(".")
            where = f"{path.relative_to(root)}:{line} imports {module}"
            if names[0] == "pipelines":
                found.append(f"{where} (components never import pipelines/)")
            if names[0] != "components" or len(names) < 2:
                continue
            target = names[1]
            if home in all_steps and target in all_steps and target != home:
                found.append(f"{where} (a step imports no other step; move the shared part to components/contracts)")
            if home in SHARED and target not in SHARED[home] and (target in all_steps or target in SHARED):
                found.append(f"{where} (components/{home} may import only {', '.join(sorted(SHARED[home]))})")
    return found


SCHEMES = ("gs://", "s3://", "minio://")
STORAGE_SDKS = ("google.cloud.storage", "boto3", "botocore")
STORAGE_LAYER = ("contracts", "storage")
COMPAT_GCS = ("contracts", "compat", "gcs.py")


def _is_scheme(node) -> bool:
    if isinstance(node, ast.Tuple):
        return any(_is_scheme(e) for e in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(SCHEMES)


def scheme_branches(root: Path) -> list:
    """One line per place outside the storage layer that tests a path's scheme (a
    comparison or startswith/endswith with a scheme literal) or imports a storage SDK."""
    components = root / "components"
    found = []
    for path in sorted(components.rglob("*.py")):
        parts = path.relative_to(components).parts
        if parts[:2] == STORAGE_LAYER or path.name.startswith("test_"):
            continue
        where = str(path.relative_to(root))
        for line, module in imported_modules(path):
            # compat.gcs holds the storage layer's one private name of the SDK (compat's rule)
            if module.startswith(STORAGE_SDKS) and parts != COMPAT_GCS:
                found.append(f"{where}:{line} imports {module} (only components/contracts/storage talks to a store)")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            tested = []
            if isinstance(node, ast.Compare):
                tested = [node.left, *node.comparators]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("startswith", "endswith", "removeprefix", "partition", "split"):
                tested = list(node.args)
            if any(_is_scheme(n) for n in tested):
                found.append(f"{where}:{node.lineno} tests a scheme (use components.contracts.storage: is_remote, "
                             "join, the same functions for every store)")
    return found


def test_no_step_branches_on_a_storage_scheme():
    assert scheme_branches(ROOT) == []


@pytest.mark.parametrize("line", ['def f(uri):\n    return uri.startswith("gs://")',
                                  'def f(uri):\n    return uri[:5] == "s3://"',
                                  "from google.cloud import storage"])
def test_the_scheme_check_fails_on_a_deliberate_branch(tmp_path, line):
    (tmp_path / "components" / "push").mkdir(parents=True)
    (tmp_path / "components" / "push" / "logic.py").write_text(line + "\n", encoding="utf-8")
    (tmp_path / "components" / "contracts" / "storage").mkdir(parents=True)
    (tmp_path / "components" / "contracts" / "storage" / "gcs.py").write_text(line + "\n", encoding="utf-8")
    found = scheme_branches(tmp_path)
    assert len(found) == 1 and found[0].startswith("components/push/logic.py:"), found


LISTED_SCHEMES = (*SCHEMES, "pvc://")


def _docstrings(tree: ast.AST) -> set:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def scheme_lists(root: Path) -> list:
    """One line per tuple, list or set literal, and per string (a help text, a description, an
    error's fix; an f-string's literal parts read whole; docstrings' prose not), outside the
    storage layer that names two or more URI schemes: the schemes are declared once
    (components/contracts/storage/schemes.py; schemes.named() words them)."""
    found = []
    files = sorted([*(root / "components").rglob("*.py"), *(root / "pipelines").rglob("*.py")])
    assert files, f"no .py file under {root}/components or {root}/pipelines: the check would scan nothing"
    for path in files:
        rel = path.relative_to(root)
        if rel.parts[1:3] == STORAGE_LAYER or path.name.startswith("test_"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        docstrings, in_fstrings = _docstrings(tree), set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                named = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
                         and e.value.startswith(LISTED_SCHEMES)]
                if len(named) >= 2:
                    found.append(f"{rel}:{node.lineno} lists the schemes {', '.join(named)} (derive them from "
                                 "components.contracts.storage.schemes)")
            text = None
            if isinstance(node, ast.JoinedStr):
                parts = [part for part in node.values if isinstance(part, ast.Constant)]
                in_fstrings |= {id(part) for part in parts}
                text = " ".join(part.value for part in parts)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                    and id(node) not in in_fstrings:
                text = node.value
            named = [scheme for scheme in LISTED_SCHEMES if text and scheme in text]
            if len(named) >= 2:
                found.append(f"{rel}:{node.lineno} names the schemes {', '.join(named)} in a string (word them "
                             "with components.contracts.storage.schemes.named)")
    return found


def test_no_module_outside_the_storage_package_lists_schemes():
    assert scheme_lists(ROOT) == []


def test_the_scheme_list_check_fails_on_a_deliberate_list(tmp_path):
    (tmp_path / "pipelines" / "manifests").mkdir(parents=True)
    (tmp_path / "pipelines" / "manifests" / "serve.py").write_text('OK = ("gs://",)\nBAD = ["s3://", "gs://"]\n')
    (tmp_path / "components" / "contracts" / "storage").mkdir(parents=True)
    (tmp_path / "components" / "contracts" / "storage" / "schemes.py").write_text('ALL = ("gs://", "s3://")\n')
    (tmp_path / "pipelines" / "cli.py").write_text(
        '"""Reads gs:// or s3:// (prose)."""\nHELP = "a path, gs:// or s3:// URI"\n'
        'FIX = f"put {x} on gs://BUCKET/PATH or " "s3://BUCKET/PATH"\nONE = f"{x} on gs://"\n')
    assert scheme_lists(tmp_path) == [
        "pipelines/cli.py:2 names the schemes gs://, s3:// in a string (word them with "
        "components.contracts.storage.schemes.named)",
        "pipelines/cli.py:3 names the schemes gs://, s3:// in a string (word them with "
        "components.contracts.storage.schemes.named)",
        "pipelines/manifests/serve.py:2 lists the schemes s3://, gs:// (derive them "
        "from components.contracts.storage.schemes)"]
    with pytest.raises(AssertionError, match="would scan nothing"):
        scheme_lists(tmp_path / "elsewhere")


def test_steps_stand_side_by_side_on_shared_contracts():
    from pipelines import steps as registry

    # each a registered step, the exit handler or the scoring pipeline's one task (predict)
    folders = {step.module.split(".")[1] for step in (*registry.registered(), registry.EXIT_HANDLER)}
    assert steps(ROOT / "components") == sorted(folders | {"predict"})
    assert len(folders) == len(registry.names()) + 1
    assert violations(ROOT) == []


@pytest.mark.parametrize("home, line, rule", [
    ("push/logic.py", "from components.evaluate.logic import read_blessing", "a step imports no other step"),
    ("validate/logic.py", "def f():\n    import components.ingest.logic", "a step imports no other step"),
    ("contracts/names.py", "from components.push import serving", "components/contracts may import only"),
    ("train/logic.py", "from pipelines.config import PipelineConfig", "components never import pipelines/"),
])
def test_the_check_fails_on_a_deliberate_violation(tmp_path, home, line, rule):
    for step in ("evaluate", "push", "train", "validate", "ingest"):
        (tmp_path / "components" / step).mkdir(parents=True)
        (tmp_path / "components" / step / "component.py").write_text("", encoding="utf-8")
    (tmp_path / "components" / "contracts").mkdir()
    target = tmp_path / "components" / home
    target.write_text(line + "\n", encoding="utf-8")
    found = violations(tmp_path)
    assert len(found) == 1 and found[0].startswith(f"components/{home}:") and rule in found[0]


PRODUCT_FILE_LINES = 400


def test_no_product_file_is_over_400_lines():
    """A module over 400 lines holds more than one concern (issue #28): split it by concern,
    as components/train (optimizers, resilience, telemetry, ...) and pipelines/cli (one module
    per command group) are."""
    long = {}
    for path in sorted([*(ROOT / "components").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")]):
        if path.name.startswith("test_") or "compiled" in path.parts:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > PRODUCT_FILE_LINES:
            long[str(path.relative_to(ROOT))] = lines
    assert not long, f"over {PRODUCT_FILE_LINES} lines, split by concern: {long}"
