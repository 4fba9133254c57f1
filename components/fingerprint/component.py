"""KFP wrapper for the fingerprint step (never cached): see components/fingerprint/logic.py."""
from typing import NamedTuple


def fingerprint(source: str, data_format: str, serving_base: str,
                model_name: str) -> NamedTuple("Fingerprint", [("data", str), ("served", str)]):
    """The data's fingerprint and the served model version, for the cache keys of ingest
    and validate."""
    from collections import namedtuple

    from components.fingerprint.logic import fingerprint_inputs

    result = fingerprint_inputs(source, data_format, serving_base, model_name)
    return namedtuple("Fingerprint", ["data", "served"])(result["data"], result["served"])
