"""The step registry (pipelines/steps.py) is the one list of steps: a throwaway step
(tests/bias_check/: one folder, one entry, registered between evaluate and push) compiles
into the pipeline with its inputs, caching and pod shape, and runs locally through
pipelines.local_run as `gpupipe run` runs it, with nothing else changed. No other file of
components/ or pipelines/ lists the step names, each entry can be built, and the
architecture page's recipe and "A step" lines say what the folders and the code hold."""
import ast
import re
from pathlib import Path

import pytest
import yaml

from pipelines import steps

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SHORT = {"epochs": 4, "eval_threshold": 0.5}  # a short training that still pushes (as tests/test_cache.py)


@pytest.fixture
def bias_check():
    """The throwaway step, registered for one test and taken away after it."""
    from tests.bias_check import STEP

    steps.register(STEP, before=steps.PUSH)
    try:
        yield STEP
    finally:
        steps.unregister(STEP.name)


def penguins(tmp_path: Path, **cluster):
    from pipelines.config import parse_config

    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["data"]["source"] = str(ROOT / "data" / "penguins.csv")
    raw["serving"]["base"] = str(tmp_path / "serving")
    raw["cluster"].update(cluster)
    return parse_config(raw)


# -- a new step through the registry alone ------------------------------------------------------
@pytest.mark.compile
def test_a_registered_step_compiles_with_its_inputs_caching_and_pod_shape(tmp_path, bias_check):
    from pipelines.cli import compile_to_text

    assert steps.names() == ("fingerprint", "ingest", "validate", "train", "evaluate", "bias_check", "push", "report")
    config = penguins(tmp_path, resources={"bias_check": {"memory": "512Mi"}})  # its key is a cluster.resources key
    spec, platform = yaml.safe_load_all(compile_to_text(config))
    task = spec["root"]["dag"]["tasks"]["bias-check"]  # kfp's name for the task of function bias_check
    assert task["taskInfo"]["name"] == "Check bias across slices" and task["cachingOptions"] == {"enableCache": True}
    assert task["dependentTasks"] == ["evaluate"]
    assert task["inputs"]["artifacts"] == {
        "blessing": {"taskOutputArtifact": {"producerTask": "evaluate", "outputArtifactKey": "blessing"}}}
    assert task["inputs"]["parameters"] == {"metric": {"runtimeValue": {"constant": "accuracy"}},
                                            "max_gap": {"runtimeValue": {"constant": 0.25}}}
    outputs = spec["components"]["comp-bias-check"]["outputDefinitions"]["artifacts"]
    assert outputs == {"report": {"artifactType": {"schemaTitle": "system.Markdown", "schemaVersion": "0.0.1"}}}
    container = spec["deploymentSpec"]["executors"]["exec-bias-check"]["container"]
    assert container["args"][-2:] == ["--function_to_execute", "bias_check"]
    assert container["image"].split("/")[-1].startswith("gpupipe-cpu:")
    assert container["resources"] == {"cpuRequest": 0.3, "cpuLimit": 0.6, "memoryRequest": 0.536870912,
                                      "memoryLimit": 0.805306368, "resourceCpuRequest": "300m",
                                      "resourceCpuLimit": "600m", "resourceMemoryRequest": "512Mi",
                                      "resourceMemoryLimit": "768Mi"}
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-bias-check"]
    assert k8s["activeDeadlineSeconds"] == "1200"  # its own 20m
    assert k8s["secretAsVolume"][0]["secretName"] == "gpupipe-gcs-key"  # what every task carries
    # push and report are as they were: the step takes nothing from them, they nothing from it
    assert spec["root"]["dag"]["tasks"]["push"]["dependentTasks"] == [
        "evaluate", "fingerprint", "ingest", "train", "validate"]


