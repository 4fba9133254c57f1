"""The shape of the gpupipe command line (issue #28, acceptance 2): a package with one module
per command group, each adding its own commands, behind the console script and
`python -m pipelines.cli`."""
import argparse
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / "pipelines" / "cli"
SHARED = {"__init__", "__main__", "common"}  # not command groups


def group_modules():
    return sorted(p.stem for p in CLI.glob("*.py") if p.stem not in SHARED)


def commands_of(module) -> set:
    sub = argparse.ArgumentParser().add_subparsers()
    module.add_commands(sub)
    return set(sub.choices)


def test_each_command_comes_from_exactly_one_group_module():
    from pipelines.cli import GROUPS, build_parser

    assert sorted(m.__name__.rsplit(".", 1)[1] for m in GROUPS) == group_modules()  # none left out of the parser
    seen = {}
    for name in group_modules():
        for command in commands_of(importlib.import_module(f"pipelines.cli.{name}")):
            assert command not in seen, f"{command}: added by both {seen[command]} and {name}"
            seen[command] = name
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(sub.choices) == set(seen)
    assert {"compile", "run", "manifest", "queue", "usage", "doctor", "submit"} <= set(seen)


@pytest.mark.parametrize("package", ["cli", "pool", "doctor"])
def test_no_module_of_the_split_packages_is_over_400_lines(package):
    long = {p.name: n for p in (ROOT / "pipelines" / package).glob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"pipelines/{package}/: over 400 lines: {long}"


def test_the_console_script_is_the_packages_main():
    from pipelines.cli import main

    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["gpupipe"]
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name) is main


def test_python_m_pipelines_cli_runs_the_command_line():
    from pipelines.version import __version__

    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "--version"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == f"gpupipe {__version__}", out.stderr
