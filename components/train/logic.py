"""Train: a tf_keras model from the config and the train-split statistics, under a
tf.distribute strategy, resumable (BackupAndRestore every N steps; SIGTERM saves and
exits 143), exported as a SavedModel that takes raw features, with a training report."""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import time
from typing import Optional

import components  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from components.contracts import names, storage
from components.contracts.errors import GpupipeError, reports_errors
from components.contracts.examples import examples_pattern
from components.contracts.features import FeatureSpecs, feature_statistics, specs_from_statistics, write_feature_specs
from components.contracts.settings import Columns
from components.train.runtime import (PREEMPTED_EXIT_CODE, Preempted, cluster_workers,  # noqa: F401 (re-exported)
                                      is_chief)
from components.train.settings import TrainSettings

REPORT_MD = "report.md"


def learning_rate_schedule(rate: float, schedule, total_steps: int):
    """The rate itself, or a tf_keras LearningRateSchedule: linear warmup to `rate`, then
    cosine or step decay (components.train.settings.LearningRateSchedule)."""
    if schedule is None:
        return rate
    from components.train.runtime import WarmupThenDecay

    return WarmupThenDecay(rate, schedule.warmup_steps, schedule.decay, max(1, total_steps - schedule.warmup_steps),
                           schedule.alpha, schedule.every_steps, schedule.factor)


def make_optimizer(name: str, learning_rate):
    """tf_keras optimizers by config name (a rate or a LearningRateSchedule).

    The `optimizers.legacy` classes: each variable's update is one fused kernel
    (ResourceApplyAdam, ResourceSparseApplyAdagradV2, ...) where the newer classes build
    the same update from about ten ops per variable in Python; Adam also applies embedding
    gradients densely (components.train.runtime.Adam). Same update rules, a train step with
    fewer ops to trace (docs/benchmarks.md)."""
    import tf_keras

    from components.train.runtime import Adam

    legacy = tf_keras.optimizers.legacy
    optimizers = {"adam": Adam, "adagrad": legacy.Adagrad, "ftrl": legacy.Ftrl, "sgd": legacy.SGD}
    if name not in optimizers:
        raise GpupipeError(f"training.optimizer: '{name}' is not one of {', '.join(optimizers)}")
    return optimizers[name](learning_rate)


def build_optimizer_slots(optimizer, variables) -> None:
    """The optimizer's slot variables now, not in the first step: a tf.function that creates
    variables on its first call is traced twice. (tf_keras' own route for a legacy
    optimizer, the one `Model.load_weights` takes.)"""
    optimizer._create_all_weights(variables)


def parsed_bytes_per_row(specs: FeatureSpecs, train_stats=None) -> int:
    """A generous estimate of one parsed example, in memory or in the disk cache (for the
    cache decision): 4 bytes a number; a string's object plus its average length from the
    statistics (16 when unknown)."""
    def string_bytes(name: str) -> int:
        avg = feature_statistics(train_stats, name).string_stats.avg_length if train_stats is not None else 0
        return 32 + int(avg or 16)

    return 4 * len(specs.numeric) + sum(string_bytes(f.name) for f in specs.categorical) + 16


INPUT_DESCRIPTIONS = {
    names.CACHE_MEMORY: "parsed batches cached in memory in the first epoch",
    names.CACHE_DISK: "parsed batches written to local scratch in the first epoch and read from there in later epochs",
    names.CACHE_NONE: "shards read and parsed every epoch (the split is over both cache budgets)",
}


def scratch_directory(setting: str) -> str:
    """Local scratch for the disk input cache: the setting, else $GPUPIPE_SCRATCH_DIR, else
    the system temp directory."""
    return setting or os.environ.get(names.SCRATCH_ENV) or tempfile.gettempdir()


