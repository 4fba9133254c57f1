"""TensorFlow Data Validation 1.16.1's private names (components/contracts/compat/__init__.py,
MEASURED_ON).

`in_memory_generators(options)`: the generators `stats_impl.get_generators(options,
in_memory=True)` builds, with the top-k sketch generator's byte-length counters off. In its
`add_input`, that generator draws a random number for each string column of each batch and,
one time in a hundred (`_length_counter_sampling_rate`, 0.01, a constructor argument that
`get_generators` does not pass), walks the column's values one by one in Python to count
their byte lengths into Beam metrics counters. Outside a Beam pipeline (ingest's local
engine feeds the generators itself: contracts/statistics.py) those counters go nowhere, and
the walk cost about 1 core-µs a row of the click-through table's 26 string columns: 7% of an
ingest worker's time (docs/benchmarks.md, "Ingest's fifth round"). The statistics do not
change: the counters never reach them.

`import_statistics()`: imports TFDV's statistics (`stats_impl`) while
`importlib.metadata.packages_distributions` answers an empty map. TFDV imports Beam, Beam
google-cloud-storage, and that google.api_core, whose import checks the Python version: in
Google's deprecation window (Python 3.11 until its end of life, 2027-10) it names the
package in a FutureWarning, and to name it reads every installed distribution's metadata
(`_python_version_support._get_pypi_package_name`, cached for the process). The warning
then names the module (google.api_core) instead of the distribution: 0.2 s less of ingest's
imports, which run on one core before its workers fork (docs/benchmarks.md, "Ingest's
fifth round").
"""
from __future__ import annotations

import importlib.metadata
import sys

from components.contracts.compat import patched_attribute


def in_memory_generators(options) -> list:
    from tensorflow_data_validation.statistics import stats_impl
    from tensorflow_data_validation.statistics.generators.top_k_uniques_sketch_stats_generator import \
        TopKUniquesSketchStatsGenerator

    generators = stats_impl.get_generators(options, in_memory=True)
    for generator in generators:
        if isinstance(generator, TopKUniquesSketchStatsGenerator):
            generator._length_counter_sampling_rate = 0.0  # pylint: disable=protected-access
    return generators


def import_statistics() -> None:
    if "google.api_core" in sys.modules:
        from tensorflow_data_validation.statistics import stats_impl  # noqa: F401
        return
    with patched_attribute(importlib.metadata, "packages_distributions", dict):
        from tensorflow_data_validation.statistics import stats_impl  # noqa: F401,F811
