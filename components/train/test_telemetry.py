"""Unit tests of the feed's cost in the training report (telemetry.feed_cost): the epochs'
CPU less the train function's trace and the compute-only steps', per example."""
import pytest

from components.train.telemetry import ComputeOnly, StepTimer, feed_cost

pytestmark = pytest.mark.unit


def _timer(epochs, first_step_cpu):
    timer = StepTimer()
    timer.epochs = [{"seconds": 1.0, "cpu_seconds": cpu, "validation_seconds": 0.0, "validation_cpu_seconds": val}
                    for cpu, val in epochs]
    timer.first_step_cpu_seconds = first_step_cpu
    return timer


def test_the_feed_is_the_epochs_cpu_less_the_trace_the_validation_and_the_compute():
    # two epochs of 101 steps of 100 examples: 12 CPU-s, 1 of them validation, 2 the first step's trace,
    # 0.5 the validation function's trace beside it; the compute-only step costs 0.04 CPU-s
    timer = _timer([(7.0, 1.0), (5.0, 0.0)], first_step_cpu=2.0)
    us = feed_cost(timer, steps=202, batch=100, compute=ComputeOnly(0.03, 0.04), aside_cpu_seconds=0.5)
    feed = 12.0 - 1.0 - 2.0 - 0.5 - 201 * 0.04
    assert us == pytest.approx(feed / (201 * 100) * 1e6)
    assert us == pytest.approx(22.89, abs=0.01)


def test_no_feed_figure_without_the_timing_or_when_the_compute_covers_the_epoch():
    timer = _timer([(1.0, 0.0)], first_step_cpu=0.1)
    assert feed_cost(timer, steps=10, batch=32, compute=None) is None  # multi-worker: no compute-only timing
    assert feed_cost(timer, steps=10, batch=32, compute=ComputeOnly(0.2, 0.2)) is None  # 1.8 CPU-s > 0.9 left
    assert feed_cost(timer, steps=1, batch=32, compute=ComputeOnly(0.01, 0.01)) is None  # the trace alone
    assert feed_cost(_timer([], 0.0), steps=10, batch=32, compute=ComputeOnly(0.01, 0.01)) is None


def test_the_first_step_of_the_first_epoch_is_the_one_timed_apart():
    timer = StepTimer()
    timer.on_epoch_begin(0)
    timer.on_train_batch_begin(0)
    sum(range(200_000))  # CPU in the first step
    timer.on_train_batch_end(0)
    first = timer.first_step_cpu_seconds
    assert first > 0
    timer.on_train_batch_begin(1)
    timer.on_train_batch_end(1)
    timer.on_epoch_end(0)
    timer.on_epoch_begin(1)
    timer.on_train_batch_begin(0)
    timer.on_train_batch_end(0)
    assert timer.first_step_cpu_seconds == first  # a later epoch's first step is not the trace
