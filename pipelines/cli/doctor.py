"""`gpupipe doctor CONFIG --host URL`: before the first run, what the config needs of KFP and the
cluster, one line each (the checks: pipelines/doctor/)."""
from __future__ import annotations

import argparse

from pipelines.doctor import DEFAULT_NAMESPACE, DOCS, cluster_lines, kfp_lines


def cmd_doctor(args: argparse.Namespace) -> int:
    from pipelines.config import load_config

    from pipelines.cli.compile_ import compile_to_text

    config = load_config(args.config)
    lines = kfp_lines(args.host, args.iap_client_id, [compile_to_text(config)])
    lines += cluster_lines(config, args.config, args.kubeconfig, args.context, args.namespace,
                           args.service_account, args.serving)
    for line in lines:
        print(line.render(), flush=True)
    return 0 if all(line.ok for line in lines) else 1


def add_commands(sub) -> None:
    p = sub.add_parser("doctor", help="before the first run: check that KFP (2.5.0 or later; 2.14.0 with notify.webhook_secret), the CRDs, the "
                                      "LocalQueue, the Secrets and the launcher's RBAC the config needs are there; "
                                      "one line each, ok or the fix; exit 1 when any is missing")
    p.add_argument("config")
    p.add_argument("--host", required=True, help="KFP API URL, e.g. https://kubeflow.example.com/pipeline")
    p.add_argument("--namespace", help="the run's namespace, where its pods, Secrets and LocalQueue are (a Kubeflow "
                                       f"profile's; default: the context's namespace, else {DEFAULT_NAMESPACE})")
    p.add_argument("--iap-client-id", help="behind Identity-Aware Proxy: the IAP OAuth client id (default: "
                                           "$KFP_IAP_CLIENT_ID)")
    p.add_argument("--kubeconfig", help="the kubeconfig (default: $KUBECONFIG, else ~/.kube/config)")
    p.add_argument("--context", help="the kubeconfig context (default: its current-context)")
    p.add_argument("--service-account", help="also check the launcher's RBAC for this ServiceAccount of the run's "
                                             "namespace (pipeline-runner; default-editor in a Kubeflow profile) "
                                             "with a SubjectAccessReview")
    p.add_argument("--serving", choices=["kserve", "tfserving", "none"], default="kserve",
                   help="how the model is served: kserve (gpupipe manifest kserve, the default) needs KServe's CRD; "
                        "tfserving (gpupipe manifest tfserving) and none need nothing more")
    p.epilog = f"the checks and their fixes: {DOCS}"
    p.set_defaults(func=cmd_doctor)
