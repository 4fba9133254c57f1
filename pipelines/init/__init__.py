"""`gpupipe init DATA --label COLUMN`: a commented config, proposed from a sample of the
table, that runs as it is.

The sample is `SAMPLE_ROWS` rows drawn at random (bottom-k of seeded random keys, one
pass) across every row of the source's files, read by components/sources: a table sorted
by its label is sampled over its whole range. CSV columns are read as text and typed on
the sample (integer, else float, else text), so a column whose later rows hold text is
text. TFDV computes the sample's statistics and infers the schema; then each column goes to
the first feature kind (components/kinds, by `detect_rank`) whose `detect` claims it: INT
and FLOAT features become numeric features, BYTES ones categorical; integer columns with few distinct values
(at most `CODE_MAX_VALUES`) or code-like ones (digits with leading zeros; a name such as
`*_code`, `zip`, `area`, `hour`, `month` with at most `CODE_MAX_NAMED_VALUES` values) are
categorical, and init says why. Left out, with a line saying why: columns empty in every
sampled row or present in under `NEAR_EMPTY_SHARE` of them, ID-like columns (text or integers with a different value in every sampled
row) and leaks (a column that alone predicts the label almost perfectly on held-out
sampled rows: `LEAK_ACCURACY`, `LEAK_R2`). A label with one value, or with a different
value in every row, is refused. The task and metric follow from the label: two values ->
binary (auc), more text values or at most `MAX_CLASS_INTEGERS` integers -> multiclass
(accuracy), other numbers -> regression (rmse). The gate is `must_beat_trivial`: evaluate
scores a model that learnt nothing on the eval split at run time, and the model must beat
it (not a constant from this sample).

The modules: sample.py (the random sample), label.py (task and metric), features.py
(the kinds' choice, left out, leaks), proposal.py (`propose`, the `Proposal`), render.py (the
commented YAML); `init_config` below writes it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

from components.contracts.errors import GpupipeError
from components.sources import readers
from pipelines.init.proposal import Proposal, pipeline_name, propose
from pipelines.init.render import render
from pipelines.init.sample import SAMPLE_ROWS, sample_table

__all__ = ["SAMPLE_ROWS", "Proposal", "init_config", "pipeline_name", "propose", "render", "sample_table"]


def init_config(source: str, label: Optional[str], output: Optional[str] = None, sample_rows: int = SAMPLE_ROWS,
                name: Optional[str] = None, data_format: str = "auto", command: str = "") -> Tuple[Path, Proposal]:
    """Proposes a config for `source` (a table, or an image folder: pipelines/init/images.py)
    and writes it to `output` (default configs/<name>.yaml); an existing file is never
    overwritten."""
    import yaml

    from pipelines.config import parse_config

    def refuse_existing(path: Path) -> Path:
        if path.exists():
            raise GpupipeError(f"{path}: exists, and init does not overwrite a config: pass -o a new path, or "
                               "remove it")
        return path

    if output:
        refuse_existing(Path(output))
    files = readers.resolve(source, data_format, key="gpupipe init DATA", format_key="--format")
    if files[0].format == readers.IMAGE_FILE:
        from pipelines.init.images import propose_images, render_images

        proposal = propose_images(source, files, name)
        path = refuse_existing(Path(output or Path("configs") / f"{proposal.name}.yaml"))
        text = render_images(proposal, command or f"gpupipe init {source}", str(path))
    else:
        if not label:
            raise GpupipeError(f"gpupipe init {source}: a table needs --label COLUMN, the column to predict (an image "
                               "folder needs none)")
        proposal = propose(source, label, sample_rows, name, data_format)
        path = refuse_existing(Path(output or Path("configs") / f"{proposal.name}.yaml"))
        text = render(proposal, command or f"gpupipe init {source} --label {label}", str(path))
    parse_config(yaml.safe_load(text), origin=f"init: the config proposed for {source}")  # it must load as written
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path, proposal
