"""training.tune on the cluster: the compiled train task carries the search and the tuning
priority class, and its launcher runs each trial as a JobSet at that class (at most
parallel_trials at once) against the Kubernetes API FIXTURE, with a controller stand-in that
"trains" each trial by writing its report and model where the command says, then picks the
best trial's model."""
import json
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from components.kinds import Columns
from components.train.launch import PRIORITY_LABEL, TRIAL_LABEL, Launch, job_manifest, trial_launch
from pipelines.config import load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def tuned_config_file(tmp_path: Path, **cluster) -> Path:
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["training"]["tune"] = {"trials": 4, "parallel_trials": 2, "budget_seconds": 3600}
    raw["cluster"].update(cluster)
    path = tmp_path / "penguins-tuned.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_the_compiled_train_task_launches_trials_at_the_tuning_priority(tmp_path):
    from pipelines.cli import main

    config_file = tuned_config_file(tmp_path, queue="team-a-gpus", priority="gpupipe-production")
    out = tmp_path / "compiled"
    assert main(["compile", str(config_file), "--output-dir", str(out)]) == 0
    spec = next(yaml.safe_load_all((out / "penguins.yaml").read_text()))
    parameters = spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]
    settings = json.loads(parameters["settings"]["runtimeValue"]["constant"])
    assert settings["tune"]["trials"] == 4 and settings["tune"]["parallel_trials"] == 2
    assert settings["tune"]["priority_class"] == "gpupipe-tuning" and settings["tune"]["algorithm"] == "random"
    assert settings["tune"]["budget_seconds"] == 3600 and settings["dropout"] == 0.0
    launch = Launch.from_json(parameters["launch"]["runtimeValue"]["constant"])
    assert launch.kind == "jobset" and launch.labels[PRIORITY_LABEL] == "gpupipe-production"
    # The train task is the CPU launcher that runs components.train's task code with both.
    executor = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert executor["image"].split("/")[-1].startswith("gpupipe-cpu:")
    assert "run_train_task" in "\n".join(executor["command"])
    # What that launcher makes of them for trial 3: production's JobSet, queued the same, at
    # the tuning priority (on the JobSet, which Kueue reads, and on its pods).
    trial = job_manifest(trial_launch(launch, "3", settings["tune"]["priority_class"]), "gpupipe-train-x-t3",
                         "team-a", ["python", "-m", "components.train"])
    labels = trial["metadata"]["labels"]
    assert labels[PRIORITY_LABEL] == "gpupipe-tuning" and labels[QUEUE_LABEL] == "team-a-gpus"
    assert labels[TRIAL_LABEL] == "3"
    pod_labels = trial["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    assert pod_labels[PRIORITY_LABEL] == "gpupipe-tuning"
    production = job_manifest(launch, "gpupipe-train-x", "team-a", ["python", "-m", "components.train"])
    assert production["metadata"]["labels"][PRIORITY_LABEL] == "gpupipe-production"


class TrialController(threading.Thread):
    """FIXTURE, not JobSet: completes each trial's JobSet after `delay` s, having written what
    its pod would (the report with a validation loss that is the distance of its learning
    rate to 0.003, its model), and counts how many ran at once."""

    def __init__(self, cluster, delay: float = 0.3):
        super().__init__(daemon=True)
        self.cluster, self.delay = cluster, delay
        self.done, self.most_at_once, self.halt = set(), 0, threading.Event()

    def run(self):
        started = {}
        while not self.halt.is_set():
            with self.cluster.lock:
                jobsets = {k: o for k, o in self.cluster.objects.items() if k[1] == "jobsets" and k not in self.done}
            self.most_at_once = max(self.most_at_once, len(jobsets))
            for key, jobset in jobsets.items():
                started.setdefault(key, time.monotonic())
                if time.monotonic() - started[key] >= self.delay:
                    self._train(jobset)
                    with self.cluster.lock:
                        self.cluster.status[key] = {"conditions": [
                            {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "done"}]}
                    self.done.add(key)
            time.sleep(0.02)

    @staticmethod
    def _train(jobset: dict):
        command = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
            "command"]
        arg = {command[i]: command[i + 1] for i in range(3, len(command) - 1, 2)}
        settings = json.loads(arg["--settings"])
        loss = abs(settings["learning_rate"] - 0.003) * 100
        report = {"early_stopping_monitor": "val_loss", "best_epoch": 1, "epochs_run": 3, "optimizer_steps": 30,
                  "history": {"loss": [loss] * 3, "val_loss": [loss, loss + 1, loss + 2]},
                  "learning_rate": settings["learning_rate"]}
        Path(arg["--report-dir"]).mkdir(parents=True)
        Path(arg["--report-dir"], "report.json").write_text(json.dumps(report))
        Path(arg["--report-dir"], "report.md").write_text("# Training report\n")
        Path(arg["--model-dir"]).mkdir(parents=True)
        Path(arg["--model-dir"], "saved_model.pb").write_text(jobset["metadata"]["name"])


