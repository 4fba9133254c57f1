"""The notify step's logic on its own: the outcome from a run's final state and push's record,
the message for each outcome, and the webhook (tests/fixtures/webhook.py, a FIXTURE: an HTTP
server on loopback taking Slack's incoming-webhook JSON) tried again on a 5xx and refused in
one line on a 4xx. The whole exit handler, after real runs, is tests/test_notify.py."""
import pytest

from components.contracts.errors import GpupipeError
from components.notify import logic
from components.notify.settings import NotifySettings
from tests.fixtures.http import JsonHandler, loopback_server
from tests.fixtures.webhook import webhook_receiver

pytestmark = pytest.mark.unit
PUSHED = {"pushed": True, "version": 3, "path": "/s/penguins/3", "metric": "accuracy", "value": 0.97,
          "threshold": 0.9, "blessed": True, "reasons": ["accuracy 0.9700 meets threshold (>= 0.9000)"]}


@pytest.fixture
def no_waits(monkeypatch):
    waits = []
    monkeypatch.setattr(logic.time, "sleep", waits.append)
    return waits


def test_the_outcome_follows_the_final_state_and_what_push_decided():
    assert logic.outcome_of("COMPLETE", PUSHED) == "pushed"  # MLMD's state, what KFP's driver sends
    assert logic.outcome_of("CACHED", {**PUSHED, "pushed": False}) == "not_blessed"
    assert logic.outcome_of("SUCCESS", {**PUSHED, "pushed": False}) == "not_blessed"  # the local runner's state
    assert logic.outcome_of("COMPLETE", None) == "failed"  # push never ran
    assert logic.outcome_of("FAILED", PUSHED) == "failed"
    assert logic.outcome_of("CANCELED", PUSHED) == "failed"


def test_each_outcome_has_its_first_line_and_the_gates_figures():
    pushed = logic.message("penguins", "pushed", PUSHED, run_url="https://kf/#/runs/details/r1")
    assert pushed["text"].splitlines() == [
        "gpupipe penguins: pushed version 3", "eval accuracy: 0.9700 (threshold 0.9000): blessed",
        "- accuracy 0.9700 meets threshold (>= 0.9000)", "run: https://kf/#/runs/details/r1"]
    assert pushed["blocks"][0]["text"]["text"] == pushed["text"]
    refused = logic.message("penguins", "not_blessed", {**PUSHED, "pushed": False, "blessed": False,
                                                        "reason": "not blessed"})
    assert refused["text"].splitlines()[0] == "gpupipe penguins: not blessed, nothing pushed"
    assert refused["text"].splitlines()[-1] == "not pushed: not blessed"
    failed = logic.message("penguins", "failed", error="train: OOMKilled\nthe rest of the trace")
    assert failed["text"] == "gpupipe penguins: run failed\ntrain: OOMKilled"


def test_a_busy_webhook_gets_the_message_on_the_third_attempt(no_waits):
    with webhook_receiver(fail_first=2) as (url, messages):
        sent = logic.notify(NotifySettings(webhook_url=url, ui_url="https://kf/pipeline"), "penguins", "pushed",
                            PUSHED, run_id="r1")
    assert messages == [sent] and no_waits == [1, 2]
    assert sent["text"].endswith("run: https://kf/pipeline/#/runs/details/r1")


def test_an_outcome_not_asked_for_sends_nothing(no_waits):
    with webhook_receiver() as (url, messages):
        assert logic.notify(NotifySettings(webhook_url=url, on=["failed"]), "penguins", "pushed", PUSHED) is None
    assert messages == [] and no_waits == []


class _Revoked(JsonHandler):
    """A webhook that was removed: Slack answers 404 no_service."""
    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(404, {"error": "no_service"})


def test_a_refused_message_is_one_line_and_not_tried_again(no_waits):
    with loopback_server(_Revoked) as url:
        with pytest.raises(GpupipeError) as err:
            logic.notify(NotifySettings(webhook_url=f"{url}/services/T/B/X"), "penguins", "failed")
    host = url.split("/")[2]
    assert str(err.value) == (f"notify: the webhook at {host} did not take the message (HTTP 404); check "
                              "notify.webhook_url, or on the cluster the Secret notify.webhook_secret names (key `url`)")
    assert no_waits == []


def test_the_exit_handler_reports_a_webhook_that_fails_and_does_not_fail(tmp_path, no_waits, capsys):
    common = dict(pipeline="penguins", run_id="r1", serving_base=str(tmp_path), model_name="penguins")
    quiet = logic.run_notify(settings=NotifySettings(), state="FAILED", error="", **common)
    assert quiet == ["notify: failed: nothing to send (no webhook, or not asked for)"]
    with loopback_server(_Revoked) as url:
        settings = NotifySettings(webhook_url=f"{url}/hook")
        lines = logic.run_notify(settings=settings, state="FAILED", error="", **common)
    assert len(lines) == 1 and lines[0].startswith("warning: notify: the webhook at 127.0.0.1:")
    assert capsys.readouterr().out.splitlines() == [*quiet, *lines]  # printed, for the task's log


def test_a_failure_kfp_sends_without_a_message_says_where_the_error_is(tmp_path, no_waits):
    """KFP's driver always sends an empty error (tests/fixtures/kfp_driver.py): the message names
    the final state and the run's page instead of an empty line."""
    from tests.fixtures.kfp_driver import final_status

    status = final_status("CANCELED", "r1")
    assert status["error"] == {}
    with webhook_receiver() as (url, messages):
        logic.run_notify(settings=NotifySettings(webhook_url=url), state=status["state"], error="",
                         pipeline="penguins", run_id="r1", serving_base=str(tmp_path), model_name="penguins")
    assert messages[0]["text"].splitlines() == [
        "gpupipe penguins: run failed", f"final state CANCELED; {logic.NO_ERROR_FROM_KFP}"]
