"""Gradient accumulation (`training.gradient_accumulation_steps: k`): the optimizer applies
the mean of k consecutive micro-batch gradients once every k training steps, an effective
batch of k x the global batch on a GPU that holds one micro-batch.

tf_keras 2.16 has no such option. `GradientAccumulation` wraps the compiled optimizer (the
LossScaleOptimizer too, under mixed_float16: the loss scale then checks and adapts per
applied update) the way tf_keras' own LossScaleOptimizer wraps one:

- each replica adds its micro-batch gradient to its own accumulators (sync-on-read
  variables: one copy per replica, summed when read across replicas or checkpointed);
- a micro-step counter decides, in the graph (tf.cond), whether this step applies; the
  cond sits in the cross-replica context (a merge_call) where the strategy needs one, as in
  LossScaleOptimizer, so the wrapped optimizer's all-reduce and update run only on
  applying steps (one all-reduce per k steps); where the strategy runs without merge_call
  (no strategy, or XLA on GPUs) the gradients are all-reduced every step and the update
  alone waits for the k-th;
- the wrapped optimizer's `iterations` (what learning-rate schedules, checkpoints' "step"
  and the report count) advance once per applied update;
- the accumulators and the counter are tracked with the optimizer, so BackupAndRestore
  checkpoints them and a resume can start at any step, also mid-window. The wrapper has the
  wrapped optimizer's checkpoint format plus them (it delegates its tracking, as
  LossScaleOptimizer does), so a SavedModel holding the model's optimizer loads as before.

An embedding's sparse gradient is added into its accumulator row by row (the rows the batch
touched), but the mean applied every k steps is dense: adagrad/ftrl then update every row
once per k steps, where without accumulation they update only the touched rows each step;
Adam, whose update touches every row anyway, runs it k times less often
(bench/accumulation.py, docs/benchmarks.md)."""
from __future__ import annotations

import tensorflow as tf
import tf_keras
from tf_keras.src.optimizers.legacy.optimizer_v2 import _var_key


class _Unwrapped:
    """Keeps the strategy from unwrapping mirrored variables passed to call_for_each_replica
    (the wrapped optimizer wants the distributed variables, as LossScaleOptimizer does)."""

    def __init__(self, value):
        self.value = value


