"""The gpupipe command line: compile and run pipelines, start a config from a table, report on runs,
manage served versions, print manifests, use KFP.

Every error a user can cause ends in one line naming the input and the fix, and a
exit code 1 (2 only for a malformed command line, from argparse); no traceback.
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import warnings
from pathlib import Path
from typing import List, Optional

# TensorFlow's C++ start-up notices (CUDA plugin registration, at ERROR level) are not for
# the terminal; the tasks keep level 2 (pipelines/local_run.py), their logs go to run.log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import components  # noqa: E402,F401  (sets TF_USE_LEGACY_KERAS for this process and its tasks)
from components.contracts.errors import GpupipeError
from pipelines.config import PipelineConfig, load_config

COMPILED_DIR = Path("pipelines/compiled")
CONFIG_DIR = Path("configs")


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


def _config_paths(given: List[str]) -> List[Path]:
    if given:
        return [Path(p) for p in given]
    found = sorted(CONFIG_DIR.glob("*.yaml"))
    if not found:
        raise GpupipeError(f"{CONFIG_DIR}/: no *.yaml configs found; pass a config path or run from the project root")
    return found


def cmd_compile(args: argparse.Namespace) -> int:
    output_dir = Path(args.output_dir)
    stale = []
    for path in _config_paths(args.configs):
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


def cmd_run(args: argparse.Namespace) -> int:
    from pipelines.local_run import run_local

    config = load_config(args.config)
    overrides = {}
    if args.epochs is not None:
        overrides["epochs"] = args.epochs
    if args.serving_base is not None:
        overrides["serving_base"] = args.serving_base
    if args.data_source is not None:
        overrides["data_source"] = args.data_source
    summary = run_local(config, runs_dir=args.runs_dir, overrides=overrides, quiet=args.quiet,
                        warm=False if args.cold else None, cache=not args.no_cache)
    print(summary.render())
    return 0 if summary.ok else 1


def cmd_predict(args: argparse.Namespace) -> int:
    from components.contracts.settings import Columns
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


def cmd_resume(args: argparse.Namespace) -> int:
    from pipelines.local_run import resume_local

    summary = resume_local(args.run_dir, quiet=args.quiet, warm=False if args.cold else None)
    print(summary.render())
    return 0 if summary.ok else 1


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
        ingest_data(resolve_local_path(data.source), tmp, data.label, list(data.numeric_features),
                    list(data.categorical_features), data.split.eval_percent, data.split.key,
                    numeric_label=config.training.task == "regression", data_format=data.format)
        schema = infer_schema(split_statistics(tmp, "train"), data.label, config.validation)
    tfdv.write_schema_text(schema, str(output))
    print(f"wrote the inferred schema of {data.source} to {output}; review it, then set "
          f"validation.schema_file: {output} in {args.config}")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from pipelines.init import init_config

    given = ["-o", args.output] if args.output else []
    command = " ".join(["gpupipe init", args.data, "--label", args.label, *given])
    path, p = init_config(args.data, args.label, args.output, args.sample_rows, args.name, args.format, command)
    print(f"wrote {path}: {p.task} label '{p.label}' ({p.metric}, threshold {p.threshold}), {len(p.numeric)} numeric "
          f"and {len(p.categorical)} categorical feature(s) from {p.rows} sampled rows")
    for column, reason in p.left_out:
        print(f"  left out '{column}': {reason}")
    for column, safe in p.renamed:
        print(f"  '{column}' is {safe} in the examples, the schema and the model's inputs")
    print(f"next: gpupipe run {path}")
    return 0


def _config_and_serving_base(args: argparse.Namespace):
    """The config and its serving base (`--serving-base`, else serving.base): what rollback,
    versions, promote and abort act on."""
    config = load_config(args.config)
    return config, args.serving_base or config.serving.base


def _storage_environment(args: argparse.Namespace):
    """For a command on a config: the storage layer's settings of its `storage` section
    (storage.s3, storage.retry) as the tasks get them, for the command's duration; a
    variable already set in the shell wins."""
    import contextlib

    from components.contracts.compat import patched_environ

    path = getattr(args, "config", None)
    if not path or not Path(path).is_file() or Path(path).suffix not in (".yaml", ".yml"):
        return contextlib.nullcontext()
    wanted = load_config(path).storage.environment()
    return patched_environ({k: v for k, v in wanted.items() if k not in os.environ})


def cmd_rollback(args: argparse.Namespace) -> int:
    from components.store.served import preload, rollback, rollback_needs_loading

    config, base = _config_and_serving_base(args)
    name, endpoint = config.serving.model_name, args.endpoint or config.serving.endpoint
    unloaded = rollback_needs_loading(base, name, args.to)
    if unloaded is not None and endpoint:
        # TF Serving moves an existing label only onto a loaded version: load it first.
        import grpc

        from components.push.smoke import wait_until_available

        preload(base, name, unloaded)
        print(f"{name}: waiting for {endpoint} to load version {unloaded} before stable moves onto it", flush=True)
        with grpc.insecure_channel(endpoint) as channel:
            wait_until_available(channel, name, unloaded, args.timeout)
    elif unloaded is not None:
        print(f"note: models.config did not name version {unloaded}, so a TF Serving reading it has it unloaded and "
              "refuses to move stable until it is loaded; pass --endpoint HOST:PORT (or set serving.endpoint) to "
              "wait for it (KServe: re-apply gpupipe manifest)", file=sys.stderr)
    previous, now = rollback(base, config.serving.model_name, args.to)
    print(f"{config.serving.model_name}: stable moved from version {previous} to version {now} "
          f"({base.rstrip('/')}/models.config)")
    return 0


def cmd_versions(args: argparse.Namespace) -> int:
    from components.store.base import ServingStore
    from components.store.served import version_records

    config, base = _config_and_serving_base(args)
    records = version_records(ServingStore(base, config.serving.model_name))
    if not records:
        print(f"no versions of {config.serving.model_name} under {base}")
    metric = config.evaluation.metric
    for r in records:
        value = r["metrics"].get(metric)
        shown = f"{metric} {value:.4f}" if isinstance(value, (int, float)) else f"{metric} -"
        state = r["state"] + (" (pushing)" if r["in_progress"] else "") + ("" if r["whole"] else " (files removed)")
        lineage = r["lineage"]
        print(f"{r['version']:>4}  {state:<26} {','.join(r['labels']) or '-':<14} {shown:<18} "
              f"model {r['digest'][:12] or '-':<12} run {r['run_id'] or '-'}")
        blessing = lineage.get("blessing") or {}
        details = [("run name", lineage.get("run_name")), ("pipeline", lineage.get("pipeline")),
                   ("gpupipe", lineage.get("gpupipe_version")), ("image", lineage.get("image")),
                   ("data", lineage.get("data_fingerprint")), ("config", (lineage.get("config_digest") or "")[:12]),
                   ("pushed", lineage.get("pushed_at"))]
        shown_details = "  ".join(f"{k} {v}" for k, v in details if v)
        if shown_details:
            print(f"      {shown_details}")
        if blessing.get("reasons"):
            print(f"      {'blessed' if blessing.get('blessed') else 'not blessed'}: {'; '.join(blessing['reasons'])}")
        if r["reason"] and r["state"] in ("failed", "retired", "canary"):
            print(f"      {r['state']}: {r['reason']}")
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    from components.store.served import promote

    config, base = _config_and_serving_base(args)
    previous, now = promote(base, config.serving.model_name, config.serving.keep_versions)
    print(f"{config.serving.model_name}: canary version {now} is now stable (previous stable {previous}, kept for "
          f"rollback) ({base.rstrip('/')}/models.config)")
    return 0


def cmd_abort(args: argparse.Namespace) -> int:
    from components.store.served import abort, served_version_number

    config, base = _config_and_serving_base(args)
    version = abort(base, config.serving.model_name)
    print(f"{config.serving.model_name}: canary version {version} aborted (marked failed, label and files removed); "
          f"stable stays version {served_version_number(base, config.serving.model_name)}")
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    import yaml

    from pipelines.manifests import (kserve_base, kserve_cluster_notes, kserve_gcs_access, kserve_inference_service,
                                     kserve_s3_access, launcher_rbac, tenant_manifests, tf_serving_manifests)

    config = load_config(args.config)
    if args.tenant:
        if not args.gpu_quota:
            raise GpupipeError("manifest --tenant: give the team's GPUs with --gpu-quota N")
        docs = tenant_manifests(config, args.tenant, args.gpu_quota, args.spot_gpu_quota, args.borrowing_limit,
                                args.cohort, args.service_account or "default-editor")
    elif args.rbac:
        docs = launcher_rbac(config, args.namespace, args.service_account or "pipeline-runner")
    elif args.tfserving:
        docs = tf_serving_manifests(config, args.serving_base or "")
    else:
        base = kserve_base(config, args.serving_base or "")  # a local base is refused before anything is read
        if args.version is not None:
            stable, canary = args.version, args.canary
        else:
            from components.store.served import releases

            stable, canary = releases(base, config.serving.model_name)
        access, steps = kserve_s3_access(config, base)
        gcs_access, gcs_steps = kserve_gcs_access(config, base)
        access, steps = [*access, *gcs_access], [*steps, *gcs_steps]
        mode = "RawDeployment" if args.raw_deployment else "Serverless"
        docs = [*access, kserve_inference_service(config, base, stable, canary, mode)]
        # what the user does to the Secret gpupipe never writes, and what the cluster needs (stdout stays the YAML)
        for line in [*steps, *kserve_cluster_notes(config, mode)]:
            print(line, file=sys.stderr)
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


def _client(args):
    from pipelines.remote import connect

    return connect(args.host, args.namespace, args.iap_client_id)


def cmd_upload(args: argparse.Namespace) -> int:
    from pipelines.remote import git_sha, upload_version, version_name

    client = _client(args)
    for path in _config_paths(args.configs):
        config = load_config(path)
        uploaded = upload_version(client, config, compile_to_text(config), version_name(git_sha()))
        verb = "uploaded" if uploaded.created else "already there:"
        print(f"{verb} {config.name} version {uploaded.version_name} (pipeline {uploaded.pipeline_id}, "
              f"version {uploaded.version_id})")
    return 0


def _run_params(config: PipelineConfig, given: List[str]) -> dict:
    """--param NAME=VALUE pairs, typed like the pipeline parameter's default."""
    from pipelines.factory import run_parameters

    defaults = run_parameters(config, local=False)
    params = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or name not in defaults:
            raise GpupipeError(f"--param {item}: give NAME=VALUE with NAME one of {', '.join(defaults)}")
        kind = type(defaults[name])
        try:
            params[name] = kind(value)
        except ValueError:
            raise GpupipeError(
                f"--param {item}: {name} takes a {kind.__name__}, e.g. {name}={defaults[name]}") from None
    return params