@pytest.mark.unit
def test_what_reads_the_registry_sees_the_registered_step(bias_check):
    from pipelines import local_run, pods, reference, task_cache, warm
    from pipelines.config import parse_config

    assert "tests.bias_check.component" in warm.default_preload()
    assert warm.needs("bias_check") == ("tests.bias_check.logic",)
    assert "tests.bias_check.logic" in warm.lookahead("train") and "tests.bias_check.logic" in warm.everything()
    assert task_cache.cached() == {"ingest", "validate", "train", "evaluate", "bias_check"}
    assert local_run.step_column() == len("fingerprint")
    table = reference.steps_table()
    assert "| 6 | `bias_check` | Check bias across slices | `tests.bias_check.component` | `blessing` ← " \
           "evaluate's `blessing`<br>`metric` ← `evaluation.metric`<br>`max_gap` ← 0.25 | `report` | yes | " \
           "300m / 600m CPU, 384Mi / 768Mi, 20m |" in table
    assert "| 7 | `push` |" in table
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["cluster"]["resources"] = {"bias_check": {"cpu": "1"}}
    assert pods.step_resources(parse_config(raw), "bias_check").cpu_limit == "1"  # the request lifts the limit


@pytest.mark.unit
def test_a_step_not_registered_is_no_resources_key():
    from components.contracts.errors import GpupipeError
    from pipelines.config import parse_config

    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["cluster"]["resources"] = {"bias_check": {"cpu": "1"}}
    with pytest.raises(GpupipeError) as err:
        parse_config(raw, "configs/penguins.yaml")
    assert str(err.value) == ("configs/penguins.yaml: cluster.resources: unknown step(s) bias_check; use fingerprint, "
                              "ingest, validate, train, evaluate, push, report")


@pytest.mark.e2e
def test_a_registered_step_runs_locally_as_gpupipe_run_runs_it(tmp_path, bias_check):
    from pipelines.local_run import run_local

    summary = run_local(penguins(tmp_path), runs_dir=str(tmp_path / "runs"), overrides=SHORT, quiet=True)
    assert summary.ok, summary.render()
    assert [s.name for s in summary.steps] == list(steps.names())
    assert {s.name: s.status for s in summary.steps}["bias_check"] == "SUCCESS"
    assert re.search(r"^  bias_check  SUCCESS +\d+\.\ds$", summary.render(), re.M), summary.render()
    page = (Path(summary.run_dir) / "bias-check" / "report").read_text()
    assert page.startswith("# Bias check: accuracy across slices (at most 0.25 apart)")
    assert re.search(r"^\| island \| \w+ \| \w+ \| \d\.\d{4} \| (ok|over) \|$", page, re.M), page
    assert list((tmp_path / "runs" / ".cache" / "bias_check").iterdir())  # cached locally, as on the cluster
    assert summary.push["pushed"]  # push ran after it, as before


# -- the registry holds -------------------------------------------------------------------------
@pytest.mark.unit
def test_each_entry_gives_its_component_every_input_from_an_output_that_exists():
    import inspect

    for step in (*steps.registered(), steps.EXIT_HANDLER):
        function = step.function()
        assert function.__name__ == step.name
        outputs = set(step.outputs())
        taken = {name for name in inspect.signature(function).parameters if name not in outputs}
        taken -= {"status"} if step is steps.EXIT_HANDLER else set()  # KFP's final status, for an exit task
        assert set(step.inputs) == taken, step.name
        for name, source in step.inputs.items():
            if isinstance(source, steps.Output):
                assert source.output in steps.get(source.step).outputs(), f"{step.name}.{name}"


@pytest.mark.unit
def test_an_entry_that_cannot_be_built_is_refused_in_one_line():
    from dataclasses import replace

    from tests.bias_check import STEP

    late = replace(STEP, inputs={"blessing": steps.Output("push", "pushed")})
    with pytest.raises(ValueError, match="^step bias_check: input blessing comes from push, which does not run "
                                         "before it$"):
        steps.register(late, before=steps.PUSH)
    with pytest.raises(ValueError, match="^step train: the name is taken$"):
        steps.register(steps.get("train"))
    misnamed = replace(STEP, name="bias")
    with pytest.raises(ValueError, match="must be the function named bias"):
        steps.register(misnamed)
    assert "bias_check" not in steps.names() and "bias" not in steps.names()


