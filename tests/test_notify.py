"""Notifications: a webhook receiver on loopback (tests/fixtures/webhook.py, an HTTP server
taking Slack's incoming-webhook JSON) gets one message for each outcome of a run: failed, not
blessed, pushed. Locally `gpupipe run` sends it from its summary; on the cluster the compiled
pipeline's exit handler sends it with KFP's final status and what push recorded."""
import json
import types
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("notify-runs")]
ROOT = Path(__file__).resolve().parents[1]


def penguins(tmp_path: Path, url: str, **notify) -> "PipelineConfig":  # noqa: F821
    from pipelines.config import parse_config

    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["data"]["source"] = str(ROOT / "data" / "penguins.csv")
    raw["serving"]["base"] = str(tmp_path / "serving")
    raw["notify"] = {"webhook_url": url, **notify}
    return parse_config(raw)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """Three local runs, one per outcome, each told to the same receiver: pushed (a threshold a
    short training meets), not blessed (one the same short training cannot: only evaluate's
    threshold differs, so the second run reuses the first's ingest and train from the task
    cache), failed (a numeric column holding text)."""
    from pipelines.local_run import run_local
    from tests.fixtures.webhook import webhook_receiver

    tmp_path = tmp_path_factory.mktemp("notify")
    bad = tmp_path / "bad.csv"
    rows = (ROOT / "data" / "penguins.csv").read_text().splitlines()
    header = rows[0].split(",")
    broken = rows[5].split(",")
    broken[header.index("body_mass_g")] = "heavy"
    bad.write_text("\n".join([rows[0], *rows[1:5], ",".join(broken), *rows[6:]]) + "\n")
    with webhook_receiver() as (url, messages):
        config = penguins(tmp_path, url)
        summaries = {
            "pushed": run_local(config, runs_dir=str(tmp_path / "runs"), overrides={"epochs": 4, "eval_threshold": 0.5},
                                quiet=True),
            "not_blessed": run_local(config, runs_dir=str(tmp_path / "runs"),
                                     overrides={"epochs": 4, "eval_threshold": 0.9999}, quiet=True),
            "failed": run_local(config, runs_dir=str(tmp_path / "runs"), overrides={"data_source": str(bad)},
                                quiet=True),
        }
    return tmp_path, summaries, messages


def test_a_local_run_tells_the_webhook_each_outcome_once(three_runs):
    _, summaries, messages = three_runs
    assert [s.status for s in summaries.values()] == ["SUCCESS", "SUCCESS", "FAILURE"]
    assert len(messages) == 3, messages
    pushed, not_blessed, failed = (m["text"] for m in messages)
    assert pushed.startswith("gpupipe penguins: pushed version 1") and "threshold 0.5000): blessed" in pushed
    assert not_blessed.startswith("gpupipe penguins: not blessed, nothing pushed")
    assert "threshold 0.9999): not blessed" in not_blessed and "not pushed:" in not_blessed
    assert failed.startswith("gpupipe penguins: run failed") and "body_mass_g" in failed
    for m in messages:  # Slack's shape: the text, and one mrkdwn section with the same lines
        assert m["blocks"] == [{"type": "section", "text": {"type": "mrkdwn", "text": m["text"]}}]
    assert summaries["pushed"].notified == "notified: pushed"
    assert "notified: not blessed" in summaries["not_blessed"].render()
    assert "train" in summaries["not_blessed"].cached  # the pushed run's model, judged by a stricter threshold


def backoff(monkeypatch) -> list:
    """The seconds notify waits between attempts, recorded instead of slept."""
    from components.notify import logic

    waits = []
    monkeypatch.setattr(logic, "time", types.SimpleNamespace(sleep=waits.append))
    return waits


