"""Label tables: CSV/TSV with a header, or JSON Lines; pure parsing helpers."""
from __future__ import annotations

import csv
import io
import json
import posixpath
from typing import Iterable, Iterator, Optional, TextIO

IMAGE_EXTENSIONS = frozenset(
    ".jpg .jpeg .jpe .jfif .png .gif .bmp .webp .tif .tiff .heic .heif .avif".split())
PATH_COLUMNS = ("filename", "file_name", "file", "path", "filepath", "file_path", "image",
                "image_path", "img", "image_name", "id", "image_id", "name")
LABEL_COLUMNS = ("label", "class", "class_name", "category", "target", "labels", "y", "score", "rating", "value")
SPLIT_COLUMNS = ("split", "subset", "fold_name")
TABLE_FORMATS = ("csv", "tsv", "jsonl")


class TableError(ValueError):
    pass


def table_format(path: str) -> str:
    name = path.lower()
    for comp in (".gz", ".bz2", ".zst"):
        if name.endswith(comp):
            name = name[: -len(comp)]
    ext = posixpath.splitext(name)[1]
    fmt = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".txt": "csv",
           ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}.get(ext)
    if fmt is None:
        raise TableError(f"cannot tell the format of label table {path!r} from its extension; "
                         f"use .csv, .tsv or .jsonl")
    return fmt


def text_stream(binary) -> TextIO:
    # utf-8-sig drops a byte-order mark; newline="" lets csv handle CRLF and
    # newlines inside quoted fields.
    return io.TextIOWrapper(binary, encoding="utf-8-sig", newline="")


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, dict)):
        return json.dumps(v, sort_keys=True, ensure_ascii=False)
    return str(v).strip()


def iter_rows(stream: TextIO, fmt: str) -> Iterator[tuple[int, dict]]:
    """(row number from 1, {column: stripped string}) for each data row."""
    if fmt == "jsonl":
        for n, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TableError(f"line {n} is not valid JSON: {e}") from None
            if not isinstance(obj, dict):
                raise TableError(f"line {n} is not a JSON object")
            yield n, {str(k).strip(): _cell(v) for k, v in obj.items()}
        return
    reader = csv.reader(stream, delimiter="\t" if fmt == "tsv" else ",", skipinitialspace=True)
    header = None
    n = 0
    for row in reader:
        if not row or all(not c.strip() for c in row):
            continue
        if header is None:
            header = [c.strip() for c in row]
            continue
        n += 1
        yield n, {k: (row[i].strip() if i < len(row) else "") for i, k in enumerate(header)}


def read_columns(stream: TextIO, fmt: str, sample_rows: int = 1000) -> tuple[list[str], list[dict]]:
    """The column names and the first rows, for checks before the run starts."""
    if fmt == "jsonl":
        rows = []
        cols: dict = {}
        for _, row in iter_rows(stream, fmt):
            rows.append(row)
            cols.update(dict.fromkeys(row))
            if len(rows) >= sample_rows:
                break
        return list(cols), rows
    reader = csv.reader(stream, delimiter="\t" if fmt == "tsv" else ",", skipinitialspace=True)
    header = next((r for r in reader if r and any(c.strip() for c in r)), None)
    if header is None:
        raise TableError("the table is empty (no header row)")
    header = [c.strip() for c in header]
    rows = []
    for row in reader:
        if row and any(c.strip() for c in row):
            rows.append({k: (row[i].strip() if i < len(row) else "") for i, k in enumerate(header)})
            if len(rows) >= sample_rows:
                break
    return header, rows


def pick_column(columns: list[str], wanted: str, candidates: Iterable[str], what: str,
                required: bool = True) -> str:
    """The column to use: `wanted` if given (it must exist), else the first
    known name present (case-insensitive)."""
    if wanted:
        if wanted not in columns:
            raise TableError(f"{what} column {wanted!r} is not in the table; columns are {columns}")
        return wanted
    lower = {c.lower(): c for c in columns}
    for name in candidates:
        if name in lower:
            return lower[name]
    if required:
        raise TableError(f"no {what} column found among {columns}; name it with --{what}_column "
                         f"(looked for {', '.join(candidates)})")
    return ""


class UnsafePath(ValueError):
    pass


def resolve_path(raw: str, root: str, allow_absolute: bool) -> tuple[str, str]:
    """(rel, path) for a path cell: relative paths are confined to `root`;
    absolute paths, URLs and `..` escapes are refused unless allowed."""
    if "\x00" in raw:
        raise UnsafePath("path contains a NUL character")
    if "://" in raw or raw.startswith("/") or (len(raw) > 2 and raw[1] == ":" and raw[2] in "/\\"):
        if not allow_absolute:
            raise UnsafePath(f"{raw!r} is absolute or names another location; table paths must be "
                             "relative to --image_root (or pass --allow_absolute_paths)")
        return raw, raw
    norm = posixpath.normpath(raw)
    if norm == ".." or norm.startswith("../"):
        raise UnsafePath(f"{raw!r} escapes the image root")
    if norm == ".":
        raise UnsafePath(f"{raw!r} names the image root itself, not a file")
    return norm, root.rstrip("/") + "/" + norm


def has_image_extension(rel: str) -> bool:
    return posixpath.splitext(rel)[1].lower() in IMAGE_EXTENSIONS


def strip_extension(rel: str) -> Optional[str]:
    base, ext = posixpath.splitext(rel)
    return base if ext.lower() in IMAGE_EXTENSIONS else None
