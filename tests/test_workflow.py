"""The CI workflow runs the project's own commands: the same as .ci/run, plus the upload."""
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]


def test_workflow_is_valid_yaml_running_the_ci_commands():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yaml").read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as True
    assert "push" in triggers
    test_steps = [s.get("run", "") for s in workflow["jobs"]["test"]["steps"]]
    ci_run = (ROOT / ".ci" / "run").read_text()
    ci_commands = [line.strip() for line in ci_run.splitlines() if line.strip().startswith("./dev ")]
    assert ci_commands == ["./dev test", "./dev compile-check"]
    assert [c for c in test_steps if c.startswith("./dev ")] == ci_commands
    upload = workflow["jobs"]["upload"]
    assert upload["if"].startswith("github.ref == 'refs/heads/main'")
    assert any("gpupipe upload" in s.get("run", "") for s in upload["steps"])
    assert "${{ secrets.KFP_TOKEN }}" in upload["env"]["KFP_TOKEN"]


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
