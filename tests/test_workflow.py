"""The CI workflow runs the project's own commands: .ci/run, the compile check on pull
requests, the upload and a watched smoke run on main, the images on a tag."""
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def test_workflow_is_valid_yaml_running_the_ci_commands():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yaml").read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as True
    assert "push" in triggers and "pull_request" in triggers
    test = workflow["jobs"]["test"]
    assert [s["run"] for s in test["steps"] if "run" in s] == [".ci/run"]
    assert test["container"].endswith("-bookworm")  # Debian: its chromium package, not Ubuntu's snap stub
    ci_run = (ROOT / ".ci" / "run").read_text()
    ci_commands = [line.strip() for line in ci_run.splitlines() if line.strip().startswith("./dev ")]
    assert ci_commands == ["./dev test", "./dev compile-check"]
    install = ci_run.index("apt-get install -y -qq chromium")
    assert ci_run.index("command -v chromium") < install < ci_run.index("\n./dev test")  # only where missing, first
    upload = workflow["jobs"]["upload"]
    assert upload["if"].startswith("github.ref == 'refs/heads/main'")
    assert any("gpupipe upload" in s.get("run", "") for s in upload["steps"])
    assert "${{ secrets.KFP_TOKEN }}" in upload["env"]["KFP_TOKEN"]


def test_pull_requests_get_the_compile_check_and_main_a_watched_smoke_run():
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yaml").read_text())["jobs"]
    compile_job = jobs["compile"]
    assert compile_job["if"] == "github.event_name == 'pull_request'"
    assert [s["run"] for s in compile_job["steps"] if "run" in s] == ["./dev compile-check"]
    smoke = jobs["smoke"]
    assert smoke["needs"] == "upload" and smoke["if"] == jobs["upload"]["if"]
    assert smoke["env"]["KFP_HOST"] == "${{ secrets.KFP_HOST }}"
    (submit,) = [s for s in smoke["steps"] if "gpupipe submit" in s.get("run", "")]
    assert submit["if"] == "env.KFP_HOST != ''"
    command = " ".join(submit["run"].replace("\\\n", " ").split())
    assert "gpupipe submit configs/penguins.yaml --host \"$KFP_HOST\"" in command and " --watch " in command
    # the flags exist: the same parser the user has
    from pipelines.cli import build_parser

    args = build_parser().parse_args(command.split("gpupipe ", 1)[1].replace('"$KFP_HOST"', "https://k").split())
    assert args.watch and args.param == ["epochs=2"] and args.timeout == 3600


def test_a_version_tag_builds_and_pushes_both_images_to_the_registry_from_the_secrets():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yaml").read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]
    assert triggers["push"]["tags"] == ["v*"]
    images = workflow["jobs"]["images"]
    assert images["needs"] == "test" and images["if"] == "startsWith(github.ref, 'refs/tags/v')"
    builds = [s["with"] for s in images["steps"] if s.get("uses", "").startswith("docker/build-push-action")]
    assert [b["file"] for b in builds] == ["images/cpu/Dockerfile", "images/gpu/Dockerfile"]
    assert all(b["push"] is True and b["tags"].startswith("${{ env.REGISTRY }}/gpupipe-") for b in builds)
    assert images["env"]["REGISTRY"] == "${{ secrets.REGISTRY }}"
    login = next(s for s in images["steps"] if s.get("uses", "").startswith("docker/login-action"))
    assert login["with"]["password"] == "${{ secrets.REGISTRY_PASSWORD }}"
