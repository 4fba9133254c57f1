"""`gpupipe report`: a local run's HTML page (RUN_DIR), or the pool view of a config's recent
local runs (CONFIG), both from what the runs recorded in their run directories."""
from __future__ import annotations

from pathlib import Path

from components.contracts import names
from components.contracts.errors import GpupipeError

# Where kfp.local keeps each step's artifacts inside a run directory (<task>/<output>).
TRAIN_REPORT_DIR = (names.TRAIN, "report")
BLESSING_DIR = (names.EVALUATE, "blessing")
ANOMALIES_DIR = (names.VALIDATE, "anomalies")
PUSHED_DIR = (names.PUSH, "pushed")
REPORT_OUTPUT = (names.REPORT, "page")  # the report task's HTML output (components/report/component.py)


def run_page(run_dir: Path) -> Path:
    """The run's report page: `RUN_DIR/report.html` as `gpupipe run` leaves it; for a run
    without one (an older run, a run whose report task did not run) built now from the
    artifacts the run has."""
    from components.report.logic import run_report

    if not run_dir.is_dir():
        raise GpupipeError(f"report: {run_dir} is not a directory; give a run directory (runs/<pipeline>-<time>) "
                           "or a config")
    page = run_dir / names.RUN_REPORT_PAGE
    if page.is_file():
        return page
    if not run_dir.joinpath(*TRAIN_REPORT_DIR, names.TRAIN_REPORT_FILE).is_file():
        raise GpupipeError(f"report: {run_dir} holds no training report ({'/'.join(TRAIN_REPORT_DIR)}/"
                           f"{names.TRAIN_REPORT_FILE}); give the directory of a run that trained")
    present = lambda parts: str(run_dir.joinpath(*parts)) if run_dir.joinpath(*parts).is_dir() else ""  # noqa: E731
    run_report(page_html=str(page), title=f"gpupipe run report: {run_dir.name}",
               train_report_dir=present(TRAIN_REPORT_DIR), blessing_dir=present(BLESSING_DIR),
               anomalies_dir=present(ANOMALIES_DIR), pushed_dir=present(PUSHED_DIR))
    return page


def open_in_browser(page: Path) -> bool:
    import webbrowser

    return webbrowser.open(page.resolve().as_uri())
