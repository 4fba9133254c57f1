"""Unit tests of push logic: versions, whole-or-nothing directories, the blessing gate."""
import os
import threading

import pytest

from components.errors import GpupipeError
from components.push.logic import list_versions, push_model

pytestmark = pytest.mark.unit


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "model"
    (d / "variables").mkdir(parents=True)
    (d / "saved_model.pb").write_bytes(b"pb")
    (d / "variables" / "variables.index").write_bytes(b"idx")
    return str(d)


def test_versions_increase_and_are_whole(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    first = push_model(model_dir, True, ["ok"], base, "m")
    second = push_model(model_dir, True, ["ok"], base, "m")
    assert (first.version, second.version) == (1, 2)
    assert list_versions(base, "m") == [1, 2]
    assert os.path.isfile(os.path.join(base, "m", "2", "saved_model.pb"))
    assert os.path.isfile(os.path.join(base, "m", "2", "variables", "variables.index"))
    assert sorted(os.listdir(os.path.join(base, "m"))) == ["1", "2"]  # no staging left behind


def test_unblessed_model_is_not_pushed(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    result = push_model(model_dir, False, ["accuracy 0.5 is below threshold 0.9"], base, "m")
    assert not result.pushed and result.version is None
    assert result.reason == "not blessed: accuracy 0.5 is below threshold 0.9"
    assert not os.path.exists(os.path.join(base, "m"))


def test_concurrent_pushes_get_distinct_whole_versions(tmp_path, model_dir):
    base = str(tmp_path / "serving")
    results = []
    threads = [threading.Thread(target=lambda: results.append(push_model(model_dir, True, ["ok"], base, "m")))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.version for r in results) == [1, 2, 3, 4, 5, 6]
    assert list_versions(base, "m") == [1, 2, 3, 4, 5, 6]


def test_directory_without_saved_model_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(GpupipeError, match="has no saved_model.pb"):
        push_model(str(tmp_path / "empty"), True, ["ok"], str(tmp_path / "serving"), "m")
