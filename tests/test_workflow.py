"""The CI workflow runs the project's own commands: .ci/run, the compile check on pull
requests, the upload and a watched smoke run on main, the images built and tested on every push
and pushed from main and tags."""
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
    assert [s["run"] for s in test["steps"] if "run" in s] == ["./dev test", "./dev compile-check"]
    assert test["container"].endswith("-bookworm")  # Debian: its chromium package, not Ubuntu's snap stub
    image_test = workflow["jobs"]["image-test"]  # on the runner's host, whose Docker engine builds
    assert "container" not in image_test
    assert [s["run"] for s in image_test["steps"] if "run" in s] == ["./dev image-test --pinned-base"]
    # the image tag is the last commit that changed what the images hold: whole checkouts
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout"):
                assert step["with"]["fetch-depth"] == 0
    # this machine's CI runs the same commands, the images from a local base
    ci_run = (ROOT / ".ci" / "run").read_text()
    ci_commands = [line.strip() for line in ci_run.splitlines() if line.strip().startswith("./dev ")]
    assert ci_commands == ["./dev test", "./dev compile-check", "./dev image-test"]
    dev = (ROOT / "dev").read_text()
    install = dev.index("apt_install test chromium")
    assert dev.index("command -v chromium") < install  # only where missing
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


def test_main_and_version_tags_push_both_images_to_the_registry_from_the_secrets():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yaml").read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]
    assert triggers["push"]["tags"] == ["v*"]
    images = workflow["jobs"]["images"]
    assert images["needs"] == ["test", "image-test"]
    assert "refs/heads/main" in images["if"] and "refs/tags/v" in images["if"]
    (push,) = [s for s in images["steps"] if "./dev images" in s.get("run", "")]
    assert push["run"] == './dev images --push "$REGISTRY"' and push["if"] == "env.REGISTRY != ''"
    assert images["env"]["REGISTRY"] == "${{ secrets.REGISTRY }}"
    login = next(s for s in images["steps"] if s.get("uses", "").startswith("docker/login-action"))
    assert login["with"]["password"] == "${{ secrets.REGISTRY_PASSWORD }}"
