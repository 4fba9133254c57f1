"""Rare and sparse columns (issue #39, acceptance 3 and 4), with the real ingest and TFDV:
a declared numeric column with a value in one row of the table (a taxi table's
`pickup_census_tract`) is named with its counts in a warning, and when no eval row holds it,
validate stops in one gpupipe line naming the column, the counts per split and the keys; a
legal CSV value with an embedded newline, unseen in training, is counted in eval rows with
the tolerance key. No TFDV sentence is the whole message."""
import csv
from pathlib import Path

import pytest

from components.contracts.errors import GpupipeError
from components.ingest.logic import ingest_data
from components.ingest.settings import DataSettings
from components.validate.logic import run_validation
from components.validate.settings import ValidationSettings

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
TRACT = "17031081500"


def penguins_with(tmp_path: Path, tract_row: int, newline_row: int = -1) -> str:
    """data/penguins.csv plus a `census tract` column with a value in row `tract_row` only,
    and, in row `newline_row`, an island written "Torgersen\\n" (one quoted CSV field)."""
    rows = list(csv.DictReader((ROOT / "data" / "penguins.csv").open()))
    path = tmp_path / "penguins.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[*rows[0], "census tract"])
        writer.writeheader()
        for i, row in enumerate(rows):
            row["census tract"] = TRACT if i == tract_row else ""
            if i == newline_row:
                row["island"] += "\n"
            writer.writerow(row)
    return str(path)


def ingest_and_validate(tmp_path: Path, source: str, **validation):
    examples = str(tmp_path / "examples")
    manifest = ingest_data(DataSettings(source=source, label="species",
                                        numeric_features=["bill_length_mm", "census tract"],
                                        categorical_features=["island"]), examples)
    out = lambda name: str(tmp_path / name)  # noqa: E731
    return manifest, lambda: run_validation(examples, "species", out("s"), out("c"), out("a"), out("r.html"),
                                            ValidationSettings(**validation))


def row_in(tmp_path: Path, split: str) -> int:
    """A row of penguins that ingest's split puts in `split` (the split hashes each row's content)."""
    for row in range(0, 40):
        manifest, _ = ingest_and_validate(tmp_path / f"probe-{row}", penguins_with(tmp_path, row))
        from components.validate.logic import ingest_statistics
        from components.validate.explain import presence

        stats = ingest_statistics(str(tmp_path / f"probe-{row}" / "examples"))
        if presence(stats, split, "census_tract")[0] == 1:
            return row
    raise AssertionError(f"no row of the first 40 lands in {split}")


def test_a_column_absent_from_eval_stops_in_one_gpupipe_line_with_the_counts_and_the_keys(tmp_path):
    row = row_in(tmp_path, "train")
    manifest, validate = ingest_and_validate(tmp_path / "run", penguins_with(tmp_path, row))
    train, evals = manifest["rows"]["train"], manifest["rows"]["eval"]
    with pytest.raises(GpupipeError) as err:
        validate()
    message = str(err.value)
    assert "\n" not in message
    assert (f"eval: feature 'census_tract' has no value in any eval row (present in train: 1 of {train:,} rows, "
            f"eval: 0 of {evals:,} rows): remove 'census tract' from data.numeric_features, or list it in "
            "validation.warn_only to train and evaluate with it imputed") in message
    assert "The feature was not present in any examples" not in message

    # warn_only accepts it: the run goes on, and the summary names the column and the count
    result = ingest_and_validate(tmp_path / "warned", penguins_with(tmp_path, row), warn_only=["census tract"])[1]()
    (warning,) = [w for w in result.warnings if "census_tract" in w]
    assert warning == (f"feature 'census_tract' is almost empty: a value in train: 1 of {train:,} rows, eval: 0 of "
                       f"{evals:,} rows; the model learns little from it (remove 'census tract' from "
                       "data.numeric_features, or set validation.min_feature_presence to 0 to silence this)")


def test_a_near_empty_column_present_in_eval_warns_and_runs_on(tmp_path):
    row = row_in(tmp_path, "eval")
    result = ingest_and_validate(tmp_path / "run", penguins_with(tmp_path, row))[1]()
    assert result.ok and any("'census_tract' is almost empty: a value in train: 0 of" in w for w in result.warnings)
    quiet = ingest_and_validate(tmp_path / "quiet", penguins_with(tmp_path, row), min_feature_presence=0)[1]()
    assert not any("almost empty" in w for w in quiet.warnings)


def test_a_newline_in_a_quoted_field_says_how_many_eval_rows_and_the_tolerance_key(tmp_path):
    tract = row_in(tmp_path, "eval")  # present in eval: only the island is anomalous
    for newline_row in (r for r in range(40) if r != tract):
        manifest, validate = ingest_and_validate(tmp_path / f"nl-{newline_row}",
                                                 penguins_with(tmp_path, tract, newline_row))
        try:
            validate()
        except GpupipeError as err:
            message = str(err)
            break
    else:
        raise AssertionError("the newline value never landed in eval")
    evals = manifest["rows"]["eval"]
    share = 1 / evals
    assert (f"eval: feature 'island': 1 of {evals} eval rows ({share:.2%}) hold values unseen in training "
            f"('Torgersen\\n'), past the tolerance 1.00% (validation.unseen_category_tolerance): fix those values in the data, or "
            f"raise validation.unseen_category_tolerance_by_feature.island (or validation.unseen_category_tolerance) "
            f"above {share:.2%}") in message
    assert "\n" not in message and "Examples contain values missing from the schema" not in message
    # the key it names does accept it
    assert ingest_and_validate(tmp_path / "tolerated", penguins_with(tmp_path, tract, newline_row),
                               unseen_category_tolerance_by_feature={"island": 0.05})[1]().ok
