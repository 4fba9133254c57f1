"""Shared fixtures: small data made by the tests (or the checked-in penguins CSV as text)
and the outputs of one ingest/validate/train pass, reused across component tests."""
import os
from pathlib import Path

import pytest

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before any TensorFlow import)
from components.kinds import Columns

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
    that read an examples artifact: they get it here instead of importing another step, so
    it builds the data section (DataSettings) from the columns it is given: (source,
    output_dir, label, numeric, categorical, eval_percent, split_key, *, numeric_label,
    shard_rows, any other DataSettings field)."""
    from components.ingest.logic import ingest_data
    from components.ingest.settings import DataSettings

    def ingest_columns(source, output_dir, label, numeric_features, categorical_features, eval_percent=20,
                       split_key=None, *, numeric_label=False, **fields):
        run = {k: fields.pop(k) for k in ("shard_rows",) if k in fields}
        settings = DataSettings(source=source, label=label, numeric_features=numeric_features,
                                categorical_features=categorical_features,
                                split={"eval_percent": eval_percent, "key": split_key}, **fields)
        return ingest_data(settings, output_dir, numeric_label=numeric_label, **run)

    return ingest_columns


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


@pytest.fixture(scope="session", autouse=True)
def warm_session():
    """One warm server per test process (pipelines/warm.py), announced in the environment:
    the local runs of the tests (`gpupipe run` in a subprocess, run_local in process) fork
    their tasks from it instead of each starting a server that imports TensorFlow again,
    and so do the multi-process training tests (`warm_python`). Every task is still its own
    process with its own environment, streams, signals and exit code. tests/test_warm.py
    clears these variables to run cold or with a server of its own; tasks starting cold, as
    pods do, are proven by `./dev image-test` (images/image_test.py)."""
    from pipelines import warm

    preload = (*warm.everything(), "components.train.launch", "components.train.__main__")
    previous = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"  # as a run sets it before its server imports TensorFlow
    try:
        with warm.warm_server(preload=preload, modules=(*warm.EXECUTOR, "components.train")) as server:
            if previous is None:
                os.environ.pop("TF_CPP_MIN_LOG_LEVEL")
            else:
                os.environ["TF_CPP_MIN_LOG_LEVEL"] = previous
            saved = {k: os.environ.get(k) for k in server.environment}
            os.environ.update(server.environment)
            yield server
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    finally:
        if previous is not None:
            os.environ["TF_CPP_MIN_LOG_LEVEL"] = previous


@pytest.fixture
def warm_module(warm_session):
    """module -> (python, environment) that runs `python -m module` as a fork of the session's
    warm server (for a test module run as a process of its own, which components/ cannot ask
    pipelines/warm_client for)."""
    from pipelines.warm_client import MODULES_ENV

    return lambda module: (warm_session.python, {**warm_session.environment, MODULES_ENV: module})


@pytest.fixture
def warm_python(warm_session):
    """(python, environment) for `python -m components.train ...` through the session's warm
    server: the multi-process training tests use it. The client passes a SIGTERM on to its
    fork; a SIGKILL stops at the process it hits (the server stops the fork of a killed client
    soon after, when its socket closes, not at once), so the SIGKILL tests kill the fork itself
    (components/train/test_distributed.py finds it by its log file; the JobSet controller
    fixture, tests/fixtures/jobset_controller.py, kills every process in the pod's working
    directory)."""
    return warm_session.python, warm_session.environment
