"""gpupipe's own lines for the anomalies a user meets most, in place of TFDV's sentence: a
feature absent from a whole split, and values unseen in training past the tolerance. Each
says how many rows that is in each split and which config key changes the outcome. And the
warning for a declared feature that is almost always empty in the train split."""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Tuple

from components.contracts import names
from components.kinds import KINDS
from components.kinds.base import find_statistics

# The anomaly types explained here (tensorflow_metadata anomalies_pb2.AnomalyInfo.Type names).
ABSENT = "FEATURE_TYPE_NOT_PRESENT"
UNSEEN = "ENUM_TYPE_UNEXPECTED_STRING_VALUES"
EXAMPLES_SHOWN = 3  # unseen values quoted in a line


def presence(statistics: Dict[str, object], split: str, feature: str) -> Tuple[int, int]:
    """(rows holding a value of `feature`, rows) in `split`, from its TFDV statistics."""
    dataset = statistics[split].datasets[0]
    stats = find_statistics(dataset, feature)
    if stats is None:
        return 0, int(dataset.num_examples)
    common = getattr(stats, stats.WhichOneof("stats")).common_stats if stats.WhichOneof("stats") else None
    return (int(common.num_non_missing) if common else 0), int(dataset.num_examples)


class Explainer:
    """Built per validation from the statistics of both splits, the schema, the manifest's
    {feature: kind} and {feature: column}, and the unseen-value tolerances."""

    def __init__(self, statistics: Dict[str, object], schema, kinds: Dict[str, str], columns: Dict[str, str],
                 tolerance: Callable[[str], float], schema_file: str = ""):
        self.statistics, self.schema, self.kinds, self.columns = statistics, schema, kinds, columns
        self.tolerance, self.schema_file = tolerance, schema_file

    def key(self, feature: str) -> str:
        kind = KINDS.get(self.kinds.get(feature, ""))
        return f"data.{kind.config_key}" if kind else "the data section"

    def column(self, feature: str) -> str:
        return self.columns.get(feature, feature)

    def counts(self, feature: str) -> str:
        """'train: 1 of 274 rows, eval: 0 of 70 rows': the rows holding a value, per split."""
        return ", ".join(f"{split}: {p:,} of {n:,} rows" for split in names.SPLITS
                         for p, n in [presence(self.statistics, split, feature)])

    def __call__(self, split: str, feature: str, reason) -> Optional[str]:
        from tensorflow_metadata.proto.v0 import anomalies_pb2

        kind = anomalies_pb2.AnomalyInfo.Type.Name(reason.type)
        if kind == ABSENT:
            return (f"{split}: feature '{feature}' has no value in any {split} row (present in "
                    f"{self.counts(feature)}): remove '{self.column(feature)}' from {self.key(feature)}, or list it "
                    "in validation.warn_only to train and evaluate with it imputed")
        if kind == UNSEEN:
            return self.unseen(split, feature)
        return None

    def unseen(self, split: str, feature: str) -> Optional[str]:
        import tensorflow_data_validation as tfdv

        stats = find_statistics(self.statistics[split].datasets[0], feature)
        if stats is None:
            return None
        domain = set(tfdv.get_domain(self.schema, feature).value)
        total, buckets = _string_counts(stats)
        unseen = [(value, count) for value, count in buckets if value not in domain]
        rows = sum(count for _, count in unseen) or total - sum(c for v, c in buckets if v in domain)
        if not total or not rows:
            return None
        share, tolerance = rows / total, self.tolerance(feature)
        shown = ", ".join(repr(v) for v, _ in unseen[:EXAMPLES_SHOWN]) + (", ..." if len(unseen) > EXAMPLES_SHOWN
                                                                          else "")
        if self.schema_file:
            fix = f"fix those values in the data, or add them to the domain of '{feature}' in {self.schema_file} " \
                  "(validation.schema_file)"
        elif share >= 0.5:
            fix = "most of the split's values are new to training: check the column's values in the data"
        else:
            fix = (f"fix those values in the data, or raise validation.unseen_category_tolerance_by_feature."
                   f"{self.column(feature)} (or validation.unseen_category_tolerance) above {share:.2%}")
        return (f"{split}: feature '{feature}': {rows:,} of {total:,} {split} rows ({share:.2%}) hold values unseen "
                f"in training ({shown}), past the tolerance {tolerance:.2%}"
                f"{'' if self.schema_file else ' (validation.unseen_category_tolerance)'}: {fix}")


