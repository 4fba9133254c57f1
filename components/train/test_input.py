"""The trainer's input pipeline: every mode yields each train example once per epoch; the
cached modes replay parsed batches without touching the shards again; the cache mode is
chosen from the budgets, and the disk cache lives in scratch only while training runs."""
import math
import shutil
from collections import Counter

import pytest
import tensorflow as tf

from components.contracts.errors import GpupipeError
from components.contracts.examples import examples_pattern
from components.kinds import Columns, specs_from_statistics
from components.contracts.names import CACHE_DISK, CACHE_MEMORY, CACHE_NONE
from components.contracts.statistics import load_statistics
from components.train.data import choose_input_cache, make_dataset, parse_spec
from conftest import CATEGORICAL, LABEL, NUMERIC, PENGUIN_COLUMNS, penguin_settings

pytestmark = pytest.mark.unit
BATCH = 16


@pytest.fixture(scope="module")
def specs(penguin_validation):
    return specs_from_statistics(load_statistics(penguin_validation["statistics"], "train"), Columns(label=LABEL, numeric_features=NUMERIC, categorical_features=CATEGORICAL))


def rows_of(batches) -> Counter:
    """Each example of the batches as a hashable row (NaN as a string: NaN != NaN)."""
    rows = Counter()
    for features, target in batches:
        columns = {k: v.numpy().reshape(-1) for k, v in features.items()}
        for i, y in enumerate(target.numpy().reshape(-1)):
            rows[tuple(str(columns[k][i]) for k in sorted(columns)) + (int(y),)] += 1
    return rows


def reference_rows(pattern: str, specs) -> Counter:
    """The train split parsed one example at a time, the plain way."""
    spec = parse_spec(specs, with_label=True)
    classes = {c.encode(): i for i, c in enumerate(specs.classes)}
    ds = tf.data.TFRecordDataset(tf.io.gfile.glob(pattern), compression_type="GZIP").map(
        lambda r: tf.io.parse_single_example(r, spec))
    return rows_of((({k: tf.reshape(v, [1]) for k, v in ex.items() if k != LABEL},
                     tf.constant([classes[ex[LABEL].numpy()[0]]])) for ex in ds))


def test_streaming_yields_every_example_once(penguin_examples, specs):
    pattern = examples_pattern(penguin_examples, "train")
    expected = reference_rows(pattern, specs)
    assert rows_of(make_dataset(pattern, specs, BATCH, shuffle=True, seed=1, cache=CACHE_NONE)) == expected


@pytest.mark.parametrize("cache", [CACHE_MEMORY, CACHE_DISK])
def test_cached_modes_replay_every_example_once_per_epoch_without_the_shards(tmp_path, penguin_examples, specs,
                                                                             cache):
    examples = tmp_path / "examples"
    shutil.copytree(penguin_examples, examples)
    pattern = examples_pattern(str(examples), "train")
    expected = reference_rows(pattern, specs)
    batches_per_epoch = math.ceil(sum(expected.values()) / BATCH)
    cache_dir = tmp_path / "scratch"
    cache_dir.mkdir()
    it = iter(make_dataset(pattern, specs, BATCH, shuffle=True, seed=1, repeat=True, cache=cache,
                           cache_dir=str(cache_dir)))
    first = [next(it) for _ in range(batches_per_epoch)]
    assert rows_of(first) == expected
    if cache == CACHE_DISK:
        assert any(p.stat().st_size > 0 for p in cache_dir.iterdir()), "the first epoch wrote no disk cache"
    else:
        assert not list(cache_dir.iterdir())
    shutil.rmtree(examples / "train")  # later epochs must not need the shards
    second = [next(it) for _ in range(batches_per_epoch)]
    assert rows_of(second) == expected
    # Same batches, replayed in a new order.
    assert [rows_of([b]) for b in second] != [rows_of([b]) for b in first]
    assert sorted(map(lambda b: sorted(rows_of([b])), second)) == sorted(map(lambda b: sorted(rows_of([b])), first))


def test_disk_cache_needs_a_scratch_directory(penguin_examples, specs):
    with pytest.raises(GpupipeError, match="input cache: 'disk' needs a local scratch directory"):
        make_dataset(examples_pattern(penguin_examples, "train"), specs, BATCH, shuffle=False, seed=1,
                     cache=CACHE_DISK)


