"""The kinds' shared layers: VocabularyRows gives the rows tf_keras' StringLookup (one
out-of-vocabulary index) and Hashing give, shifted by each feature's offset, from one table."""
import numpy as np
import tensorflow as tf
import tf_keras

from components.kinds.layers import VocabularyRows

VOCABULARIES = [["red", "green", ""], None, ["ü", "1:x", "a b"], [], ["0", "1", "2", "3"], None]
BUCKETS = [0, 7, 0, 0, 0, 3]
OFFSETS = [0, 4, 11, 15, 16, 21]
VALUES = [["red", "zzz", "ü", "", "3", "q"], ["", "red", "1:x", "red", "0", "w"], ["green", "", "a b", "x", "9", ""],
          ["blue", "ü", "x", "0", "1", "red"], ["", "é", "1:", "", "2", "1"]]


def _reference(values):
    """Each feature through its own StringLookup (or Hashing), then shifted by its offset."""
    columns = []
    for i, (vocabulary, buckets) in enumerate(zip(VOCABULARIES, BUCKETS)):
        x = tf.constant([[row[i]] for row in values])
        if vocabulary == []:  # every value out of the (empty) vocabulary
            columns.append(tf.zeros_like(x, tf.int64) + OFFSETS[i])
            continue
        layer = tf_keras.layers.Hashing(buckets) if vocabulary is None else \
            tf_keras.layers.StringLookup(vocabulary=vocabulary or None, num_oov_indices=1)
        columns.append(tf.cast(layer(x), tf.int64) + OFFSETS[i])
    return tf.concat(columns, axis=-1).numpy()


def test_rows_are_the_per_feature_layers_rows():
    layer = VocabularyRows(VOCABULARIES, BUCKETS, OFFSETS)
    got = layer([tf.constant([[row[i]] for row in VALUES]) for i in range(len(VOCABULARIES))]).numpy()
    np.testing.assert_array_equal(got, _reference(VALUES))
    assert got[0].tolist()[:1] == [1] and got[3][0] == 0  # red: the first value; blue: out of the vocabulary


def test_in_a_model_one_table_and_the_same_rows_after_a_saved_model_round_trip(tmp_path):
    inputs = [tf_keras.Input((1,), dtype=tf.string, name=f"f{i}") for i in range(len(VOCABULARIES))]
    model = tf_keras.Model(inputs, VocabularyRows(VOCABULARIES, BUCKETS, OFFSETS, name="rows")(inputs))
    resources = [t for t in tf.train.TrackableView(model).descendants()
                 if isinstance(t, tf.saved_model.experimental.TrackableResource)]
    assert len(resources) == 1  # one table, where a StringLookup a feature made one each
    module = tf.Module()
    module.table_owner = model.get_layer("rows")
    module.f = tf.function(lambda *x: model(list(x)), input_signature=[tf.TensorSpec([None, 1], tf.string)] * 6)
    tf.saved_model.save(module, str(tmp_path / "m"))
    loaded = tf.saved_model.load(str(tmp_path / "m"))
    got = loaded.f(*[tf.constant([[row[i]] for row in VALUES]) for i in range(6)]).numpy()
    np.testing.assert_array_equal(got, _reference(VALUES))


def test_all_looked_up_or_all_hashed():
    looked = VocabularyRows([["a"], ["b", "c"]], [0, 0], [0, 2])
    np.testing.assert_array_equal(looked([tf.constant([["a"], ["z"]]), tf.constant([["c"], ["b"]])]).numpy(),
                                  [[1, 4], [0, 3]])
    hashed = VocabularyRows([None], [5], [10])
    expected = tf.strings.to_hash_bucket_fast(tf.constant([["a"], ["b"]]), 5).numpy() + 10
    np.testing.assert_array_equal(hashed([tf.constant([["a"], ["b"]])]).numpy(), expected)
