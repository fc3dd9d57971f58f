"""Walking an image tree (local or gs://) into records; pure generators.

Names are plain names: `[1]`, `*`, `?`, spaces and non-ASCII characters are
never interpreted. Hidden entries (a leading '.', e.g. `.DS_Store`) and names
not matching --include are skipped and counted, never silently lost; a
symlinked folder that loops back to one of its ancestors is skipped and counted.
A symlink (to a file or a folder) that resolves inside the root is skipped and
counted too: what it names is listed under its own name, and would otherwise
be written twice, under two labels. Links to outside the root are followed.

A gs:// tree is listed in pieces as a local one is (the files directly in the
root, then each top-level "folder" by prefix), so the pieces list in parallel;
each object carries the generation the listing saw, which the reads are
pinned to.
"""
from __future__ import annotations

import collections
import fnmatch
import functools
import os
import re
from typing import Iterator

from tfrecord_pipelines.transforms.core import provenance
from tfrecord_pipelines.transforms.core.records import Rec
from tfrecord_pipelines.transforms.storage import fsutil, gcs

EXCLUDED_HIDDEN = "hidden"
EXCLUDED_PATTERN = "not_included"
EXCLUDED_LOOP = "symlink_loop"
EXCLUDED_ALIAS = "symlink_alias"


def included(name: str, patterns: tuple) -> bool:
    """Case-insensitive shell patterns on the file name (`*.jpg` matches `A.JPG`)."""
    return _matcher(patterns)(name.lower()) is not None


@functools.lru_cache(maxsize=64)
def _matcher(patterns: tuple):
    """One regular expression for all the patterns (fnmatch's translation):
    a match per listed file, not one per pattern."""
    if not patterns:
        return lambda name: None
    return re.compile("|".join(f"(?:{fnmatch.translate(p.lower())})" for p in patterns)).match


def folder_units(root: str, timeout: float = gcs.DEFAULT_TIMEOUT) -> list[str]:
    """The pieces a tree is listed in, in parallel: '' (files directly in the
    root) and each top-level folder. Trees on other object stores than GCS
    are listed in one piece ('*'). `timeout`: --io_timeout, for a bucket."""
    if fsutil.is_local(root):
        # Names that are not valid UTF-8 stay as os.fsdecode made them; the
        # stage carries units as bytes (unit_to_bytes), which Beam can encode.
        return [""] + [d for d in fsutil.list_subdirs(root) if not d.startswith(".")]
    if root.startswith("gs://"):
        return [""] + [d for d in gcs.list_prefixes(root.rstrip("/") + "/", timeout, flag=True)
                       if not d.startswith(".")]
    return ["*"]


def unit_to_bytes(unit: str) -> bytes:
    return unit.encode("utf-8", "surrogateescape")


def unit_from_bytes(unit: bytes) -> str:
    return unit.decode("utf-8", "surrogateescape")


def _accept(name: str, patterns: tuple, counts: collections.Counter) -> bool:
    if name.startswith("."):
        counts[EXCLUDED_HIDDEN] += 1
        return False
    if not included(name, patterns):
        counts[EXCLUDED_PATTERN] += 1
        return False
    return True


def walk_unit(root: str, unit: str, patterns: tuple, counts: collections.Counter, digest=None,
              racy_after_ns: int = 0, racy_digest=None, timeout: float = gcs.DEFAULT_TIMEOUT) -> Iterator[Rec]:
    """Records for one listing unit (see `folder_units`), in sorted order,
    each with its identity (Rec.stamp). With `digest` (a hashlib object),
    each record's path, size and change marker (modification time; on GCS
    the generation) and identity are hashed in that order: the unit's
    fingerprint. The paths of files changed too recently to trust their times
    (provenance.racy, after `racy_after_ns`) go into `racy_digest`, with that
    threshold, so a run never finds them unchanged since the run whose listing
    they were racy to (transforms/core/fingerprint.py, RACY). `timeout`: how
    long a bucket may stay silent (--io_timeout)."""
    if root.startswith("gs://"):
        recs = _walk_gcs(root, unit, patterns, counts, timeout)
    elif not fsutil.is_local(root):
        recs = _walk_remote(root, patterns, counts)
    elif unit == "":
        recs = _walk_top(root, patterns, counts)
    else:
        recs = _walk_local(os.path.join(root, unit), unit, patterns, counts, ancestors=(_dir_id(root),),
                           real_root=os.path.realpath(root))
    for rec, mtime in recs:
        if digest is not None:
            digest.update(f"{rec.rel}\0{rec.size}\0{mtime}\0{provenance.stamp_text(rec.stamp)}\n"
                          .encode("utf-8", "surrogateescape"))
        if racy_digest is not None and provenance.racy(rec.stamp, racy_after_ns):
            racy_digest.update(f"{racy_after_ns}\0{rec.rel}\n".encode("utf-8", "surrogateescape"))
        yield rec


