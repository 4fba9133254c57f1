"""Storage benchmark: how the trainer gets its TFRecord shards from an object store.

  staged    components.contracts.storage.download_prefix of the examples prefix into local
            scratch (what components.train.logic.run_train does), then one full tf.data pass
            over the local gzip shards (parse nothing: read records)
  direct    one tf.data pass reading the same shards straight from s3:// through
            tensorflow-io's S3 filesystem (only when `import tensorflow_io` works: it is not in
            the lock; install it beside for the measurement, e.g. `pip install --target DIR
            --no-deps tensorflow-io==0.37.1` and PYTHONPATH=DIR)
  local     the same pass over shards already on the local disk (the floor)
on the S3 protocol server of the tests (moto's server mode, in this process) and, for
staging, on the GCS emulator. Both servers are Python processes on loopback: the figures
compare the paths through the same server, not the speed of MinIO or GCS.

  python -m bench.storage --rows 200000 [--repeats 3]
  PYTHONPATH=.:/tmp/tfio python -m bench.storage ...   (tensorflow-io installed in /tmp/tfio; it
                                                      aborts with "pure virtual method called" at
                                                      exit, after the figures)
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics as stats
import tempfile
import time

import components  # noqa: F401


class _Patch:
    """A stand-in for pytest's monkeypatch (setenv/delenv) for the test fixtures."""

    def setenv(self, name, value):
        os.environ[name] = value

    def delenv(self, name, raising=True):
        os.environ.pop(name, None)


def _read_all(files) -> int:
    """Every record of the gzip shards, counted inside tf.data (no per-record Python)."""
    import tensorflow as tf

    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP", num_parallel_reads=4).batch(8192)
    return int(dataset.reduce(tf.constant(0, tf.int64), lambda n, b: n + tf.cast(tf.shape(b)[0], tf.int64)))


def _timed(fn, repeats):
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return stats.median(times), result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    from components.contracts import storage
    from components.ingest.logic import ingest_data
    from components.ingest.settings import DataSettings
    from components.sources import synthetic
    from tests.fixtures.gcs import gcs_emulator
    from tests.fixtures.s3 import s3_server

    work = tempfile.mkdtemp(prefix="gpupipe-bench-storage-")
    examples = os.path.join(work, "examples")
    label, numeric, categorical = synthetic.LABEL, synthetic.NUMERIC, synthetic.CATEGORICAL
    ingest_data(DataSettings(source=f"synthetic:ctr?rows={args.rows}&seed=1", label=label, numeric_features=numeric,
                             categorical_features=categorical, split={"eval_percent": 10}), examples)
    local_files = [e.uri for e in storage.glob(os.path.join(examples, "train", "*.tfrecord.gz"))]
    size_mb = sum(os.path.getsize(f) for f in local_files) / 2 ** 20
    print(f"train split: {len(local_files)} shard(s), {size_mb:.1f} MB gzip, {args.rows:,} rows in all")
    seconds, records = _timed(lambda: _read_all(local_files), args.repeats)
    print(f"local   read {records:,} records in {seconds:.2f} s ({size_mb / seconds:.1f} MB/s)")

    def staged(root):
        def run():
            into = tempfile.mkdtemp(dir=work)
            storage.download_prefix(f"{root}/examples/train", into)
            n = _read_all(sorted(e.uri for e in storage.list_prefix(into)))
            shutil.rmtree(into)
            return n
        return run

    for name, server in (("s3", s3_server), ("gs", gcs_emulator)):
        with server(_Patch()) as bucket:
            root = f"{name}://{bucket}"
            storage.upload_tree(os.path.join(examples, "train"), f"{root}/examples/train")
            def download_only():
                into = tempfile.mkdtemp(dir=work)
                n = storage.download_prefix(f"{root}/examples/train", into)
                shutil.rmtree(into)
                return n

            seconds, _ = _timed(download_only, args.repeats)
            print(f"staging {name}: download alone {seconds:.2f} s ({size_mb / seconds:.1f} MB/s)")
            seconds, records = _timed(staged(root), args.repeats)
            print(f"staged  {name}: {records:,} records in {seconds:.2f} s ({size_mb / seconds:.1f} MB/s, "
                  "download + local read)")
            if name != "s3":
                continue
            try:
                import tensorflow_io  # noqa: F401  (registers the s3:// filesystem)
            except ImportError:
                print("direct  s3: tensorflow-io is not importable; skipped (see the docstring)")
                continue
            endpoint = os.environ["AWS_ENDPOINT_URL_S3"]
            os.environ.update(S3_ENDPOINT=endpoint, S3_USE_HTTPS="0", S3_VERIFY_SSL="0")
            remote = [f"{root}/examples/train/{os.path.basename(f)}" for f in local_files]
            seconds, records = _timed(lambda: _read_all(remote), args.repeats)
            print(f"direct  s3: {records:,} records in {seconds:.2f} s ({size_mb / seconds:.1f} MB/s, tensorflow-io)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
