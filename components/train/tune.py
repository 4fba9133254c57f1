"""training.tune: a search over the learning rate, the tower's width and depth, dropout and
the batch size. Keras Tuner's oracles (RandomSearch, BayesianOptimization) propose the
hyperparameters; gpupipe runs each trial itself, as training runs (Keras Tuner's own Tuner
builds Keras 3 models, and ours are tf_keras):

- locally, and on a cluster whose train task trains in its own pod, one trial after
  another in this process, each in its own directory;
- where the train task launches its workers (components/train/launch.py), each trial is a
  JobSet at the tuning WorkloadPriorityClass, `parallel_trials` at once, so trials fill
  the GPUs production runs leave idle and give them back when preempted.

A trial's score is the validation slice's early-stopping metric at the epoch whose weights
training kept; the best trial's model is the step's model (no retraining) and the training
report is the best trial's, with every trial in `tuning.trials`."""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, List, Optional, Tuple

from components.contracts import names, storage
from components.contracts.compat.keras_tuner import set_oracle_project_dir
from components.contracts.errors import GpupipeError
from components.train.report import REPORT_MD
from components.train.settings import MIN_VALIDATION_ROWS, TrainSettings

TRIAL_FILE = "trial.json"  # in each trial's directory: its hyperparameters, and whether it finished

# One trial: its settings (the hyperparameters applied) and its directory -> (score, report).
TrainTrial = Callable[[TrainSettings, str], Tuple[float, dict]]
MIN_WIDTH = 4  # the narrowest layer of a halving tower
SIGNAL_POLL_SECONDS = 0.2  # the main thread's wait between chances to run a SIGTERM handler


def objective(settings: TrainSettings) -> Tuple[str, str]:
    """(the metric trials are compared on, "min" or "max"): the early-stopping metric on
    the validation slice, as training monitors it."""
    if settings.early_stopping is None or settings.validation_percent <= 0:
        raise GpupipeError("training.tune: trials are compared on the validation slice's early-stopping metric; "
                           "set training.early_stopping (on by default) and training.validation_percent above 0")
    key = "rmse" if settings.task == "regression" else "accuracy"
    metric = settings.early_stopping.metric if settings.early_stopping.metric in ("loss", key) else "loss"
    return "val_" + metric, "max" if metric == "accuracy" else "min"


def score(report: dict, metric: str, direction: str) -> float:
    """The trial's `metric` at the epoch whose weights it kept (its best epoch)."""
    values = (report.get("history") or {}).get(metric)
    if report.get("early_stopping_monitor") != metric or not values:
        raise GpupipeError(f"training.tune: a trial reported no {metric}: its validation slice was under "
                           f"{MIN_VALIDATION_ROWS} rows ({report.get('train_examples', 0)} train rows x "
                           "training.validation_percent); raise training.validation_percent or give more rows")
    best = report.get("best_epoch")
    if best:
        return float(values[best - 1])
    if best == 0 and report.get("start_validation_value") is not None:  # the linear start was kept
        return float(report["start_validation_value"])
    return float(min(values) if direction == "min" else max(values))


def search_space(settings: TrainSettings):
    """keras_tuner.HyperParameters from training.tune's ranges (a range of one value is Fixed)."""
    import keras_tuner as kt

    t = settings.tune
    hp = kt.HyperParameters()

    def number(name, low, high, kind, **extra):
        if low == high:
            hp.Fixed(name, low)
        else:
            getattr(hp, kind)(name, low, high, **extra)

    number("learning_rate", *t.learning_rate, "Float", sampling="log")
    hp.Choice("width", t.width)
    number("depth", *t.depth, "Int")
    number("dropout", *t.dropout, "Float")
    hp.Choice("batch_size", t.batch_size)
    return hp


