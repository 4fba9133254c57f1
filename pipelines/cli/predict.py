"""`gpupipe predict`: score a table with a served version, one prediction per row."""
from __future__ import annotations

import argparse

from components.contracts.storage import schemes
from pipelines.config import load_config


def cmd_predict(args: argparse.Namespace) -> int:
    from components.kinds import Columns
    from components.predict.logic import predict, summary
    from pipelines.local_run import resolve_local_path

    config = load_config(args.config)
    data = config.data
    result = predict(source=resolve_local_path(args.data), data_format=data.format, columns=Columns.part_of(data),
                     serving_base=resolve_local_path(args.serving_base or config.serving.base),
                     model_name=config.serving.model_name, output=resolve_local_path(args.output),
                     version=args.version, key=args.key or data.split.key, na_values=data.na_values,
                     engine=args.engine, beam_pipeline_args=data.beam_pipeline_args)
    print(summary(result))
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("predict", help="score a table with a served version: one prediction per row, in order, with "
                                       "the key column (CSV or JSON lines)")
    p.add_argument("config")
    p.add_argument("--data", required=True, help=f"the table: a path, directory, glob, {schemes.named()} URI")
    p.add_argument("--output", required=True, help="where the predictions go: a .csv or .jsonl path or URI")
    p.add_argument("--version", default="stable", help="stable (default: what serving serves) or a version number")
    p.add_argument("--serving-base", help="override serving.base")
    p.add_argument("--key", help="the column naming each row (default: data.split.key; none: the row's number)")
    p.add_argument("--engine", choices=["local", "beam"], default="local",
                   help="beam: an Apache Beam job on data.beam_pipeline_args (default: the DirectRunner)")
    p.set_defaults(func=cmd_predict)
