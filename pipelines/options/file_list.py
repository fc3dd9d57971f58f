"""--file_list: a listing of image paths or URIs, one a line (what `gcloud
storage ls -r gs://bucket/images` prints), converted as a folder tree would be:
labels and split folders come from the folders below the root.

It is read inside the pipeline like a label table of one column
(transforms/core/tables.py's "list" format: gcloud's folder lines are
skipped), so its rows get a table's validation, reject reasons and counts.
Before the run, read_listing (in the resolve step, resolve.py) reads it to
find the root the folders count from: --image_root if given, else the folder of the first folder line that
`gcloud storage ls -r` prints when every listed path is below it, else the
deepest folder all listed paths share (or, for relative paths, the
listing's own folder, as for a table). A root that a few stray lines moved
up (all but a few paths in one folder that holds class folders of its own,
one line elsewhere), or paths that share no folder (two buckets), is
refused: --image_root names it.
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


def read_listing(o) -> tuple:
    """(the root folders are counted from, the first folder level below it)
    of --file_list, read from the listing (resolve.py), or UsageError."""
    listing = fsutil.normalize_root(o.file_list)
    if not FileSystems.exists(listing) or (fsutil.is_local(listing) and os.path.isdir(listing)):
        raise UsageError(f"--file_list {o.file_list!r}: no such file (a listing: one image path or gs:// URI a line)")
    encoding = _encoding(o)
    header_root, common = _scan(listing, encoding)
    if o.image_root:
        root = fsutil.normalize_root(o.image_root)
    else:
        root = listing_root(header_root, common, listing)
        if common is not None:
            problem = root_problem(*_root_counts(listing, encoding, "" if common == "" else root))
            if problem:
                raise UsageError(f"--file_list {o.file_list!r}: {problem}")
    return root, frozenset(_top_folders(listing, encoding, root))


def _encoding(o) -> str:
    try:
        return tables.check_encoding(o.table_encoding)
    except tables.TableError as e:
        raise UsageError(str(e)) from None


def list_input(o, root: str, tops: frozenset) -> tuple:
    """(InputSpec, SplitSpec, label source) for --file_list, from what
    read_listing found (no reads here), or UsageError."""
    listing = fsutil.normalize_root(o.file_list)
    encoding = _encoding(o)
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


# Lines outside the folder that holds all the others, up to which they are
# strays (a path pasted from elsewhere) rather than part of the dataset.
def _strays_allowed(n: int) -> int:
    return max(2, n // 100)


def _group(path: str) -> str:
    """The top of a path's tree: `gs://bucket` or `/first-folder`."""
    scheme, sep, rest = path.partition("://")
    if sep:
        return f"{scheme}://{rest.split('/', 1)[0]}"
    return "/" + path.lstrip("/").split("/", 1)[0]


def _root_counts(listing: str, encoding: str, root: str) -> tuple:
    """(root, {folder under it: [paths, its subfolders (up to 2), one path]},
    absolute paths, one path outside every folder). With root "" (the paths
    share none), the folders are the buckets and top folders."""
    tops: dict = {}
    n, loose = 0, ""
    for path in _rows(listing, encoding):
        if not tables.is_absolute(path):
            continue
        n += 1
        if root:
            rel = tables.under_root(path, root)
            top, sep, below = rel.partition("/")
            if not sep or rel == path:
                loose = loose or path
                continue
        else:
            top = _group(path)
            below = path[len(top):].lstrip("/")
        seen = tops.get(top)
        if seen is None:
            if len(tops) >= _TOP_FOLDERS_SEEN:
                return root, {}, n, loose
            seen = tops[top] = [0, set(), path]
        seen[0] += 1
        if "/" in below and len(seen[1]) < 2:
            seen[1].add(below.split("/", 1)[0])
    return root, tops, n, loose


def root_problem(root: str, tops: dict, n: int, loose: str) -> str:
    """Why the folder the paths share is not the root the user would name
    (a few stray lines moved it up, or there is none), or "" when it is."""
    if not tops or (root and all(t.lower() in KNOWN_SPLIT_FOLDERS for t in tops)):  # a tiny split is no stray
        return ""
    top, (count, subfolders, example) = max(tops.items(), key=lambda kv: (kv[1][0], kv[0]))
    outside = n - count
    name = f"{root.rstrip('/')}/{top}" if root else top
    if not root:
        others = next((t for t in sorted(tops) if t != top), "")
        stray = loose or (tops[others][2] if others else "")
        if outside <= _strays_allowed(n) and count > outside:
            return (f"{outside} of its {n:,} paths lie outside {name} (e.g. {stray}), and the paths share no folder: "
                    f"name the root the classes are counted from with --image_root (such as --image_root {name}); "
                    "the lines outside it are then rejected as unsafe_path")
        return (f"its paths share no folder ({count:,} under {name}, {outside:,} elsewhere, e.g. {stray}): name the "
                "root the classes are counted from with --image_root")
    if 0 < outside <= _strays_allowed(n) and count > outside and len(subfolders) >= 2:
        stray = loose or next(v[2] for t, v in sorted(tops.items()) if t != top)
        return (f"{outside} of its {n:,} paths lie outside {name} (e.g. {stray}): counted from the folder they share, "
                f"{root}, every record under {name} would be labelled {top!r}; name the root with --image_root "
                f"(such as --image_root {name}, the lines outside it then rejected as unsafe_path, or --image_root "
                f"{root} to count from there)")
    return ""


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
