"""Apache Beam 2.61.0's private names (components/contracts/compat/__init__.py, MEASURED_ON).

`TFRecordSink`: Beam's TFRecord file sink, `apache_beam.io.tfrecordio._TFRecordSink`
(its `__init__(file_path_prefix, coder, file_name_suffix, num_shards, shard_name_template,
compression_type)` and `open(temp_path)`), what `WriteToTFRecord` writes through. Beam has
no public way to choose the gzip level of its shards; ingest subclasses this sink and wraps
`open`'s file (components/ingest/beam.py)."""
from apache_beam.io import tfrecordio

TFRecordSink = tfrecordio._TFRecordSink  # pylint: disable=protected-access