def test_the_launcher_runs_each_trial_as_a_jobset_at_the_tuning_priority_and_keeps_the_best(tmp_path,
                                                                                              monkeypatch):
    from components.train.launch import WORKFLOW_ENV
    from components.train.tune import run_tuned_task
    from pipelines.factory import launch_json
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api
    from tests.fixtures.k8s_schema import assert_valid
    from tests.test_launch import jobset_refusals

    monkeypatch.setenv(WORKFLOW_ENV, "penguins-tuned-7hx2k")
    config = load_config(tuned_config_file(tmp_path, queue="team-a-gpus", priority="gpupipe-production"))
    task = tmp_path / "run" / "train"
    model = str(task / "model")
    with kubernetes_api([[]]) as (url, cluster):
        controller = TrialController(cluster)
        controller.start()
        try:
            report, report_dir = run_tuned_task(
                examples=("/x", str(tmp_path / "run" / "ingest" / "examples")),
                statistics=("/x", str(tmp_path / "run" / "ingest" / "examples" / "statistics")),
                model=("/x", model), columns=Columns.part_of(config.data), settings=config.training,
                launch=launch_json(config), run_train=None, api=custom_objects_api(url), poll_seconds=0.02)
        finally:
            controller.halt.set()
            controller.join()
    posts = [json.loads(json.dumps(o)) for k, o in cluster.objects.items() if k[1] == "jobsets"]
    # <the run's job>-t<trial id>-<6 hex of its hyperparameters>: a retry re-attaches only to the same values
    found = sorted(re.search(r"-t(\d+)-([0-9a-f]{6})$", o["metadata"]["name"]).groups() for o in posts)
    assert [t for t, _ in found] == ["0", "1", "2", "3"] and len({h for _, h in found}) == 4
    assert [m for m, _ in cluster.requests].count("POST") == 4 and cluster.deleted == []
    for jobset in posts:
        labels = jobset["metadata"]["labels"]
        assert labels[PRIORITY_LABEL] == "gpupipe-tuning" and labels[QUEUE_LABEL] == "team-a-gpus"
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        assert pod["metadata"]["labels"][PRIORITY_LABEL] == "gpupipe-tuning"
        assert jobset_refusals(jobset) == [] and assert_valid(jobset) is None
    assert controller.most_at_once == 2  # parallel_trials
    tuning = report["tuning"]
    best = min(tuning["trials"], key=lambda t: t["value"])
    assert tuning["best_trial"] == best["trial_id"] and len(tuning["trials"]) == 4
    # The step's model is the best trial's (its JobSet's name in the stand-in's model file).
    assert re.search(rf"-t{best['trial_id']}-[0-9a-f]{{6}}$", Path(model, "saved_model.pb").read_text())
    assert report["learning_rate"] == best["learning_rate"]
    assert json.loads(Path(report_dir, "report.json").read_text())["tuning"]["best_trial"] == best["trial_id"]


def test_sigterm_to_the_launcher_deletes_the_running_trials_and_exits_143(tmp_path, monkeypatch):
    import signal

    from components.train.launch import WORKFLOW_ENV
    from components.train.tune import run_tuned_task
    from pipelines.factory import launch_json
    from tests.fixtures.k8s_api import custom_objects_api, kubernetes_api

    monkeypatch.setenv(WORKFLOW_ENV, "penguins-tuned-cancel")
    config = load_config(tuned_config_file(tmp_path))
    signalled = []
    with kubernetes_api([[]]) as (url, cluster):
        def cancel():  # the run is cancelled once both trials' JobSets exist
            deadline = time.monotonic() + 60
            while len(cluster.objects) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            # Delivered to this thread, not the main one: the kernel may pick any thread for a
            # process's SIGTERM, and Python runs the handler only in the main thread.
            signalled.append(time.monotonic())
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

        before = signal.getsignal(signal.SIGTERM)
        threading.Thread(target=cancel, daemon=True).start()
        with pytest.raises(SystemExit) as stopped:
            run_tuned_task(examples=("/x", str(tmp_path / "examples")), statistics=("/x", str(tmp_path / "stats")),
                           model=("/x", str(tmp_path / "train" / "model")), columns=Columns.part_of(config.data),
                           settings=config.training, launch=launch_json(config), run_train=None,
                           api=custom_objects_api(url), poll_seconds=0.02)
        stopped_at = time.monotonic()
    assert stopped.value.code == 143
    # Within the pod's grace period (Kubernetes' default terminationGracePeriodSeconds, 30 s),
    # after which the kubelet kills the launcher and its trials' JobSets would be left running.
    assert stopped_at - signalled[0] < 30
    assert len(cluster.deleted) == 2 and not cluster.objects  # both trials' JobSets, and no third started
    assert [m for m, _ in cluster.requests].count("POST") == 2
    assert signal.getsignal(signal.SIGTERM) is before  # the launcher's handler is gone again
