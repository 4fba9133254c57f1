"""Fingerprint: what the cached steps depend on beyond their parameters. KFP caches a task
by its inputs; ingest's input is the source's name, and validate's drift baseline is the
model served at run time. Without this step a scheduled run would reuse yesterday's
ingest of a source that has new files today, and a validate computed against a model
that has since been replaced. This step is never cached; its outputs are inputs of
ingest (the data's fingerprint) and validate (the served version), so their cache hits
only when neither changed."""
from __future__ import annotations

from components.contracts.errors import reports_errors

NOTHING_SERVED = "none"


@reports_errors("fingerprint")
def fingerprint_inputs(source: str, data_format: str, serving_base: str, model_name: str) -> dict:
    """{"data": digest of the source's file names, sizes and mtimes or generations,
    "served": the served version number or "none"}."""
    from components.sources import readers
    from components.store.served import served_version_number

    files = readers.resolve(source, data_format)
    version = served_version_number(serving_base, model_name)
    result = {"data": readers.fingerprint(files), "files": len(files),
              "served": NOTHING_SERVED if version is None else str(version)}
    print(f"{source}: {result['files']} file(s), fingerprint {result['data']}; served version of {model_name}: "
          f"{result['served']}", flush=True)
    return result
