"""tf_keras 2.16.0's private names (components/contracts/compat/__init__.py, MEASURED_ON),
on TensorFlow 2.16.2: the optimizers gpupipe trains with that override private OptimizerV2
methods, the slot creation tf_keras' legacy optimizers keep private, and BackupAndRestore's
private save. Imported by the train step only (it loads TensorFlow)."""
from __future__ import annotations

import tensorflow as tf
import tf_keras
from tf_keras.src.optimizers.legacy.optimizer_v2 import _var_key


@tf_keras.saving.register_keras_serializable(package="gpupipe")
class Adam(tf_keras.optimizers.legacy.Adam):
    """tf_keras' Adam with one change: an embedding's gradient (IndexedSlices, the rows a
    batch looked up) is applied through the same fused dense kernel as any other gradient
    (overriding OptimizerV2's private `_resource_apply_sparse_duplicate_indices`, which
    calls `_resource_apply_dense`).

    The library's sparse path updates the moments of every row of the table anyway (it
    decays m and v over the whole table, then adds the batch's rows), so the result is the
    same update; it builds about 20 ops per embedding table to do it, the dense kernel one.
    On the click-through model (26 embedding tables) the train step has 1,274 ops instead of
    1,794 to trace and optimise before its first run (docs/benchmarks.md)."""

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
        rows = tf.shape(handle, out_type=indices.dtype)[0]
        return self._resource_apply_dense(tf.math.unsorted_segment_sum(grad, indices, rows), handle, **kwargs)


def create_optimizer_slots(optimizer, variables) -> None:
    """A legacy optimizer's slot variables now, not in the first step: a tf.function that
    creates variables on its first call is traced twice. (tf_keras' own route, the private
    OptimizerV2._create_all_weights that `Model.load_weights` takes.)"""
    optimizer._create_all_weights(variables)


class BackupAndRestore(tf_keras.callbacks.BackupAndRestore):
    """tf_keras' BackupAndRestore with its private save made public: `backup_now(epoch,
    batch)` saves a checkpoint at once (a SIGTERM's), and `after_backup()`, which a subclass
    overrides, runs after every checkpoint it writes (its own every `save_freq` steps and
    backup_now's). Both go through `_backup(epoch, batch)`, which on_train_batch_end and
    on_epoch_end call in tf_keras 2.16."""

    def backup_now(self, epoch: int, batch: int = 0) -> None:
        self._backup(epoch=epoch, batch=batch)

    def after_backup(self) -> None:
        """Called after each checkpoint is written."""

    def _backup(self, epoch, batch=0):
        super()._backup(epoch=epoch, batch=batch)
        self.after_backup()


class _Unwrapped:
    """Keeps the strategy from unwrapping mirrored variables passed to call_for_each_replica
    (the wrapped optimizer wants the distributed variables, as LossScaleOptimizer does)."""

    def __init__(self, value):
        self.value = value


@tf_keras.saving.register_keras_serializable(package="gpupipe")
class GradientAccumulation(tf.__internal__.tracking.DelegatingTrackableMixin, tf_keras.optimizers.legacy.Optimizer):
    """Applies the mean gradient of `steps` consecutive calls of apply_gradients once, through
    `inner` (one of tf_keras' `optimizers.legacy` classes, which gpupipe trains with, or a
    LossScaleOptimizer around one). Built as tf_keras' own LossScaleOptimizer is
    (tf_keras/src/mixed_precision/loss_scale_optimizer.py): the OptimizerV2 interface,
    delegating to the wrapped optimizer, which takes overriding OptimizerV2's private
    methods (`_create_all_weights`, `_compute_gradients`, `_aggregate_gradients`, the slot
    restore pair), reading its `_hyper`, and `__getattribute__`.

    components/train/optimizers.py says what gradient accumulation is for. In the graph:

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
    (bench/accumulation.py, docs/benchmarks.md).
    """

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
        (create_optimizer_slots, before the first step)."""
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
