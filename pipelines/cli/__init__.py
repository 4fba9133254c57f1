"""The gpupipe command line: compile and run pipelines, start a config from a table, report on runs,
manage served versions, print manifests, use KFP.

One module per command group (as kfp's own sdk/python/kfp/cli): compile_ (compile,
config-schema), run (run, resume), predict, init (init, schema), serving (versions, rollback,
promote, abort), examples (an example image folder), remote (upload, submit, schedule, runs: KFP), report, manifest (kserve,
tfserving, rbac, tenant), pool (queue, usage: Kueue), doctor. Each adds its commands to the
parser with `add_commands`.

Every error a user can cause ends in one line naming the input and the fix, and a
exit code 1 (2 only for a malformed command line, from argparse); no traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from typing import List, Optional

# TensorFlow's C++ start-up notices (CUDA plugin registration, at ERROR level) are not for
# the terminal; the tasks keep level 2 (pipelines/local_run.py), their logs go to run.log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import components  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS for this process and its tasks)
from components.contracts.errors import GpupipeError  # noqa: E402
from pipelines.cli import (compile_, doctor, examples, init, manifest, pool, predict, remote, report,  # noqa: E402
                           run, serving)
from pipelines.cli.common import CONFIG_DIR, storage_environment  # noqa: E402
from pipelines.cli.compile_ import COMPILED_DIR, compile_to_text, compiled_path  # noqa: E402
from pipelines.config import ConfigDeprecation  # noqa: E402
from pipelines.stopping import Terminated, check, handled, stop_signals  # noqa: E402

__all__ = ["COMPILED_DIR", "CONFIG_DIR", "build_parser", "compile_to_text", "compiled_path", "main"]

# in the order `gpupipe -h` lists them
GROUPS = (compile_, predict, run, init, examples, serving, remote, report, manifest, pool, doctor)
# the commands that stop on SIGTERM, SIGINT and SIGHUP alike, with 128 + the signal (pipelines/stopping.py)
STOPPABLE = {"run", "resume", "predict"}


def build_parser() -> argparse.ArgumentParser:
    from pipelines.version import __version__

    parser = argparse.ArgumentParser(prog="gpupipe", description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--version", action="version", version=f"gpupipe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_commands(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    """A config key that moved is one `warning:` line on stderr; other warnings as Python shows them."""
    if issubclass(category, ConfigDeprecation):
        print(f"warning: {message}", file=sys.stderr)
        return
    _show_warning(message, category, filename, lineno, file, line)


_show_warning = warnings.showwarning


def main(argv: Optional[List[str]] = None) -> int:
    # Libraries' notices about their own future (kfp, google-api-core) are not the user's
    # business on the terminal; errors the user can cause are one line each.
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("once", category=ConfigDeprecation)
    warnings.showwarning = _one_line_warning
    argv = sys.argv[1:] if argv is None else list(argv)
    old = manifest.old_form(argv)
    if old:  # a malformed command line: argparse's exit code
        print(f"error: {old}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        with (stop_signals() if args.command in STOPPABLE else contextlib.nullcontext()), storage_environment(args):
            code = args.func(args)
            check()  # a stop signal whose exception was lost, and no one handled
            return code
    except Terminated as stop:  # before or after the run's tasks (a run stopped during them returns its code)
        handled()
        print(f"gpupipe {args.command}: {stop}", file=sys.stderr, flush=True)
        return stop.exit_code
    except GpupipeError as err:  # bad input or a failed run: exit 1 (a malformed command line: argparse's 2)
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
