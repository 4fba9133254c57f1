"""Pipeline versions on the backend: named after the commit, uploaded once.

A version is called `v<gpupipe version>-<commit>` (the commit from $GITHUB_SHA in CI, else
git, `-dirty` for uncommitted changes), so uploading the same commit again reuses it.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass

from pipelines.config import PipelineConfig
from pipelines.version import __version__


def git_sha(cwd: str = ".") -> str:
    """The commit being submitted: $GITHUB_SHA in CI, else `git rev-parse HEAD`, with
    `-dirty` when the work tree has uncommitted changes; "nogit" outside a checkout."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"][:12]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True).stdout.strip()
        return f"{sha}-dirty" if dirty else sha
    except (OSError, subprocess.CalledProcessError):
        return "nogit"


def version_name(sha: str) -> str:
    return f"v{__version__}-{sha}"


@dataclass
class UploadedVersion:
    pipeline_id: str
    version_id: str
    version_name: str
    created: bool


def by_name(name: str) -> str:
    """The KFP API's list filter for objects whose display name is `name`."""
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": name}]})


def upload_version(client, config: PipelineConfig, package_text: str, name: str) -> UploadedVersion:
    """Uploads the compiled pipeline as version `name` of the pipeline `config.name`
    (creating the pipeline on first upload); an existing version of that name is reused."""
    with tempfile.TemporaryDirectory() as tmp:
        package = os.path.join(tmp, f"{config.name}.yaml")
        with open(package, "w", encoding="utf-8") as f:
            f.write(package_text)
        pipeline_id = client.get_pipeline_id(config.name)
        if pipeline_id is None:
            pipeline = client.upload_pipeline(package, pipeline_name=config.name,
                                              description=config.description or None)
            pipeline_id = pipeline.pipeline_id
        existing = client.list_pipeline_versions(pipeline_id, filter=by_name(name)).pipeline_versions or []
        if existing:
            return UploadedVersion(pipeline_id, existing[0].pipeline_version_id, name, created=False)
        version = client.upload_pipeline_version(package, pipeline_version_name=name, pipeline_id=pipeline_id)
        return UploadedVersion(pipeline_id, version.pipeline_version_id, name, created=True)
