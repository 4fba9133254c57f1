"""How a text column becomes tokens, written once (components/contracts/tokens.py: Arrow's RE2
kernels, for ingest and the linear design) and in TensorFlow's RE2 string ops (text_ops.py, the
SavedModel's), so training, ingest's vocabulary and serving read a value alike:

- lower-cased (Unicode: Arrow's utf8_lower, TensorFlow's lower with encoding utf-8);
- split on non-word characters: a token is a maximal run of letters and digits (`[\\pL\\pN]+`,
  any script; '_', punctuation and whitespace separate), so "Don't!" is `don`, `t`;
- n-grams (bigrams with `ngrams: 2`) are neighbouring tokens joined by one space.

A value with no token (empty, whitespace, punctuation only) has no tokens; ingest counts an
empty or blank value as missing."""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from components.contracts.tokens import SEPARATORS, TOKEN, tokenize, with_ngrams  # noqa: F401  (the rule's home)


def token_lists(values, ngrams: int = 1) -> List[List[str]]:
    """Python lists of each value's tokens and n-grams (what tests and init look at)."""
    tokens = tokenize(values)
    return (with_ngrams(tokens, ngrams) if ngrams > 1 else tokens).to_pylist()


def ranked(counts: Sequence[Tuple[str, float]], max_tokens: int, min_count: float) -> List[str]:
    """The vocabulary: tokens seen at least `min_count` times, most frequent first (ties by
    token), at most `max_tokens`."""
    kept = [(c, t) for t, c in counts if c >= min_count and t]
    return [t for _, t in sorted(kept, key=lambda ct: (-ct[0], ct[1]))[:max_tokens]]


def counts_of_values(values: Sequence[str], weights: Sequence[float], ngrams: int) -> Dict[str, float]:
    """{token or n-gram: weighted count} over whole values (the spec's fallback: statistics
    that hold the text column's most frequent values, not ingest's token column)."""
    counts: Dict[str, float] = {}
    for tokens, weight in zip(token_lists(list(values), ngrams), weights):
        for token in tokens:
            counts[token] = counts.get(token, 0.0) + weight
    return counts
