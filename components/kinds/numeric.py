"""The numeric kind (data.numeric_features): a float32 per row, missing as NaN; in the
model imputed with the train mean and standardised, all numeric features as one tensor."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional

from components.contracts.errors import GpupipeError
from components.kinds.base import LINEAR_NUMERIC, ColumnFacts, Encoded, FeatureKind, FeatureSetting


@dataclass(frozen=True)
class NumericFeature:
    name: str
    mean: float
    std: float


class NumericKind(FeatureKind):
    name = "numeric"
    config_key = "numeric_features"
    description = ("columns of numbers: standardised with the train split's mean and deviation, a missing value "
                   "imputed with the mean")
    spec_type = NumericFeature
    linear = LINEAR_NUMERIC
    detect_rank = 40
    init_comment = "TFDV inferred these INT or FLOAT: standardised, a missing value imputed with the train mean"

    def arrow_type(self, setting: Optional[FeatureSetting]):
        import pyarrow as pa

        return pa.float32()

    def prepare_column(self, column, name: str, setting, source):
        """inf and -inf are not measurements: they would turn the mean and the model into NaN."""
        import pyarrow.compute as pc

        infinite = pc.sum(pc.is_inf(column)).as_py() or 0
        if infinite:
            raise GpupipeError(f"data: column '{name}' of {source.uri} holds inf or -inf ({infinite} in one batch of rows); "
                               "replace them with numbers, or leave the cells empty (a missing value)")
        return column, {}

    def spec(self, name: str, stats, setting, options) -> NumericFeature:
        return numeric_spec(stats, name)

    def parse_feature(self, spec):
        import tensorflow as tf

        return tf.io.FixedLenFeature([1], tf.float32, default_value=[float("nan")])

    def serving_spec(self, spec):
        import tensorflow as tf

        return tf.TensorSpec([None], tf.float32, name=spec.name)

    def model_input(self, spec):
        import tensorflow as tf
        import tf_keras

        return tf_keras.Input(shape=(1,), name=spec.name, dtype=tf.float32)

    def encode(self, specs: List[NumericFeature], inputs: Dict[str, object], options) -> Encoded:
        """One [batch, numeric features] tensor in spec order: imputed (training mean), standardised."""
        import tf_keras

        from components.kinds.layers import FillMissing, concat

        x = concat([inputs[f.name] for f in specs], "numeric")
        x = FillMissing([f.mean for f in specs], name="numeric_fill")(x)
        x = tf_keras.layers.Normalization(mean=[f.mean for f in specs], variance=[f.std ** 2 for f in specs],
                                          name="numeric_norm")(x)
        return Encoded(dense=[x], extras={})

    def detect(self, facts: ColumnFacts) -> Optional[str]:
        from tensorflow_metadata.proto.v0 import schema_pb2

        return "" if facts.tfdv_type in (schema_pb2.INT, schema_pb2.FLOAT) else None


def numeric_spec(stats, name: str) -> NumericFeature:
    """The mean and deviation of a numeric column's statistics (deviation 1 when it is 0)."""
    s = stats.num_stats
    std = s.std_dev if s.std_dev > 0 and math.isfinite(s.std_dev) else 1.0
    return NumericFeature(name=name, mean=float(s.mean), std=float(std))
