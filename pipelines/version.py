"""The package version (the one place it is set; pyproject reads it) and the images' tag.

An image tag carries the commit: `<version>-<commit>`, where the commit is the last one that
changed what the images hold. A commit that changes only docs, tests, configs or the compiled
pipelines keeps the tag, so the compiled YAML committed after a code change names the image
built from that change. Inside an image the tag it was built as is in its environment.

    python -m pipelines.version          prints the tag (./dev images tags with it)
    python -m pipelines.version --dirty  prints the uncommitted changes to what the images hold
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import List

__version__ = "0.1.0"

from components.contracts.names import IMAGE_TAG_ENV  # set by the images' build (ARG IMAGE_TAG), or by hand

ROOT = Path(__file__).resolve().parents[1]
# What the Dockerfiles COPY, less .dockerignore (tests and the compiled pipelines stay out).
IMAGE_INPUTS = ("components", "pipelines", "images", "pyproject.toml", "requirements-cpu.lock",
                "requirements-gpu.lock", ":(exclude)pipelines/compiled", ":(exclude,glob)**/test_*.py")


def _git(*args: str) -> str:
    """git's output in the checkout this file is part of; "" outside one (an installed package)."""
    if not (ROOT / ".git").exists():
        return ""
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


@functools.lru_cache(maxsize=None)
def image_tag() -> str:
    """`<version>-<12 hex of the last commit changing the images' inputs>`; the environment's
    GPUPIPE_IMAGE_TAG when set; the bare version outside a git checkout."""
    if os.environ.get(IMAGE_TAG_ENV):
        return os.environ[IMAGE_TAG_ENV]
    commit = _git("log", "-1", "--format=%h", "--abbrev=12", "--", *IMAGE_INPUTS).strip()
    return f"{__version__}-{commit}" if commit else __version__


def uncommitted_image_inputs() -> List[str]:
    """The paths under the images' inputs with uncommitted changes (new files included)."""
    out = _git("status", "--porcelain", "--untracked-files=all", "--", *IMAGE_INPUTS)
    return [line[3:] for line in out.splitlines() if line.strip()]  # "XY path" lines


if __name__ == "__main__":
    if sys.argv[1:] == ["--dirty"]:
        print("\n".join(uncommitted_image_inputs()))
    else:
        print(image_tag())
