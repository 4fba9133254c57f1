"""The commands that talk to a KFP installation: `gpupipe upload`, `submit`, `watch`,
`schedule` and `runs` (pipelines/remote/ does the talking)."""
from __future__ import annotations

import argparse
import sys
from typing import List

from components.contracts.errors import GpupipeError
from pipelines.cli.common import config_paths
from pipelines.cli.compile_ import compile_to_text
from pipelines.config import PipelineConfig, load_config

SCHEDULE_ACTIONS = ("pause", "resume", "delete", "list")


def _client(args, pipeline_texts=()):
    """kfp.Client, refused in one line when the backend is older than what these compiled
    pipelines use needs (pipelines/remote/backend.py needed_kfp)."""
    from pipelines.remote import connect, needed_kfp

    return connect(args.host, args.namespace, args.iap_client_id, need=needed_kfp(pipeline_texts))


def cmd_upload(args: argparse.Namespace) -> int:
    from pipelines.remote import git_sha, upload_version, version_name

    compiled = [(config, compile_to_text(config)) for config in map(load_config, config_paths(args.configs))]
    client = _client(args, [text for _, text in compiled])
    for config, text in compiled:
        uploaded = upload_version(client, config, text, version_name(git_sha()))
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
    from pipelines.remote import check_host, git_sha, run_url, submit

    config = load_config(args.config)
    params = _run_params(config, args.param)
    text = compile_to_text(config)
    client = _client(args, [text])
    uploaded, run = submit(client, config, text, git_sha(), args.experiment, params)
    print(f"started run {run.run_id} of {config.name} version {uploaded.version_name} in experiment {args.experiment}")
    print(f"  {run_url(check_host(args.host), run.run_id)}")
    if not args.watch:
        return 0
    return _follow(client, run.run_id, args, config.training.pods.retries)


def _follow(client, run_id: str, args: argparse.Namespace, retries: int) -> int:
    """Follows a run to its end (retrying a lost train pod up to `retries` times): 0 when it
    succeeded, 1 with one line naming the failed task otherwise."""
    from pipelines.remote import failed_task, watch_run

    final = watch_run(client, run_id, args.poll, args.timeout, report=lambda line: print(f"  {line}", flush=True),
                      lost_pod_retries=retries)
    if final.state == "SUCCEEDED":
        return 0
    where = failed_task(final)
    print(f"error: run {run_id} {final.state}" + (f" at {where}" if where else ""), file=sys.stderr)
    return 1


def cmd_watch(args: argparse.Namespace) -> int:
    """`gpupipe watch RUN_ID`: what `submit --watch` does, for a run started elsewhere (the
    Kubeflow UI, a recurring run, CI)."""
    from pipelines.remote import check_host, run_url

    if args.retries is not None and args.config:
        raise GpupipeError("watch: give --retries or --config, not both")
    retries = args.retries if args.retries is not None else \
        load_config(args.config).training.pods.retries if args.config else 0
    if retries < 0:
        raise GpupipeError(f"watch --retries {retries}: give 0 or more")
    client = _client(args)
    try:
        client.get_run(args.run_id)
    except Exception as err:  # kfp_server_api's ApiException
        if getattr(err, "status", None) != 404:
            raise
        raise GpupipeError(f"watch: no run {args.run_id} at {args.host}; `gpupipe runs --host {args.host}` lists "
                           "the recent runs and their ids") from None
    print(f"following run {args.run_id}: {run_url(check_host(args.host), args.run_id)}")
    return _follow(client, args.run_id, args, retries)


