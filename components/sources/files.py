"""The files a data source names, and the columns they must hold.

A source is a local file, directory or glob, a `gs://` or `s3://bucket/prefix` (or object, or
glob; listed through components/contracts/storage), or `synthetic:ctr?rows=N&seed=S`. This
module resolves it to `SourceFile`s, tells each one's format from `data.format` or its
extension, fingerprints them, and says in one line when a column is named twice or a later
file of a multi-file source lacks a column the first one has. Reading the rows is the
format modules' job (csv_text, records), put together by readers.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import List

from components.contracts import storage
from components.contracts.errors import GpupipeError
from components.sources import images, synthetic

FORMATS = ("csv", "parquet", "tfrecord", "images")
IMAGE_FILE = "image"  # the format of one file of an image folder (data.format: images)


@dataclass
class SourceFile:
    uri: str
    size: int
    format: str
    stamp: str = ""  # what changes when the content does: mtime (local), generation (gs://)
    root: str = ""  # an image folder's file: the folder (its class is the first folder under it)


class SourceFiles(list):
    """The files of a source, and the notes on what was left out of them (an image folder's
    other files), for the step to print."""

    def __init__(self, files, notes=()):
        super().__init__(files)
        self.notes = list(notes)


def detect_format(uri: str, declared: str = "auto") -> str:
    if declared != "auto":
        return declared
    name = uri.lower().removesuffix(".gz").removesuffix(".gzip")
    for ext, fmt in ((".csv", "csv"), (".parquet", "parquet"), (".pq", "parquet"), (".tfrecord", "tfrecord"),
                     (".tfrecords", "tfrecord")):
        if name.endswith(ext):
            return fmt
    raise GpupipeError(f"data.format: cannot tell the format of {uri} from its name; set data.format to "
                       "csv, parquet, tfrecord or images (a folder of class folders)")


def is_gzip(uri: str) -> bool:
    return uri.lower().endswith((".gz", ".gzip"))


def _hidden(name: str) -> bool:
    return os.path.basename(name).startswith((".", "_"))


def fingerprint(files: List[SourceFile]) -> str:
    """A digest of the files' names, sizes and stamps: it changes when the data does, so a
    cached ingest is reused only for the same data."""
    text = "\n".join(f"{f.uri}\t{f.size}\t{f.stamp}" for f in files)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def resolve(source: str, declared_format: str = "auto", key: str = "data.source",
            format_key: str = "data.format") -> List[SourceFile]:
    """The files a source names, sorted; a source that names none is an error. `key` and
    `format_key` are what the errors tell the user to fix: the config's keys, or the
    command's own arguments (`gpupipe init DATA --format`, `gpupipe predict --data`)."""
    if synthetic.is_synthetic(source):
        synthetic.parse_source(source)
        return [SourceFile(source, 0, "synthetic")]
    one = None if storage.GLOB_CHARS.search(source) else storage.stat(source)
    if storage.GLOB_CHARS.search(source):
        entries = storage.glob(source)
        what = "matches no objects" if storage.is_remote(source) else "matches no files"
    elif one is not None:
        entries = [one]
        what = ""
    else:  # a directory or prefix: the files under it
        entries = storage.list_prefix(source)
        if not entries and not storage.is_remote(source) and not os.path.isdir(source):
            example = os.path.basename(source.rstrip("/"))
            hint = (f", or make the example image folder: gpupipe examples {example} {source}"
                    if example in images.EXAMPLE_NAMES else "")
            raise GpupipeError(f"{key}: file not found: {source}; fix the path (relative paths start at the "
                               f"working directory){hint}")
        what = "is an empty directory" if not storage.is_remote(source) else "does not exist"
        if entries and (declared_format == "images" or (declared_format == "auto" and
                                                        images.looks_like_image_folder(entries))):
            found, notes = images.image_tree(source, entries, key)
            return SourceFiles([SourceFile(e.uri, e.size, IMAGE_FILE, e.stamp, root=source.rstrip("/"))
                                for e in found], notes)
    if declared_format == "images":
        raise GpupipeError(f"{key}: data.format is images, and {source} is not a folder of class folders "
                           "(ROOT/<class>/*.jpg); point data.source at the folder")
    files = [SourceFile(e.uri, e.size, "", e.stamp) for e in entries if not _hidden(e.uri)]
    if not files:
        raise GpupipeError(f"{key}: {source} {what}; fix {key} (a file, directory, glob or "
                           f"{storage.schemes.named(path='bucket/prefix')})")
    for f in files:
        f.format = detect_format(f.uri, declared_format)
    formats = {f.format for f in files}
    if len(formats) > 1:
        raise GpupipeError(f"{key}: {source} mixes formats ({', '.join(sorted(formats))}); "
                           f"point it at one format or set {format_key}")
    return files


def unique_columns(names: List[str], uri: str) -> List[str]:
    """The names, or a one-line error when one of them is there twice."""
    seen = {}
    for i, name in enumerate(names, start=1):
        if name in seen:
            raise GpupipeError(f"data.source: {uri} has two columns named '{name}' (columns {seen[name]} and {i}); "
                               "rename one in the data")
        seen[name] = i
    return names


def check_later_file(f: SourceFile, columns: List[str], needed: List[str], which: str) -> None:
    """A file after the first that lacks a column the first one has: the file and the column."""
    missing = [c for c in needed if c not in columns]
    if missing:
        names_ = ", ".join(f"'{c}'" for c in missing)
        raise GpupipeError(
            f"data.source: {f.uri} ({which}) has no column {names_} (its columns: {', '.join(columns)}); every file "
            "of a multi-file source needs the label, the features and the split key: add the column to that file, "
            "or leave the file out of data.source")
