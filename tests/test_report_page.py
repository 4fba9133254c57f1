"""The run report of a two-class run with a served baseline, in a real headless Chromium
with no network: the ROC and PR curves and the drift bars are drawn too (the penguins
run's page, three classes and nothing served, is checked in tests/test_e2e.py)."""
import pytest

from components.report.logic import run_report
from components.report.test_logic import write_run
from tests.fixtures.browser import drawn_plots, rendered_dom

pytestmark = pytest.mark.unit


def test_binary_run_with_drift_renders_every_plot(tmp_path):
    page = tmp_path / "report.html"
    drawn = run_report(page_html=str(page), title="ctr", **write_run(tmp_path))
    plots = drawn_plots(rendered_dom(str(page)))
    assert sorted(plots) == sorted(drawn) == ["plot-confusion", "plot-drift", "plot-loss", "plot-metrics", "plot-pr",
                                              "plot-roc"]
    assert all(p["main_svg"] >= 1 for p in plots.values()), plots
    assert plots["plot-roc"]["traces"] == ["scatter", "scatter"]  # the curve and the chance line
    assert plots["plot-pr"]["traces"] == ["scatter"]
    assert plots["plot-drift"]["traces"] == ["bars", "scatter"]  # measured distances, thresholds
    assert plots["plot-confusion"]["labels"] == ["40", "3", "5", "52"]