def cmd_schedule(args: argparse.Namespace) -> int:
    from pipelines.remote import change_schedules, git_sha, kfp_cron, list_schedules, schedule

    # `--experiment` defaults to gpupipe; `schedule list` lists every experiment's unless given
    experiment = args.experiment or "gpupipe"
    action, rest = (args.what[0], args.what[1:]) if args.what[0] in SCHEDULE_ACTIONS else ("create", args.what)
    if action == "list":
        for job in list_schedules(_client(args), args.experiment):
            print(f"{job['status']:<9} {job['cron']:<20} {job['id']}  {job['name']}")
        return 0
    if len(rest) != 1:
        example = "" if action == "create" else f"{action} "
        raise GpupipeError(f"schedule {action}: give one config, e.g. gpupipe schedule {example}"
                           "configs/penguins.yaml --host URL")
    config = load_config(rest[0])
    if action != "create":
        changed = change_schedules(_client(args), config, experiment, action)
        print(f"{action}d {', '.join(changed)}" if changed else f"no schedule of {config.name} in experiment "
                                                                  f"{experiment}")
        return 0 if changed else 1
    if not args.cron:
        raise GpupipeError("schedule: give --cron, e.g. --cron '0 3 * * *' (03:00 daily)")
    kfp_cron(args.cron)  # a bad expression fails before anything is uploaded
    text = compile_to_text(config)
    uploaded, job, deleted = schedule(_client(args, [text]), config, text, git_sha(), experiment,
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


def _kfp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", required=True, help="KFP API URL, e.g. https://kubeflow.example.com/pipeline")
    p.add_argument("--namespace", help="Kubeflow profile namespace (multi-user installs)")
    p.add_argument("--iap-client-id", help="behind Identity-Aware Proxy: the IAP OAuth client id; a Google ID token "
                                           "for it is the bearer token (default: $KFP_IAP_CLIENT_ID)")


def add_commands(sub) -> None:
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
                   help="follow the run to its end: exit 0 when it succeeded, 1 naming the failed task otherwise; "
                        "a run that failed only because the train task's pod was deleted is retried (KFP Retry), "
                        "up to training.pods.retries times")
    p.add_argument("--poll", type=float, default=15.0, help="with --watch: seconds between two looks")
    p.add_argument("--timeout", type=float, default=7 * 24 * 3600, help="with --watch: give up after this many seconds")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("watch", help="follow a run started elsewhere (the UI, a schedule, CI) as submit --watch does: "
                                     "exit 0 when it succeeded, 1 naming the failed task; a lost train pod is retried")
    p.add_argument("run_id", metavar="RUN_ID")
    _kfp_args(p)
    p.add_argument("--config", help="retry a deleted train pod up to this config's training.pods.retries times")
    p.add_argument("--retries", type=int, help="retry a deleted train pod up to this many times (default: 0, or "
                                               "--config's training.pods.retries)")
    p.add_argument("--poll", type=float, default=15.0, help="seconds between two looks")
    p.add_argument("--timeout", type=float, default=7 * 24 * 3600, help="give up after this many seconds")
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("schedule", help="create the recurring run (replacing an earlier one); or pause, resume or "
                                        "delete it; or list the schedules",
                       usage="gpupipe schedule [pause|resume|delete] CONFIG --host URL [--cron C] | "
                             "gpupipe schedule list --host URL")
    p.add_argument("what", nargs="+", metavar="[ACTION] CONFIG")
    _kfp_args(p)
    p.add_argument("--cron", help="to create: five-field cron, e.g. '0 3 * * *'")
    p.add_argument("--max-concurrency", type=int, default=1)
    p.add_argument("--no-catchup", action="store_true", help="skip runs missed while paused")
    p.add_argument("--experiment", default=None, help="default: gpupipe (schedule list: every experiment)")
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("runs", help="list recent KFP runs: state, duration, the version each pushed")
    _kfp_args(p)
    p.add_argument("--experiment")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--config", help="read the pushed versions from this config's serving base (cluster.serving_base)")
    p.add_argument("--serving-base", help="read the pushed versions from this serving base (with --model or --config)")
    p.add_argument("--model", help="with --serving-base: the model name")
    p.set_defaults(func=cmd_runs)
