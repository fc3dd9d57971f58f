"""The reads a run's config needs, in one step before the options are parsed
(parse.py reads nothing): whether --input is a folder and its top folders, a
label table's header and first rows, a --file_list's root and top folders,
what --annotations holds (its format, its image folders, YOLO's class names),
the version LATEST names and its manifest (--versioned), and the text of a
--label_map. A bad path is a UsageError here, worded as the option's own.

During a Dataflow dry run a remote path is not read (pipelines/run/offline.py):
its field stays None and the parse assumes what the flags name.
"""
from __future__ import annotations

import os
from typing import Optional

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfrecord_pipelines.options import parse
from tfrecord_pipelines.options.parse import Resolved  # noqa: F401 (what resolve() returns, offered here)
from tfrecord_pipelines.outputs import versions
from tfrecord_pipelines.run import offline
from tfrecord_pipelines.transforms.core import provenance, tables
from tfrecord_pipelines.transforms.core.errors import UsageError
from tfrecord_pipelines.transforms.storage import confined, copy_trust, fsutil


def resolve(values, rows: bool = False) -> Resolved:
    """Every read the config of `values` needs (`rows`: the inputs are a
    pipeline's rows, not a flag); UsageError for an input that is not there."""
    o = parse.door(values, rows)
    found: dict = {}
    if rows:
        pass
    elif o.annotations:
        found["annotations"] = _annotations(o)
    elif o.file_list:
        from tfrecord_pipelines.options.file_list import read_listing
        found["listing"] = read_listing(o)
    elif o.input:
        found["subdirs"] = _subdirs(o)
    else:
        found["table_head"] = _table_head(o)
    if o.versioned:
        found.update(_latest(o))
    if o.label_map:
        found["label_map_text"] = _label_map_text(o.label_map)
    return Resolved(**found)


def _annotations(o) -> tuple:
    from tfrecord_pipelines.options.annotation_input import AnnotationUsageError, annotation_input
    try:
        return annotation_input(o)
    except AnnotationUsageError as e:
        raise UsageError(str(e)) from None


def _subdirs(o) -> Optional[tuple]:
    root = fsutil.normalize_root(o.input)
    if offline.skip(root, f"--input {o.input}: that it exists and holds images, and whether its top "
                    "folders are split folders (the job was built as if not, unless --split folders)"):
        return None
    if not fsutil.is_dir(root):
        raise UsageError(_not_a_folder(o.input, root))
    return tuple(d for d in fsutil.list_subdirs(root) if not d.startswith("."))


def _not_a_folder(given: str, root: str) -> str:
    """Why --input is not a folder of images: a label table given as --input
    is pointed to --label_table."""
    try:
        is_file = os.path.isfile(root) if fsutil.is_local(root) else FileSystems.exists(root)
    except Exception:  # e.g. a bucket we may not read: say what we know
        is_file = False
    if not is_file:
        return f"--input {given!r}: no such folder (or it holds no files)"
    try:
        tables.table_format(root)
    except tables.TableError:
        return (f"--input {given!r} is a file, not a folder: --input takes the folder that holds the images "
                "(root/<class>/<image>)")
    return (f"--input {given!r} is a file, not a folder of images: for a label table use --label_table "
            f"{given} (its paths are relative to its folder, or to --image_root)")


def _table_head(o) -> Optional[tuple]:
    table = fsutil.normalize_root(o.label_table)
    fmt, encoding = parse.table_format(o, table)
    if offline.skip(table, f"--label_table {o.label_table}: that it exists, and its header (the job was built "
                    "with the columns --path_column, --label_column, --split_column and --extra_columns name, "
                    "else 'filename' and 'label')"):
        return None
    bad: list = []
    columns, sample = _read_table_head(table, fmt, encoding, bad)
    return columns, sample, bad


def _read_table_head(path: str, fmt: str, encoding: str, bad: Optional[list] = None) -> tuple[list, list]:
    if not FileSystems.exists(path):
        raise UsageError(f"--label_table {path!r}: no such file")
    if fsutil.is_local(path) and os.path.isdir(path):
        raise UsageError(f"--label_table {path!r} is a folder, not a table file (for a folder of images use --input)")
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.AUTO) as f:
            return tables.read_columns(tables.text_stream(f, encoding), fmt, bad=bad)
    except (tables.TableError, UnicodeError) as e:
        raise UsageError(f"--label_table {path!r}: {e}") from None
    except (OSError, EOFError) as e:  # unreadable, or a damaged .gz
        raise UsageError(f"--label_table {path!r} cannot be read: {getattr(e, 'strerror', None) or e}") from None


def _latest(o) -> dict:
    root = fsutil.normalize_root(o.output)
    if offline.skip(o.output, f"--output {o.output}: which version LATEST names (the job was built as "
                    "a first version, with no label map carried over)"):
        return {}
    try:
        latest = versions.read_latest(root)
    except ValueError as e:
        return {"latest_error": str(e), "latest_named": versions.latest_name(root) if o.full else ""}
    return {"latest": latest, **_previous(root, *latest)}


def _previous(root: str, name: str, manifest) -> dict:
    """What the run may copy from the version LATEST names: the first of its parts (its provenance folder, a
    shard, a provenance file) that is a link out of it (records are copied from a version only where it lies),
    and the version with what a run on this machine pinned of it (transforms/storage/copy_trust.py)."""
    if not name or not isinstance(manifest, dict):
        return {}
    try:
        prev = provenance.previous_version(manifest, name, fsutil.join(root, name))
    except (provenance.ProvenanceError, KeyError, TypeError, AttributeError):
        return {}  # not a version to copy from: parse says why it converts in full
    if prev is None:
        return {}
    out_of = confined.link_out(prev.folder, [provenance.FOLDER, *(n for s in prev.shards for n in (
        s.name, provenance.provenance_name(s.name)))], root)
    return {"latest_link_out": out_of, "latest_pinned": None if out_of else copy_trust.with_pins(prev)}


def _label_map_text(path: str) -> Optional[str]:
    if offline.skip(path, f"--label_map {path}: that it can be read (the job was built with an empty map)"):
        return None
    try:
        return fsutil.read_bytes(path).decode("utf-8-sig")
    except Exception as e:
        raise UsageError(f"--label_map {path!r} cannot be read: {e}") from None
