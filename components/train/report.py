"""The training report: a TrainReport, built from what one training run planned and measured,
written by the step as JSON (names.TRAIN_REPORT_FILE; its keys are what evaluate, the run
summary and the KFP metrics read) and as a Markdown table."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Dict, Iterator, List, Optional

REPORT_MD = "report.md"  # the Markdown report beside the JSON one (names.TRAIN_REPORT_FILE)


@dataclasses.dataclass(frozen=True)
class TrainReport(Mapping):
    """One training run (one attempt: a resumed run's history starts at its resume). Read
    it by attribute, or by the JSON report's keys (it is a read-only Mapping of to_dict()):
    `final_train_metric` is `final_train_<metric>` there (accuracy or rmse), and
    `best_validation_metric`, when there is one, `best_validation_<metric>`."""

    examples_per_second: Optional[float]
    train_seconds: float
    epochs: int
    epochs_run: int
    early_stopping_monitor: Optional[str]
    best_epoch: Optional[int]  # the epoch (1-based, of this attempt) whose weights were kept; 0: the starting ones
    linear_start: Optional[str]  # what the model started from (components/train/linear_start.py), or None
    start_validation_value: Optional[float]  # the monitored value of the starting weights, before the first epoch
    start_margin: Optional[float]  # how much lower an epoch had to score to replace them
    validation_percent: int
    validation_examples_estimate: int
    target_transform: Optional[str]
    target_transform_why: Optional[str]
    log_target_smearing: Optional[float]
    steps_per_epoch: int
    optimizer_steps: int
    train_function_traces: Optional[int]
    resumed_from_step: int
    preemptions: int
    resumes: int
    # Training steps (batches) done again after interruptions: per interruption, the step the
    # interrupted run reached and the checkpoint's step this one resumed from.
    steps_lost: int
    interruptions: List[dict]
    first_epoch_seconds: Optional[float]
    steady_epoch_seconds: Optional[float]
    step_seconds_p50: Optional[float]
    step_seconds_p95: Optional[float]
    compute_only_step_seconds_p50: Optional[float]
    input_wait_fraction: Optional[float]
    # What feeding the steps cost the CPU (telemetry.feed_cost): core-microseconds per
    # example, and the feed rate that is per core (examples/s one core sustains).
    input_core_us_per_example: Optional[float]
    feed_examples_per_core_second: Optional[float]
    train_examples: int
    replicas: int
    workers: int
    strategy: str
    global_batch_size: int
    gradient_accumulation_steps: int
    effective_batch_size: int
    learning_rate: float
    optimizer: str
    precision_policy: str
    xla: bool
    input_cache: str
    gpus: int
    gpu_utilization_mean: Optional[float]
    gpu_hours: float
    estimated_cost: float
    final_loss: float
    metric: str  # "accuracy" or "rmse": names the two keys below in the JSON
    final_train_metric: float
    best_validation_metric: Optional[float]
    model: str
    chief: bool
    # per epoch run (this attempt's): loss and the metric, val_ ones with a validation slice
    history: Dict[str, List[float]]
    # where the task's time went: [{name, seconds, cpu_seconds}] (components/train/phases.py)
    phases: List[dict] = dataclasses.field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """The JSON report, its keys in this order."""
        out: Dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "metric":
                continue
            if field.name == "final_train_metric":
                out[f"final_train_{self.metric}"] = value
            elif field.name == "best_validation_metric":
                if value is not None:
                    out[f"best_validation_{self.metric}"] = value
            else:
                out[field.name] = value
        return out

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


def rounded(value: Optional[float], digits: int) -> Optional[float]:
    return round(value, digits) if value is not None else None


def build_report(plan, run, model, dataset, smearing: float, start=None) -> TrainReport:
    """The report of a finished run: `plan` and `run` are components.train.logic's Plan and
    Fit (after the export: the compute-only timing's extra steps
    change only the in-memory model)."""
    import tensorflow as tf

    from components.train.optimizers import batches_done
    from components.train.runtime import cluster_workers
    from components.train.telemetry import compute_only_step, feed_cost, strategy_name, traces

    s, history, stopper, backup = plan.settings, run.history.history, run.stopper, run.backup
    optimizer_steps = int(model.optimizer.iterations.numpy())  # before the compute-only steps below
    steps_run = batches_done(model.optimizer) - run.resume.resumed_batches
    p50, p95 = run.timer.percentiles()
    first_epoch, steady_epoch = run.timer.first_and_steady_epoch()
    workers = cluster_workers(run.tf_config)
    gpus = len(tf.config.list_physical_devices("GPU"))
    gpu_hours = gpus * workers * run.seconds / 3600
    compute = compute_only_step(model, dataset, plan.strategy) if workers == 1 else None
    compute_p50 = compute.seconds if compute is not None else None
    feed_us = feed_cost(run.timer, steps_run, plan.global_batch, compute, getattr(stopper, "trace_cpu_seconds", 0.0))
    kept = stopper is not None and stopper.best_weights is not None
    val_key = "val_" + plan.metric
    best_validation = (float(history[val_key][run.history.epoch.index(stopper.best_epoch)])
                       if kept and plan.held_out and stopper.best_epoch in run.history.epoch and val_key in history
                       else None)
    if kept and plan.held_out and stopper.best_epoch == -1:  # the linear start was kept: its own scores
        best_validation = getattr(stopper, "start_scores", {}).get(plan.metric)
    k = s.gradient_accumulation_steps
    return TrainReport(
        examples_per_second=round(steps_run * plan.global_batch / run.seconds, 1) if run.seconds else None,
        train_seconds=round(run.seconds, 2), epochs=s.epochs, epochs_run=len(history["loss"]),
        early_stopping_monitor=stopper.monitor if stopper else None,
        best_epoch=(stopper.best_epoch + 1) if kept else None,
        linear_start=f"{start.fit.name} on {start.fit_rows} train rows" if start is not None else None,
        start_validation_value=getattr(stopper, "start_value", None),
        start_margin=getattr(stopper, "start_margin", None) if start is not None else None,
        validation_percent=plan.held_out,
        validation_examples_estimate=plan.train_rows - plan.fit_rows if plan.held_out else 0,
        target_transform=plan.target if s.task == "regression" else None,
        target_transform_why=plan.target_why or None,
        log_target_smearing=round(smearing, 5) if plan.target == "log" else None,
        steps_per_epoch=plan.steps_per_epoch, optimizer_steps=optimizer_steps,
        train_function_traces=traces(model.train_function), resumed_from_step=run.resume.resumed_from,
        preemptions=backup.history["preemptions"] if backup else 0,
        resumes=backup.history["resumes"] if backup else 0,
        steps_lost=backup.history["steps_lost"] if backup else 0,
        interruptions=backup.history["interruptions"] if backup else [],
        first_epoch_seconds=rounded(first_epoch, 3), steady_epoch_seconds=rounded(steady_epoch, 3),
        step_seconds_p50=p50, step_seconds_p95=p95, compute_only_step_seconds_p50=compute_p50,
        input_wait_fraction=round(max(0.0, 1 - compute_p50 / p50), 3) if (p50 and compute_p50) else None,
        input_core_us_per_example=rounded(feed_us, 2),
        feed_examples_per_core_second=round(1e6 / feed_us) if feed_us else None,
        train_examples=plan.train_rows, replicas=plan.replicas, workers=workers,
        strategy=strategy_name(plan.strategy), global_batch_size=plan.global_batch, gradient_accumulation_steps=k,
        effective_batch_size=plan.global_batch * k, learning_rate=plan.learning_rate, optimizer=s.optimizer,
        precision_policy=plan.policy, xla=s.xla, input_cache=plan.cache, gpus=gpus,
        gpu_utilization_mean=run.gpu.mean, gpu_hours=round(gpu_hours, 4),
        estimated_cost=round(gpu_hours * s.gpu_hour_price, 4), final_loss=float(history["loss"][-1]),
        metric=plan.metric, final_train_metric=float(history[plan.metric][-1]),
        best_validation_metric=best_validation, model=s.custom_model or s.model, chief=run.chief,
        history={key: [float(v) for v in values] for key, values in history.items()})


def render_report(report: Mapping) -> str:
    rows = [f"| {k} | {v} |" for k, v in report.items() if not isinstance(v, dict) and k != "phases"]
    text = "# Training report\n\n| measure | value |\n|---|---|\n" + "\n".join(rows) + "\n"
    phases = report.get("phases") or []
    if phases:
        text += ("\n## Where the time went\n\n| phase | seconds | CPU seconds |\n|---|---|---|\n"
                 + "\n".join(f"| {p['name']} | {p['seconds']:.2f} | {p['cpu_seconds']:.2f} |" for p in phases) + "\n")
    return text
