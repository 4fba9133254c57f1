"""The fingerprint step: its data digest changes exactly when the source's files do (so a
cached ingest is reused only for the same data), and it reports the served version (so a
cached validate is reused only against the same drift baseline)."""
import os
from pathlib import Path

import pytest

from components.contracts.errors import GpupipeError
from components.fingerprint.logic import NOTHING_SERVED, fingerprint_inputs

pytestmark = pytest.mark.unit
CSV = "x,label\n1,a\n2,b\n"


def data_print(source: str, serving: Path) -> str:
    return fingerprint_inputs(source, "auto", str(serving), "m")["data"]


def test_local_data_fingerprint_follows_the_files(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.csv").write_text(CSV)
    serving = tmp_path / "serving"
    first = data_print(str(raw), serving)
    assert data_print(str(raw), serving) == first  # unchanged data: the same key, the cache may hit
    (raw / "b.csv").write_text(CSV)  # a new file arrives
    second = data_print(str(raw), serving)
    assert second != first
    (raw / "a.csv").write_text(CSV.replace("2,b", "3,b"))  # same size, new content
    os.utime(raw / "a.csv", ns=(1, os.stat(raw / "a.csv").st_mtime_ns + 1_000_000))
    assert data_print(str(raw), serving) not in (first, second)
    assert data_print(str(raw / "*.csv"), serving) != data_print(str(raw / "a.csv"), serving)


def test_gcs_data_fingerprint_follows_object_generations(tmp_path, monkeypatch):
    from components.contracts.storage.gcs import client as gcs_client
    from tests.fixtures.gcs import gcs_emulator

    with gcs_emulator(monkeypatch) as bucket:
        blob = gcs_client().bucket(bucket).blob("raw/part-1.csv")
        blob.upload_from_string(CSV)
        first = data_print(f"gs://{bucket}/raw", tmp_path / "serving")
        assert data_print(f"gs://{bucket}/raw", tmp_path / "serving") == first
        blob.upload_from_string(CSV.replace("2,b", "3,b"))  # overwritten in place, same size
        assert data_print(f"gs://{bucket}/raw", tmp_path / "serving") != first


def test_served_version_follows_pushes(tmp_path):
    source = tmp_path / "a.csv"
    source.write_text(CSV)
    serving = tmp_path / "serving"
    assert fingerprint_inputs(str(source), "auto", str(serving), "m")["served"] == NOTHING_SERVED
    for version in (1, 2):
        (serving / "m" / str(version)).mkdir(parents=True)
        (serving / "m" / str(version) / "saved_model.pb").write_bytes(b"")
    (serving / "m" / "3").mkdir()  # a half-written version does not count
    assert fingerprint_inputs(str(source), "auto", str(serving), "m")["served"] == "2"


def test_missing_source_is_a_one_line_error(tmp_path):
    with pytest.raises(GpupipeError, match=r"data.source: file not found: .*nope.csv; fix the path"):
        fingerprint_inputs(str(tmp_path / "nope.csv"), "auto", str(tmp_path), "m")