def _walk_local(path: str, rel: str, patterns: tuple, counts: collections.Counter,
                ancestors: tuple, real_root: str) -> Iterator[tuple]:
    ident = _dir_id(path)
    if ident in ancestors:
        counts[EXCLUDED_LOOP] += 1
        return
    ancestors = ancestors + (ident,)
    subdirs = []
    for e in _scandir_sorted(path):
        erel = f"{rel}/{e.name}"
        if _is_dir(e):
            if e.name.startswith("."):
                counts[EXCLUDED_HIDDEN] += 1
            elif _aliases_inside(e, real_root) and _dir_id(e.path) not in ancestors:
                counts[EXCLUDED_ALIAS] += 1
            else:
                subdirs.append((e.path, erel))
        elif _accept(e.name, patterns, counts):
            if _aliases_inside(e, real_root):
                counts[EXCLUDED_ALIAS] += 1
            else:
                yield _local_rec(erel, e)
    for sub_path, sub_rel in subdirs:
        yield from _walk_local(sub_path, sub_rel, patterns, counts, ancestors, real_root)


def _walk_top(root: str, patterns: tuple, counts: collections.Counter) -> Iterator[tuple]:
    """The files directly in the root; hidden top folders (which
    `folder_units` leaves out) are counted here, once."""
    for e in _scandir_sorted(root):
        if _is_dir(e):
            if e.name.startswith("."):
                counts[EXCLUDED_HIDDEN] += 1
        elif _accept(e.name, patterns, counts):
            yield _local_rec(e.name, e)


def _local_rec(rel: str, entry) -> tuple:
    """(Rec with its size and identity, modification time) of a directory entry."""
    try:
        st = entry.stat(follow_symlinks=True)
    except OSError:  # a broken link: listed, and rejected as missing when read
        return Rec(rel=rel, path=entry.path, size=-1), 0
    return Rec(rel=rel, path=entry.path, size=st.st_size, stamp=provenance.local_stamp(st)), st.st_mtime_ns


def _aliases_inside(entry, real_root: str) -> bool:
    """A symlink whose target lies inside the root: its target is listed
    under its own name already. (A broken link is listed, and rejected as
    missing when read.)"""
    if not entry.is_symlink():
        return False
    target = os.path.realpath(entry.path)
    if not os.path.exists(target):
        return False
    return target == real_root or target.startswith(real_root.rstrip(os.sep) + os.sep)


def _walk_gcs(root: str, unit: str, patterns: tuple, counts: collections.Counter,
              timeout: float) -> Iterator[tuple]:
    prefix = root.rstrip("/") + "/"
    if unit == "":
        hidden = sum(1 for d in gcs.list_prefixes(prefix, timeout, flag=True) if d.startswith("."))
        if hidden:  # a count of 0 would be a "not listed: hidden 0" line, and a manifest unlike a local tree's
            counts[EXCLUDED_HIDDEN] += hidden
    listed = gcs.list_objects(prefix if unit == "" else f"{prefix}{unit}/", "/" if unit == "" else None,
                              timeout=timeout, flag=True)
    # The generation, not the time, marks a change in the fingerprint: every
    # rewrite of an object gets a new one.
    objects = ((o.path, o.size, o.generation, o.generation, provenance.gcs_stamp(o.size, o.generation))
               for o in listed)
    return _objects_to_recs(prefix, objects, patterns, counts)


def _walk_remote(root: str, patterns: tuple, counts: collections.Counter) -> Iterator[tuple]:
    prefix = root.rstrip("/") + "/"
    objects = ((path, size, 0, mtime, provenance.mtime_stamp(size, mtime)) for path, size, mtime in fsutil.list_prefix(prefix))
    return _objects_to_recs(prefix, objects, patterns, counts)


def _objects_to_recs(prefix: str, objects, patterns: tuple, counts: collections.Counter) -> Iterator[tuple]:
    """(Rec, change marker) for (path, size, generation, change marker, stamp)
    of each object under `prefix`, skipping hidden and excluded names."""
    for path, size, generation, marker, stamp in objects:
        rel = path[len(prefix):]
        if not rel or rel.endswith("/"):  # folder placeholder objects
            continue
        parts = rel.split("/")
        if any(p.startswith(".") for p in parts[:-1]):
            counts[EXCLUDED_HIDDEN] += 1
            continue
        if _accept(parts[-1], patterns, counts):
            yield Rec(rel=rel, path=path, size=size, generation=generation, stamp=stamp), marker


def _scandir_sorted(path: str) -> list:
    try:
        return sorted(os.scandir(path), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def _is_dir(entry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def _dir_id(path: str) -> tuple:
    st = os.stat(path)
    return st.st_dev, st.st_ino
