"""KFP wrapper for the bias check: maps evaluate's blessing to `tests.bias_check.logic.check_bias`."""
from kfp.dsl import Artifact, Input, Markdown, Output


def bias_check(blessing: Input[Artifact], metric: str, max_gap: float, report: Output[Markdown]):
    """The gate's metric per slice value (evaluate's evaluation.json): the worst and best
    value of each sliced feature and their gap, as a Markdown table."""
    from tests.bias_check.logic import check_bias

    gaps = check_bias(blessing_dir=blessing.path, metric=metric, max_gap=max_gap, report_md=report.path)
    report.metadata["over"] = sorted(f for f, g in gaps.items() if g["gap"] > max_gap)