def sparse_warnings(statistics: Dict[str, object], kinds: Dict[str, str], columns: Dict[str, str],
                    min_presence: float) -> List[str]:
    """One line per declared feature present in fewer than `min_presence` of the train
    split's rows: the column, the counts, the key that declares it."""
    lines = []
    explainer = Explainer(statistics, None, kinds, columns, lambda f: 0.0)
    for feature in kinds:
        present, rows = presence(statistics, names.TRAIN_SPLIT, feature)
        if rows and present / rows < min_presence:
            lines.append(f"feature '{feature}' is almost empty: a value in {explainer.counts(feature)}; the model "
                         f"learns little from it (remove '{explainer.column(feature)}' from {explainer.key(feature)}, "
                         f"or set validation.min_feature_presence to 0 to silence this)")
    return lines


def unseen_tolerance(schema, feature_name: str) -> float:
    """The share of a feature's values the schema lets be unseen in training (1 - min_domain_mass)."""
    for feature in schema.feature:
        if feature.name == feature_name and feature.HasField("distribution_constraints"):
            return 1.0 - feature.distribution_constraints.min_domain_mass
    return 0.0


def _string_counts(feature_stats) -> Tuple[int, List[Tuple[str, int]]]:
    """(values in all, [(value, count)]) of a string feature, from TFDV's rank histogram (or
    its top values)."""
    s = feature_stats.string_stats
    total = s.common_stats.tot_num_values or s.common_stats.num_non_missing
    buckets = [(b.label, int(b.sample_count)) for b in s.rank_histogram.buckets] or \
              [(v.value, int(v.frequency)) for v in s.top_values]
    return int(total), buckets


def _in_domain_counts(feature_stats, domain: set) -> tuple:
    """(values in all, values in `domain`) of a string feature: what TFDV's min_domain_mass
    check counts."""
    total, buckets = _string_counts(feature_stats)
    return total, sum(count for value, count in buckets if value in domain)


def tolerated_unseen(statistics: Dict[str, object], schema, label: str, problems: List[str]) -> List[str]:
    """One line per split and categorical feature whose values unseen in training stay
    within the schema's tolerance (1 - min_domain_mass): the feature, the fraction, the
    tolerance. Past the tolerance it is an anomaly (in `problems`) instead."""
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import schema_pb2

    flagged = {(line.split(":", 1)[0], feature_of(line)) for line in problems}
    lines = []
    for split in names.SPLITS:
        by_name = {f.path.step[0] if f.path.step else f.name: f for f in statistics[split].datasets[0].features}
        for feature in schema.feature:
            if feature.name == label or feature.type != schema_pb2.BYTES or not feature.HasField("domain") \
                    or feature.name not in by_name or (split, feature.name) in flagged:
                continue
            total, known = _in_domain_counts(by_name[feature.name], set(tfdv.get_domain(schema, feature.name).value))
            if not total or known >= total:
                continue
            tolerance = 1.0 - feature.distribution_constraints.min_domain_mass \
                if feature.HasField("distribution_constraints") else 0.0
            lines.append(f"{split}: feature '{feature.name}': {(total - known) / total:.2%} of values "
                         f"({total - known} of {total}) unseen in training, within the tolerance {tolerance:.2%} "
                         "(validation.unseen_category_tolerance): the model's out-of-vocabulary row takes them")
    return lines


def feature_of(line: str) -> str:
    m = re.search(r"feature '([^']+)'", line)
    return m.group(1) if m else ""
