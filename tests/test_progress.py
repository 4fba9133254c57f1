"""What `gpupipe run` prints while it runs, fed the lines kfp.local relays from the tasks:
one line per step start and end, the trainer's progress rewritten in place on a terminal
and as plain lines elsewhere, nothing with --quiet."""
import io

import pytest

from pipelines.local_run import StepResult, _ProgressTee

pytestmark = pytest.mark.unit
TASK_LINES = [
    "Executing task 'train'",
    "    input: parsed batches cached in memory in the first epoch",
    *[f"    progress: epoch {e}/3 step {3 * e}/9 loss 0.{9 - e}000 examples/s 1,000 eta {3 - e}s" for e in (1, 2, 3)],
    "Task 'train' finished with status SUCCESS",
]


class Console(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def shown(tty: bool, quiet: bool = False) -> str:
    console, log = Console(tty), io.StringIO()
    tee = _ProgressTee(log, console, {"train": StepResult("train")}, quiet)
    tee.write("\n".join(TASK_LINES) + "\n")
    assert log.getvalue() == "\n".join(TASK_LINES) + "\n"  # the log keeps every line
    return console.getvalue()


def test_a_terminal_sees_one_progress_line_rewritten_in_place():
    out = shown(tty=True)
    assert out.startswith("  train       running ...\n\r\x1b[K  train       epoch 1/3 step 3/9 loss 0.8000 ")
    assert "\r\x1b[K  train       epoch 3/3 step 9/9 loss 0.6000 examples/s 1,000 eta 0s\n  train       SUCCESS in " in out


def test_a_pipe_sees_plain_lines_the_first_and_last_epoch_at_least():
    lines = shown(tty=False).splitlines()
    assert lines[0] == "  train       running ..." and lines[-1].startswith("  train       SUCCESS in ")
    assert lines[1] == "  train       epoch 1/3 step 3/9 loss 0.8000 examples/s 1,000 eta 2s"
    assert lines[-2] == "  train       epoch 3/3 step 9/9 loss 0.6000 examples/s 1,000 eta 0s"
    assert not any("\r" in line or "\x1b" in line for line in lines)


def test_quiet_shows_nothing_until_the_summary():
    assert shown(tty=True, quiet=True) == "" and shown(tty=False, quiet=True) == ""
