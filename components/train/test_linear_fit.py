"""The linear start's fit from ingest's train sample, in a process of its own beside the
task's TensorFlow import (components/train/linear_fit.py; issue #36): the same fit as in
the task's process, its errors reported as the task's, and the task fitting it itself when
that process fails."""
import json
import os
import shutil

import numpy as np
import pytest

from components.contracts import names
from components.contracts.errors import GpupipeError
from components.contracts.examples import ingest_statistics_dir, manifest_path
from components.contracts.statistics import load_statistics
from components.kinds import specs_from_statistics
from conftest import PENGUIN_COLUMNS, penguin_settings


def _specs(examples):
    return specs_from_statistics(load_statistics(ingest_statistics_dir(examples), names.TRAIN_SPLIT), PENGUIN_COLUMNS)


def test_the_fit_beside_is_the_fit_in_the_task(tmp_path, penguin_examples, monkeypatch):
    """The process's fit (from the sample, TensorFlow never imported there) has the weights
    the task's own fit_linear_start gives, on the same rows; a task whose plan has other specs
    does not take it. A pod's memory is its processes' sum: the run's record of the task's
    peak gets this process's peak so far plus the fit's process's
    (components.record_workers_peak_rss), and that process does not write the task's own."""
    import dataclasses

    import components
    from components.train.linear_fit import fit_linear_start, fitted_beside, same_design

    peak = tmp_path / "peak"
    monkeypatch.setenv(components.PEAK_RSS_ENV, str(peak))
    specs = _specs(penguin_examples)
    stats = load_statistics(ingest_statistics_dir(penguin_examples), names.TRAIN_SPLIT)
    here = fit_linear_start(penguin_examples, specs, stats, "standardize", "", specs, "auto", 0)
    with fitted_beside(penguin_examples, PENGUIN_COLUMNS, penguin_settings(linear_start_process_rows=0)) as beside:
        assert beside is not None
        early = beside.design_start(specs)  # sent before the fit: the model is built on it meanwhile
        assert beside.design_start(dataclasses.replace(specs, label="other")) is None
        taken, start = beside.result(specs)
        other, why = beside.result(dataclasses.replace(specs, label="other"))
    assert same_design(early, start) and same_design(early, here) and early.specs == specs
    assert early.fit.coef.shape == start.fit.coef.shape and not early.fit.coef.any() and not early.fit.intercept.any()
    assert taken and start.fit_rows == here.fit_rows
    np.testing.assert_allclose(start.fit.coef, here.fit.coef, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(start.fit.intercept, here.fit.intercept, rtol=1e-6, atol=1e-9)
    assert start.specs == specs
    assert not other and "other feature specs" in why
    own_then, workers = (int(n) for n in (tmp_path / ("peak" + components.WORKERS_PEAK_RSS_SUFFIX)).read_text().split())
    assert workers == 0 and not peak.exists()
    assert own_then - components.vm_hwm_kb() > 50_000  # the fit's process: scikit-learn, numpy, pyarrow (kB)


def test_no_process_where_the_task_fits_it_itself(tmp_path, penguin_examples):
    """None (the task fits it) for a regression, a launched job, no linear start, a sample
    smaller than training.linear_start_process_rows, and examples without ingest's sample."""
    from components.train.linear_fit import fitted_beside

    for settings, launch in [(penguin_settings(task="regression"), ""), (penguin_settings(), '{"workers": 2}'),
                             (penguin_settings(linear_start=False), ""),
                             (penguin_settings(), "")]:  # its sample, 279 rows: below linear_start_process_rows
        with fitted_beside(penguin_examples, PENGUIN_COLUMNS, settings, launch) as beside:
            assert beside is None
    copy = str(tmp_path / "examples")
    shutil.copytree(penguin_examples, copy)
    manifest = json.loads(open(manifest_path(copy)).read())
    del manifest["sample"]
    open(manifest_path(copy), "w").write(json.dumps(manifest))
    with fitted_beside(copy, PENGUIN_COLUMNS, penguin_settings(linear_start_process_rows=0)) as beside:
        assert beside is None


def test_bad_data_in_the_process_is_the_tasks_error(tmp_path, penguin_examples):
    """An error the fit reports (here: the statistics gone) reaches the task as the same
    one-line GpupipeError, naming what to fix."""
    from components.train.linear_fit import fitted_beside

    copy = str(tmp_path / "examples")
    shutil.copytree(penguin_examples, copy)
    shutil.rmtree(ingest_statistics_dir(copy))
    with fitted_beside(copy, PENGUIN_COLUMNS, penguin_settings(linear_start_process_rows=0)) as beside:
        with pytest.raises(GpupipeError) as err:
            beside.result(_specs(penguin_examples))
    assert "statistics" in str(err.value) and "\n" not in str(err.value)


def test_a_process_that_dies_leaves_the_fit_to_the_task(penguin_examples):
    """Killed (out of memory, say): (False, why), and the task fits the start itself
    (linear_start.py: with_linear_start); the process and its files are gone after the block."""
    from components.train.linear_fit import fitted_beside

    with fitted_beside(penguin_examples, PENGUIN_COLUMNS, penguin_settings(linear_start_process_rows=0)) as beside:
        home = beside._home
        beside._process.kill()
        assert beside.design_start(_specs(penguin_examples)) is None  # no design sent: the model waits for the fit
        taken, why = beside.result(_specs(penguin_examples))
    assert not taken and "exited with" in why
    assert not os.path.exists(home) and beside._process.poll() is not None