@tf_keras.saving.register_keras_serializable(package="gpupipe")
class GradientAccumulation(tf.__internal__.tracking.DelegatingTrackableMixin, tf_keras.optimizers.legacy.Optimizer):
    """Applies the mean gradient of `steps` consecutive calls of apply_gradients once, through
    `inner` (one of tf_keras' `optimizers.legacy` classes, which gpupipe trains with, or a
    LossScaleOptimizer around one). Built as tf_keras' own LossScaleOptimizer is: the
    OptimizerV2 interface, delegating to the wrapped optimizer."""

    _HAS_AGGREGATE_GRAD = True

    @tf.__internal__.tracking.no_automatic_dependency_tracking
    def __init__(self, inner, steps: int):
        # Optimizer.__init__ is not called: the wrapped optimizer holds the hyperparameters,
        # the learning rate and `iterations` (as in LossScaleOptimizer).
        if int(steps) < 1:
            raise ValueError(f"gradient accumulation steps must be 1 or more, got {steps}")
        self._optimizer = inner
        self.steps = int(steps)
        self._state = None  # the counter and the accumulators, made by build()
        self._slot_of = {}
        tf.__internal__.tracking.DelegatingTrackableMixin.__init__(self, inner)

    @property
    def inner_optimizer(self):
        return self._optimizer

    @property
    def micro_steps(self) -> tf.Variable:
        """Training steps (micro-batches) seen so far, applied or not."""
        return self._state.micro_steps

    @property
    def iterations(self):
        return self._optimizer.iterations

    @iterations.setter
    def iterations(self, variable):
        self._optimizer.iterations = variable

    @property
    def learning_rate(self):
        return self._optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self._optimizer.learning_rate = value

    @property
    def lr(self):
        return self._optimizer.learning_rate

    def variables(self):
        own = [self._state.micro_steps, *self._state.accumulators] if self._state is not None else []
        return list(self._optimizer.variables()) + own

    @property
    def weights(self):
        return self.variables()

    def __getattribute__(self, name):
        # As LossScaleOptimizer: the hyperparameters are the wrapped optimizer's.
        try:
            return object.__getattribute__(self, name)
        except AttributeError:
            if name in ("_optimizer", "_hyper"):
                raise
            inner = object.__getattribute__(self, "_optimizer")
            if (name := "learning_rate" if name == "lr" else name) in inner._hyper:
                return inner._get_hyper(name)
            raise

    # The slots are the wrapped optimizer's (what a checkpoint saves and restores).
    def get_slot_names(self):
        return self._optimizer.get_slot_names()

    def get_slot(self, var, slot_name):
        return self._optimizer.get_slot(var, slot_name)

    def _restore_slot_variable(self, slot_name, variable, slot_variable):
        return self._optimizer._restore_slot_variable(slot_name, variable, slot_variable)

    def _create_or_restore_slot_variable(self, slot_variable_position, slot_name, variable):
        return self._optimizer._create_or_restore_slot_variable(slot_variable_position, slot_name, variable)

    def _create_all_weights(self, var_list):
        """The wrapped optimizer's slots, then the counter and one accumulator per variable
        (components.train.logic.build_optimizer_slots calls this before the first step)."""
        self._optimizer._create_all_weights(var_list)
        if self._state is not None:
            return
        state = tf.Module(name="gradient_accumulation")
        with tf.init_scope():
            state.micro_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="micro_steps",
                                            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            state.accumulators = []
            for i, var in enumerate(var_list):
                self._slot_of[_var_key(var)] = i
                state.accumulators.append(tf.Variable(
                    tf.zeros(var.shape, var.dtype.base_dtype), trainable=False, name=f"accumulator_{i}",
                    synchronization=tf.VariableSynchronization.ON_READ, aggregation=tf.VariableAggregation.SUM))
        # Tracked beside the wrapped optimizer's own variables: checkpointed with it.
        self._track_trackable(state, "gpupipe_gradient_accumulation")
        object.__setattr__(self, "_state", state)

    def _accumulator(self, var):
        return self._state.accumulators[self._slot_of[_var_key(var)]]

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        return self._optimizer._compute_gradients(loss, var_list, grad_loss, tape=tape)

    def _aggregate_gradients(self, grads_and_vars):
        return self._optimizer._aggregate_gradients(grads_and_vars)

    def minimize(self, loss, var_list, grad_loss=None, name=None, tape=None):
        grads_and_vars = self._compute_gradients(loss, var_list=var_list, grad_loss=grad_loss, tape=tape)
        return self.apply_gradients(grads_and_vars, name=name)

    def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
        grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
        if not grads_and_vars:
            return self.iterations
        with tf.init_scope():
            self._create_all_weights([v for _, v in grads_and_vars])
        if tf.distribute.in_cross_replica_context():
            raise ValueError("apply_gradients() must be called in a replica context")
        aggregated = not experimental_aggregate_gradients
        no_merge_call = tf.__internal__.distribute.strategy_supports_no_merge_call()
        if no_merge_call and not aggregated:
            # The cond below sits in the replica context: all-reduce outside it.
            grads_and_vars = self._optimizer._aggregate_gradients(grads_and_vars)
            aggregated = True
        for grad, var in grads_and_vars:
            accumulator = self._accumulator(var)
            if isinstance(grad, tf.IndexedSlices):
                # An embedding's gradient: add the rows it touched only, into this replica's
                # copy (sync-on-read variables have no scatter_add; their handle in a replica
                # context is the replica's own).
                tf.raw_ops.ResourceScatterAdd(resource=accumulator.handle, indices=grad.indices,
                                              updates=tf.cast(grad.values, accumulator.dtype))
            else:
                accumulator.assign_add(tf.cast(grad, accumulator.dtype), read_value=False)
        variables = _Unwrapped([v for _, v in grads_and_vars])

        def apply_mean(variables):
            # In a replica context: each replica's accumulators hold its own sum (or, when the
            # gradients came aggregated, the same sum on every replica).
            accumulators = [self._accumulator(v) for v in variables.value]
            mean = [a.read_value() / self.steps for a in accumulators]
            self._optimizer.apply_gradients(list(zip(mean, variables.value)),
                                            experimental_aggregate_gradients=not aggregated)
            for a in accumulators:
                a.assign(tf.zeros_like(a), read_value=False)

        if no_merge_call:
            micro = self._state.micro_steps.assign_add(1)
            tf.cond(tf.equal(micro % self.steps, 0), lambda: apply_mean(variables), lambda: None)
        else:
            def cross_replica(distribution, variables):
                micro = self._state.micro_steps.assign_add(1)

                def apply_everywhere():
                    distribution.extended.call_for_each_replica(apply_mean, args=(variables,))

                # In the cross-replica context: a strategy does not support a cond in a
                # replica context whose branch calls merge_call (the wrapped optimizer does).
                tf.cond(tf.equal(micro % self.steps, 0), apply_everywhere, lambda: None)

            tf.distribute.get_replica_context().merge_call(cross_replica, args=(variables,))
        return self.iterations

    def get_config(self):
        return {"inner_optimizer": tf_keras.optimizers.serialize(self._optimizer), "steps": self.steps}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        inner = tf_keras.optimizers.deserialize(config["inner_optimizer"], custom_objects=custom_objects,
                                                use_legacy_optimizer=True)
        return cls(inner, config["steps"])


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
