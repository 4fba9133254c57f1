"""`gpupipe queue` (the config's GPU workloads in its Kueue LocalQueue) and `gpupipe usage`
(GPU-hours and cost per team): the shared GPU pool as Kueue sees it (pipelines/pool/)."""
from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path

from components.contracts.errors import GpupipeError
from pipelines.pool import (GPU, connect, is_gpupipe_workload, list_workloads, local_usage, parse_when,
                            pending_positions, queue_rows, render_queue, render_usage, usage_by_team, workload_state)
from pipelines.pool.usage import iso


def cmd_queue(args: argparse.Namespace) -> int:
    from pipelines.config import load_config

    config = load_config(args.config)
    queue = config.cluster.queue
    if not queue:
        raise GpupipeError(f"{args.config}: cluster.queue is unset, so its train pods and jobs carry no "
                           "kueue.x-k8s.io/queue-name label and Kueue queues none of them; set cluster.queue to the "
                           "team's LocalQueue (gpupipe manifest tenant makes one named gpus)")
    resource = config.training.pods.accelerator or GPU
    conn = connect(args.kubeconfig, args.context)
    namespace = args.namespace or conn.namespace or "default"
    workloads = [w for w in list_workloads(conn, namespace) if is_gpupipe_workload(w, queue, config.name)]
    waiting = [w for w in workloads if workload_state(w)[0] in ("pending", "evicted")]
    positions, note = pending_positions(conn, namespace, queue) if waiting else ({}, "")
    rows = queue_rows(workloads, positions, resource)
    if args.json:
        print(json.dumps({"pipeline": config.name, "namespace": namespace, "queue": queue, "workloads": rows,
                          **({"note": note} if note else {})}, indent=2))
    else:
        print(render_queue(rows, namespace, queue, config.name, note))
    return 0


def cmd_usage(args: argparse.Namespace) -> int:
    now = datetime.now(timezone.utc)
    until = parse_when(args.until, now, "--until") if args.until else now
    since = parse_when(args.since, until, "--since")
    if since >= until:
        raise GpupipeError(f"usage --since {args.since}: the period starts at {iso(since)}, not before its end "
                           f"{iso(until)}; give an earlier --since or a later --until")
    if args.price_per_gpu_hour is not None and args.price_per_gpu_hour < 0:
        raise GpupipeError(f"usage --price-per-gpu-hour {args.price_per_gpu_hour}: a price is 0 or more; give e.g. "
                           "--price-per-gpu-hour 0.35")
    config = None
    if args.config:
        from pipelines.config import load_config

        config = load_config(args.config)
    price = args.price_per_gpu_hour
    if price is None and config is not None:
        price = config.training.gpu_hour_price or None
    resource = (config.training.pods.accelerator if config else None) or GPU
    asked = list(dict.fromkeys((args.namespace or []) + (args.team or [])))
    conn = connect(args.kubeconfig, args.context)
    workloads = []
    if asked:
        for namespace in asked:
            workloads += list_workloads(conn, namespace)
    else:
        workloads = list_workloads(conn, None)
    teams, records = usage_by_team(workloads, since, until, resource)
    local = local_usage(config.name, Path(args.runs_dir), since, until) if config is not None else None
    if args.json:
        print(json.dumps({"since": iso(since), "until": iso(until), "price_per_gpu_hour": price,
                          "teams": [{**t, **({"cost": t["gpu_hours"] * price} if price else {})} for t in teams],
                          "workloads": records, **({"local": local} if local is not None else {})}, indent=2))
    else:
        print(render_usage(teams, since, until, price, local, asked))
    return 0


def _kube_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="the kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="the kubeconfig context (default: its current-context)")
    p.add_argument("--json", action="store_true", help="print JSON instead of lines")


def add_commands(sub) -> None:
    p = sub.add_parser("queue", help="the config's GPU workloads in its Kueue LocalQueue: state, position (Kueue's "
                                     "visibility API), pending or eviction reason, admitted flavor")
    p.add_argument("config")
    p.add_argument("--namespace", help="the LocalQueue's namespace, the team's (default: the context's namespace, "
                                       "else default)")
    _kube_args(p)
    p.set_defaults(func=cmd_queue)

    p = sub.add_parser("usage", help="GPU-hours (and cost) per team from the finished Kueue workloads over a period, "
                                     "and from the local run reports")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--namespace", action="append", help="a team's namespace; repeat for more")
    which.add_argument("--team", action="append", help="a team (its namespace, as gpupipe manifest tenant makes "
                                                       "it); repeat for more")
    which.add_argument("-A", "--all-namespaces", action="store_true", help="every team: each namespace with "
                                                                           "finished workloads")
    p.add_argument("--since", default="7d", help="the period's start: 7d, 12h, 2w, or a date (default: 7d)")
    p.add_argument("--until", help="the period's end: a date or ISO time (default: now)")
    p.add_argument("--price-per-gpu-hour", type=float, help="the cost of one GPU-hour (default: the config's "
                                                            "training.gpu_hour_price)")
    p.add_argument("--config", help="a config: its training.gpu_hour_price and accelerator, and its local runs")
    p.add_argument("--runs-dir", default="runs", help="with --config: where its local runs are (default: runs/)")
    _kube_args(p)
    p.set_defaults(func=cmd_usage)
