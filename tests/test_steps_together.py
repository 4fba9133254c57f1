"""Steps one after another without kfp, where a test needs more than one step's logic:
ingest, validate, train and evaluate on a regression task."""
import pytest

from components.contracts.settings import Columns
from components.evaluate.logic import score_model
from components.ingest.logic import ingest_data
from components.train.logic import train_model
from components.validate.logic import run_validation
from conftest import penguin_settings

pytestmark = pytest.mark.unit


def test_regression_task_trains_and_serves_predictions(tmp_path, penguins_csv):
    ex = str(tmp_path / "ex")
    ingest_data(str(penguins_csv), ex, "body_mass_g", ["bill_length_mm", "flipper_length_mm"], ["species", "sex"],
                numeric_label=True)
    run_validation(ex, "body_mass_g", str(tmp_path / "s"), str(tmp_path / "c"), str(tmp_path / "a"),
                   str(tmp_path / "r.html"))
    columns = Columns(label="body_mass_g", numeric_features=["bill_length_mm", "flipper_length_mm"],
                      categorical_features=["species", "sex"])
    report = train_model(ex, str(tmp_path / "s"), str(tmp_path / "m"), columns,
                         penguin_settings(task="regression", epochs=30))
    assert "final_train_rmse" in report
    evaluation = score_model(str(tmp_path / "m"), ex)
    assert evaluation.classes == [] and evaluation.metrics["rmse"] < 600  # body mass sd is about 800 g


