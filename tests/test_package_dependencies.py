"""`pip install .` gives a working gpupipe: every third-party module that product code
(components/, pipelines/) imports, also inside a function, comes from a distribution in the
dependency closure of pyproject.toml's `dependencies` (the extras `test` and `bench` hold the
test tools and the bench baselines and do not count). An import name maps to its
distributions through importlib.metadata.packages_distributions(); a namespace shared by
many distributions (`google`) is narrowed to those whose files hold the imported module."""
import ast
import importlib.metadata as md
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("components", "pipelines")


def product_imports(root: Path) -> dict:
    """{dotted module: first `file:line`} of every absolute import of a third-party module in
    product code (test files beside the code excluded)."""
    found = {}
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*.py")):
            if path.name.startswith("test_"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    top = module.split(".")[0]
                    if top in sys.stdlib_module_names or top in PRODUCT or top == "__future__":
                        continue
                    found.setdefault(module, f"{path.relative_to(root)}:{node.lineno}")
    return found


def dependency_closure(requirements: list) -> set:
    """The canonical names of the distributions `requirements` installs, transitively (extras
    and environment markers as pip evaluates them on this machine)."""
    closure, todo = set(), [(Requirement(r), ()) for r in requirements]
    while todo:
        req, extras = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (extras or ("",))):
            continue
        name = canonicalize_name(req.name)
        key = (name, tuple(sorted(req.extras)))
        if key in closure:
            continue
        closure.add(key)
        try:
            requires = md.requires(req.name) or []
        except md.PackageNotFoundError:
            continue  # not installed here: its own requirements cannot be read (the install check says so)
        todo += [(Requirement(r), tuple(req.extras)) for r in requires]
    return {name for name, _ in closure}


def distributions_of(module: str, index: dict) -> set:
    """The distributions that provide `module` (the top-level map, narrowed by file paths)."""
    top = module.split(".")[0]
    candidates = index.get(top, [])
    if len(candidates) <= 1:
        return {canonicalize_name(d) for d in candidates}
    prefix = module.replace(".", "/")
    narrowed = {canonicalize_name(d) for d in candidates
                if any(str(f).startswith((prefix + "/", prefix + ".")) for f in md.distribution(d).files or [])}
    return narrowed or {canonicalize_name(d) for d in candidates}


def undeclared(root: Path) -> list:
    """One line per product import that no distribution of the closure provides."""
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    closure = dependency_closure(project["dependencies"])
    index = md.packages_distributions()
    problems = []
    for module, where in sorted(product_imports(root).items()):
        dists = distributions_of(module, index)
        if not dists:
            problems.append(f"{where} imports {module}, which no installed distribution provides")
        elif not dists & closure:
            problems.append(f"{where} imports {module} (from {', '.join(sorted(dists))}), which pyproject.toml's "
                            "dependencies do not install; add it to [project] dependencies")
    return problems


def test_every_product_import_is_installed_by_pyprojects_dependencies():
    assert undeclared(ROOT) == []


def test_the_test_tools_stay_in_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    tools = {"pytest", "moto", "gcp-storage-emulator", "mkdocs", "lightgbm", "statsmodels"}
    assert declared & tools == set()
    extras = {canonicalize_name(Requirement(r).name) for reqs in project["optional-dependencies"].values()
              for r in reqs}
    assert tools <= extras


def test_the_check_names_an_undeclared_import(tmp_path):
    """A product file importing a distribution pyproject does not declare (lightgbm: an
    extra's only) is found, with its file and line."""
    (tmp_path / "components").mkdir()
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "components" / "model.py").write_text("import os\n\ndef fit():\n    import lightgbm\n")
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(text)
    assert undeclared(tmp_path) == [
        "components/model.py:4 imports lightgbm (from lightgbm), which pyproject.toml's dependencies do not "
        "install; add it to [project] dependencies"]
    without_boto = "\n".join(line for line in text.splitlines() if "boto" not in line)
    (tmp_path / "pyproject.toml").write_text(without_boto)
    (tmp_path / "pipelines" / "s3.py").write_text("from boto3.session import Session\n")
    assert sorted(p.split(" (")[0] for p in undeclared(tmp_path)) == ["components/model.py:4 imports lightgbm",
                                                                       "pipelines/s3.py:1 imports boto3.session"]
