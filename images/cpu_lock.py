"""Derives the locks from the ones uv resolves: requirements.lock, requirements-hashed.lock's
pins without their hashes (pip takes it as constraints, `pip install -c requirements.lock .`,
where it refuses hashes for a source directory); requirements-cpu.lock, the CPU image's lock,
from requirements-hashed.lock; and takes the test tools out of requirements-gpu.lock, the GPU
image's lock (uv resolves it from requirements-gpu.in, which includes requirements.in's test
tools):

- `tensorflow` becomes `tensorflow-cpu` of the same version (the same ops without the CUDA
  kernels: about 0.75 GB less installed);
- the test tools (TEST_ONLY) go, with every package that only they pull in (read from the
  lock's `# via` lines).

Every other pin and hash is copied as it is, so the image runs the versions the tests ran.

    python images/cpu_lock.py      (./dev lock runs it after re-resolving requirements-hashed.lock)

The wheel's hash is pip's own (`pip download`, then `pip hash`) for CPython 3.11 on
manylinux x86_64, the images' one platform.
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
# requirements.in's tests and local fixtures: nothing under components/ or pipelines/ imports them
TEST_ONLY = ("pytest", "pytest-xdist", "gcp-storage-emulator", "kubernetes-validate", "moto", "flask", "flask-cors",
             "mkdocs", "mkdocs-material",
             "lightgbm", "statsmodels")
HASHES = re.compile(r" \\\n(?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+")
ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._\-]*)(?:\[[^\]]*\])?==\S+ \\\n(?:    .*\n)+", re.M)


def entries(lock_text: str) -> Dict[str, re.Match]:
    return {m.group(1).lower(): m for m in ENTRY.finditer(lock_text)}


def wanted_by(entry: str) -> List[str]:
    """The `# via` names of one entry ("-r requirements.in" when asked for directly)."""
    via = entry.split("# via", 1)[1] if "# via" in entry else ""
    return [name.strip().lower() for name in re.split(r"\n\s*#", via) if name.strip().strip("#").strip()]


def dropped(lock_text: str) -> set:
    """TEST_ONLY and, transitively, every package wanted only by dropped ones."""
    found = entries(lock_text)
    gone = {name for name in TEST_ONLY if name in found}
    while True:
        more = {name for name, m in found.items() if name not in gone
                and (wants := wanted_by(m.group(0)))
                and all(w.strip("# ") in gone for w in wants)}
        if not more:
            return gone
        gone |= more


def unhashed(lock_text: str) -> str:
    """`lock_text` with each pin's hashes taken out, its pins and `# via` lines as they are."""
    body = HASHES.sub("\n", lock_text.split("\n", 2)[2])
    return ("# requirements-hashed.lock without its hashes, written by images/cpu_lock.py (./dev lock):\n"
            "# the same pins, for pip install -c requirements.lock . (pip takes no hashes for a source directory)\n"
            + body)


def cpu_lock(lock_text: str, tf_cpu_hashes: List[str]) -> str:
    gone = dropped(lock_text)
    found = entries(lock_text)
    out = lock_text
    for name in gone:
        out = out.replace(found[name].group(0), "")
    tf = entries(out)["tensorflow"]
    version = tf.group(0).split("==", 1)[1].split()[0]
    lines = [f"tensorflow-cpu=={version} \\"] + [f"    --hash=sha256:{h} \\" for h in tf_cpu_hashes]
    lines[-1] = lines[-1][:-2]
    block = "\n".join(lines) + "\n    # the CPU image's TensorFlow (images/cpu_lock.py)\n"
    return out.replace(tf.group(0), block)


def image_lock(lock_text: str) -> str:
    """`lock_text` without the test tools (TEST_ONLY and what only they pull in): what an
    image installs. Idempotent."""
    found = entries(lock_text)
    for name in dropped(lock_text):
        lock_text = lock_text.replace(found[name].group(0), "")
    return lock_text


def wheel_hashes(version: str) -> List[str]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                        "--platform", "manylinux2014_x86_64", "--python-version", "3.11", "--dest", tmp,
                        f"tensorflow-cpu=={version}"], check=True)
        out = subprocess.run([sys.executable, "-m", "pip", "hash", *map(str, Path(tmp).glob("*.whl"))],
                             check=True, capture_output=True, text=True).stdout
    return sorted(re.findall(r"--hash=sha256:([0-9a-f]{64})", out))


if __name__ == "__main__":
    text = (ROOT / "requirements-hashed.lock").read_text()
    (ROOT / "requirements.lock").write_text(unhashed(text))
    version = entries(text)["tensorflow"].group(0).split("==", 1)[1].split()[0]
    (ROOT / "requirements-cpu.lock").write_text(cpu_lock(text, wheel_hashes(version)))
    print("requirements-cpu.lock: dropped " + ", ".join(sorted(dropped(text))))
    gpu = (ROOT / "requirements-gpu.lock").read_text()
    (ROOT / "requirements-gpu.lock").write_text(image_lock(gpu))
    print("requirements-gpu.lock: dropped " + (", ".join(sorted(dropped(gpu))) or "nothing (already without them)"))
