"""The text kind's parts, without kfp or a pipeline: ingest's tokens (Arrow) and the model's
(TensorFlow string ops) agree value by value, with Python's own `re` as the independent side;
n-grams alike; the bag's hashing of tokens past the vocabulary; settings refused in one line;
the spec from statistics computed outside ingest; init's detection."""
import re

import pytest

import components  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)
import tensorflow as tf

from components.kinds.text_kind import TextFeature, TextKind, TextSetting
from components.kinds.text_ops import TextBag, TokenIds, tokenize_tensor
from components.kinds.text_tokens import ranked, token_lists

pytestmark = pytest.mark.unit

VALUES = ["Don't STOP believing!!", "Café  au-lait, 2 cups\tnow", "ÜBER straße ÉCOLE", "snake_case and CamelCase",
          "  ", "", "!!! ...", "e-mail: a.b@c.de 10:30pm", "日本語 テキスト", "emoji 👍 ok 👎bad", "line\nbreak",
          "x" * 3, "Ünïcödé ÀÉÎ"]


def _python(value: str):
    """The rule in Python's re, the independent side: maximal runs of letters and digits, lower-cased."""
    return re.findall(r"[^\W_]+", value.lower())


def test_ingest_the_model_and_python_tokenise_alike():
    arrow = token_lists(VALUES)
    model = [[t.decode() for t in row] for row in tokenize_tensor(tf.constant(VALUES)).to_list()]
    assert arrow == model == [_python(v) for v in VALUES]
    assert arrow[0] == ["don", "t", "stop", "believing"] and arrow[3] == ["snake", "case", "and", "camelcase"]
    assert arrow[4] == arrow[5] == arrow[6] == []


@pytest.mark.parametrize("n", [2, 3])
def test_ngrams_agree_in_ingest_and_the_model(n):
    arrow = token_lists(VALUES, n)
    model = [[t.decode() for t in row] for row in tokenize_tensor(tf.constant(VALUES), n).to_list()]
    assert arrow == model
    words = _python(VALUES[0])
    expected = words + [" ".join(words[i:i + k]) for k in range(2, n + 1) for i in range(len(words) - k + 1)]
    assert arrow[0] == expected


def test_the_vocabulary_ranks_by_count_then_token_and_drops_the_rare():
    counts = [("b", 5), ("a", 5), ("c", 9), ("rare", 1), ("d", 2)]
    assert ranked(counts, 10, 2) == ["c", "a", "b", "d"] and ranked(counts, 2, 1) == ["c", "a"]


def _spec(**kw):
    base = dict(name="t", vocabulary=["good", "bad", "good movie"], hash_buckets=8, ngrams=2, dim=4,
                sequence_length=5)
    return {**TextFeature(**base).__dict__, **kw}


def test_the_bag_looks_up_the_vocabulary_hashes_the_rest_and_marks_empty_text():
    bag = TextBag(_spec())
    out = bag(tf.constant([["good movie"], ["Good, MOVIE!"], [""], ["zzz unseen"]])).numpy()
    assert out.shape == (4, 5)
    assert (out[0] == out[1]).all()  # the same tokens, whatever the case and punctuation
    assert list(out[:, -1]) == [0.0, 0.0, 1.0, 0.0] and not out[2, :-1].any()
    ids = bag.lookup(tf.constant(["good", "bad", "good movie", "zzz", "unseen"])).numpy()
    assert list(ids[:3]) == [8, 9, 10] and all(0 <= i < 8 for i in ids[3:])  # hashed below the vocabulary


def test_token_ids_are_padded_truncated_and_shifted_past_padding():
    ids = TokenIds(_spec())(tf.constant([["good bad good x y z w"], [""], ["bad"]])).numpy()
    assert ids.shape == (3, 5)
    assert list(ids[0][:3]) == [9, 10, 9] and list(ids[1]) == [0] * 5 and list(ids[2]) == [10, 0, 0, 0, 0]


def test_settings_are_refused_in_one_line():
    with pytest.raises(ValueError, match="dim 30 is not a multiple of heads 4; set dim to a multiple"):
        TextSetting(name="t", encoder="transformer", dim=30, heads=4)
    with pytest.raises(ValueError, match="encoder"):
        TextSetting(name="t", encoder="lstm")


def test_the_spec_without_ingest_statistics_tokenises_the_most_frequent_values():
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from components.kinds.text_kind import TextStatistics

    feature = statistics_pb2.FeatureNameStatistics(name="t")
    for value, count in [("Great film", 3), ("bad film", 2), ("film", 1)]:
        feature.string_stats.top_values.add(value=value, frequency=count)
    spec = TextKind().spec("t", TextStatistics(feature), TextSetting(name="t", ngrams=2), None)
    assert spec.vocabulary == ["film", "great", "great film", "bad", "bad film"]
    transformer = TextKind().spec("t", TextStatistics(feature), TextSetting(name="t", encoder="transformer"), None)
    assert transformer.vocabulary == ["film", "great", "bad"] and transformer.encoder == "transformer"


def _facts(values):
    import pyarrow as pa
    import pyarrow.compute as pc
    from tensorflow_metadata.proto.v0 import schema_pb2

    from components.kinds import ColumnFacts

    column = pa.array(values, pa.string())
    present = column.drop_null()
    return ColumnFacts(name="c", column=column, tfdv_type=schema_pb2.BYTES, unique=len(pc.unique(present)),
                       present=len(present), whole_numbers=False)


def test_init_detects_long_varied_text_and_not_ids_or_categories():
    kind = TextKind()
    reviews = [f"review number {i} says the blender is {'great' if i % 2 else 'awful'}" for i in range(50)]
    note = kind.detect(_facts(reviews))
    assert note.startswith("free text: 100% of 50 sampled values distinct, 8.0 tokens (")
    assert kind.detect(_facts([f"u{i:04d}" for i in range(50)])) is None  # an ID: one short token
    assert kind.detect(_facts(["Bachelor's degree or higher", "Some college, no degree"] * 25)) is None  # categories
    assert kind.detect(_facts(["NY", "LA", "SF", "Boston"] * 12)) is None
