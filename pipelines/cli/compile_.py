"""`gpupipe compile` (configs to KFP pipeline YAML under pipelines/compiled/) and
`gpupipe config-schema` (the config file's own JSON Schema)."""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from pipelines.cli.common import config_paths
from pipelines.config import PipelineConfig, load_config

COMPILED_DIR = Path("pipelines/compiled")


def compiled_path(config: PipelineConfig, output_dir: Path = COMPILED_DIR) -> Path:
    return output_dir / f"{config.name}.yaml"


def compile_to_text(config: PipelineConfig, scoring: bool = False) -> str:
    """The KFP pipeline YAML for `config` (`scoring`: its scoring pipeline), as the kfp compiler
    writes it."""
    import tempfile

    from kfp import compiler

    from pipelines.factory import create_pipeline, create_scoring_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pipeline.yaml"
        compiler.Compiler().compile(create_scoring_pipeline(config) if scoring else create_pipeline(config), str(out))
        return out.read_text(encoding="utf-8")


def cmd_compile(args: argparse.Namespace) -> int:
    output_dir = Path(args.output_dir)
    stale = []
    for path in config_paths(args.configs):
        config = load_config(path)
        text = compile_to_text(config, scoring=args.scoring)
        target = compiled_path(config, output_dir)
        if args.scoring:
            target = target.with_name(f"{config.name}-scoring.yaml")
        if args.check:
            current = target.read_text(encoding="utf-8") if target.is_file() else None
            if current != text:
                stale.append(target)
                if args.diff and current is not None:
                    sys.stdout.writelines(difflib.unified_diff(
                        current.splitlines(True), text.splitlines(True), str(target), f"{target} (from {path})", n=1))
            else:
                print(f"up to date: {target}")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(f"compiled {path} -> {target}")
        _warn_uncommitted_images(config)
    if stale:
        names = ", ".join(str(p) for p in stale)
        print(f"error: stale compiled pipeline(s): {names}; run `gpupipe compile` and commit the result",
              file=sys.stderr)
        return 1
    return 0


def _warn_uncommitted_images(config: PipelineConfig) -> None:
    """Compiled from a tree whose image inputs have uncommitted changes: the tag written names
    the image of the last commit, which does not hold them."""
    from pipelines.version import uncommitted_image_inputs

    changed = uncommitted_image_inputs()
    defaulted = [ref for ref, given in ((config.images.cpu_image, config.images.cpu),
                                        (config.images.gpu_image, config.images.gpu)) if not given]
    if changed and defaulted:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        print(f"warning: {config.name}: uncommitted changes to what the images hold ({', '.join(changed[:3])}{more}): "
              f"the pipeline names {' and '.join(defaulted)}, built from the last commit without them; "
              f"commit, then `./dev images` and `gpupipe compile` again", file=sys.stderr)


def add_commands(sub) -> None:
    p = sub.add_parser("compile", help="compile configs to KFP pipeline YAML under pipelines/compiled/")
    p.add_argument("configs", nargs="*", help="config files (default: every configs/*.yaml)")
    p.add_argument("--check", action="store_true", help="exit 1, naming the file, when a compiled file is stale")
    p.add_argument("--diff", action="store_true", help="with --check: print the difference")
    p.add_argument("--output-dir", default=str(COMPILED_DIR))
    p.add_argument("--scoring", action="store_true", help="compile each config's scoring pipeline instead "
                                                          "(<name>-scoring.yaml: batch predictions with the served "
                                                          "version, to schedule like any pipeline)")
    p.set_defaults(func=cmd_compile)

    from pipelines.reference import cmd_config_schema  # the config file's own schema (docs/config.schema.json)

    p = sub.add_parser("config-schema", help="print the config's JSON Schema (docs/config.schema.json), generated "
                                             "from pipelines/config.py")
    p.set_defaults(func=cmd_config_schema)