def choose_input_cache(estimated_bytes: int, memory_budget_mb: int, disk_budget_mb: int, scratch_dir: str) -> str:
    """Where the parsed train batches live after the first epoch: "memory" when they fit the
    memory budget; else "disk" when they fit the disk budget and half the scratch
    directory's free space; else "none" (every epoch reads and parses the shards)."""
    if memory_budget_mb > 0 and estimated_bytes <= memory_budget_mb * 2 ** 20:
        return names.CACHE_MEMORY
    if disk_budget_mb > 0 and estimated_bytes <= disk_budget_mb * 2 ** 20:
        try:
            free = shutil.disk_usage(scratch_dir).free
        except OSError:
            free = 0
        if estimated_bytes <= free // 2:
            return names.CACHE_DISK
    return names.CACHE_NONE


@contextlib.contextmanager
def input_cache_directory(cache: str, scratch_dir: str):
    """A fresh directory under scratch for the disk cache ("" for the other modes), removed
    afterwards, also after a preemption. Each process (worker) gets its own."""
    path = tempfile.mkdtemp(prefix="gpupipe-input-cache-", dir=scratch_dir) if cache == names.CACHE_DISK else ""
    try:
        yield path
    finally:
        if path:
            shutil.rmtree(path, ignore_errors=True)


