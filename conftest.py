"""Shared fixtures: small data made by the tests (or the checked-in penguins CSV as text)
and the outputs of one ingest/validate/train pass, reused across component tests."""
import os
from pathlib import Path

import pytest

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before any TensorFlow import)
from components.contracts.settings import Columns

ROOT = Path(__file__).resolve().parent
PENGUINS_CSV = ROOT / "data" / "penguins.csv"
NUMERIC = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
CATEGORICAL = ["island", "sex"]
LABEL = "species"
PENGUIN_COLUMNS = Columns(label=LABEL, numeric_features=NUMERIC, categorical_features=CATEGORICAL)


@pytest.fixture(scope="session")
def penguins_csv() -> Path:
    return PENGUINS_CSV


@pytest.fixture(scope="session")
def ingest():
    """The real ingest (components.ingest.logic.ingest_data), for the tests of the steps
    that read an examples artifact: they get it here instead of importing another step."""
    from components.ingest.logic import ingest_data

    return ingest_data


@pytest.fixture(scope="session")
def penguin_examples(tmp_path_factory, ingest) -> str:
    out = str(tmp_path_factory.mktemp("examples"))
    ingest(str(PENGUINS_CSV), out, LABEL, NUMERIC, CATEGORICAL, eval_percent=20)
    return out


@pytest.fixture(scope="session")
def penguin_validation(tmp_path_factory, penguin_examples) -> dict:
    from components.validate.logic import run_validation

    out = tmp_path_factory.mktemp("validation")
    dirs = {k: str(out / k) for k in ("statistics", "schema", "anomalies")}
    dirs["report"] = str(out / "report.html")
    dirs["summary"] = str(out / "summary.md")
    run_validation(penguin_examples, LABEL, dirs["statistics"], dirs["schema"], dirs["anomalies"], dirs["report"],
                   summary_md=dirs["summary"])
    return dirs


@pytest.fixture(scope="session")
def penguin_model(tmp_path_factory, penguin_examples, penguin_validation) -> str:
    """A small model trained for a few epochs: enough for shape and signature checks."""
    from components.train.logic import train_model

    model_dir = str(tmp_path_factory.mktemp("model") / "model")
    train_model(penguin_examples, penguin_validation["statistics"], model_dir, PENGUIN_COLUMNS, penguin_settings(epochs=3))
    return model_dir


def penguin_settings(**overrides):
    from components.train.settings import TrainSettings

    base = dict(hidden_units=[16], embedding_dim=2, epochs=3, batch_size=32, learning_rate=0.01)
    return TrainSettings(**{**base, **overrides})


def write_csv(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture
def make_csv(tmp_path):
    """Writes a CSV from text into the test's tmp dir and returns its path."""
    counter = iter(range(1000))

    def make(text: str, name: str = "") -> str:
        return write_csv(tmp_path / (name or f"data{next(counter)}.csv"), text)

    return make


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def penguins_config():
    from pipelines.config import load_config

    return load_config(ROOT / "configs" / "penguins.yaml")


@pytest.fixture(scope="session")
def ctr_config():
    from pipelines.config import load_config

    return load_config(ROOT / "configs" / "ctr.yaml")


@pytest.fixture
def model_dir(tmp_path):
    """A SavedModel's file layout (not a loadable model): what the serving store copies and
    checks (saved_model.pb, variables/)."""
    d = tmp_path / "model"
    (d / "variables").mkdir(parents=True)
    (d / "saved_model.pb").write_bytes(b"pb")
    (d / "variables" / "variables.index").write_bytes(b"idx")
    return str(d)


@pytest.fixture(scope="module")
def warm_python():
    """A warm server (pipelines/warm.py, the way a local run starts its tasks) whose shim
    starts `python -m components.train ...` as a fork of one process that imported
    TensorFlow and the trainer: each worker is still its own process with its own
    environment, streams, signals and exit code, without paying TensorFlow's import again.
    Yields (python, environment) for the command line. The multi-process training tests that
    SIGTERM their workers use it (the client passes a SIGTERM on); the SIGKILL test starts its
    processes cold, since a SIGKILL stops at the process it hits."""
    from pipelines.warm import warm_server

    preload = ("components", "tensorflow", "tf_keras", "components.train.logic", "components.train.model",
               "components.train.runtime", "components.train.launch", "components.train.__main__")
    with warm_server(preload=preload, modules=("components.train",)) as server:
        yield server.python, server.environment
