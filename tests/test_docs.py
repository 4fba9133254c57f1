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
