"""`gpupipe manifest kserve|tfserving|rbac|tenant` (pipelines/cli/manifest.py, issue #28): one
sub-command per kind of manifest, each taking only its own options; the form before the
sub-commands is refused in one line giving the new one."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.cli import main

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]

# each kind's own options, as its --help must list them (and no other)
OPTIONS = {
    "kserve": {"--serving-base", "--version", "--canary", "--raw-deployment", "--restricted"},
    "tfserving": {"--serving-base"},
    "rbac": {"--namespace", "--service-account"},
    "tenant": {"--team", "--gpu-quota", "--spot-gpu-quota", "--borrowing-limit", "--cohort", "--service-account",
               "--kueue-api"},
}


def gpupipe(*args):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def help_of(capsys, *args) -> str:
    with pytest.raises(SystemExit) as done:
        main([*args, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("kind", sorted(OPTIONS))
def test_each_kinds_help_lists_only_its_own_options(capsys, kind):
    text = help_of(capsys, "manifest", kind)
    assert set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) == OPTIONS[kind] | {"--help"}, text
    assert text.startswith(f"usage: gpupipe manifest {kind} ")


def test_manifest_help_lists_the_four_kinds(capsys):
    text = help_of(capsys, "manifest")
    assert "{kserve,tfserving,rbac,tenant}" in text
    assert not re.findall(r"(?<![\w-])--[a-z][a-z-]*", text.replace("--help", ""))  # no option of any kind


@pytest.mark.parametrize("kind, option", [("tfserving", "--version"), ("rbac", "--serving-base"),
                                          ("kserve", "--gpu-quota"), ("tenant", "--raw-deployment")])
def test_another_kinds_option_is_a_usage_error(capsys, kind, option):
    with pytest.raises(SystemExit) as done:
        main(["manifest", kind, "configs/ctr.yaml", *(["--team", "a", "--gpu-quota", "1"] if kind == "tenant" else []),
              option, "1"])
    assert done.value.code == 2
    assert f"unrecognized arguments: {option}" in capsys.readouterr().err


@pytest.mark.parametrize("old, new", [
    (["configs/penguins.yaml", "--serving-base", "gs://b/serving", "--version", "3"],
     "gpupipe manifest CONFIG: the kind of manifest is now a sub-command; run gpupipe manifest kserve "
     "configs/penguins.yaml --serving-base gs://b/serving --version 3"),
    (["configs/penguins.yaml", "--tfserving", "--serving-base", "gs://b/serving"],
     "gpupipe manifest --tfserving: the kind of manifest is now a sub-command; run gpupipe manifest tfserving "
     "configs/penguins.yaml --serving-base gs://b/serving"),
    (["configs/ctr.yaml", "--rbac", "--namespace", "team-a"],
     "gpupipe manifest --rbac: the kind of manifest is now a sub-command; run gpupipe manifest rbac "
     "configs/ctr.yaml --namespace team-a"),
    (["configs/ctr.yaml", "--tenant", "team-a", "--gpu-quota", "4"],
     "gpupipe manifest --tenant: the kind of manifest is now a sub-command; run gpupipe manifest tenant "
     "configs/ctr.yaml --team team-a --gpu-quota 4"),
    (["--tenant=team-b", "configs/ctr.yaml", "--gpu-quota", "2"],
     "gpupipe manifest --tenant: the kind of manifest is now a sub-command; run gpupipe manifest tenant "
     "--team team-b configs/ctr.yaml --gpu-quota 2"),
])
def test_the_old_combined_form_is_refused_in_one_line_naming_the_new_one(capsys, old, new):
    assert main(["manifest", *old]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [f"error: {new} (gpupipe manifest -h lists kserve, tfserving, rbac, "
                                              "tenant)"]


def test_the_old_form_from_the_shell_is_one_line_and_the_new_one_it_names_works():
    out = gpupipe("manifest", "configs/ctr.yaml", "--rbac")
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    new = out.stderr.split("; run gpupipe ", 1)[1].split(" (gpupipe manifest -h", 1)[0]
    assert new == "manifest rbac configs/ctr.yaml"
    again = gpupipe(*new.split())
    assert again.returncode == 0, again.stderr
    assert [d["kind"] for d in yaml.safe_load_all(again.stdout)] == ["Role", "RoleBinding"]


def test_a_misspelt_kind_is_argparses_usage_error(capsys):
    with pytest.raises(SystemExit) as done:
        main(["manifest", "kservee", "configs/penguins.yaml"])
    assert done.value.code == 2
    assert "invalid choice: 'kservee'" in capsys.readouterr().err


def test_manifest_kserve_is_a_kserve_tensorflow_inference_service():
    out = gpupipe("manifest", "kserve", "configs/penguins.yaml", "--serving-base", "gs://models-bucket/serving",
                  "--version", "3")
    assert out.returncode == 0, out.stderr
    account, manifest = yaml.safe_load_all(out.stdout)  # a private gs:// base: the key's Secret on the account
    assert account["kind"] == "ServiceAccount" and account["secrets"] == [{"name": "gpupipe-gcs-key"}]
    assert manifest["apiVersion"] == "serving.kserve.io/v1beta1" and manifest["kind"] == "InferenceService"
    assert manifest["metadata"]["name"] == "penguins"
    model = manifest["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "tensorflow"}
    assert model["storageUri"] == "gs://models-bucket/serving/penguins/releases/3"


def test_manifest_kserve_refuses_a_local_serving_base():
    out = gpupipe("manifest", "kserve", "configs/penguins.yaml")
    assert out.returncode == 1
    assert out.stderr.strip().startswith("error: serving.base: 'serving' is a local path")


def test_manifest_kserve_refuses_a_canary_without_the_stable_version(capsys):
    assert main(["manifest", "kserve", "configs/penguins.yaml", "--serving-base", "gs://b/serving",
                 "--canary", "2"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        "error: manifest kserve --canary 2: give the stable version too, with --version N (or neither, to serve the "
        "serving base's releases)"]


def test_manifest_kserve_serves_the_stable_and_canary_versions_given(capsys, tmp_path):
    raw = yaml.safe_load((ROOT / "configs" / "penguins.yaml").read_text())
    raw["serving"]["canary_percent"] = 20
    (tmp_path / "penguins.yaml").write_text(yaml.safe_dump(raw))
    assert main(["manifest", "kserve", str(tmp_path / "penguins.yaml"), "--serving-base", "gs://b/serving",
                 "--version", "3", "--canary", "4"]) == 0
    *_, service = yaml.safe_load_all(capsys.readouterr().out)
    predictor = service["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == "gs://b/serving/penguins/releases/4"  # the canary's release
    assert predictor["canaryTrafficPercent"] == 20


def test_a_refused_kserve_manifest_is_one_line_without_the_notes(capsys):
    """penguins.yaml has serving.canary_percent 0: a canary is refused before any note is printed."""
    assert main(["manifest", "kserve", "configs/penguins.yaml", "--serving-base", "gs://b/serving",
                 "--version", "3", "--canary", "4"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        "error: serving.canary_percent: 0, yet version 4 of penguins is the canary; set serving.canary_percent to its "
        "share of the traffic, or gpupipe promote/abort it"]


def test_manifest_tfserving_prints_tf_servings_objects(capsys):
    assert main(["manifest", "tfserving", "configs/penguins.yaml", "--serving-base", "gs://b/serving"]) == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)]
    assert kinds[:3] == ["ConfigMap", "Deployment", "Service"] and "InferenceService" not in kinds


@pytest.mark.parametrize("flags, namespace, account", [([], "kubeflow", "pipeline-runner"),
                                                       (["--namespace", "team-a", "--service-account", "default-editor"],
                                                        "team-a", "default-editor")])
def test_manifest_rbac_binds_the_launchers_role_to_the_runs_account(capsys, flags, namespace, account):
    assert main(["manifest", "rbac", "configs/ctr.yaml", *flags]) == 0
    role, binding = yaml.safe_load_all(capsys.readouterr().out)
    assert (role["kind"], binding["kind"]) == ("Role", "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == namespace
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]


def test_manifest_tenant_needs_the_team_and_its_gpus(capsys):
    with pytest.raises(SystemExit) as done:
        main(["manifest", "tenant", "configs/ctr.yaml", "--gpu-quota", "4"])
    assert done.value.code == 2 and "the following arguments are required: --team" in capsys.readouterr().err
    assert main(["manifest", "tenant", "configs/ctr.yaml", "--team", "team-a", "--gpu-quota", "0"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: manifest tenant --gpu-quota 0: the team needs on-demand GPUs; give --gpu-quota N with N at least the "
        "GPUs of one training run"]


def test_manifest_tenant_makes_the_teams_namespace_and_queues(capsys):
    assert main(["manifest", "tenant", "configs/ctr.yaml", "--team", "team-a", "--gpu-quota", "4"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["Namespace"]["metadata"]["name"] == "team-a"
    assert by_kind["ClusterQueue"]["spec"]["cohortName"] == "gpupipe-pool"
    assert {d["apiVersion"] for d in docs if "kueue" in d["apiVersion"]} == {"kueue.x-k8s.io/v1beta2"}
    assert main(["manifest", "tenant", "configs/ctr.yaml", "--team", "team-a", "--gpu-quota", "4",
                 "--kueue-api", "v1beta1"]) == 0  # for a Kueue before v0.15
    old = {d["kind"]: d for d in yaml.safe_load_all(capsys.readouterr().out)}
    assert old["ClusterQueue"]["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert old["ClusterQueue"]["spec"]["cohort"] == "gpupipe-pool"
    assert by_kind["LocalQueue"]["metadata"]["namespace"] == "team-a"
