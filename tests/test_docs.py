"""The documentation: the MkDocs site builds with --strict (no broken link, anchor or page
left out of the nav), the generated config reference and JSON Schema are not stale, the
configs name the schema and pass it, and the README stays a landing page."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipelines import reference

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_LINE = "# yaml-language-server: $schema=../docs/config.schema.json"


def test_mkdocs_builds_strict_without_a_warning(tmp_path):
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-f",
                           str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # mkdocs-material's banner about MkDocs 2
    took = time.monotonic() - start
    log = done.stdout + done.stderr
    warnings = [line for line in log.splitlines() if re.match(r"(WARNING|ERROR)\b", line)]
    assert done.returncode == 0 and not warnings, "\n".join(warnings) or log
    assert (tmp_path / "site" / "config" / "index.html").is_file()
    assert (tmp_path / "site" / "config.schema.json").is_file()
    print(f"mkdocs build --strict: {took:.1f} s")


@pytest.mark.unit
def test_the_config_reference_and_schema_are_not_stale():
    stale = [str(p.relative_to(ROOT)) for p in reference.stale()]
    assert not stale, f"stale: {', '.join(stale)}; run .venv/bin/python -m pipelines.reference"


@pytest.mark.unit
def test_the_reference_names_every_key_of_every_section():
    text = (ROOT / "docs" / "config.md").read_text()
    for path, model in reference.sections():
        assert f"{{#{reference.anchor(path) if path else 'top-level'}}}" in text, path
        for name in model.model_fields:
            assert f"| `{name}` |" in text, f"{path}.{name}"


@pytest.mark.unit
@pytest.mark.parametrize("config", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_configs_name_the_schema_and_pass_it(config):
    import jsonschema

    from pipelines.config import load_config

    text = config.read_text()
    assert text.splitlines()[0] == SCHEMA_LINE
    load_config(config)
    schema = json.loads((ROOT / "docs" / "config.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(text))


@pytest.mark.unit
def test_the_schema_catches_what_the_config_refuses():
    import jsonschema

    schema = json.loads((ROOT / "docs" / "config.schema.json").read_text())
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["training"]["epoch"] = 3  # a misspelt key
    with pytest.raises(jsonschema.ValidationError, match="epoch"):
        jsonschema.Draft202012Validator(schema).validate(raw)


@pytest.mark.unit
def test_gpupipe_config_schema_prints_the_committed_schema(capsys):
    from pipelines.cli import main

    assert main(["config-schema"]) == 0
    printed = capsys.readouterr().out
    assert printed == (ROOT / "docs" / "config.schema.json").read_text(), \
        "docs/config.schema.json is stale; run .venv/bin/python -m pipelines.reference"


@pytest.mark.unit
def test_the_readme_is_a_landing_page_whose_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert text.index("./dev run") < text.index("./dev test") < text.index("## ")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), link


# -- a figure is stated once ---------------------------------------------------------------------
# A size (kB, MB, GB), a latency (ms), a decimal ratio (11.4x) or the suite's count and time: each
# is stated on one page of README.md and docs/ (the measurement's own, with its command), and the
# others link to it. The same figure meaning two different things on two pages is listed here, why.
FIGURE = re.compile(r"(?<![\w.,-])\d[\d,]*(?:\.\d+)? ?(?:[kKMG]i?B|ms)\b|(?<![\w.,-])\d+\.\d+x\b|\b\d[\d,]* tests in\b")
SAME_FIGURE_TWO_MEANINGS = {"600kB": "storage.md: the fault test's largest file; benchmarks.md: one decoded image"}


def figures_on_two_pages(root: Path) -> dict:
    """figure -> the pages stating it, for each figure stated on two or more."""
    pages = {}
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for figure in FIGURE.findall(page.read_text(encoding="utf-8")):
            figure = re.sub(r"(\d) (?=[kKMG]|ms)", r"\1", figure)  # 3.47 MB and 3.47MB are one figure
            pages.setdefault(figure, set()).add(page.relative_to(root).as_posix())
    return {figure: sorted(where) for figure, where in pages.items()
            if len(where) > 1 and figure not in SAME_FIGURE_TWO_MEANINGS}


@pytest.mark.unit
def test_no_figure_is_stated_on_two_pages():
    assert figures_on_two_pages(ROOT) == {}


@pytest.mark.unit
def test_the_suite_time_is_stated_once_in_the_readme():
    """docs/testing.md#time says how it was measured and points at the README for the figure."""
    stated = {page.relative_to(ROOT).as_posix(): re.findall(r"\b\d[\d,]* tests in [^(;]+", page.read_text())
              for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    assert {page: found for page, found in stated.items() if found} == {
        "README.md": [stated["README.md"][0]]}, stated["README.md"]
    assert "README" in (ROOT / "docs" / "testing.md").read_text().split("## Time", 1)[1].split("\n## ", 1)[0]


@pytest.mark.unit
def test_the_figure_check_finds_a_figure_on_two_pages(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("The suite: 885 tests in 3 min 34 s. int8 is 3.47 MB.\n")
    (tmp_path / "docs" / "testing.md").write_text("**885 tests in 3 min 34 s**; a call takes 2.40 ms.\n")
    (tmp_path / "docs" / "serving.md").write_text("3.47 MB against 39.59 MB (11.4x), 2.40 ms; 600 kB.\n")
    (tmp_path / "docs" / "benchmarks.md").write_text("| int8 | 3.47 | 11.4x smaller | 600 kB |\n")
    assert figures_on_two_pages(tmp_path) == {"11.4x": ["docs/benchmarks.md", "docs/serving.md"],
                                              "2.40ms": ["docs/serving.md", "docs/testing.md"],
                                              "3.47MB": ["README.md", "docs/serving.md"],
                                              "885 tests in": ["README.md", "docs/testing.md"]}
