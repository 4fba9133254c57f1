"""The step registry: every step of the pipeline declared once, in run order.

A step's entry names its component ("module:function": the function's name is the step's
name, kfp's `--function_to_execute` and, kfp-renamed, the task's name), where each of its
inputs comes from (a run parameter, another step's output, the config, a KFP placeholder),
the steps it runs after beyond its inputs, whether it is cached, its pod's defaults, what
the warm task start imports for it, and a hook for what no entry can say. Its outputs are
its component's (`outputs()`, read from the function's signature through kfp).

Everything that lists steps reads them from here when it runs, never a copy: the factory's
wiring (pipelines/factory.py), pod shapes and cluster.resources (pipelines/pods.py,
pipelines/config.py), the warm task start (pipelines/warm.py), the local task cache
(pipelines/task_cache.py), `gpupipe run`'s summary (pipelines/local_run.py) and the steps
table in docs/architecture.md (pipelines/reference.py). A test adds a step with
`register(step, before=...)` and takes it away with `unregister(name)`.

This module imports neither kfp nor TensorFlow: the config and the warm server read it.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from components.kinds import Columns
from pipelines.resources import StepResources

# The names other modules read a step's artifacts by (run directories are <task>/<output>).
FINGERPRINT, INGEST, VALIDATE, TRAIN, EVALUATE, PUSH, REPORT = (
    "fingerprint", "ingest", "validate", "train", "evaluate", "push", "report")
NOTIFY = "notify"  # the exit handler on the cluster (with notify.webhook_secret), not one of the steps

# The pipeline's parameters (the fields of the Kubeflow run form, what local runs override):
# pipelines/factory.py's pipeline function takes exactly these.
P_DATA_SOURCE, P_EPOCHS, P_THRESHOLD, P_SERVING_BASE, P_LEARNING_RATE = (
    "data_source", "epochs", "eval_threshold", "serving_base", "learning_rate")

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass
class Build:
    """What a step's inputs and hook read while the factory builds the pipeline."""

    config: Any  # the validated PipelineConfig (pipelines/config.py, which reads this module)
    local: bool  # for kfp.local (`gpupipe run`), not the cluster
    params: Dict[str, Any] = field(default_factory=dict)  # run parameter -> the pipeline's channel for it
    tasks: Dict[str, Any] = field(default_factory=dict)  # step -> its task, as built so far


