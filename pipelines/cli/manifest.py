"""`gpupipe manifest kserve|tfserving|rbac|tenant CONFIG`: the Kubernetes objects a config
needs, printed as YAML for `kubectl apply -f -` (pipelines/manifests/ writes them). Each
sub-command takes only its own options; what the user still has to do goes to stderr, so
stdout stays the YAML."""
from __future__ import annotations

import argparse
import shlex
import sys
from typing import List, Optional

from components.contracts.errors import GpupipeError
from components.contracts.storage import schemes
from pipelines.config import load_config

KINDS = ("kserve", "tfserving", "rbac", "tenant")
# the flags that chose the kind before the sub-commands (`gpupipe manifest CONFIG --tfserving`)
_OLD_MODES = {"--kserve": "kserve", "--tfserving": "tfserving", "--rbac": "rbac", "--tenant": "tenant"}


def _print(docs: list) -> int:
    import yaml

    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


def cmd_kserve(args: argparse.Namespace) -> int:
    from pipelines.manifests import (kserve_base, kserve_cluster_notes, kserve_gcs_access, kserve_inference_service,
                                     kserve_s3_access)

    config = load_config(args.config)
    if args.canary is not None and args.version is None:
        raise GpupipeError(f"manifest kserve --canary {args.canary}: give the stable version too, with --version N "
                           "(or neither, to serve the serving base's releases)")
    if args.restricted:  # its own refusals (a local or pvc:// base) before anything is read
        from pipelines.manifests.storage_container import storage_container_base

        storage_container_base(config, args.serving_base or "")
    base = kserve_base(config, args.serving_base or "")  # a local base is refused before anything is read
    if args.version is not None:
        stable, canary = args.version, args.canary
    else:
        from components.store.served import releases

        stable, canary = releases(base, config.serving.model_name)
    access, steps = kserve_s3_access(config, base)
    gcs_access, gcs_steps = kserve_gcs_access(config, base)
    mode = "RawDeployment" if args.raw_deployment else "Serverless"
    docs = [*access, *gcs_access, kserve_inference_service(config, base, stable, canary, mode)]
    notes = kserve_cluster_notes(config, mode)
    if args.restricted:
        from pipelines.manifests.storage_container import restricted_storage_container, storage_container_notes

        docs.append(restricted_storage_container(config, base))
        notes += storage_container_notes(config, base)
    # what the user does to the Secret gpupipe never writes, and what the cluster needs
    for line in [*steps, *gcs_steps, *notes]:
        print(line, file=sys.stderr)
    return _print(docs)


def cmd_tfserving(args: argparse.Namespace) -> int:
    from pipelines.manifests import tf_serving_manifests

    return _print(tf_serving_manifests(load_config(args.config), args.serving_base or ""))


def cmd_rbac(args: argparse.Namespace) -> int:
    from pipelines.manifests import launcher_rbac

    return _print(launcher_rbac(load_config(args.config), args.namespace, args.service_account))


def cmd_tenant(args: argparse.Namespace) -> int:
    from pipelines.manifests import tenant_manifests

    config = load_config(args.config)
    if not args.gpu_quota:
        raise GpupipeError(f"manifest tenant --gpu-quota {args.gpu_quota}: the team needs on-demand GPUs; give "
                           "--gpu-quota N with N at least the GPUs of one training run")
    return _print(tenant_manifests(config, args.team, args.gpu_quota, args.spot_gpu_quota, args.borrowing_limit,
                                   args.cohort, args.service_account, args.kueue_api))


def old_form(argv: List[str]) -> Optional[str]:
    """For the form before the sub-commands (`manifest CONFIG [--tfserving|--rbac|--tenant
    TEAM] ...`): the one-line error giving the same command in the new form; else None."""
    if len(argv) < 2 or argv[0] != "manifest" or argv[1] in ("-h", "--help"):
        return None
    if not argv[1].startswith("-") and not argv[1].endswith((".yaml", ".yml")):
        return None  # a kind, or a misspelt one: argparse names the choices
    rest, kind, old = [], "kserve", None
    words = iter(argv[1:])
    for word in words:
        flag, eq, value = word.partition("=")
        if flag in _OLD_MODES:
            kind, old = _OLD_MODES[flag], flag
            if flag == "--tenant":
                rest += ["--team", value if eq else next(words, "TEAM")]
            continue
        rest.append(word)
    if old is None and not any(w.endswith((".yaml", ".yml")) for w in rest):
        return None  # no config and no old flag: argparse says what is missing
    was = f" {old}" if old else " CONFIG"
    return (f"gpupipe manifest{was}: the kind of manifest is now a sub-command; run "
            f"{shlex.join(['gpupipe', 'manifest', kind, *rest])} (gpupipe manifest -h lists {', '.join(KINDS)})")


