"""The served versions under a config's serving base: `gpupipe versions`, `rollback`,
`promote` and `abort`."""
from __future__ import annotations

import argparse
import sys

from pipelines.config import load_config


def _config_and_serving_base(args: argparse.Namespace):
    """The config and its serving base (`--serving-base`, else serving.base): what rollback,
    versions, promote and abort act on."""
    config = load_config(args.config)
    return config, args.serving_base or config.serving.base


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
              "wait for it (KServe: re-apply gpupipe manifest kserve)", file=sys.stderr)
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


def add_commands(sub) -> None:
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
