"""KFP wrapper for push: maps typed artifacts to `components.push.logic.run_push`."""
from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output


def push(model: Input[Model], blessing: Input[Artifact], examples: Input[Dataset], statistics: Input[Artifact],
         schema: Input[Artifact], serving_base: str, model_name: str, keep_versions: int, endpoint: str,
         smoke_rows: int, smoke_timeout: float, fail_if_not_blessed: bool, pushed: Output[Artifact]) -> str:
    """Copies a blessed model to <serving_base>/<model_name>/<next integer version>/ (whole or
    not at all) with warmup requests, training statistics, schema and metrics; labels it in
    models.config; smoke-tests it when an endpoint is set; keeps the newest versions. An
    unblessed model is not pushed and the output says why. Returns the version's path or ""."""
    from components.push.logic import run_push

    result = run_push(model.path, blessing.path, examples.path, statistics.path, schema.path, serving_base,
                      model_name, pushed.path, keep_versions, endpoint, smoke_rows, smoke_timeout,
                      fail_if_not_blessed)
    pushed.metadata.update(result.to_dict())
    return result.path or ""


def make_push_op(image: str):
    return dsl.component(push, base_image=image, install_kfp_package=False)
