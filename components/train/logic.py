"""Train: a tf_keras model from the config and the train-split statistics, under a
tf.distribute strategy, resumable (BackupAndRestore every N steps; SIGTERM saves and
exits 143), exported as a SavedModel that takes raw features, with a training report.

`train_model` is one training run on local data (what a tuning trial calls); `run_train`
adds the staging from and to object stores and the report files; `run_train_task` is the KFP
task (in this pod, or a multi-worker job it launches). The concerns live beside it: model.py
(families), target.py (a regression label's transform), data.py (the input and its cache),
optimizers.py, runtime.py (strategy, precision), resilience.py (backup, preemption),
telemetry.py (timing, progress, GPU use), report.py (TrainReport) and export.py."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import tempfile
import time
from typing import Any, List, Optional

import components  # (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

components.import_tensorflow()  # before the modules below import it: without the Google API client
from components.contracts import names, storage  # noqa: E402
from components.contracts.errors import reports_errors  # noqa: E402
from components.contracts.examples import examples_pattern  # noqa: E402
from components.kinds import Columns, FeatureSpecs, specs_from_statistics  # noqa: E402
from components.train import phases as phase  # noqa: E402
from components.train.data import scratch_directory  # noqa: E402
from components.train.phases import Phases  # noqa: E402
from components.train.report import REPORT_MD, TrainReport, build_report, render_report  # noqa: E402
from components.train.resilience import PREEMPTED_EXIT_CODE, Preempted  # noqa: E402
from components.train.runtime import is_chief  # noqa: E402
from components.train.settings import TrainSettings, validation_slice  # noqa: E402
from components.train.target import regression_target  # noqa: E402



# Held-out rows the validation slice reads at most (about): its metric on 25,000 rows is within about 0.3% of the whole's.
VALIDATION_ROWS = 25_000


@dataclasses.dataclass(frozen=True)
class Plan:
    """What one run trains with, decided from the settings, the statistics and the strategy."""

    settings: TrainSettings
    specs: FeatureSpecs  # the features' (the input parses these)
    model_specs: FeatureSpecs  # the network's: a log target's label moments are log(1 + y)'s
    metric: str  # accuracy or rmse
    strategy: Any
    policy: str
    replicas: int
    global_batch: int
    learning_rate: float
    train_rows: int
    held_out: int  # validation percent
    fit_rows: int
    steps_per_epoch: int
    target: str
    target_why: str
    scratch: str
    cache: str
    estimated_bytes: int
    validation_cache: str = "none"  # the slice's: memory when the held-out rows fit the memory budget


def plan_training(statistics_dir: str, columns: Columns, settings: TrainSettings, phases: Optional[Phases] = None) -> Plan:
    """Seeds, picks the strategy and the precision policy (set globally, as tf_keras has it),
    loads the train statistics and sizes the run (`phases`: START, then STATISTICS)."""
    import tf_keras

    from components.contracts.statistics import load_statistics
    from components.train.data import choose_caches, parsed_bytes_per_row
    from components.train.runtime import choose_strategy, compute_capability, precision_policy

    s, phases = settings, phases or Phases()
    tf_keras.utils.set_random_seed(s.seed)
    strategy = choose_strategy(s.strategy)
    policy = precision_policy(s.mixed_precision, compute_capability())
    tf_keras.mixed_precision.set_global_policy(policy)
    phases.mark(phase.START)
    train_stats = load_statistics(statistics_dir, names.TRAIN_SPLIT)
    specs = specs_from_statistics(train_stats, columns, s.task, s.max_vocabulary, s.hash_buckets)
    replicas = strategy.num_replicas_in_sync
    global_batch = s.batch_size * replicas
    train_rows = int(train_stats.num_examples)
    target, target_why, model_specs = regression_target(specs, train_stats, s.target_transform)
    held_out = validation_slice(s, train_rows)
    fit_rows = max(1, round(train_rows * (100 - held_out) / 100))
    k = s.gradient_accumulation_steps
    scratch = scratch_directory(s.scratch_dir or "")
    estimated = train_rows * parsed_bytes_per_row(specs, train_stats)
    cache, validation_cache = choose_caches(estimated, train_rows - fit_rows if held_out else 0, train_rows, s.epochs,
                                            s.cache_budget_mb, s.disk_cache_budget_mb, scratch)
    phases.mark(phase.STATISTICS)
    return Plan(
        settings=s, specs=specs, model_specs=model_specs, metric="rmse" if s.task == "regression" else "accuracy",
        strategy=strategy, policy=policy, replicas=replicas, global_batch=global_batch,
        learning_rate=s.learning_rate * (replicas if s.scale_learning_rate else 1), train_rows=train_rows,
        held_out=held_out, fit_rows=fit_rows,
        # With accumulation an epoch is whole k-step windows (each applies one update).
        steps_per_epoch=k * max(1, math.ceil(fit_rows / (global_batch * k))), target=target, target_why=target_why,
        scratch=scratch, cache=cache, estimated_bytes=estimated, validation_cache=validation_cache)


def training_inputs(examples_dir: str, plan: Plan, cache_dir: str, validation=None):
    """(the train batches, repeated; the validation slice's (`validation`: one made before), or None)."""
    from components.train.data import make_dataset

    s, pattern = plan.settings, examples_pattern(examples_dir, names.TRAIN_SPLIT)
    dataset = make_dataset(pattern, plan.specs, plan.global_batch, shuffle=True, seed=s.seed, repeat=True,
                           cache=plan.cache, cache_dir=cache_dir, shuffle_buffer=s.shuffle_buffer,
                           validation_percent=plan.held_out, part="train" if plan.held_out else "all",
                           target=plan.target)
    made = validation if validation is not None else validation_input(examples_dir, plan) if plan.held_out else None
    return dataset, made


def validation_input(examples_dir: str, plan: Plan):
    """The validation slice's batches (plan.held_out > 0): held-out train rows (never the eval
    split), kept in memory after its first pass when the held-out rows fit the memory budget;
    past VALIDATION_ROWS held-out rows, from the share of the shards that holds about that
    many (spread over them; docs/benchmarks.md, "Scale"), and their first VALIDATION_ROWS
    (about: whole batches), as the shards are the share's grain (2M rows in 10 shards: 2
    shards, 40,246 held-out rows, without that bound)."""
    from components.train.data import make_dataset

    held_rows = plan.train_rows - plan.fit_rows
    return make_dataset(
        examples_pattern(examples_dir, names.TRAIN_SPLIT), plan.specs, plan.global_batch, shuffle=False,
        seed=plan.settings.seed, cache=plan.validation_cache,
        validation_percent=plan.held_out, part="validation", target=plan.target,
        shard_share=min(1.0, VALIDATION_ROWS / held_rows) if held_rows else 1.0,
        max_rows=VALIDATION_ROWS if held_rows > VALIDATION_ROWS else 0)


@dataclasses.dataclass
class Fit:
    """What fitting measured, with the callbacks that measured it."""

    history: Any
    seconds: float
    chief: bool
    tf_config: Optional[str]
    resume: Any
    timer: Any
    gpu: Any
    stopper: Any = None
    backup: Any = None


def fit(model, dataset, validation, plan: Plan, backup_dir: Optional[str], log_dir: Optional[str],
        start=None) -> Fit:
    """model.fit with the callbacks: backup and preemption (with a `backup_dir`), resume log,
    timing, progress, early stopping, TensorBoard (the chief's). Raises Preempted after a
    SIGTERM checkpoint."""
    import tf_keras

    from components.train.resilience import Backup, PreemptionGuard, ResumeLog
    from components.train.telemetry import GpuSampler, Progress, StepTimer

    s, k = plan.settings, plan.settings.gradient_accumulation_steps
    tf_config = os.environ.get("TF_CONFIG")
    chief = is_chief(tf_config)
    callbacks: List[Any] = []
    guard, backup = None, None
    resume, timer = ResumeLog(), StepTimer()
    if backup_dir:
        backup = Backup(backup_dir, plan.scratch, s.checkpoint_steps, chief)
        guard = PreemptionGuard(backup, plan.strategy)
        callbacks += [backup, guard]
    callbacks += [resume, timer, Progress(s.epochs, plan.steps_per_epoch // k, plan.global_batch * k)]
    if s.image.fine_tune_after:  # the image backbones frozen for the first epochs
        from components.train.vision import FineTune

        callbacks.append(FineTune(s.image.fine_tune_after))
    stopper, validation_data = None, validation
    if s.early_stopping:
        stop = s.early_stopping
        metric = stop.metric if stop.metric in ("loss", plan.metric) else "loss"
        # A resumed run starts counting patience and best weights again from its resume.
        from components.train.stopping import EarlyStoppingFromTheStart, SliceScoringStopper

        kwargs = dict(monitor=("val_" if plan.held_out else "") + metric, mode="max" if metric == "accuracy" else "min",
                      patience=stop.patience, min_delta=stop.min_delta, restore_best_weights=True, verbose=1)
        if start is not None and validation is not None and s.task != "regression":  # it scores the slice itself
            stopper, validation_data = SliceScoringStopper(validation, start, **kwargs), None
        else:  # with a linear start, the starting weights are a candidate too
            stopper = EarlyStoppingFromTheStart(validation=validation if start is not None else None, **kwargs)
        callbacks.append(stopper)
    if log_dir and chief:
        callbacks.append(tf_keras.callbacks.TensorBoard(log_dir, update_freq="epoch",
                                                        profile_batch=tuple(s.profile_steps or (0, 0))))
    started = time.perf_counter()
    if guard:
        guard.install()
    try:
        with GpuSampler() as gpu:
            history = model.fit(dataset, epochs=s.epochs, steps_per_epoch=plan.steps_per_epoch, callbacks=callbacks,
                                validation_data=validation_data, verbose=0)
    finally:
        if guard:
            guard.uninstall()
        if backup:
            backup.close()
    seconds = time.perf_counter() - started
    if guard and guard.preempted:
        raise Preempted(f"checkpointed at step {int(model.optimizer.iterations.numpy())} after SIGTERM")
    return Fit(history=history, seconds=seconds, chief=chief, tf_config=tf_config, resume=resume, timer=timer,
               gpu=gpu, stopper=stopper, backup=backup)


def train_model(examples_dir: str, statistics_dir: str, model_dir: str, columns: Columns, settings: TrainSettings,
                backup_dir: Optional[str] = None, log_dir: Optional[str] = None,
                phases: Optional[Phases] = None, linear=None) -> TrainReport:
    """One training run on local data: trains on `examples_dir/train`, exports a SavedModel
    to `model_dir` (the chief only) and returns the training report. A checkpoint in
    `backup_dir` is resumed from. `phases` (default: from this call) times it
    (components/train/phases.py), through the report's. `linear`: the linear start being
    fitted in a process of its own (linear_fit.py: fitted_beside), or None to fit it here."""
    from components.contracts.compat.tensorflow import graph_code_without_autograph
    from components.train.data import input_cache_directory, INPUT_DESCRIPTIONS, ONE_EPOCH_INPUT
    from components.train.export import export_model

    phases = phases or Phases()
    graph_code_without_autograph()
    plan = plan_training(statistics_dir, columns, settings, phases)
    start, validation = None, None
    with_start = settings.linear_start and not settings.custom_model  # the model contains the linear model
    from components.train.linear_start import model_on_the_start, read_beside, save_for_evaluate
    from components.train.model import compile_model

    def build(p: Plan, on):  # the model compiled for plan `p`, on the linear start `on` (or None)
        return compile_model(p.model_specs, settings, p.strategy, p.learning_rate, p.steps_per_epoch, p.target, on)

    # The validation slice's first pass runs in a thread from here until the model is built.
    with read_beside(plan, lambda: validation_input(examples_dir, plan)) if with_start else \
            contextlib.nullcontext() as validation:
        model = None
        if with_start:
            plan, model, start = model_on_the_start(examples_dir, statistics_dir, plan, linear, build, phases,
                                                    phase.MODEL_BESIDE if validation is not None else phase.MODEL)
        if model is None:
            model = build(plan, start)
    read_early = validation is not None
    with input_cache_directory(plan.cache, plan.scratch) as cache_dir:
        described = INPUT_DESCRIPTIONS[plan.cache] if settings.epochs > 1 else ONE_EPOCH_INPUT
        print(f"input: {described} (train split about {plan.estimated_bytes / 2 ** 20:,.0f} MB "
              "parsed)", flush=True)
        dataset, validation = training_inputs(examples_dir, plan, cache_dir, validation)
        phases.mark(phase.MODEL_BESIDE if read_early else phase.MODEL)
        run = fit(model, dataset, validation, plan, backup_dir, log_dir, start)
        phases.fit(run.timer.epochs, getattr(run.stopper, "passes", None))
        smearing = 1.0
        if plan.target == "log":  # Duan's factor on held-out rows (the slice), else on the train rows
            from components.train.data import make_dataset
            from components.train.target import smearing_factor

            smearing = smearing_factor(model, validation if validation is not None else make_dataset(
                examples_pattern(examples_dir, names.TRAIN_SPLIT), plan.specs, plan.global_batch, shuffle=False,
                seed=settings.seed, target=plan.target))
            phases.mark(phase.SMEARING)
        export_model(model, plan.specs, model_dir, run.chief, plan.target, smearing)
        if run.chief and start is not None:  # the baseline evaluate would fit: it takes this one
            save_for_evaluate(examples_dir, model_dir, start, plan.train_rows)
        if run.backup and run.chief:
            run.backup.discard()  # the model is whole; a later retry need not resume
        phases.mark(phase.EXPORT)
        report = build_report(plan, run, model, dataset, smearing, start)
        phases.mark(phase.REPORT)
        return dataclasses.replace(report, phases=phases.to_list())


def run_train(*, examples_dir: str, statistics_dir: str, model_dir: str, columns: Columns, settings: TrainSettings,
              backup_dir: str = "", log_dir: str = "", report_dir: str = "", phases: Optional[Phases] = None,
              linear=None) -> dict:
    """Training in this process, as the train task and `python -m components.train` (each
    worker of a multi-worker job) call it. Exits with 143 after a SIGTERM checkpoint (retried).

    Any of the directories may be on an object store (a multi-worker job's workers get the
    artifact URIs): inputs are staged into local scratch through the storage layer first
    (docs/benchmarks.md, "Staging", measures it), the model, its TensorBoard logs and the
    report are written locally and copied up once whole (the model `saved_model.pb` last).
    TensorFlow's own filesystems are not used, so gs:// and s3:// take the same path. Returns
    the JSON report, its `phases` (default: from this call) with the copies up. Its entry points
    report a GpupipeError; this does not, so one error is reported once."""
    phases = phases or Phases()
    remote = [d for d in (examples_dir, statistics_dir, model_dir, log_dir) if d and storage.is_remote(d)]
    stage = tempfile.mkdtemp(prefix="gpupipe-stage-", dir=scratch_directory(settings.scratch_dir or "")) \
        if remote else ""
    try:
        started = time.perf_counter()
        if remote:
            phases.mark(phase.START)  # what ran before the staging
        local_examples = storage.local_dir(examples_dir, os.path.join(stage, "examples"))
        local_statistics = storage.local_dir(statistics_dir, os.path.join(stage, "statistics"))
        if remote:
            print(f"input: staged {', '.join(remote)} into {stage} in {time.perf_counter() - started:.1f} s",
                  flush=True)
            phases.mark(phase.STAGING)
        local_model = os.path.join(stage, "model") if storage.is_remote(model_dir) else model_dir
        local_logs = os.path.join(stage, "tensorboard") if log_dir and storage.is_remote(log_dir) else log_dir
        try:
            report = train_model(local_examples, local_statistics, local_model, columns, settings, backup_dir or None,
                                 local_logs or None, phases, linear).to_dict()
        except Preempted as err:
            print(f"preempted: {err}; exiting with {PREEMPTED_EXIT_CODE} so the retry resumes", flush=True)
            raise SystemExit(PREEMPTED_EXIT_CODE) from None
        if report["chief"]:
            if local_model != model_dir:
                storage.put_tree(local_model, model_dir, last="saved_model.pb")
            if local_logs != log_dir and os.path.isdir(local_logs):
                storage.upload_tree(local_logs, log_dir)
            if local_model != model_dir or local_logs != log_dir:
                phases.mark(phase.MIRROR)
                report["phases"] = phases.to_list()
            if report_dir:
                storage.makedirs(report_dir)
                storage.write_text(storage.join(report_dir, names.TRAIN_REPORT_FILE), json.dumps(report, indent=2))
                storage.write_text(storage.join(report_dir, REPORT_MD), render_report(report))
        return report
    finally:
        if stage:
            shutil.rmtree(stage, ignore_errors=True)


def _sibling(location: str, name: str) -> str:  # <parent of location>/<name>, local or a URI
    return storage.join(storage.parent(location), name)


@reports_errors("train")
def run_train_task(*, examples: tuple, statistics: tuple, model: tuple, log_dir: str, summary_md: str,
                   columns: Columns, settings: TrainSettings, launch: str = "", export: str = "float32",
                   linear=None) -> dict:
    """The train task. `examples`, `statistics`, `model` are (local path, URI) pairs of the
    KFP artifacts. Without `launch`: trains in this process. With `launch` (workers > 1, a
    components.train.launch.Launch as JSON): runs the same entry point as a multi-worker job
    on the artifact URIs and follows it. The BackupAndRestore directory sits beside the
    model's URI, where a retry of this task finds it. The Markdown report is copied to
    `summary_md`. Returns the training report (the chief's). With training.tune: the search
    (components/train/tune.py), its best trial's model and report. `export` (serving.export)
    float16 or int8: a TFLite model beside the SavedModel (components/train/compress.py).
    `linear`: the linear start being fitted beside this process (linear_fit.py: fitted_beside)."""
    if settings.tune:
        from components.train.tune import run_tuned_task

        report, report_dir = run_tuned_task(examples=examples, statistics=statistics, model=model, log_dir=log_dir,
                                            columns=columns, settings=settings, launch=launch, run_train=run_train)
    elif not launch:
        # The backup beside the model's URI: in the run's remote root on the cluster, where a
        # retry of this task (in a new pod) finds it; kfp.local's URIs are local paths.
        backup_home = _sibling(model[1] if storage.is_remote(model[1]) else model[0], "backup")
        report_dir = _sibling(model[0], "report")
        report = run_train(examples_dir=examples[0], statistics_dir=statistics[0], model_dir=model[0],
                           columns=columns, settings=settings, backup_dir=backup_home, log_dir=log_dir,
                           report_dir=report_dir, phases=Phases(since_process_start=True), linear=linear)
    else:
        from components.train.launch import Launch, run_training_job, worker_command

        home = storage.parent(model[1])  # beside the model's URI: backup, logs, report
        report_dir = storage.join(home, "report")
        command = worker_command(examples=examples[1], statistics=statistics[1], model_dir=model[1], home=home,
                                 columns=columns, settings=settings)
        run_training_job(Launch.from_json(launch), command)
        report = json.loads(storage.read_text(storage.join(report_dir, names.TRAIN_REPORT_FILE)) or "{}")
    from components.train.compress import compress_export

    where = 1 if launch else 0  # a launched job's model is at the artifact's URI
    compress_export(model[where], examples[where], export, settings.scratch_dir or "")
    if summary_md:
        storage.download_file(storage.join(report_dir, REPORT_MD), summary_md)
    return report
