"""KFP wrapper for push: maps typed artifacts to `components.push.logic.run_push`."""
from kfp import dsl
from kfp.dsl import Artifact, Input, Model, Output


def push(model: Input[Model], blessing: Input[Artifact], serving_base: str, model_name: str,
         pushed: Output[Artifact]) -> str:
    """Copies a blessed model to <serving_base>/<model_name>/<next integer version>/ (whole or
    not at all). An unblessed model is not pushed; the output records why. Returns the
    pushed version's path, or "" when nothing was pushed."""
    from components.push.logic import run_push

    result = run_push(model.path, blessing.path, serving_base, model_name, pushed.path)
    pushed.metadata.update(result.to_dict())
    return result.path or ""


def make_push_op(image: str):
    return dsl.component(push, base_image=image, install_kfp_package=False)
