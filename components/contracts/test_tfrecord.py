"""Gzip TFRecord files by ISA-L (tfrecord.py): the bytes TensorFlow's own writer frames,
read back by tf.data (which checks every frame's CRCs), at every level."""
import gzip

import pytest
import tensorflow as tf

from components.contracts.tfrecord import RecordWriter, frame

RECORDS = [b"", b"x", bytes(range(256)) * 3, "ünïcode".encode(), b"\x00" * 70_000] + \
          [f"row {i}".encode() * (i % 13) for i in range(2_000)]


def _tensorflow_frames(tmp_path, records):
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    return open(path, "rb").read()


def test_frames_are_tensorflow_writers_bytes(tmp_path):
    assert frame(RECORDS).to_pybytes() == _tensorflow_frames(tmp_path, RECORDS)
    assert frame([]).to_pybytes() == b""


@pytest.mark.parametrize("level", [0, 1, 3])
def test_tf_data_reads_what_the_writer_wrote(tmp_path, level):
    path = str(tmp_path / "part.tfrecord.gz")
    with RecordWriter(path, level) as w:
        w.write_many(RECORDS[:1000])
        w.write(RECORDS[1000])
        w.write_many([])
        w.write_many(RECORDS[1001:])
    assert [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type="GZIP")] == RECORDS
    # one gzip stream of the frames, as tf.io.TFRecordWriter's GZIP option writes
    assert gzip.open(path).read() == _tensorflow_frames(tmp_path, RECORDS)


def test_a_corrupted_frame_is_refused_by_the_reader(tmp_path):
    """The CRCs are the ones TensorFlow checks: a flipped byte in a record fails the read."""
    framed = bytearray(frame([b"first record", b"second record"]).to_pybytes())
    framed[12 + 3] ^= 0xFF
    path = str(tmp_path / "bad.tfrecord.gz")
    with gzip.open(path, "wb") as f:
        f.write(bytes(framed))
    with pytest.raises(tf.errors.DataLossError, match="corrupted record"):
        list(tf.data.TFRecordDataset(path, compression_type="GZIP"))


def test_a_level_isal_does_not_have_is_refused(tmp_path):
    with pytest.raises(ValueError, match="gzip level 6: ISA-L takes 0 to 3"):
        RecordWriter(str(tmp_path / "x.gz"), 6)


def test_without_compression_the_frames_are_written_as_they_are(tmp_path):
    path = str(tmp_path / "part.tfrecord")
    with RecordWriter(path, None) as w:
        w.write_many(RECORDS)
    assert open(path, "rb").read() == _tensorflow_frames(tmp_path, RECORDS)
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == RECORDS