def compile_model(specs: FeatureSpecs, settings: TrainSettings, strategy, learning_rate: float,
                  steps_per_epoch: int = 1, target: str = "standardize"):
    """The configured family (or the custom builder) under the strategy, compiled with the
    task's loss and metric. Regression: the head learns the target standardised (its
    Rescaling by `specs`' label mean and deviation); with `target` log, `specs` carries
    log(1 + y)'s, the loss is on that scale and the rmse metric in the label's units."""
    import tf_keras

    from components.train.accumulation import accumulate
    from components.train.model import LOG, LabelUnitsRMSE, build_model, load_custom_builder

    k = settings.gradient_accumulation_steps
    with strategy.scope():
        builder = load_custom_builder(settings.custom_model) if settings.custom_model else build_model
        model = builder(specs, settings)
        # The schedule counts optimizer steps: one per k training steps with accumulation.
        learning_rate = learning_rate_schedule(learning_rate, settings.lr_schedule,
                                               settings.epochs * steps_per_epoch // k)
        if settings.task == "regression":
            loss = tf_keras.losses.MeanSquaredError()
            metrics = [LabelUnitsRMSE(LOG) if target == LOG else tf_keras.metrics.RootMeanSquaredError(name="rmse")]
        else:
            loss = tf_keras.losses.SparseCategoricalCrossentropy()
            metrics = [tf_keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        model.compile(optimizer=make_optimizer(settings.optimizer, learning_rate), loss=loss, metrics=metrics,
                      jit_compile=settings.xla)
        accumulate(model, k)
        build_optimizer_slots(model.optimizer, model.trainable_variables)
    return model


def export_model(model, specs: FeatureSpecs, model_dir: str, chief: bool, target: str = "standardize",
                 smearing: float = 1.0) -> None:
    """Every worker takes part in the save (collective ops); only the chief's copy is kept,
    with the feature specs beside it."""
    import tensorflow as tf

    from components.train.model import export_saved_model

    path = model_dir if chief else os.path.join(model_dir + "-scratch", f"worker-{os.getpid()}")
    export_saved_model(model, specs, path, target, smearing)
    if chief:
        write_feature_specs(specs, model_dir)
    else:
        tf.io.gfile.rmtree(path)


def regression_target(specs: FeatureSpecs, train_stats, setting: str):
    """(transform, why, the specs the network is built on): for a log target the label's
    mean and deviation there are log(1 + y)'s, so the head's Rescaling standardises that."""
    import dataclasses

    from components.train.model import LOG, STANDARDIZE, choose_target_transform, log_target_moments

    if specs.task != "regression":
        return STANDARDIZE, "", specs
    label_stats = feature_statistics(train_stats, specs.label)
    transform, why = choose_target_transform(label_stats, setting)
    if transform != LOG:
        return transform, why, specs
    mean, std = log_target_moments(label_stats)
    return transform, why, dataclasses.replace(specs, label_mean=mean, label_std=std)


def validation_slice(settings: TrainSettings, train_rows: int) -> int:
    """The percent of the train split held out for early stopping: 0 without early stopping
    or when the slice would have fewer than MIN_VALIDATION_ROWS rows."""
    from components.train.settings import MIN_VALIDATION_ROWS

    p = settings.validation_percent
    if not settings.early_stopping or p <= 0 or train_rows * p / 100 < MIN_VALIDATION_ROWS:
        return 0
    return p


def train_model(examples_dir: str, statistics_dir: str, model_dir: str, columns: Columns, settings: TrainSettings,
                backup_dir: Optional[str] = None, log_dir: Optional[str] = None) -> dict:
    """Trains on `examples_dir/train`, exports a SavedModel to `model_dir` (the chief only)
    and returns the training report. A checkpoint in `backup_dir` is resumed from."""
    import tensorflow as tf
    import tf_keras

    from components.contracts.statistics import load_statistics
    from components.train.accumulation import batches_done
    from components.train.model import make_dataset
    from components.train.runtime import (Backup, GpuSampler, PreemptionGuard, Progress, ResumeLog, StepTimer,
                                          choose_strategy, compute_capability, graph_code_without_autograph,
                                          precision_policy)

    graph_code_without_autograph()
    s = settings
    history_key = "rmse" if s.task == "regression" else "accuracy"
    tf_keras.utils.set_random_seed(s.seed)
    train_stats = load_statistics(statistics_dir, names.TRAIN_SPLIT)
    specs = specs_from_statistics(train_stats, columns.label, list(columns.numeric_features),
                                  list(columns.categorical_features), s.task, s.max_vocabulary, s.hash_buckets)
    strategy = choose_strategy(s.strategy)
    policy = precision_policy(s.mixed_precision, compute_capability())
    tf_keras.mixed_precision.set_global_policy(policy)
    replicas = strategy.num_replicas_in_sync
    global_batch = s.batch_size * replicas
    learning_rate = s.learning_rate * (replicas if s.scale_learning_rate else 1)
    train_rows = int(train_stats.num_examples)
    target, target_why, model_specs = regression_target(specs, train_stats, s.target_transform)
    held_out = validation_slice(s, train_rows)
    fit_rows = max(1, round(train_rows * (100 - held_out) / 100))
    k = s.gradient_accumulation_steps
    # With accumulation an epoch is whole k-step windows (each applies one update).
    steps_per_epoch = k * max(1, math.ceil(fit_rows / (global_batch * k)))
    scratch = scratch_directory(s.scratch_dir or "")
    estimated = train_rows * parsed_bytes_per_row(specs, train_stats)
    cache = choose_input_cache(estimated, s.cache_budget_mb, s.disk_cache_budget_mb, scratch)
    with input_cache_directory(cache, scratch) as cache_dir:
        print(f"input: {INPUT_DESCRIPTIONS[cache]} (train split about {estimated / 2 ** 20:,.0f} MB parsed)",
              flush=True)
        dataset = make_dataset(examples_pattern(examples_dir, names.TRAIN_SPLIT), specs, global_batch, shuffle=True,
                               seed=s.seed, repeat=True, cache=cache, cache_dir=cache_dir,
                               shuffle_buffer=s.shuffle_buffer, validation_percent=held_out,
                               part="train" if held_out else "all", target=target)
        # The validation slice: held-out train rows (never the eval split), kept in memory
        # after its first pass when the train split fits the memory budget.
        validation = make_dataset(
            examples_pattern(examples_dir, names.TRAIN_SPLIT), specs, global_batch, shuffle=False, seed=s.seed,
            cache=names.CACHE_MEMORY if cache == names.CACHE_MEMORY else names.CACHE_NONE,
            validation_percent=held_out, part="validation", target=target) if held_out else None
        model = compile_model(model_specs, s, strategy, learning_rate, steps_per_epoch, target)

        tf_config = os.environ.get("TF_CONFIG")
        chief = is_chief(tf_config)
        callbacks, guard, backup = [], None, None
        resume, timer = ResumeLog(), StepTimer()
        if backup_dir:
            backup = Backup(backup_dir, scratch, s.checkpoint_steps, chief)
            guard = PreemptionGuard(backup, strategy)
            callbacks += [backup, guard]
        callbacks += [resume, timer, Progress(s.epochs, steps_per_epoch // k, global_batch * k)]
        stopper = None
        if s.early_stopping:
            stop = s.early_stopping
            metric = stop.metric if stop.metric == "loss" or stop.metric == history_key else "loss"
            # A resumed run starts counting patience and best weights again from its resume.
            stopper = tf_keras.callbacks.EarlyStopping(
                monitor=("val_" if held_out else "") + metric, mode="max" if metric == "accuracy" else "min",
                patience=stop.patience, min_delta=stop.min_delta, restore_best_weights=True, verbose=1)
            callbacks.append(stopper)
        if log_dir and chief:
            callbacks.append(tf_keras.callbacks.TensorBoard(log_dir, update_freq="epoch",
                                                            profile_batch=tuple(s.profile_steps or (0, 0))))

        started = time.perf_counter()
        if guard:
            guard.install()
        try:
            with GpuSampler() as gpu:
                history = model.fit(dataset, epochs=s.epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                                    validation_data=validation, verbose=0)
        finally:
            if guard:
                guard.uninstall()
            if backup:
                backup.close()
        seconds = time.perf_counter() - started
        if guard and guard.preempted:
            raise Preempted(f"checkpointed at step {int(model.optimizer.iterations.numpy())} after SIGTERM")

        smearing = 1.0
        if target == "log":  # Duan's factor on held-out rows (the slice), else on the train rows
            from components.train.model import smearing_factor

            smearing = smearing_factor(model, validation if validation is not None else make_dataset(
                examples_pattern(examples_dir, names.TRAIN_SPLIT), specs, global_batch, shuffle=False,
                seed=s.seed, target=target))
        export_model(model, specs, model_dir, chief, target, smearing)
        if backup and chief:
            backup.discard()  # the model is whole; a later retry need not resume

        optimizer_steps = int(model.optimizer.iterations.numpy())
        steps_run = batches_done(model.optimizer) - resume.resumed_batches
        p50, p95 = timer.percentiles()
        first_epoch, steady_epoch = timer.first_and_steady_epoch()
        workers = cluster_workers(tf_config)
        gpus = len(tf.config.list_physical_devices("GPU"))
        gpu_hours = gpus * workers * seconds / 3600
        compute_p50 = compute_only_step_seconds(model, dataset, strategy) if workers == 1 else None
        return {
            "examples_per_second": round(steps_run * global_batch / seconds, 1) if seconds else None,
            "train_seconds": round(seconds, 2),
            "epochs": s.epochs,
            "epochs_run": len(history.history["loss"]),
            "early_stopping_monitor": stopper.monitor if stopper else None,
            # the epoch (1-based, of this attempt) whose weights were kept
            "best_epoch": (stopper.best_epoch + 1) if stopper and stopper.best_weights is not None else None,
            "validation_percent": held_out,
            "validation_examples_estimate": train_rows - fit_rows if held_out else 0,
            "target_transform": target if s.task == "regression" else None,
            "target_transform_why": target_why or None,
            "log_target_smearing": round(smearing, 5) if target == "log" else None,
            "steps_per_epoch": steps_per_epoch,
            "optimizer_steps": optimizer_steps,
            "train_function_traces": traces(model.train_function),
            "resumed_from_step": resume.resumed_from,
            "preemptions": backup.history["preemptions"] if backup else 0,
            "resumes": backup.history["resumes"] if backup else 0,
            # Training steps (batches) done again after interruptions: per interruption, the
            # step the interrupted run reached and the checkpoint's step this one resumed from.
            "steps_lost": backup.history["steps_lost"] if backup else 0,
            "interruptions": backup.history["interruptions"] if backup else [],
            "first_epoch_seconds": round(first_epoch, 3) if first_epoch is not None else None,
            "steady_epoch_seconds": round(steady_epoch, 3) if steady_epoch is not None else None,
            "step_seconds_p50": p50,
            "step_seconds_p95": p95,
            "compute_only_step_seconds_p50": compute_p50,
            "input_wait_fraction": (round(max(0.0, 1 - compute_p50 / p50), 3) if (p50 and compute_p50) else None),
            "train_examples": train_rows,
            "replicas": replicas,
            "workers": workers,
            "strategy": strategy_name(strategy),
            "global_batch_size": global_batch,
            "gradient_accumulation_steps": k,
            "effective_batch_size": global_batch * k,
            "learning_rate": learning_rate,
            "optimizer": s.optimizer,
            "precision_policy": policy,
            "xla": s.xla,
            "input_cache": cache,
            "gpus": gpus,
            "gpu_utilization_mean": gpu.mean,
            "gpu_hours": round(gpu_hours, 4),
            "estimated_cost": round(gpu_hours * s.gpu_hour_price, 4),
            "final_loss": float(history.history["loss"][-1]),
            f"final_train_{history_key}": float(history.history[history_key][-1]),
            **({f"best_validation_{history_key}":
                float(history.history["val_" + history_key][history.epoch.index(stopper.best_epoch)])}
               if stopper and held_out and stopper.best_weights is not None and stopper.best_epoch in history.epoch
               and "val_" + history_key in history.history else {}),
            "model": s.custom_model or s.model,
            "chief": chief,
            # per epoch run (this attempt's; a resumed run's from its resume on): loss and the metric
            "history": {k: [float(v) for v in values] for k, values in history.history.items()},
        }


def traces(function) -> Optional[int]:
    """How often a tf.function was traced (once per input signature it saw)."""
    count = getattr(function, "experimental_get_tracing_count", None)
    return count() if count else None


def strategy_name(strategy) -> str:
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "MultiWorkerMirroredStrategy"
    if not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy():
        return "default (one device)"
    return type(strategy).__name__


def compute_only_step_seconds(model, dataset, strategy, steps: int = 30) -> Optional[float]:
    """Median time of the model's own train step on one batch held in memory: the step time
    without input wait. The training steps' median against this gives the input-wait
    fraction. Called after the export: the extra steps change only this in-memory copy,
    which is discarded. The batch comes from the training dataset itself, so the step's
    input has the same spec and the train function is not traced again."""
    import numpy as np

    try:
        held = dataset.take(1).cache().repeat()
        iterator = iter(strategy.experimental_distribute_dataset(held))
        model.train_function(iterator)  # fills the cache
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            model.train_function(iterator)
            times.append(time.perf_counter() - t)
        return float(np.percentile(times, 50))
    except Exception as err:  # a measurement, never a reason to fail training
        print(f"compute-only step timing skipped: {err}", flush=True)
        return None


def render_report(report: dict) -> str:
    rows = [f"| {k} | {v} |" for k, v in report.items() if not isinstance(v, dict)]
    return "# Training report\n\n| measure | value |\n|---|---|\n" + "\n".join(rows) + "\n"


@reports_errors("train")
def run_train(*, examples_dir: str, statistics_dir: str, model_dir: str, columns: Columns, settings: TrainSettings,
              backup_dir: str = "", log_dir: str = "", report_dir: str = "") -> dict:
    """Training in this process, as the train task and `python -m components.train` (each
    worker of a multi-worker job) call it. Exits with 143 after a SIGTERM checkpoint (KFP
    and the job controller retry it; the retry resumes).

    Any of the directories may be on an object store (a multi-worker job's workers get the
    artifact URIs): inputs are staged into local scratch through the storage layer first
    (docs/benchmarks.md, "Staging", measures it), the model, its TensorBoard logs and the
    report are written locally and copied up once whole (the model `saved_model.pb` last).
    TensorFlow's own filesystems are not used, so gs:// and s3:// take the same path."""
    remote = [d for d in (examples_dir, statistics_dir, model_dir, log_dir) if d and storage.is_remote(d)]
    stage = tempfile.mkdtemp(prefix="gpupipe-stage-", dir=scratch_directory(settings.scratch_dir or "")) \
        if remote else ""
    try:
        started = time.perf_counter()
        local_examples = storage.local_dir(examples_dir, os.path.join(stage, "examples"))
        local_statistics = storage.local_dir(statistics_dir, os.path.join(stage, "statistics"))
        if remote:
            print(f"input: staged {', '.join(remote)} into {stage} in {time.perf_counter() - started:.1f} s",
                  flush=True)
        local_model = os.path.join(stage, "model") if storage.is_remote(model_dir) else model_dir
        local_logs = os.path.join(stage, "tensorboard") if log_dir and storage.is_remote(log_dir) else log_dir
        try:
            report = train_model(local_examples, local_statistics, local_model, columns, settings, backup_dir or None,
                                 local_logs or None)
        except Preempted as err:
            print(f"preempted: {err}; exiting with {PREEMPTED_EXIT_CODE} so the retry resumes", flush=True)
            raise SystemExit(PREEMPTED_EXIT_CODE) from None
        if report["chief"]:
            if local_model != model_dir:
                storage.put_tree(local_model, model_dir, last="saved_model.pb")
            if local_logs != log_dir and os.path.isdir(local_logs):
                storage.upload_tree(local_logs, log_dir)
            if report_dir:
                storage.makedirs(report_dir)
                storage.write_text(storage.join(report_dir, names.TRAIN_REPORT_FILE), json.dumps(report, indent=2))
                storage.write_text(storage.join(report_dir, REPORT_MD), render_report(report))
        return report
    finally:
        if stage:
            shutil.rmtree(stage, ignore_errors=True)


def _sibling(location: str, name: str) -> str:
    """`<parent of location>/<name>` for a local path or an object store URI."""
    return storage.join(storage.parent(location), name)


@reports_errors("train")
def run_train_task(*, examples: tuple, statistics: tuple, model: tuple, log_dir: str, summary_md: str,
                   columns: Columns, settings: TrainSettings, launch: str = "") -> dict:
    """The train task. `examples`, `statistics`, `model` are (local path, URI) pairs of the
    KFP artifacts. Without `launch`: trains in this process. With `launch` (workers > 1, a
    components.train.launch.Launch as JSON): runs the same entry point as a multi-worker job
    on the artifact URIs and follows it. The BackupAndRestore directory sits beside the
    model's URI, where a retry of this task finds it. The Markdown report is copied to
    `summary_md`. Returns the training report (the chief's)."""
    if not launch:
        # The backup beside the model's URI: in the run's remote root on the cluster, where a
        # retry of this task (in a new pod) finds it; kfp.local's URIs are local paths.
        backup_home = _sibling(model[1] if storage.is_remote(model[1]) else model[0], "backup")
        report_dir = _sibling(model[0], "report")
        report = run_train(examples_dir=examples[0], statistics_dir=statistics[0], model_dir=model[0],
                           columns=columns, settings=settings, backup_dir=backup_home, log_dir=log_dir,
                           report_dir=report_dir)
    else:
        from components.train.launch import Launch, run_training_job

        report_dir = _sibling(model[1], "report")
        command = ["python", "-m", "components.train", "--examples", examples[1], "--statistics", statistics[1],
                   "--model-dir", model[1], "--columns", columns.model_dump_json(),
                   "--settings", settings.model_dump_json(), "--backup-dir", _sibling(model[1], "backup"),
                   "--log-dir", _sibling(model[1], "tensorboard"), "--report-dir", report_dir]
        run_training_job(Launch.from_json(launch), command)
        report = json.loads(storage.read_text(storage.join(report_dir, names.TRAIN_REPORT_FILE)) or "{}")
    if summary_md:
        storage.download_file(storage.join(report_dir, REPORT_MD), summary_md)
    return report
