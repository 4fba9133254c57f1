"""The optimizers: by config name (tf_keras' legacy classes, Adam applying embedding
gradients densely), the learning-rate schedule, and gradient accumulation.

Gradient accumulation (`training.gradient_accumulation_steps: k`): the optimizer applies
the mean of k consecutive micro-batch gradients once every k training steps, an effective
batch of k x the global batch on a GPU that holds one micro-batch.

tf_keras 2.16 has no such option: `GradientAccumulation` (components/contracts/compat/tf_keras.py,
where the private OptimizerV2 methods it overrides are) wraps the compiled optimizer, the
LossScaleOptimizer too under mixed_float16, the way tf_keras' own LossScaleOptimizer wraps
one. The wrapped optimizer's `iterations` (what the schedule, checkpoints and the report
count) advance once per applied update; its micro-step counter and accumulators are
checkpointed with it, so a resume can start at any step, also mid-window.
"""
from __future__ import annotations

import math

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tf_keras

from components.contracts.compat.tf_keras import Adam, GradientAccumulation, create_optimizer_slots
from components.contracts.errors import GpupipeError


@tf_keras.saving.register_keras_serializable(package="gpupipe")
class WarmupThenDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `rate` over `warmup_steps`, then `decay` over the steps after
    it: "cosine" to alpha x rate at `decay_steps`, "step" x factor every `every_steps`, or
    "none"."""

    def __init__(self, rate: float, warmup_steps: int, decay: str, decay_steps: int, alpha: float = 0.0,
                 every_steps: int = 1000, factor: float = 0.5):
        super().__init__()
        self.rate, self.warmup_steps, self.decay, self.decay_steps = rate, warmup_steps, decay, decay_steps
        self.alpha, self.every_steps, self.factor = alpha, every_steps, factor

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        after = tf.maximum(step - self.warmup_steps, 0.0)
        if self.decay == "cosine":
            progress = tf.minimum(after / self.decay_steps, 1.0)
            decayed = self.rate * ((1 - self.alpha) * 0.5 * (1 + tf.cos(math.pi * progress)) + self.alpha)
        elif self.decay == "step":
            decayed = self.rate * tf.pow(self.factor, tf.floor(after / self.every_steps))
        else:
            decayed = tf.constant(self.rate, tf.float32)
        if not self.warmup_steps:
            return decayed
        return tf.where(step < self.warmup_steps, self.rate * step / self.warmup_steps, decayed)

    def get_config(self):
        return {"rate": self.rate, "warmup_steps": self.warmup_steps, "decay": self.decay,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "every_steps": self.every_steps,
                "factor": self.factor}



def learning_rate_schedule(rate: float, schedule, total_steps: int):
    """The rate itself, or a tf_keras LearningRateSchedule: linear warmup to `rate`, then
    cosine or step decay (components.train.settings.LearningRateSchedule)."""
    if schedule is None:
        return rate
    return WarmupThenDecay(rate, schedule.warmup_steps, schedule.decay, max(1, total_steps - schedule.warmup_steps),
                           schedule.alpha, schedule.every_steps, schedule.factor)


def make_optimizer(name: str, learning_rate):
    """tf_keras optimizers by config name (a rate or a LearningRateSchedule).

    The `optimizers.legacy` classes: each variable's update is one fused kernel
    (ResourceApplyAdam, ResourceSparseApplyAdagradV2, ...) where the newer classes build
    the same update from about ten ops per variable in Python; Adam also applies embedding
    gradients densely (components.contracts.compat.tf_keras.Adam). Same update rules, a train step with
    fewer ops to trace (docs/benchmarks.md)."""
    legacy = tf_keras.optimizers.legacy
    optimizers = {"adam": Adam, "adagrad": legacy.Adagrad, "ftrl": legacy.Ftrl, "sgd": legacy.SGD}
    if name not in optimizers:
        raise GpupipeError(f"training.optimizer: '{name}' is not one of {', '.join(optimizers)}")
    return optimizers[name](learning_rate)


def build_optimizer_slots(optimizer, variables) -> None:
    """The optimizer's slot variables now, not in the first step: a tf.function that creates
    variables on its first call is traced twice. (tf_keras' own route for a legacy
    optimizer, the one `Model.load_weights` takes.)"""
    create_optimizer_slots(optimizer, variables)


def accumulate(model, steps: int):
    """Wraps the compiled model's optimizer (steps > 1), before the train function is made."""
    if steps > 1:
        model.optimizer = GradientAccumulation(model.optimizer, steps)
    return model


def batches_done(optimizer) -> int:
    """Training steps (batches) run so far: the micro-step counter with accumulation, else
    the optimizer's iterations."""
    counter = optimizer.micro_steps if isinstance(optimizer, GradientAccumulation) else optimizer.iterations
    return int(counter.numpy())