# -- no other list of the steps -----------------------------------------------------------------
def _docstrings(tree: ast.AST) -> set:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def step_name_literals(root: Path, names) -> dict:
    """file -> the step names it lists, for each .py file under components/ and pipelines/ (but
    the registry) that holds four or more of them as string constants, or one string (a help
    text, a message; f-strings' literal parts too, docstrings' prose not) naming four or more."""
    found = {}
    files = sorted([*(root / "components").rglob("*.py"), *(root / "pipelines").rglob("*.py")])
    assert files, f"no .py file under {root}/components or {root}/pipelines: the check would scan nothing"
    for path in files:
        rel = path.relative_to(root).as_posix()
        if rel == "pipelines/steps.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        strings = [node for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
        held = {node.value for node in strings if node.value in names}
        if len(held) < 4:  # no four constants: a string naming four?
            texts = [node.value for node in strings if id(node) not in docstrings] + [
                " ".join(part.value for part in node.values if isinstance(part, ast.Constant))
                for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)]  # an f-string's literal parts, whole
            held = max(({word for word in re.findall(r"\w+", text) if word in names} for text in texts),
                       key=len, default=set())
        if len(held) >= 4:
            found[rel] = sorted(held)
    return found


def _all_step_names() -> set:
    return {*steps.names(), steps.EXIT_HANDLER.name}


@pytest.mark.unit
def test_no_file_but_the_registry_lists_the_steps():
    assert step_name_literals(ROOT, _all_step_names()) == {}


@pytest.mark.unit
def test_the_list_check_finds_a_list_of_steps(tmp_path):
    (tmp_path / "pipelines" / "cli").mkdir(parents=True)
    (tmp_path / "components" / "push").mkdir(parents=True)
    (tmp_path / "pipelines" / "steps.py").write_text('STEPS = ("ingest", "validate", "train", "push")\n')
    (tmp_path / "pipelines" / "order.py").write_text('ORDER = ("ingest", "validate", "train", "evaluate")\n')
    (tmp_path / "pipelines" / "cli" / "run.py").write_text(
        'HELP = f"default: ingest, validate, train and {x} evaluate reuse"\n')
    (tmp_path / "components" / "push" / "logic.py").write_text(
        '"""push reads what ingest, validate, train and evaluate wrote (prose)."""\n'
        'SPLITS = ("train", "eval")\nA = "push"\nB = "the report of notify"\n')
    assert step_name_literals(tmp_path, _all_step_names()) == {
        "pipelines/cli/run.py": ["evaluate", "ingest", "train", "validate"],
        "pipelines/order.py": ["evaluate", "ingest", "train", "validate"]}
    with pytest.raises(AssertionError, match="would scan nothing"):
        step_name_literals(tmp_path / "elsewhere", _all_step_names())


# -- the architecture page says what is so ------------------------------------------------------
def _section(title: str) -> str:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


@pytest.mark.unit
def test_each_step_folder_holds_what_the_page_says_or_the_page_says_why_not():
    page = _section("A step")
    required = re.findall(r"^\| `([\w*.]+)` \|", page, re.M)
    assert required == ["logic.py", "component.py", "settings.py", "test_*.py", "README.md"]
    missing = {"settings.py": re.search(r"^- No `settings.py`: ([\w, ]+)\.", page, re.M).group(1),
               "test_*.py": re.search(r"^- No tests beside it: ([\w, ]+)\.", page, re.M).group(1)}
    excused = {file: set(names.split(", ")) for file, names in missing.items()}
    folders = {step.module.split(".")[1] for step in (*steps.registered(), steps.EXIT_HANDLER)} | {"predict"}
    for folder in sorted(folders):
        for pattern in required:
            holds = any((ROOT / "components" / folder).glob(pattern))
            assert holds != (folder in excused.get(pattern, ())), (
                f"components/{folder}: {'holds' if holds else 'has no'} {pattern}; docs/architecture.md says otherwise")


@pytest.mark.unit
def test_the_recipes_name_code_that_exists():
    """Every `path.py:Name` the "How to add" recipes and "The steps" name is defined there."""
    named = re.findall(r"`((?:pipelines|components)/[\w/]+\.py): ?(\w+)`",
                       _section("How to add ...") + _section("The steps"))
    assert ("pipelines/steps.py", "_STEPS") in named and ("pipelines/factory.py", "StepTask") in named
    for path, name in named:
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
            t.id for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        assert name in defined, f"docs/architecture.md names {path}:{name}, which is not there"