def test_cache_mode_follows_the_budgets(tmp_path):
    mb = 2 ** 20
    free = shutil.disk_usage(tmp_path).free
    assert choose_input_cache(100 * mb, 1024, 20480, str(tmp_path)) == CACHE_MEMORY
    assert choose_input_cache(2000 * mb, 1024, 20480, str(tmp_path)) == (CACHE_DISK if free >= 4000 * mb else
                                                                           CACHE_NONE)
    assert choose_input_cache(2000 * mb, 1024, 0, str(tmp_path)) == CACHE_NONE
    assert choose_input_cache(30000 * mb, 1024, 20480, str(tmp_path)) == CACHE_NONE
    assert choose_input_cache(100 * mb, 0, 0, str(tmp_path)) == CACHE_NONE
    # More than half the scratch disk's free space: stream instead of filling the disk (60% of
    # it: other tests free space meanwhile, and a margin of one byte was flaky under xdist)
    assert choose_input_cache(int(free * 0.6), 0, 2 ** 40 // mb, str(tmp_path)) == CACHE_NONE
    assert choose_input_cache(1000 * mb, 0, 20480, str(tmp_path / "missing")) == CACHE_NONE


def test_trainer_over_the_memory_budget_spills_to_scratch_and_cleans_up(tmp_path, penguin_examples,
                                                                       penguin_validation, capsys):
    from components.train.logic import train_model

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    report = train_model(penguin_examples, penguin_validation["statistics"], str(tmp_path / "m"), PENGUIN_COLUMNS,
                         penguin_settings(epochs=3, cache_budget_mb=0, disk_cache_budget_mb=100,
                                          scratch_dir=str(scratch)))
    assert report["input_cache"] == "disk"
    assert report["train_function_traces"] == 1  # the replayed batches (a short one each epoch) reuse the trace
    assert report["optimizer_steps"] == 3 * report["steps_per_epoch"]
    assert report["final_train_accuracy"] > 0.8
    assert "input: parsed batches written to local scratch in the first epoch" in capsys.readouterr().out
    assert not list(scratch.iterdir()), "the disk cache outlived training"


def test_a_large_validation_slice_reads_a_spread_share_of_the_shards():
    """Past VALIDATION_ROWS held-out rows the slice reads evenly spaced shards only: a table
    sorted by time or label is sampled over its whole range, not its first shards."""
    from components.contracts.examples import spread_shards

    files = [f"shard-{i:05d}" for i in range(20)]
    assert spread_shards(files, 1.0) == files and spread_shards(files[:1], 0.1) == files[:1]
    picked = spread_shards(files, 0.1)
    assert picked == ["shard-00000", "shard-00010"]
    quarter = spread_shards(files, 0.25)
    assert len(quarter) == 5 and quarter[-1] >= "shard-00015"  # reaches the end of the split
    assert spread_shards(files, 0.01, at_least=4) == ["shard-00000", "shard-00005", "shard-00010", "shard-00015"]


@pytest.mark.parametrize("blocks", [True, False], ids=["column-blocks", "row-shards"])
def test_a_bounded_validation_slice_keeps_its_first_rows_in_whole_batches_and_replays_them(
        tmp_path, penguin_examples, specs, blocks):
    """`max_rows` (the slice past VALIDATION_ROWS): the first rows of the read, whole batches,
    before the memory cache: every pass gives the same rows, a subset of the whole slice's."""
    source = penguin_examples
    if not blocks:
        source = str(tmp_path / "rows-only")
        shutil.copytree(penguin_examples, source, ignore=shutil.ignore_patterns("blocks"))
    pattern = examples_pattern(source, "train")
    whole = rows_of(make_dataset(pattern, specs, 8, shuffle=False, seed=1, validation_percent=30, part="validation"))
    bounded = make_dataset(pattern, specs, 8, shuffle=False, seed=1, validation_percent=30, part="validation",
                           cache="memory", max_rows=20)
    first, second = rows_of(bounded), rows_of(bounded)
    assert sum(first.values()) == 24 < sum(whole.values())  # 20 rows: three batches of 8
    assert first == second and all(whole[row] >= n for row, n in first.items())


@pytest.mark.parametrize("part", ["train", "validation"])
def test_column_blocks_give_the_rows_and_validation_slice_of_the_row_shards(tmp_path, penguin_examples, specs, part):
    """The input reads ingest's column blocks when they are there, and gets the same rows,
    and the same validation slice (each row's bucket of its row-wise Example), as from the
    row shards of data gpupipe did not write blocks for."""
    from components.contracts.examples import block_files

    rows_only = tmp_path / "rows-only"
    shutil.copytree(penguin_examples, rows_only, ignore=shutil.ignore_patterns("blocks"))
    with_blocks, without = examples_pattern(penguin_examples, "train"), examples_pattern(str(rows_only), "train")
    assert block_files(with_blocks) and not block_files(without)
    by_block = rows_of(make_dataset(with_blocks, specs, BATCH, shuffle=True, seed=1, validation_percent=30, part=part))
    by_row = rows_of(make_dataset(without, specs, BATCH, shuffle=True, seed=1, validation_percent=30, part=part))
    assert by_block == by_row and sum(by_row.values()) > 0


def test_gzip_column_blocks_of_an_earlier_artifact_are_read_too(tmp_path, penguin_examples, specs):
    """Blocks are written without compression (the feed reads them every epoch); an examples
    artifact from before, whose blocks are `.tfrecord.gz`, gives the same rows."""
    import glob
    import gzip
    import os

    from components.contracts.examples import block_files

    earlier = tmp_path / "earlier"
    shutil.copytree(penguin_examples, earlier)
    raw = glob.glob(str(earlier / "blocks" / "*" / "part-*.tfrecord"))
    assert raw
    for path in raw:
        with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
            dst.write(src.read())
        os.remove(path)
    pattern = examples_pattern(str(earlier), "train")
    assert block_files(pattern) and all(f.endswith(".tfrecord.gz") for f in block_files(pattern))
    now = rows_of(make_dataset(examples_pattern(penguin_examples, "train"), specs, BATCH, shuffle=False, seed=1))
    assert rows_of(make_dataset(pattern, specs, BATCH, shuffle=False, seed=1)) == now and sum(now.values()) > 0
