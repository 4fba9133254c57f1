"""`gpupipe init` (a commented config proposed from a sample of a table) and `gpupipe schema`
(the data's inferred schema, written next to the config for review)."""
from __future__ import annotations

import argparse
from pathlib import Path

from pipelines.config import load_config


def cmd_init(args: argparse.Namespace) -> int:
    from pipelines.init import init_config

    given = ["-o", args.output] if args.output else []
    command = " ".join(["gpupipe init", args.data, *(["--label", args.label] if args.label else []), *given])
    path, p = init_config(args.data, args.label, args.output, args.sample_rows, args.name, args.format, command)
    if hasattr(p, "classes") and hasattr(p, "image_size"):
        print(f"wrote {path}: an image classifier of {len(p.classes)} classes ({p.rows} images), "
              f"{p.image_size[0]}x{p.image_size[1]}x{p.channels} pixels, model {p.model}")
    else:
        print(f"wrote {path}: {p.task} label '{p.label}' ({p.metric}, threshold {p.threshold}), {p.counted()} "
              f"from {p.rows} sampled rows")
    for column, reason in p.left_out:
        print(f"  left out '{column}': {reason}")
    for column, safe in p.renamed:
        print(f"  '{column}' is {safe} in the examples, the schema and the model's inputs")
    print(f"next: gpupipe run {path}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    import tempfile

    import tensorflow_data_validation as tfdv

    from components.ingest.logic import ingest_data
    from components.validate.logic import infer_schema, split_statistics
    from pipelines.local_run import resolve_local_path

    config = load_config(args.config)
    data = config.data
    output = Path(args.output or Path(args.config).with_name(f"{config.name}.schema.pbtxt"))
    with tempfile.TemporaryDirectory(prefix="gpupipe-schema-") as tmp:
        ingest_data(data.model_copy(update={"source": resolve_local_path(data.source)}), tmp,
                    numeric_label=config.training.task == "regression")
        schema = infer_schema(split_statistics(tmp, "train"), data.label, config.validation)
    tfdv.write_schema_text(schema, str(output))
    print(f"wrote the inferred schema of {data.source} to {output}; review it, then set "
          f"validation.schema_file: {output} in {args.config}")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("schema", help="infer the data's schema and write it next to the config for review")
    p.add_argument("config")
    p.add_argument("--output", help="default: <config dir>/<name>.schema.pbtxt")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("init", help="propose a commented config from a sample of a table (TFDV schema inference) "
                                    "or from an image folder (ROOT/<class>/*.jpg)")
    p.add_argument("data", help="a CSV, Parquet or TFRecord file, directory, glob or gs:// prefix; or an image folder")
    p.add_argument("--label", help="the column to predict (a table; an image folder's label is its class folders)")
    p.add_argument("-o", "--output", help="where to write the config (default: configs/<name>.yaml; never overwritten)")
    p.add_argument("--name", help="pipeline and model name (default: from the file name)")
    p.add_argument("--format", default="auto", choices=["auto", "csv", "parquet", "tfrecord", "images"])
    p.add_argument("--sample-rows", type=int, default=10_000, help="rows read to propose the config (default 10000)")
    p.set_defaults(func=cmd_init)
