"""--file_list: a listing of image paths or URIs, one a line (what `gcloud
storage ls -r gs://bucket/images` prints), converted as a folder tree would be:
labels and split folders come from the folders below the root.

It is read inside the pipeline like a label table of one column
(transforms/core/tables.py's "list" format: gcloud's folder lines are
skipped), so its rows get a table's validation, reject reasons and counts.
Here, before the run, it is read once to find the root the folders count
from: --image_root if given, else the folder of the first folder line that
`gcloud storage ls -r` prints when every listed path is below it, else the
deepest folder all listed paths share (or, for relative paths, the
listing's own folder, as for a table).
"""
from __future__ import annotations

import os
import posixpath

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfrecord_pipelines.options.split_flag import parse_split, refuse_split_folders_as_classes
from tfrecord_pipelines.transforms.core import tables
from tfrecord_pipelines.transforms.core.errors import UsageError
from tfrecord_pipelines.transforms.core.specs import KNOWN_SPLIT_FOLDERS, InputKind, InputSpec, SplitSource
from tfrecord_pipelines.transforms.storage import fsutil

_TOP_FOLDERS_SEEN = 1000  # more distinct top folders than this are classes, not splits


def list_input(o) -> tuple:
    """(InputSpec, SplitSpec, label source) for --file_list, or UsageError."""
    listing = fsutil.normalize_root(o.file_list)
    if not FileSystems.exists(listing) or (fsutil.is_local(listing) and os.path.isdir(listing)):
        raise UsageError(f"--file_list {o.file_list!r}: no such file (a listing: one image path or gs:// URI a line)")
    try:
        encoding = tables.check_encoding(o.table_encoding)
    except tables.TableError as e:
        raise UsageError(str(e)) from None
    header_root, common = _scan(listing, encoding)
    root = fsutil.normalize_root(o.image_root) if o.image_root else listing_root(header_root, common, listing)
    tops = _top_folders(listing, encoding, root)
    split_folders = bool(tops) and all(d.lower() in KNOWN_SPLIT_FOLDERS for d in tops)
    split = parse_split(o.split, split_folders, False)
    if split.source is SplitSource.COLUMN:
        raise UsageError("--split column needs a --label_table (a listing has no columns)")
    if o.label_from == "table":
        raise UsageError("--label_from table needs a --label_table (a listing has no label column)")
    refuse_split_folders_as_classes(o, sorted(tops), split_folders, split)
    inputs = InputSpec(InputKind.TABLE, root, table=listing, table_format=tables.LIST_FORMAT,
                       table_encoding=encoding, path_column=tables.LIST_COLUMN,
                       allow_absolute_paths=o.allow_absolute_paths,
                       split_folders=split.source is SplitSource.FOLDERS)
    label_from = o.label_from
    if label_from == "auto":
        label_from = "regex" if o.label_regex else "folder"
    return inputs, split, label_from


def listing_root(header_root: str, common, listing: str) -> str:
    """The root folders are counted from (see the module's docstring);
    `common`: the folder the absolute paths share ("" for none, None when no
    path is absolute)."""
    if header_root and (common is None or (common + "/").startswith(header_root.rstrip("/") + "/")):
        return header_root
    if common:
        return common
    return posixpath.dirname(listing) if "://" in listing else os.path.dirname(os.path.abspath(listing))


def _rows(listing: str, encoding: str):
    with FileSystems.open(listing, compression_type=CompressionTypes.AUTO) as f:
        stream = tables.text_stream(f, encoding)
        header, rows = tables.open_rows(stream, tables.LIST_FORMAT)
        for _, row in rows:
            if not isinstance(row, tables.BadRow):
                yield row[tables.LIST_COLUMN]


def _scan(listing: str, encoding: str) -> tuple:
    """(the folder of gcloud's first folder line, or ""; the folder the
    absolute paths share, "" if none, None if no path is absolute)."""
    header = ""
    with FileSystems.open(listing, compression_type=CompressionTypes.AUTO) as f:
        for line in tables.text_stream(f, encoding):
            folder = tables.listing_folder(line.rstrip("\r\n"))
            if folder:
                header = folder
                break
    common = None
    for path in _rows(listing, encoding):
        if tables.is_absolute(path):
            common = tables.common_folder([path] if common is None else [common + "/x", path])
            if not common:
                break
    return header, common


def _top_folders(listing: str, encoding: str, root: str) -> set:
    """The first folder level below the root (split folders, or classes)."""
    tops: set = set()
    for path in _rows(listing, encoding):
        rel = tables.under_root(path, root)
        if tables.is_absolute(rel) or "/" not in rel:
            continue
        tops.add(rel.split("/", 1)[0])
        if len(tops) > _TOP_FOLDERS_SEEN:
            break
    return tops