def cmd_submit(args: argparse.Namespace) -> int:
    from pipelines.remote import check_host, failed_task, git_sha, run_url, submit, watch_run

    config = load_config(args.config)
    params = _run_params(config, args.param)
    client = _client(args)
    uploaded, run = submit(client, config, compile_to_text(config), git_sha(), args.experiment, params)
    print(f"started run {run.run_id} of {config.name} version {uploaded.version_name} in experiment {args.experiment}")
    print(f"  {run_url(check_host(args.host), run.run_id)}")
    if not args.watch:
        return 0
    final = watch_run(client, run.run_id, args.poll, args.timeout, report=lambda line: print(f"  {line}", flush=True))
    if final.state == "SUCCEEDED":
        return 0
    where = failed_task(final)
    print(f"error: run {run.run_id} {final.state}" + (f" at {where}" if where else ""), file=sys.stderr)
    return 1


SCHEDULE_ACTIONS = ("pause", "resume", "delete", "list")


def cmd_schedule(args: argparse.Namespace) -> int:
    from pipelines.remote import change_schedules, git_sha, kfp_cron, list_schedules, schedule

    action, rest = (args.what[0], args.what[1:]) if args.what[0] in SCHEDULE_ACTIONS else ("create", args.what)
    if action == "list":
        for job in list_schedules(_client(args), args.experiment if args.experiment_given else None):
            print(f"{job['status']:<9} {job['cron']:<20} {job['id']}  {job['name']}")
        return 0
    if len(rest) != 1:
        example = "" if action == "create" else f"{action} "
        raise GpupipeError(f"schedule {action}: give one config, e.g. gpupipe schedule {example}"
                           "configs/penguins.yaml --host URL")
    config = load_config(rest[0])
    if action != "create":
        changed = change_schedules(_client(args), config, args.experiment, action)
        print(f"{action}d {', '.join(changed)}" if changed else f"no schedule of {config.name} in experiment "
                                                                  f"{args.experiment}")
        return 0 if changed else 1
    if not args.cron:
        raise GpupipeError("schedule: give --cron, e.g. --cron '0 3 * * *' (03:00 daily)")
    kfp_cron(args.cron)  # a bad expression fails before anything is uploaded
    uploaded, job, deleted = schedule(_client(args), config, compile_to_text(config), git_sha(), args.experiment,
                                      args.cron, args.max_concurrency, catchup=not args.no_catchup)
    replaced = f", replacing {', '.join(deleted)}" if deleted else ""
    print(f"scheduled {job.display_name} ({job.recurring_run_id}) '{args.cron}' running {config.name} version "
          f"{uploaded.version_name}{replaced}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from pipelines.remote import format_duration, recent_runs

    pushed_by_run = None
    if args.config or args.serving_base:
        from components.store.base import ServingStore
        from components.store.served import version_records

        config = load_config(args.config) if args.config else None
        if config is None and not args.model:
            raise GpupipeError("runs --serving-base: give the model with --model NAME, or give --config CONFIG")
        base = args.serving_base or config.cluster.serving_base or config.serving.base
        model = args.model or config.serving.model_name
        try:
            records = version_records(ServingStore(base, model))
        except Exception as err:  # google-auth's or the storage API's error reading a gs:// base
            if isinstance(err, GpupipeError):
                raise
            reason = (str(err).splitlines() or [type(err).__name__])[0][:200]
            raise GpupipeError(f"runs: cannot read the serving base {base} ({reason}); check its credentials "
                               "(GOOGLE_APPLICATION_CREDENTIALS) or leave out --config/--serving-base") from None
        pushed_by_run = {r["run_id"]: r["version"] for r in records if r["run_id"]}
    runs = recent_runs(_client(args), args.limit, args.experiment, pushed_by_run)
    if not runs:
        print("no runs")
    for run in runs:
        print(f"{run['created']:<26} {run['state'] or '-':<10} {format_duration(run['seconds']):>7}  "
              f"{run['pushed']:<16} {run['id']}  {run['name']}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pipelines.reports import open_in_browser, pool_runs, render_pool, run_page

    target = Path(args.target)
    if target.is_file():  # a config: the pool view of its recent local runs
        if args.open:
            raise GpupipeError(f"report --open: {target} is a config; --open opens a run's page (give RUN_DIR)")
        if not 0 <= args.input_bound <= 1:
            raise GpupipeError(f"report --input-bound {args.input_bound}: give a fraction between 0 and 1, e.g. 0.3")
        config = load_config(target)
        runs_dir = Path(args.runs_dir)
        print(render_pool(config.name, runs_dir, pool_runs(config.name, runs_dir, args.limit), args.input_bound))
        return 0
    page = run_page(target)
    print(page)
    if args.open and not open_in_browser(page):
        raise GpupipeError(f"report --open: no web browser found to open {page}; open the file by hand")
    return 0


def _kfp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", required=True, help="KFP API URL, e.g. https://kubeflow.example.com/pipeline")
    p.add_argument("--namespace", help="Kubeflow profile namespace (multi-user installs)")
    p.add_argument("--iap-client-id", help="behind Identity-Aware Proxy: the IAP OAuth client id; a Google ID token "
                                           "for it is the bearer token (default: $KFP_IAP_CLIENT_ID)")


def build_parser() -> argparse.ArgumentParser:
    from pipelines.version import __version__

    parser = argparse.ArgumentParser(prog="gpupipe", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gpupipe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="compile configs to KFP pipeline YAML under pipelines/compiled/")
    p.add_argument("configs", nargs="*", help="config files (default: every configs/*.yaml)")
    p.add_argument("--check", action="store_true", help="exit 1, naming the file, when a compiled file is stale")
    p.add_argument("--diff", action="store_true", help="with --check: print the difference")
    p.add_argument("--output-dir", default=str(COMPILED_DIR))
    p.add_argument("--scoring", action="store_true", help="compile each config's scoring pipeline instead "
                                                          "(<name>-scoring.yaml: batch predictions with the served "
                                                          "version, to schedule like any pipeline)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("predict", help="score a table with a served version: one prediction per row, in order, with "
                                       "the key column (CSV or JSON lines)")
    p.add_argument("config")
    p.add_argument("--data", required=True, help="the table: a path, directory, glob, gs:// or s3:// URI")
    p.add_argument("--output", required=True, help="where the predictions go: a .csv or .jsonl path or URI")
    p.add_argument("--version", default="stable", help="stable (default: what serving serves) or a version number")
    p.add_argument("--serving-base", help="override serving.base")
    p.add_argument("--key", help="the column naming each row (default: data.split.key; none: the row's number)")
    p.add_argument("--engine", choices=["local", "beam"], default="local",
                   help="beam: an Apache Beam job on data.beam_pipeline_args (default: the DirectRunner)")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("run", help="run the pipeline end to end on this machine (kfp.local)")
    p.add_argument("config")
    p.add_argument("--runs-dir", default="runs", help="local pipeline root (default: runs/)")
    p.add_argument("--epochs", type=int, help="override training.epochs for this run")
    p.add_argument("--data-source", help="override data.source for this run")
    p.add_argument("--serving-base", help="override serving.base for this run")
    p.add_argument("--quiet", action="store_true", help="print the summary only (no live progress)")
    p.add_argument("--cold", action="store_true", help="start every task in a new Python, as a pod does (default: "
                                                       "tasks fork from one process that imported their libraries; "
                                                       "GPUPIPE_WARM_START=0 does the same)")
    p.add_argument("--no-cache", action="store_true", help="run every step, reusing no earlier run's outputs "
                                                           "(default: ingest, validate, train and evaluate reuse those "
                                                           "of a run with the same inputs, as KFP's cache does)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("resume", help="run a local run again with its own config and parameters: what finished is "
                                      "reused, the failed step and those after it run")
    p.add_argument("run_dir", help="the run's folder, runs/<pipeline>-<time>")
    p.add_argument("--quiet", action="store_true", help="print the summary only")
    p.add_argument("--cold", action="store_true", help="start every task in a new Python, as a pod does")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("schema", help="infer the data's schema and write it next to the config for review")
    p.add_argument("config")
    p.add_argument("--output", help="default: <config dir>/<name>.schema.pbtxt")
    p.set_defaults(func=cmd_schema)

    from pipelines.reference import cmd_config_schema  # the config file's own schema (docs/config.schema.json)
    p = sub.add_parser("config-schema", help="print the config's JSON Schema (docs/config.schema.json), generated "
                                             "from pipelines/config.py")
    p.set_defaults(func=cmd_config_schema)

    p = sub.add_parser("init", help="propose a commented config from a sample of a table (TFDV schema inference)")
    p.add_argument("data", help="a CSV, Parquet or TFRecord file, directory, glob or gs:// prefix")
    p.add_argument("--label", required=True, help="the column to predict")
    p.add_argument("-o", "--output", help="where to write the config (default: configs/<name>.yaml; never overwritten)")
    p.add_argument("--name", help="pipeline and model name (default: from the file name)")
    p.add_argument("--format", default="auto", choices=["auto", "csv", "parquet", "tfrecord"])
    p.add_argument("--sample-rows", type=int, default=10_000, help="rows read to propose the config (default 10000)")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("rollback", help="point TF Serving's `stable` label back at an earlier version")
    p.add_argument("config")
    p.add_argument("--to", type=int, help="version to serve (default: the newest earlier one that passed)")
    p.add_argument("--serving-base", help="override serving.base")
    p.add_argument("--endpoint", help="TF Serving gRPC host:port (default: serving.endpoint): when the target is not "
                                      "loaded, load it and wait for it before stable moves")
    p.add_argument("--timeout", type=float, default=300.0, help="with an endpoint: seconds to wait for the load")
    p.set_defaults(func=cmd_rollback)

    p = sub.add_parser("versions", help="list the versions under the serving base: state, labels, metric, model "
                                        "digest and lineage (run, pipeline, gpupipe, image, data, config, blessing)")
    p.add_argument("config")
    p.add_argument("--serving-base", help="override serving.base")
    p.set_defaults(func=cmd_versions)

    p = sub.add_parser("promote", help="make the canary version stable (the stable before is kept for rollback)")
    p.add_argument("config")
    p.add_argument("--serving-base", help="override serving.base")
    p.set_defaults(func=cmd_promote)

    p = sub.add_parser("abort", help="drop the canary version: marked failed, its label and files removed")
    p.add_argument("config")
    p.add_argument("--serving-base", help="override serving.base")
    p.set_defaults(func=cmd_abort)

    p = sub.add_parser("upload", help="upload compiled pipelines to KFP as a new version (named by version and git SHA)")
    p.add_argument("configs", nargs="*", help="config files (default: every configs/*.yaml)")
    _kfp_args(p)
    p.set_defaults(func=cmd_upload)

    p = sub.add_parser("submit", help="upload a new pipeline version to KFP and start a run")
    p.add_argument("config")
    _kfp_args(p)
    p.add_argument("--experiment", default="gpupipe")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a run parameter (data_source, epochs, learning_rate, eval_threshold, serving_base); repeat")
    p.add_argument("--watch", action="store_true",
                   help="follow the run to its end: exit 0 when it succeeded, 1 naming the failed task otherwise")
    p.add_argument("--poll", type=float, default=15.0, help="with --watch: seconds between two looks")
    p.add_argument("--timeout", type=float, default=7 * 24 * 3600, help="with --watch: give up after this many seconds")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("schedule", help="create the recurring run (replacing an earlier one); or pause, resume or "
                                        "delete it; or list the schedules",
                       usage="gpupipe schedule [pause|resume|delete] CONFIG --host URL [--cron C] | "
                             "gpupipe schedule list --host URL")
    p.add_argument("what", nargs="+", metavar="[ACTION] CONFIG")
    _kfp_args(p)
    p.add_argument("--cron", help="to create: five-field cron, e.g. '0 3 * * *'")
    p.add_argument("--max-concurrency", type=int, default=1)
    p.add_argument("--no-catchup", action="store_true", help="skip runs missed while paused")
    p.add_argument("--experiment", default=None)
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("runs", help="list recent KFP runs: state, duration, the version each pushed")
    _kfp_args(p)
    p.add_argument("--experiment")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--config", help="read the pushed versions from this config's serving base (cluster.serving_base)")
    p.add_argument("--serving-base", help="read the pushed versions from this serving base (with --model or --config)")
    p.add_argument("--model", help="with --serving-base: the model name")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("report", help="RUN_DIR: print the path of the run's HTML report (--open opens it); CONFIG: "
                                      "the pool view of its recent local runs (GPU-hours, examples/s, input wait, "
                                      "GPU use, preemptions, cost)")
    p.add_argument("target", metavar="RUN_DIR|CONFIG")
    p.add_argument("--open", action="store_true", help="RUN_DIR: open the page in a web browser")
    p.add_argument("--runs-dir", default="runs", help="CONFIG: where the local runs are (default: runs/)")
    p.add_argument("--limit", type=int, default=10, help="CONFIG: this many of the newest runs")
    p.add_argument("--input-bound", type=float, default=0.3,  # pipelines.reports.INPUT_BOUND
                   help="CONFIG: flag runs whose input-wait fraction is above this (default: 0.3)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("manifest", help="print a KServe InferenceService serving the released version (an s3:// "
                                        "base: and its ServiceAccount, with the Secret's annotations on stderr), or "
                                        "(--tfserving) a TF Serving Deployment reading models.config, or (--rbac) "
                                        "the Role and RoleBinding the train task needs to launch multi-worker jobs")
    p.add_argument("config")
    p.add_argument("--serving-base", help="override serving.base (KServe needs a gs://, s3:// or pvc:// URI, "
                                          "TF Serving a gs:// or s3:// one)")
    p.add_argument("--tfserving", action="store_true",
                   help="print a TF Serving ConfigMap, Deployment, Service (and HPA) instead of the InferenceService")
    p.add_argument("--version", type=int, help="KServe: the stable version to serve (default: the serving base's "
                                               "stable version)")
    p.add_argument("--canary", type=int, help="with --version: the canary version (default: none)")
    p.add_argument("--raw-deployment", action="store_true",
                   help="KServe without Knative (deploymentMode RawDeployment, HPA on cpu or memory, no canary split)")
    p.add_argument("--rbac", action="store_true", help="print the launcher's Role and RoleBinding instead")
    p.add_argument("--namespace", default="kubeflow", help="with --rbac: where the pipeline runs (default: kubeflow)")
    p.add_argument("--service-account",
                   help="the runs' service account (--rbac: pipeline-runner; --tenant: default-editor, a Kubeflow "
                        "profile's)")
    p.add_argument("--tenant", help="print a team's share of the GPU pool instead: Namespace, ResourceQuota, "
                                    "LimitRange, Kueue ResourceFlavors, ClusterQueue, LocalQueue and RBAC")
    p.add_argument("--gpu-quota", type=int, default=0, help="with --tenant: the team's on-demand GPUs")
    p.add_argument("--spot-gpu-quota", type=int, default=0, help="with --tenant: the team's spot GPUs")
    p.add_argument("--borrowing-limit", type=int, default=None,
                   help="with --tenant: GPUs the team may borrow from the cohort while others leave them idle "
                        "(unset: no limit; 0: never borrows)")
    p.add_argument("--cohort", default="gpupipe-pool", help="with --tenant: the Kueue cohort that shares the pool")
    p.set_defaults(func=cmd_manifest)
    from pipelines.pool import add_commands as add_pool_commands  # queue, usage: the GPU pool as Kueue sees it
    add_pool_commands(sub)
    from pipelines.doctor import add_command as add_doctor_command  # doctor: before the first run
    add_doctor_command(sub)
    return parser


def _experiment_default(args: argparse.Namespace) -> None:
    """`--experiment` defaults to gpupipe; `schedule list` lists every experiment's unless given."""
    if hasattr(args, "experiment") and args.func is cmd_schedule:
        args.experiment_given = args.experiment is not None
        args.experiment = args.experiment or "gpupipe"


def main(argv: Optional[List[str]] = None) -> int:
    # Libraries' notices about their own future (kfp, google-api-core) are not the user's
    # business on the terminal; errors the user can cause are one line each.
    warnings.filterwarnings("ignore", category=FutureWarning)
    args = build_parser().parse_args(argv)
    _experiment_default(args)
    try:
        with _storage_environment(args):
            return args.func(args)
    except GpupipeError as err:  # bad input or a failed run: exit 1 (a malformed command line: argparse's 2)
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