def initial_random_trials(trials: int) -> int:
    """Bayesian search: the random trials before the Gaussian process proposes."""
    return max(2, trials // 3)


def make_oracle(settings: TrainSettings, oracle_dir: str):
    import keras_tuner as kt

    t = settings.tune
    metric, direction = objective(settings)
    common = dict(objective=kt.Objective(metric, direction), max_trials=t.trials,
                  hyperparameters=search_space(settings), allow_new_entries=False, tune_new_entries=False,
                  seed=settings.seed, max_consecutive_failed_trials=t.trials + 1)
    # Keras Tuner's default starts the Gaussian process after 3 x 5 random trials; a search of
    # a few trials would never reach it.
    oracle = (kt.oracles.BayesianOptimizationOracle(num_initial_points=initial_random_trials(t.trials), **common)
              if t.algorithm == "bayesian" else kt.oracles.RandomSearchOracle(**common))
    set_oracle_project_dir(oracle, oracle_dir, "oracle")  # its state files (Keras Tuner's Tuner does this)
    oracle.verbose = 0
    return oracle


def hidden_units(width: int, depth: int) -> List[int]:
    """A tower `depth` layers deep whose first layer is `width` wide, each next half as wide."""
    return [max(MIN_WIDTH, width // 2 ** i) for i in range(depth)]


def trial_settings(settings: TrainSettings, values: dict) -> TrainSettings:
    """The training settings of one trial: the hyperparameters applied, no search of its own."""
    return settings.model_copy(update={
        "learning_rate": float(values["learning_rate"]),
        "hidden_units": hidden_units(int(values["width"]), int(values["depth"])),
        "dropout": round(float(values["dropout"]), 4), "batch_size": int(values["batch_size"]), "tune": None})


def trial_hyperparameters(s: TrainSettings) -> dict:
    return {"learning_rate": s.learning_rate, "hidden_units": list(s.hidden_units), "dropout": s.dropout,
            "batch_size": s.batch_size}


def earlier_attempt(directory: str, hyperparameters: dict) -> Optional[dict]:
    """A retried train task finds its trials' directories where the last attempt left them
    (beside the model's URI). A trial that finished there with the same hyperparameters is
    reused: its report is returned and it is not trained again. One that started with other
    values (a bayesian search may propose others after a retry) is removed first, so its
    backup is never restored into this trial's model, and so is one marked finished whose report
    is missing; one that started with the same values and did not finish resumes from its
    backup (or its job is re-attached)."""
    text = storage.read_text(storage.join(directory, TRIAL_FILE))
    if not text:
        return None
    record = json.loads(text)
    same = record.get("hyperparameters") == hyperparameters
    report = storage.read_text(storage.join(directory, "report", names.TRAIN_REPORT_FILE)) if same else None
    if not same or (record.get("completed") and not report):  # other values, or a finish without its report
        storage.delete_prefix(directory)
        return None
    return json.loads(report) if record.get("completed") else None


def record_trial(directory: str, hyperparameters: dict, completed: bool) -> None:
    """The trial's TRIAL_FILE: what earlier_attempt reads on a retry."""
    storage.write_text(storage.join(directory, TRIAL_FILE),
                       json.dumps({"hyperparameters": hyperparameters, "completed": completed}))


def search(settings: TrainSettings, train_trial: TrainTrial, trials_home: str, parallel: int = 1,
           stop: Optional[threading.Event] = None, clock=time.monotonic) -> dict:
    """Runs the trials (`parallel` at once) and returns the tuning record: every trial (id,
    hyperparameters, score, epochs, steps, seconds, status), the best one's id, directory and
    report. A trial that fails is recorded and the search goes on; none finishing is an error.
    With `parallel` > 1, SIGTERM sets `stop` (the trials' jobs watch it, and delete themselves)
    and the search exits 143 once they are gone."""
    import keras_tuner as kt

    t = settings.tune
    metric, direction = objective(settings)
    oracle_dir = tempfile.mkdtemp(prefix="gpupipe-tune-")
    oracle = make_oracle(settings, oracle_dir)
    lock, stop = threading.Lock(), stop or threading.Event()
    started = clock()
    trials: List[dict] = []
    reports: dict = {}
    stopped_by = ["trials"]

    def next_trial(slot: int):
        with lock:
            if stop.is_set():
                return None
            if t.budget_seconds and clock() - started >= t.budget_seconds:
                stopped_by[0] = "budget_seconds"
                return None
            if t.budget_epochs and sum(r.get("epochs_run") or 0 for r in trials) >= t.budget_epochs:
                stopped_by[0] = "budget_epochs"
                return None
            trial = oracle.create_trial(f"slot-{slot}")
            if trial.status != kt.engine.trial.TrialStatus.RUNNING:
                if len(oracle.trials) < t.trials:
                    stopped_by[0] = "search space exhausted"
                return None
            return trial

    def run(trial) -> None:
        s = trial_settings(settings, trial.hyperparameters.values)
        directory = storage.join(trials_home, f"trial-{trial.trial_id}")
        hyperparameters = trial_hyperparameters(s)
        record = {"trial_id": trial.trial_id, **hyperparameters, "objective": metric}
        print(f"tune: trial {trial.trial_id} {json.dumps(hyperparameters)}", flush=True)
        t0 = clock()
        try:
            earlier = earlier_attempt(directory, hyperparameters)
            if earlier is not None:  # a retried train task: this trial finished in an earlier attempt
                value, report = score(earlier, metric, direction), earlier
                record["reused"] = True
                print(f"tune: trial {trial.trial_id} finished in an earlier attempt of this task: reused", flush=True)
            else:
                record_trial(directory, hyperparameters, completed=False)
                value, report = train_trial(s, directory)
            if not math.isfinite(value):
                raise GpupipeError(f"{metric} is {value}: the trial diverged; narrow training.tune.learning_rate")
        except Exception as err:  # noqa: BLE001 (one trial's failure is recorded; the search goes on)
            trial.status, trial.message = kt.engine.trial.TrialStatus.FAILED, str(err)
            record.update(status="failed", value=None, message=f"{type(err).__name__}: {err}"[:500])
        else:
            trial.status = kt.engine.trial.TrialStatus.COMPLETED
            record_trial(directory, hyperparameters, completed=True)
            record.update(status="completed", value=value, epochs_run=report.get("epochs_run"),
                          best_epoch=report.get("best_epoch"), optimizer_steps=report.get("optimizer_steps"),
                          train_seconds=report.get("train_seconds"))
        record["seconds"] = round(clock() - t0, 2)
        record["directory"] = directory
        with lock:
            if record["status"] == "completed":
                oracle.update_trial(trial.trial_id, {metric: value}, step=report.get("epochs_run") or 0)
                reports[trial.trial_id] = report
            oracle.end_trial(trial)
            trials.append(record)
        print(f"tune: trial {trial.trial_id} {record['status']}"
              + (f" {metric} {value:.5g}" if record["status"] == "completed" else f": {record['message']}"),
              flush=True)

    def worker(slot: int) -> None:
        while (trial := next_trial(slot)) is not None:
            run(trial)

    try:
        if parallel <= 1:
            worker(0)
        else:
            in_main = threading.current_thread() is threading.main_thread()
            previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if in_main else None
            try:
                with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="gpupipe-trial") as pool:
                    futures = [pool.submit(worker, slot) for slot in range(parallel)]
                    # Waits a short while at a time: the kernel may deliver SIGTERM to any thread,
                    # and Python runs its handler only in the main thread, between bytecodes; a
                    # main thread blocked in future.result() would never see it.
                    while wait(futures, timeout=SIGNAL_POLL_SECONDS).not_done:
                        pass
                    for future in futures:
                        future.result()
            finally:
                if previous is not None:
                    signal.signal(signal.SIGTERM, previous)
            if stop.is_set():
                print("SIGTERM: the trials' jobs were deleted", flush=True)
                raise SystemExit(143)
        best = oracle.get_best_trials(1)
    finally:
        shutil.rmtree(oracle_dir, ignore_errors=True)
    if not best or best[0].trial_id not in reports:
        failed = next((r["message"] for r in trials if r["status"] == "failed"), "no trial ran")
        raise GpupipeError(f"training.tune: no trial finished ({failed}); see the train task's log, and narrow "
                           "training.tune's ranges (batch_size, width) if trials ran out of memory")
    best_id = best[0].trial_id
    trials.sort(key=lambda r: r["trial_id"])
    chosen = next(r for r in trials if r["trial_id"] == best_id)
    return {"algorithm": t.algorithm, "objective": metric, "direction": direction, "trials_planned": t.trials,
            "trials_run": len(trials), "stopped_by": stopped_by[0], "search_seconds": round(clock() - started, 2),
            "best_trial": best_id, "best_value": chosen["value"], "best_directory": chosen["directory"],
            "best_report": reports[best_id], "trials": trials}


def render_trials(tuning: dict) -> str:
    """The trials as a Markdown table, the best marked."""
    rows = ["| trial | learning rate | hidden units | dropout | batch | "
            f"{tuning['objective']} | epochs | steps | seconds | status |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in tuning["trials"]:
        value = f"{r['value']:.5g}" if r.get("value") is not None else "-"
        mark = " (best)" if r["trial_id"] == tuning["best_trial"] else ""
        rows.append(f"| {r['trial_id']}{mark} | {r['learning_rate']:.3g} | {r['hidden_units']} | {r['dropout']} | "
                    f"{r['batch_size']} | {value} | {r.get('epochs_run', '-')} | {r.get('optimizer_steps', '-')} | "
                    f"{r['seconds']} | {r['status']}{': ' + r['message'] if r.get('message') else ''} |")
    return (f"\n## Tuning\n\n{tuning['algorithm']} search, {tuning['trials_run']} of {tuning['trials_planned']} "
            f"trials (stopped by {tuning['stopped_by']}) in {tuning['search_seconds']} s; best trial "
            f"{tuning['best_trial']} ({tuning['direction']} {tuning['objective']}), whose model this is.\n\n"
            + "\n".join(rows) + "\n")


def read_trial_report(trial_dir: str) -> dict:
    text = storage.read_text(storage.join(trial_dir, "report", names.TRAIN_REPORT_FILE))
    if not text:
        raise GpupipeError(f"training.tune: the trial's job finished without a report in {trial_dir}/report; "
                           "see its pods' logs (kubectl logs -l app.kubernetes.io/managed-by=gpupipe)")
    return json.loads(text)


def copy_model(source: str, target: str) -> None:
    """The best trial's model (a directory or an object store prefix) to the step's model."""
    if not storage.is_remote(source) and not storage.is_remote(target):
        shutil.copytree(source, target, dirs_exist_ok=True)
        return
    with tempfile.TemporaryDirectory(prefix="gpupipe-best-") as tmp:
        local = storage.local_dir(source, os.path.join(tmp, "model"))
        if storage.is_remote(target):
            storage.put_tree(local, target, last="saved_model.pb")
        else:
            shutil.copytree(local, target, dirs_exist_ok=True)


def run_tuned_task(*, examples: tuple, statistics: tuple, model: tuple, columns, settings: TrainSettings,
                   launch: str, run_train: Optional[Callable[..., dict]], log_dir: str = "", api=None,
                   poll_seconds: float = 15.0) -> Tuple[dict, str]:
    """The train task with training.tune: the search, then the best trial's model as the
    step's model (its TensorBoard logs in `log_dir`, locally) and the report (the best
    trial's, plus `tuning`) in the report directory.
    `run_train` is components.train.logic.run_train (one trial in this process); with
    `launch`, each trial is a JobSet (components.train.launch.run_training_job). Returns
    (the report, the report directory)."""
    if not launch:
        trials_home = storage.join(storage.parent(model[1] if storage.is_remote(model[1]) else model[0]), "trials")
        model_target, report_dir = model[0], storage.join(storage.parent(model[0]), "report")

        def train_trial(s: TrainSettings, trial_dir: str):
            report = run_train(examples_dir=examples[0], statistics_dir=statistics[0],
                               model_dir=storage.join(trial_dir, "model"), columns=columns, settings=s,
                               backup_dir=storage.join(trial_dir, "backup"),
                               log_dir=storage.join(trial_dir, "tensorboard"),
                               report_dir=storage.join(trial_dir, "report"))
            return score(report, *objective(settings)), report
        parallel, stop = 1, None
    else:
        from components.train.launch import Launch, run_training_job, worker_command

        job, stop = Launch.from_json(launch), threading.Event()
        trials_home = storage.join(storage.parent(model[1]), "trials")
        model_target, report_dir = model[1], storage.join(storage.parent(model[1]), "report")

        def train_trial(s: TrainSettings, trial_dir: str):
            # the job's name carries the trial's hyperparameters too: a retried train task re-attaches to a
            # trial job only when it trains the same values (a bayesian search may propose others on a retry)
            values = hashlib.sha256(json.dumps(trial_hyperparameters(s), sort_keys=True).encode()).hexdigest()[:6]
            trial_id = f"{storage.basename(trial_dir).split('-', 1)[1]}-{values}"
            run_training_job(job, worker_command(examples=examples[1], statistics=statistics[1], home=trial_dir,
                                                  model_dir=storage.join(trial_dir, "model"), columns=columns,
                                                  settings=s), api=api,
                             poll_seconds=poll_seconds, trial=(trial_id, settings.tune.priority_class), stopping=stop)
            report = read_trial_report(trial_dir)
            return score(report, *objective(settings)), report
        parallel = settings.tune.parallel_trials
    tuning = search(settings, train_trial, trials_home, parallel, stop)
    best_dir = tuning.pop("best_directory")
    report = {**tuning.pop("best_report"), "tuning": tuning}
    copy_model(storage.join(best_dir, "model"), model_target)
    best_logs = storage.join(best_dir, "tensorboard")
    if log_dir and not launch and not storage.is_remote(best_logs) and os.path.isdir(best_logs):
        shutil.copytree(best_logs, log_dir, dirs_exist_ok=True)
    best_md = storage.read_text(storage.join(best_dir, "report", REPORT_MD)) or "# Training report\n"
    storage.makedirs(report_dir)
    storage.write_text(storage.join(report_dir, names.TRAIN_REPORT_FILE), json.dumps(report, indent=2))
    storage.write_text(storage.join(report_dir, REPORT_MD), best_md + render_trials(tuning))
    print(f"tune: best trial {tuning['best_trial']} ({tuning['objective']} {tuning['best_value']:.5g}); its model "
          "is the step's model", flush=True)
    return report, report_dir