def test_the_exit_handler_reads_what_push_recorded_and_tells_the_webhook(three_runs, monkeypatch, tmp_path):
    """The compiled exit task's own function, run by kfp's Executor on the final status KFP's
    driver really sends (tests/fixtures/kfp_driver.py): COMPLETE and push's record of that run
    -> pushed, or not blessed; FAILED with an empty error -> failed, saying where the error is.
    A webhook that answers 503 twice gets the first message on the third attempt, 1 s then 2 s
    after the first."""
    from components.store import served
    from components.store.base import ServingStore
    from pipelines import steps
    from tests.fixtures.kfp_driver import final_status, run_exit_task
    from tests.fixtures.webhook import webhook_receiver

    runs_path, summaries, _ = three_runs
    store = ServingStore(str(runs_path / "serving"), "penguins")
    run_ids = [p.stem for p in (runs_path / "serving" / "penguins" / served.RUNS_DIR).glob("*.json")]
    recorded = {run_id: served.run_outcome(store, run_id) for run_id in run_ids}
    (pushed_run,) = [run_id for run_id, outcome in recorded.items() if outcome["pushed"]]
    (refused_run,) = [run_id for run_id, outcome in recorded.items() if not outcome["pushed"]]
    assert recorded[pushed_run]["version"] == 1

    notify_fn = steps.EXIT_HANDLER.function()  # the exit task's function, as the factory compiles it
    waits = backoff(monkeypatch)
    with webhook_receiver(fail_first=2) as (url, messages), pytest.MonkeyPatch.context() as env:
        env.setenv("GPUPIPE_WEBHOOK_URL", url)  # as the Secret gives it to the exit task
        settings = json.dumps({"ui_url": "https://kf.example.com/pipeline", "webhook_secret": "team-slack"})
        for state, run_id in (("COMPLETE", pushed_run), ("COMPLETE", refused_run), ("FAILED", "run-3")):
            run_exit_task(notify_fn, "status", final_status(state, run_id), dict(
                settings=settings, pipeline="penguins", run_id=run_id,
                serving_base=str(runs_path / "serving"), model_name="penguins"), tmp_path)
    assert [m["text"].splitlines()[0] for m in messages] == ["gpupipe penguins: pushed version 1",
                                                             "gpupipe penguins: not blessed, nothing pushed",
                                                             "gpupipe penguins: run failed"]
    assert f"run: https://kf.example.com/pipeline/#/runs/details/{pushed_run}" in messages[0]["text"]
    assert messages[2]["text"].splitlines()[1] == (
        "final state FAILED; KFP sends no error message to the exit handler: the failed task and its log are on "
        "the run's page")
    assert waits == [1, 2]  # the first message's two refused attempts; the others went through at once


def test_a_webhook_that_refuses_is_one_warning_line_not_a_failed_run(tmp_path, capsys, monkeypatch):
    from components.notify.logic import run_notify
    from components.notify.settings import NotifySettings

    waits = backoff(monkeypatch)

    lines = run_notify(settings=NotifySettings(webhook_url="http://127.0.0.1:9/hook"), state="FAILED", error="x",
                       pipeline="penguins", run_id="r1", serving_base=str(tmp_path), model_name="penguins")
    assert len(lines) == 1 and lines[0].startswith("warning: notify: the webhook at 127.0.0.1:9 did not take")
    assert "notify.webhook_url" in lines[0]
    assert waits == [1, 2]  # three attempts in all


def test_the_compiled_pipeline_notifies_from_an_exit_handler_with_the_webhook_from_a_secret(tmp_path):
    from pipelines.cli import compile_to_text
    from pipelines.config import parse_config

    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["notify"] = {"webhook_secret": "team-a-slack", "webhook_url": "https://hooks.example.com/T1/B1/secret"}
    text = compile_to_text(parse_config(raw))
    assert "hooks.example.com" not in text  # the local webhook is never compiled in
    spec, platform = yaml.safe_load_all(text)
    root = spec["root"]["dag"]["tasks"]
    assert set(root) == {"exit-handler-1", "notify"}
    assert root["notify"]["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    assert root["notify"]["dependentTasks"] == ["exit-handler-1"]
    inner = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    assert {"ingest", "train", "push"} <= set(inner)
    env = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-notify"]["secretAsEnv"]
    assert [(e["secretName"], e["keyToEnv"]) for e in env] == [("team-a-slack",
                                                                [{"secretKey": "url", "envVar": "GPUPIPE_WEBHOOK_URL"}])]
    # without a Secret, no exit handler: the committed example pipelines stay as they are
    assert "exit-handler" not in compile_to_text(parse_config(yaml.safe_load(
        (ROOT / "configs" / "penguins.yaml").read_text())))
