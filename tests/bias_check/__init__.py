"""A throwaway step for tests/test_step_registry.py: what a new step is, one folder (this one:
logic.py, component.py) and one registry entry (STEP, which the test registers between
evaluate and push with pipelines.steps.register). It reads evaluate's blessing and writes a
Markdown table of how far apart the gate's metric is across each sliced feature's values."""
from pipelines.resources import StepResources
from pipelines.steps import EVALUATE, Output, Setting, Step, Value

MAX_GAP = 0.25

STEP = Step("bias_check", "Check bias across slices", "tests.bias_check.component:bias_check",
            {"blessing": Output(EVALUATE, "blessing"), "metric": Setting("evaluation.metric"),
             "max_gap": Value(lambda build: MAX_GAP, f"{MAX_GAP}")},
            StepResources(cpu="300m", cpu_limit="600m", memory="384Mi", memory_limit="768Mi", timeout="20m"),
            cached=True, preload=("tests.bias_check.logic",))
