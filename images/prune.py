"""Removes the stale final-stage images gpupipe's Dockerfiles left in the engine's storage.

    python images/prune.py [--engine podman|docker] --keep REF [--keep REF ...] [--dry-run]

Each build of a new tag leaves an image whose venv layer is its own (2.6 GB for the CPU
image, 6.4 GB for the GPU image), tagged or, after a failed or repeated build, untagged; the
builder stages share their big layers (the locks' installs) and stay, so the next build
still finds them in its cache. A final-stage image is one whose history copies a folder into
/opt/venv and sets TF_USE_LEGACY_KERAS (both Dockerfiles' last stage, nothing else); every one
that is not a kept reference or one of its ancestors is removed. `./dev image-test` runs it
before it builds, with the two references it is about to build (a machine that builds every
commit otherwise fills its disk: CI once ended "no space left on device" halfway through the
GPU image's venv layer).

Prints one line: how many images went and how much the storage's file system gained.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from typing import Dict, List, Set


def _run(engine: str, *args: str) -> str:
    done = subprocess.run([engine, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{engine} {' '.join(args[:2])}: {done.stderr.strip()[-300:]}")
    return done.stdout


def _inspect_all(engine: str) -> List[dict]:
    ids = _run(engine, "images", "--all", "--quiet", "--no-trunc").split()
    ids = list(dict.fromkeys(ids))
    if not ids:
        return []
    return json.loads(_run(engine, "image", "inspect", *ids))


def _history(engine: str, image: dict) -> List[str]:
    history = image.get("History")
    if history is None:  # docker's inspect has no history
        out = _run(engine, "history", "--no-trunc", "--format", "{{.CreatedBy}}", image["Id"])
        return out.splitlines()
    return [entry.get("created_by", "") for entry in history]


def is_final_stage(created_by: List[str]) -> bool:
    """Both Dockerfiles' last stage: the builder's venv copied in, TF_USE_LEGACY_KERAS set."""
    copies_venv = any("COPY" in line and line.rstrip().endswith("in /opt/venv") for line in created_by)
    legacy_keras = any("ENV" in line and "TF_USE_LEGACY_KERAS=1" in line for line in created_by)
    return copies_venv and legacy_keras


def _image_id(engine: str, ref: str) -> str:
    done = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    return done.stdout.strip().removeprefix("sha256:") if done.returncode == 0 else ""


def _free_bytes(engine: str) -> int:
    root = "/var/lib/containers/storage"
    try:
        info = json.loads(_run(engine, "info", "--format", "json"))
        root = info.get("store", {}).get("graphRoot") or info.get("DockerRootDir") or root
    except (RuntimeError, ValueError):
        pass
    try:
        return shutil.disk_usage(root).free
    except OSError:
        return 0


def prune(engine: str, keep: List[str], dry_run: bool = False) -> Dict[str, object]:
    images = {image["Id"].removeprefix("sha256:"): image for image in _inspect_all(engine)}
    parent = {image_id: (image.get("Parent") or "").removeprefix("sha256:") for image_id, image in images.items()}
    kept: Set[str] = set()
    for ref in keep:  # a kept image and every image it was built on
        image_id = _image_id(engine, ref)
        while image_id and image_id not in kept:
            kept.add(image_id)
            image_id = parent.get(image_id, "")
    stale = [image_id for image_id, image in images.items()
             if image_id not in kept and is_final_stage(_history(engine, image))]
    before = _free_bytes(engine)
    if dry_run:
        return {"removed": len(stale), "stale": len(stale), "freed": 0}
    for image_id in stale:  # its other tags first (rmi of a tag the image shares only untags it)
        for name in (images[image_id].get("RepoTags") or [])[1:]:
            subprocess.run([engine, "rmi", name], capture_output=True)
    # No --force: the engine refuses to remove an image another one is built on, so a kept
    # image can never go with its parents; children are removed first, round by round.
    left, removed = list(stale), 0
    while left:
        failed = []
        for image_id in left:
            done = subprocess.run([engine, "rmi", image_id], capture_output=True, text=True)
            if done.returncode == 0 or "not known" in done.stderr or "No such image" in done.stderr:
                removed += 1
            else:
                failed.append(image_id)
        if len(failed) == len(left):
            break
        left = failed
    return {"removed": removed, "stale": len(stale), "freed": max(0, _free_bytes(engine) - before)}


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="podman", choices=["podman", "docker"])
    parser.add_argument("--keep", action="append", default=[], metavar="REF")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which(args.engine) is None:
        print(f"error: images/prune.py: {args.engine} is not installed", file=sys.stderr)
        return 1
    try:
        result = prune(args.engine, args.keep, args.dry_run)
    except RuntimeError as err:
        print(f"error: images/prune.py: {err}", file=sys.stderr)
        return 1
    verb = "would remove" if args.dry_run else "removed"
    print(f"prune: {verb} {result['removed']} stale gpupipe final-stage image(s) of {result['stale']}; "
          f"{result['freed'] / 1e9:.1f} GB freed, {_free_bytes(args.engine) / 1e9:.1f} GB free")
    return 0


if __name__ == "__main__":
    sys.exit(main())