def load(reference: str) -> Any:
    """The object a "module:name" string names (imported now)."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


# -- where an input comes from -----------------------------------------------------------------
@dataclass(frozen=True)
class Param:
    """A run parameter (P_*)."""
    name: str

    def value(self, build: Build) -> Any:
        return build.params[self.name]

    def describe(self) -> str:
        return f"run parameter `{self.name}`"


@dataclass(frozen=True)
class Output:
    """An output of an earlier step."""
    step: str
    output: str

    def value(self, build: Build) -> Any:
        return build.tasks[self.step].outputs[self.output]

    def describe(self) -> str:
        return f"{self.step}'s `{self.output}`"


@dataclass(frozen=True)
class Section:
    """A config section as JSON (the step reads it back with its own settings model)."""
    section: str

    def value(self, build: Build) -> Any:
        return getattr(build.config, self.section).model_dump_json()

    def describe(self) -> str:
        return f"the `{self.section}:` section (JSON)"


@dataclass(frozen=True)
class Setting:
    """One config value, by its dotted key."""
    key: str

    def value(self, build: Build) -> Any:
        found: Any = build.config
        for part in self.key.split("."):
            found = getattr(found, part)
        return found

    def describe(self) -> str:
        return f"`{self.key}`"


@dataclass(frozen=True)
class Value:
    """Computed from the build: a function of a Build, or a "module:function" naming one
    (for a function that needs kfp)."""
    compute: Union[Callable[[Build], Any], str]
    text: str  # what it is, for the steps table

    def value(self, build: Build) -> Any:
        return (load(self.compute) if isinstance(self.compute, str) else self.compute)(build)

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True)
class Placeholder:
    """A KFP placeholder the backend fills in at run time (kfp.dsl.<name>)."""
    name: str

    def value(self, build: Build) -> Any:
        from kfp import dsl

        return getattr(dsl, self.name)

    def describe(self) -> str:
        return f"KFP's `{self.name}`"


Source = Union[Param, Output, Section, Setting, Value, Placeholder]
COLUMNS = Value(lambda build: Columns.part_of(build.config.data).model_dump_json(),
                "the table's columns (`Columns.part_of(data)`, JSON)")


# -- a step ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    name: str
    display_name: str  # the task's name in the Kubeflow UI
    component: str  # "module:function", the function named as the step
    inputs: Mapping[str, Source]
    resources: StepResources  # the pod's defaults; cluster.resources.<name> overrides them
    cached: bool  # KFP's cache on the cluster, pipelines/task_cache.py locally
    preload: Tuple[str, ...] = ()  # what the warm server imports before this step's task starts
    after: Tuple[str, ...] = ()  # steps it runs after beyond those its inputs come from
    hook: str = ""  # "module:Class" (a pipelines.factory.StepTask): image, extra settings, pod shape
    why: str = ""  # one line for the steps table: what it is for, when the entry alone does not say

    @property
    def module(self) -> str:
        return self.component.partition(":")[0]

    @property
    def task(self) -> str:
        """kfp's name for the task: the component's name ("bias_check" is "Bias check") made
        Kubernetes-safe, kfp 2.13 kfp/dsl/component_factory.py _python_function_name_to_component_name
        and kfp/dsl/pipeline_context.py add_task (utils.maybe_rename_for_k8s)."""
        return self.name.replace("_", "-")

    def function(self) -> Callable:
        return load(self.component)

    def outputs(self) -> List[str]:
        """The component's outputs (kfp reads them from its signature: Output[...] parameters,
        a returned value or NamedTuple)."""
        from kfp import dsl

        # only the signature is read: any image does (an explicit one, or kfp warns of its default)
        spec = dsl.component(self.function(), base_image="python:3.11", install_kfp_package=False).component_spec
        return list(spec.outputs or {})


def _cpu(request: str, limit: str, memory: str, memory_limit: str, timeout: str) -> StepResources:
    return StepResources(cpu=request, cpu_limit=limit, memory=memory, memory_limit=memory_limit, timeout=timeout)


# The steps, in run order. Requests are what a step needs on the example data; limits leave room
# for larger tables.
_STEPS: List[Step] = [
    Step(FINGERPRINT, "Fingerprint inputs", "components.fingerprint.component:fingerprint",
         {"source": Param(P_DATA_SOURCE), "data_format": Setting("data.format"), "serving_base": Param(P_SERVING_BASE),
          "model_name": Setting("serving.model_name")},
         _cpu("250m", "1", "512Mi", "1Gi", "15m"), cached=False,
         preload=("components.sources.readers", "components.fingerprint.logic"),
         why="never cached: its outputs put the data's and the served model's state into the cache keys of "
             "ingest, validate and evaluate"),
    Step(INGEST, "Ingest data", "components.ingest.component:ingest",
         {"source": Param(P_DATA_SOURCE), "settings": Section("data"),
          "numeric_label": Value(lambda build: build.config.training.task == "regression",
                                 "whether `training.task` is regression"),
          "source_fingerprint": Output(FINGERPRINT, "data")},
         _cpu("1", "2", "2Gi", "4Gi", "6h"), cached=True,
         preload=("pyarrow.csv", "pyarrow.parquet", "components.sources.readers", "tensorflow",
                  "tfx_bsl.coders.example_coder", "tensorflow_data_validation", "components.ingest.logic")),
    Step(VALIDATE, "Validate data (TFDV)", "components.validate.component:validate",
         {"examples": Output(INGEST, "examples"), "columns": COLUMNS, "settings": Section("validation"),
          "serving_base": Param(P_SERVING_BASE), "model_name": Setting("serving.model_name"),
          "served_version": Output(FINGERPRINT, "served")},
         _cpu("1", "2", "4Gi", "8Gi", "6h"), cached=True,
         preload=("tensorflow_data_validation", "components.validate.logic")),
    # Cached: the key is the examples (ingest's, cached by the data's fingerprint), the settings, the run
    # parameters and the image (its tag carries the commit). After validate, which stops the run on bad
    # data, though it takes nothing from it. Its resources are the pods that train; a train task that
    # launches a job only creates and follows it (pipelines/pods.py: launcher_shape).
    Step(TRAIN, "Train model", "components.train.component:train",
         {"examples": Output(INGEST, "examples"), "columns": COLUMNS, "settings": Section("training"),
          "launch": Value("pipelines.factory:launch_argument",
                          "the job to launch (`training.pods`; none in a local run)"),
          "export": Setting("serving.export"), "epochs": Param(P_EPOCHS), "learning_rate": Param(P_LEARNING_RATE)},
         _cpu("2", "4", "4Gi", "8Gi", "24h"), cached=True, after=(VALIDATE,), hook="pipelines.factory:TrainTask",
         preload=("tensorflow", "tf_keras", "components.train.logic", "components.train.model", "components.train.parts",
                  "components.train.vision",
                  "components.train.runtime", "components.train.data", "components.train.optimizers",
                  "components.train.resilience", "components.train.telemetry", "components.train.export",
                  "components.train.target", "components.train.report", "components.contracts.compat.tf_keras"),
         why="the GPU image, retries and the pods that train (or a launcher) come from its hook"),
    Step(EVALUATE, "Evaluate model", "components.evaluate.component:evaluate",
         {"model": Output(TRAIN, "model"), "examples": Output(INGEST, "examples"), "settings": Section("evaluation"),
          "threshold": Param(P_THRESHOLD), "serving_base": Param(P_SERVING_BASE),
          "model_name": Setting("serving.model_name"), "served_version": Output(FINGERPRINT, "served")},
         _cpu("1", "2", "2Gi", "4Gi", "2h"), cached=True,
         preload=("tensorflow", "pandas", "sklearn.metrics", "components.evaluate.logic")),
    Step(PUSH, "Push to serving", "components.push.component:push",
         {"model": Output(TRAIN, "model"), "blessing": Output(EVALUATE, "blessing"),
          "examples": Output(INGEST, "examples"), "statistics": Output(VALIDATE, "statistics"),
          "schema": Output(VALIDATE, "schema"), "settings": Section("serving"), "serving_base": Param(P_SERVING_BASE),
          "run_id": Placeholder("PIPELINE_JOB_ID_PLACEHOLDER"),
          "run_name": Placeholder("PIPELINE_JOB_NAME_PLACEHOLDER"),
          "lineage": Value("pipelines.factory:push_lineage",
                           "the pipeline, gpupipe's version, the image, the config's digest (JSON)"),
          "data_fingerprint": Output(FINGERPRINT, "data")},
         _cpu("500m", "1", "1Gi", "2Gi", "1h"), cached=False,
         preload=("tensorflow", "tensorflow_serving.apis.prediction_log_pb2", "components.push.logic"),
         why="gates on the blessing itself (kfp.local has no dsl.If); never cached: it writes the serving base"),
    # Reads what the others recorded; the page is the task's HTML output in the Kubeflow UI.
    Step(REPORT, "Run report", "components.report.component:report",
         {"train_report": Output(TRAIN, "report"), "blessing": Output(EVALUATE, "blessing"),
          "anomalies": Output(VALIDATE, "anomalies"), "pushed": Output(PUSH, "pushed"), "pipeline": Setting("name"),
          "run_id": Placeholder("PIPELINE_JOB_ID_PLACEHOLDER")},
         _cpu("250m", "1", "512Mi", "1Gi", "15m"), cached=False, preload=("plotly", "components.report.logic")),
]

# The exit handler on the cluster with notify.webhook_secret: declared like a step, built by
# pipelines/factory.py around the steps (kfp.local has no exit handlers: `gpupipe run`
# notifies from its summary). Not a step: not in registered(), not in cluster.resources.
EXIT_HANDLER = Step(
    NOTIFY, "Notify", "components.notify.component:notify",
    {"settings": Value(lambda build: build.config.notify.for_cluster().model_dump_json(),
                       "the `notify:` section for the cluster (JSON)"),
     "pipeline": Setting("name"), "run_id": Placeholder("PIPELINE_JOB_ID_PLACEHOLDER"),
     "serving_base": Param(P_SERVING_BASE), "model_name": Setting("serving.model_name")},
    _cpu("100m", "500m", "256Mi", "512Mi", "10m"), cached=False, hook="pipelines.factory:NotifyTask")


def registered() -> Tuple[Step, ...]:
    """The steps, in run order."""
    return tuple(_STEPS)


def names() -> Tuple[str, ...]:
    return tuple(step.name for step in _STEPS)


def get(name: str) -> Step:
    """A step, or the exit handler, by name."""
    for step in (*_STEPS, EXIT_HANDLER):
        if step.name == name:
            return step
    raise KeyError(f"no step {name!r}; the steps are {', '.join(names())} (pipelines/steps.py)")


def by_task(task: str) -> Optional[Step]:
    """The step whose kfp task is named `task` (kfp.local's log lines and run folders name tasks)."""
    return next((step for step in _STEPS if step.task == task), None)


def check(step: Step, earlier: Tuple[Step, ...]) -> None:
    """Refuses an entry that cannot be built: a bad or taken name, a component named otherwise
    than the step, an input from or an `after` on a step that does not run before it."""
    before = {s.name for s in earlier}
    problems = []
    if not _NAME.match(step.name):
        problems.append("a name is lowercase letters, digits and '_'")
    if step.name in before:
        problems.append("the name is taken")
    if step.component.partition(":")[2] != step.name:
        problems.append(f"its component {step.component!r} must be the function named {step.name}")
    for name, source in step.inputs.items():
        if isinstance(source, Output) and source.step not in before:
            problems.append(f"input {name} comes from {source.step}, which does not run before it")
    problems += [f"it runs after {other}, which does not run before it" for other in step.after if other not in before]
    if problems:
        raise ValueError(f"step {step.name}: {'; '.join(problems)}")


def register(step: Step, before: Optional[str] = None) -> Step:
    """Adds a step at the end, or before the step named `before`."""
    at = len(_STEPS) if before is None else names().index(before)
    if step.name in (*names(), NOTIFY):
        raise ValueError(f"step {step.name}: the name is taken")
    check(step, tuple(_STEPS[:at]))
    _STEPS.insert(at, step)
    return step


def unregister(name: str) -> None:
    _STEPS.remove(get(name))


for _at, _step in enumerate(_STEPS):
    check(_step, tuple(_STEPS[:_at]))
check(EXIT_HANDLER, tuple(_STEPS))