def add_commands(sub) -> None:
    manifest = sub.add_parser("manifest", help="print Kubernetes objects for the config: kserve (an InferenceService "
                                               "serving the released version), tfserving (a TF Serving Deployment), "
                                               "rbac (the launcher's Role), tenant (a team's share of the GPU pool)")
    kinds = manifest.add_subparsers(dest="kind", required=True, metavar="{" + ",".join(KINDS) + "}")

    p = kinds.add_parser("kserve", help="a KServe InferenceService serving the released version (an s3:// base: and "
                                        "its ServiceAccount, with the Secret's annotations on stderr)")
    p.add_argument("config")
    p.add_argument("--serving-base", metavar="URI",
                   help=f"override serving.base (a {schemes.named(schemes.served_by('kserve'))} URI)")
    p.add_argument("--version", type=int, metavar="N",
                   help="the stable version to serve (default: the serving base's stable version)")
    p.add_argument("--canary", type=int, metavar="N", help="with --version: the canary version (default: none)")
    p.add_argument("--raw-deployment", action="store_true",
                   help="KServe without Knative (deploymentMode RawDeployment, HPA on cpu or memory, no canary split)")
    p.add_argument("--restricted", action="store_true",
                   help="for a namespace enforcing Pod Security restricted: also a ClusterStorageContainer whose "
                        "storage-initializer (KServe's init container that pulls the model) passes it "
                        f"({schemes.named(schemes.downloaded_by('kserve'))})")
    p.set_defaults(func=cmd_kserve)

    p = kinds.add_parser("tfserving", help="a TF Serving ConfigMap, Deployment, Service (and HPA) reading "
                                           "<serving base>/models.config")
    p.add_argument("config")
    p.add_argument("--serving-base", metavar="URI",
                   help=f"override serving.base (a {schemes.named(schemes.served_by('tfserving'))} URI)")
    p.set_defaults(func=cmd_tfserving)

    p = kinds.add_parser("rbac", help="the Role and RoleBinding the train task needs to launch multi-worker jobs")
    p.add_argument("config")
    p.add_argument("--namespace", default="kubeflow", metavar="NS", help="where the pipeline runs (default: kubeflow)")
    p.add_argument("--service-account", default="pipeline-runner", metavar="SA",
                   help="the runs' service account (default: pipeline-runner; default-editor in a Kubeflow profile)")
    p.set_defaults(func=cmd_rbac)

    p = kinds.add_parser("tenant", help="a team's share of the GPU pool: Namespace, ResourceQuota, LimitRange, Kueue "
                                        "ResourceFlavors, ClusterQueue, LocalQueue and RBAC")
    p.add_argument("config")
    p.add_argument("--team", required=True, help="the team, and its namespace")
    p.add_argument("--gpu-quota", type=int, required=True, metavar="N", help="the team's on-demand GPUs")
    p.add_argument("--spot-gpu-quota", type=int, default=0, metavar="N", help="the team's spot GPUs (default: 0)")
    p.add_argument("--borrowing-limit", type=int, default=None, metavar="N",
                   help="GPUs the team may borrow from the cohort while others leave them idle (unset: no limit; 0: "
                        "never borrows)")
    p.add_argument("--cohort", default="gpupipe-pool", help="the Kueue cohort that shares the pool (default: "
                                                            "gpupipe-pool)")
    p.add_argument("--service-account", default="default-editor", metavar="SA",
                   help="the runs' service account (default: default-editor, a Kubeflow profile's)")
    p.add_argument("--kueue-api", default="v1beta2", choices=("v1beta2", "v1beta1"),
                   help="the Kueue objects' version (default: v1beta2, served from Kueue v0.15 on; v1beta1, "
                        "deprecated in v0.19, for an older Kueue)")
    p.set_defaults(func=cmd_tenant)
