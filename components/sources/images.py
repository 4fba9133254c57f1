"""An image folder as a data source: `ROOT/<class>/**/*.{jpg,jpeg,png,bmp,gif}`, the layout
of Keras' `image_dataset_from_directory`, local, `gs://` or `s3://` (listed through
components/contracts/storage). Each file is one row: `image` (its bytes), `label` (its
class folder's name) and `file` (its path under ROOT). Files that are not images, and files
directly under ROOT, are counted and left out, and ingest says so; an empty class folder,
or a single class, is a one-line error.

Reading is by chunks of files read in parallel threads (a remote object costs a round trip
each); one file is still the unit a Beam job reads."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterator, List, Sequence, Tuple

import pyarrow as pa

from components.contracts import storage
from components.contracts.errors import GpupipeError

EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
IMAGE, LABEL, FILE = "image", "label", "file"  # the columns an image folder has
COLUMNS = (IMAGE, LABEL, FILE)
CHUNK = 256  # files read together
EXAMPLE_NAMES = ("digits", "shapes")  # the example folders `gpupipe examples` writes (example_images.py)
_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="gpupipe-image-files")


def is_image_name(uri: str) -> bool:
    return uri.lower().endswith(EXTENSIONS)


def class_of(uri: str, root: str) -> str:
    """The class folder an image file is in (its first folder under ROOT), '' when directly under ROOT."""
    rel = uri[len(root.rstrip("/")) + 1:] if uri.startswith(root.rstrip("/") + "/") else os.path.basename(uri)
    return rel.split("/", 1)[0] if "/" in rel else ""


def relative_path(uri: str, root: str) -> str:
    return uri[len(root.rstrip("/")) + 1:]


def looks_like_image_folder(entries: Sequence[storage.Entry]) -> bool:
    """A listing whose files are mostly images: an image folder, not a table's directory."""
    files = [e for e in entries if not e.uri.endswith("/")]
    return bool(files) and sum(is_image_name(e.uri) for e in files) * 2 > len(files)


def image_tree(root: str, entries: Sequence[storage.Entry], key: str = "data.source") -> Tuple[list, List[str]]:
    """(the image entries in class folders, sorted by class then path; the notes on what
    was left out). Raises on an empty class folder or fewer than two classes."""
    root = root.rstrip("/")
    images, left_out, folders = [], [], set()
    for e in entries:
        cls = class_of(e.uri, root)
        if e.uri.endswith("/"):  # an object store's folder placeholder
            if cls:
                folders.add(cls)
            continue
        if cls:
            folders.add(cls)
        if cls and is_image_name(e.uri) and not os.path.basename(e.uri).startswith("."):
            images.append((cls, e))
        else:
            left_out.append(relative_path(e.uri, root) if e.uri.startswith(root) else e.uri)
    if not storage.is_remote(root) and os.path.isdir(root):  # an empty folder shows in no listing
        folders.update(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))
    counts: Dict[str, int] = {c: 0 for c in folders}
    for cls, _ in images:
        counts[cls] += 1
    empty = sorted(c for c, n in counts.items() if n == 0)
    if empty:
        raise GpupipeError(f"{key}: class folder {root}/{empty[0]} holds no images ({', '.join(EXTENSIONS)}); add "
                           f"images to it or remove it{f' ({len(empty)} empty folders)' if len(empty) > 1 else ''}")
    if len(counts) < 2:
        found = f"one class folder ({next(iter(counts))})" if counts else "no class folders"
        raise GpupipeError(f"{key}: {root} has {found}; an image classifier needs a folder per class, at least 2; "
                           "add a folder of images for each other class (ROOT/<class>/*.jpg)")
    notes = []
    if left_out:
        notes.append(f"{len(left_out)} file(s) under {root} left out, not images in a class folder "
                     f"({', '.join(left_out[:3])}{', ...' if len(left_out) > 3 else ''})")
    return [e for _, e in sorted(images, key=lambda ce: (ce[0], ce[1].uri))], notes


def read_files(uris: Sequence[str], root: str) -> pa.RecordBatch:
    """The rows of image files: their bytes, class and path under ROOT (read in parallel)."""
    contents = list(_POOL.map(storage.read_bytes, uris))
    for uri, content in zip(uris, contents):
        if content is None:
            raise GpupipeError(f"data.source: {uri} disappeared while it was read; run again")
    return pa.RecordBatch.from_arrays(
        [pa.array(contents, pa.binary()), pa.array([class_of(u, root) for u in uris], pa.string()),
         pa.array([relative_path(u, root) for u in uris], pa.string())], list(COLUMNS))


def chunks(uris: Sequence[str]) -> Iterator[List[str]]:
    for i in range(0, len(uris), CHUNK):
        yield list(uris[i:i + CHUNK])
