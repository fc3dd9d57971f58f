"""Label tables: CSV/TSV with a header, or JSON Lines; pure parsing helpers.

What one row can cost is bounded: a physical line over MAX_LINE characters, a
cell over MAX_CELL, or a row over MAX_COLUMNS cells is a BadRow (rejected as
`bad_row` with its line number), as is a line that does not decode in the
table's encoding or a JSON Lines line that is not a JSON object. A bad row
never stops the table: the rows after it are read (unless the decoder itself
cannot go on, e.g. UTF-16 cut mid-character: that last BadRow says so).
"""
from __future__ import annotations

import codecs
import csv
import io
import itertools
import json
import os
import posixpath
import re
from typing import Iterable, Iterator, NamedTuple, Optional, TextIO

from tfrecord_pipelines.transforms.core.errors import ConversionError

IMAGE_EXTENSIONS = frozenset(
    ".jpg .jpeg .jpe .jfif .png .gif .bmp .webp .tif .tiff .heic .heif .avif".split())
PATH_COLUMNS = ("filename", "file_name", "file", "path", "filepath", "file_path", "image",
                "image_path", "img", "image_name", "id", "image_id", "name")
LABEL_COLUMNS = ("label", "class", "class_name", "category", "target", "labels", "y", "score", "rating", "value")
SPLIT_COLUMNS = ("split", "subset", "fold_name")
TABLE_FORMATS = ("csv", "tsv", "jsonl")
# --file_list: one path or URI per line, no header (what `gcloud storage ls -r` prints); its one column:
LIST_FORMAT, LIST_COLUMN = "list", "path"


MAX_LINE = 1 << 20      # characters in one physical line
MAX_CELL = 1 << 20      # characters in one cell (csv's own default limit is 128 KiB)
MAX_COLUMNS = 1000      # columns of the header, cells of a row, keys of a JSON object
SAMPLE_CHARS = 16 << 20  # what the checks before the run read at most
_BAD = "\x00tfrecords-bad-line\x00"  # stands in for a line that could not be read
_SURROGATE = re.compile("[\udc80-\udcff]")  # bytes that did not decode (surrogateescape)


# The cap is ours (MAX_CELL, a bad_row); csv's default of 128 KiB would be raised for the whole table.
csv.field_size_limit(MAX_CELL)


class TableError(ConversionError, ValueError):
    pass


class BadRow(NamedTuple):
    detail: str


def check_encoding(name: str) -> str:
    """The codec name for --table_encoding, or TableError."""
    try:
        codecs.lookup(name)
    except LookupError:
        raise TableError(f"--table_encoding {name!r} is not an encoding Python knows; use e.g. utf-8, latin-1, "
                         "cp1252, utf-16") from None
    return name


def open_text(binary, encoding: str = "utf-8") -> TextIO:
    """Text from the table's bytes. Undecodable bytes are kept as surrogates
    (and make their row a BadRow) instead of failing the whole read; a UTF-8
    byte-order mark is dropped."""
    if codecs.lookup(encoding).name == "utf-8":
        encoding = "utf-8-sig"
    if not hasattr(binary, "writable"):  # Beam's CompressedFile (.gz tables) is not a full io object
        binary = io.BufferedReader(_ReadOnly(binary))
    return io.TextIOWrapper(binary, encoding=encoding, errors="surrogateescape", newline="")


class _ReadOnly(io.RawIOBase):
    """The raw-stream interface TextIOWrapper needs, over an object that only reads."""

    def __init__(self, f):
        super().__init__()
        self._f = f

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        data = self._f.read(len(buf))
        buf[:len(data)] = data
        return len(data)


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


def text_stream(binary, encoding: str = "utf-8") -> TextIO:
    # newline="" lets csv handle CRLF and newlines inside quoted fields.
    return open_text(binary, encoding)


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


def _lines(stream: TextIO, bad: dict, start: int = 0) -> Iterator[str]:
    """Physical lines, each at most MAX_LINE characters; a line that is too
    long or does not decode is replaced by a marker, its reason kept in `bad`
    by line number."""
    n = start
    while True:
        try:
            line = _readline(stream, MAX_LINE + 1, n + 1)
        except _Undecodable as e:  # the last row: its BadRow says why the rest is not read
            bad[n + 1] = str(e)
            yield _BAD + "\n"
            return
        if not line:
            return
        n += 1
        if len(line) > MAX_LINE and not line.endswith(("\n", "\r")):
            size = len(line)
            while True:  # skip the rest of the line without holding it
                try:
                    more = _readline(stream, MAX_LINE, n)
                except _Undecodable:
                    more = ""
                size += len(more)
                if not more or more.endswith(("\n", "\r")):
                    break
            bad[n] = f"line {n} has {size:,} characters or more, above the limit of {MAX_LINE:,}"
            yield _BAD + "\n"
        elif _SURROGATE.search(line):
            encoding = stream.encoding.replace("utf-8-sig", "utf-8")
            bad[n] = f"line {n} is not valid {encoding} text (pass --table_encoding, e.g. latin-1)"
            yield _BAD + "\n"
        else:
            yield line


class _Undecodable(Exception):
    pass


def _readline(stream: TextIO, limit: int, n: int) -> str:
    # Invalid bytes become surrogates (a BadRow), but some decoders fail as a
    # whole (UTF-16 without a BOM, a cut code unit at the end): nothing after
    # that point can be decoded.
    try:
        return stream.readline(limit)
    except UnicodeError as e:
        raise _Undecodable(f"line {n} is not valid {stream.encoding} text ({e}), and nothing after it can be "
                           "read; pass the right --table_encoding") from None


DELIMITERS = (",", ";", "\t", "|")


def sniff_delimiter(header_line: str, fmt: str) -> str:
    """The cell delimiter of a CSV/TSV table, from its header line: the
    format's own (`,` for .csv, TAB for .tsv) when the header holds it, else
    the one other of `, ; TAB |` it holds (a `;` table is what a spreadsheet
    set to a comma-decimal locale saves as .csv). A header holding none, or
    several, keeps the format's: one column, or a header that
    pick_column's message shows as it was read (delimiter_hint)."""
    own = "\t" if fmt == "tsv" else ","
    if _BAD in header_line or own in header_line:
        return own
    others = [d for d in DELIMITERS if d != own and d in header_line]
    return others[0] if len(others) == 1 else own


def delimiter_hint(columns: list) -> str:
    """What a header read as one cell (or cells holding a delimiter) suggests:
    a table separated by a character other than the one it was read with."""
    held = [d for d in DELIMITERS if any(d in c for c in columns)]
    if not held:
        return ""
    shown = " and ".join("TAB" if d == "\t" else repr(d) for d in held)
    return (f". Its header cells {columns[:4]} hold {shown}: a table is split at the delimiter of its format "
            "(',' for .csv, TAB for .tsv) when the header line holds it, else at the one other of , ; TAB | "
            "it holds; save the table with one delimiter, e.g. filename;label")


def open_rows(stream: TextIO, fmt: str, exact: tuple = ()) -> tuple[list, Iterator[tuple]]:
    """(header, rows): the CSV/TSV header (the first non-blank row; [] for
    JSON Lines), and (line number, {column: stripped string} or BadRow) for
    each data row after it. The cells of the `exact` columns (the path
    column: `x/a.jpg ` and `x/a.jpg` may both exist) are kept as written."""
    if fmt == "jsonl":
        return [], _iter_jsonl(stream, exact)
    if fmt == LIST_FORMAT:
        return [LIST_COLUMN], _iter_list(stream)
    bad: dict = {}
    lines = _lines(stream, bad)
    before = []  # the blank lines before the header, and the header line
    for line in lines:
        before.append(line)
        if line.strip():
            break
    delimiter = sniff_delimiter(before[-1] if before else "", fmt)
    counter = _Counting(itertools.chain(before, lines))
    reader = csv.reader(counter, delimiter=delimiter, skipinitialspace=True)
    rows = _csv_rows(reader, counter, bad)
    for n, row in rows:
        if isinstance(row, BadRow):
            raise TableError(f"the header row cannot be read: {row.detail}")
        header = [c.strip() for c in row]
        if len(header) > MAX_COLUMNS:
            raise TableError(f"the header has {len(header):,} columns; at most {MAX_COLUMNS:,} are allowed")
        twice = sorted({c for c in header if c and header.count(c) > 1})
        if twice:  # which of the two cells would be the label?
            raise TableError(f"the header names column(s) {twice} more than once; give each column its own name")
        return header, _with_header(rows, header, exact)
    raise TableError("the table is empty (no header row)")


def _csv_rows(reader, counter: "_Counting", bad: dict) -> Iterator[tuple]:
    """(first line, [cells] or BadRow) for each non-blank CSV record."""
    last = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            first, last = last + 1, counter.n
            limit = f" (a cell is limited to {MAX_CELL:,} characters)" if "field limit" in str(e) else ""
            yield first, BadRow(f"line {first}: {e}{limit}")
            continue
        first, last = last + 1, counter.n
        if not row or all(not c.strip() for c in row):
            continue
        if any(_BAD in c for c in row):
            yield first, BadRow(next((bad[k] for k in range(first, last + 1) if k in bad), f"line {first}"))
            continue
        yield first, row


def _with_header(rows: Iterator[tuple], header: list, exact: tuple = ()) -> Iterator[tuple]:
    kept = [k in exact for k in header]
    for n, row in rows:
        if isinstance(row, BadRow):
            yield n, row
        elif len(row) > MAX_COLUMNS:
            yield n, BadRow(f"line {n} has {len(row):,} cells, above the limit of {MAX_COLUMNS:,}")
        else:
            yield n, {k: ((row[i] if kept[i] else row[i].strip()) if i < len(row) else "")
                      for i, k in enumerate(header)}


def strip_path_cells(rows: Iterator[tuple], path_column: str, padded: dict) -> Iterator[tuple]:
    """open_rows' rows with the path cell stripped, as every other CSV cell is;
    `padded` gets {line: the cell as written} for each cell that lost white
    space (which may yet name a file of its own: list_inputs.padded_path_check)."""
    for n, row in rows:
        if isinstance(row, dict):
            cell = row.get(path_column, "")
            if cell != cell.strip():
                row[path_column] = cell.strip()
                if row[path_column]:
                    padded[n] = cell
        yield n, row


class _Counting:
    """An iterator of lines that counts them (csv reads ahead over quoted newlines)."""

    def __init__(self, lines: Iterator[str]):
        self._lines, self.n = lines, 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.n += 1
        return line


def _iter_jsonl(stream: TextIO, exact: tuple = ()) -> Iterator[tuple]:
    bad: dict = {}
    for n, line in enumerate(_lines(stream, bad), 1):
        if n in bad:
            yield n, BadRow(bad[n])
            continue
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, an integer of more than 4,300 digits
            yield n, BadRow(f"line {n} is not valid JSON: {e}")
            continue
        if not isinstance(obj, dict):
            yield n, BadRow(f"line {n} is a JSON {type(obj).__name__}, not an object {{\"column\": value}}")
            continue
        if len(obj) > MAX_COLUMNS:
            yield n, BadRow(f"line {n} has {len(obj):,} keys, above the limit of {MAX_COLUMNS:,}")
            continue
        cells = {str(k).strip(): v if str(k).strip() in exact and isinstance(v, str) else _cell(v)
                 for k, v in obj.items()}
        big = next((k for k, v in cells.items() if len(v) > MAX_CELL), None)
        if big is not None:
            yield n, BadRow(f"line {n}: cell {big!r} has {len(cells[big]):,} characters, above the limit of "
                            f"{MAX_CELL:,}")
            continue
        yield n, cells


def _iter_list(stream: TextIO) -> Iterator[tuple]:
    """A listing's files: each non-blank line is a path, as written (a name
    may hold spaces); the folder lines `gcloud storage ls -r` (and gsutil)
    print, `gs://b/dir/:` and `gs://b/dir/`, are not files."""
    bad: dict = {}
    for n, line in enumerate(_lines(stream, bad), 1):
        if n in bad:
            yield n, BadRow(bad[n])
            continue
        path = line.rstrip("\r\n")
        if not path.strip() or listing_folder(path) is not None or path.endswith("/"):
            continue
        yield n, {LIST_COLUMN: path}


def listing_folder(line: str) -> Optional[str]:
    """The folder a `gcloud storage ls -r` header line names (`gs://b/dir/:`
    gives gs://b/dir), or None for any other line."""
    return line[:-2] if line.endswith("/:") else None


def is_absolute(path: str) -> bool:
    """A URL, a POSIX absolute path or a Windows drive path (what a table may
    name only with --allow_absolute_paths)."""
    return "://" in path or path.startswith("/") or (len(path) > 2 and path[1] == ":" and path[2] in "/\\")


def common_folder(paths: Iterable[str]) -> str:
    """The deepest folder holding every one of `paths` (absolute paths or URIs
    of one scheme and bucket), or "" when there is none (other buckets, a
    mix of local paths and URIs)."""
    common: Optional[list] = None
    for p in paths:
        parts = p.split("/")[:-1]  # the folders, the file name dropped
        if common is None:
            common = parts
            continue
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    if not common or (common[0].endswith(":") and len(common) < 3):  # none, or `gs://` without a bucket
        return ""
    return "/".join(common) or "/"


def under_root(path: str, root: str) -> str:
    """`path` relative to `root` when it names a file below it, else unchanged
    (so that a path outside the root is refused as unsafe, as in any table)."""
    prefix = root.rstrip("/") + "/"
    return path[len(prefix):] if root and path.startswith(prefix) and len(path) > len(prefix) else path


def python_cell(v) -> str:
    """A Python value as the cell `pandas.DataFrame.to_csv` writes for it (and
    the csv reader gives back): None and NaN (pandas' NA, NaT) an empty cell,
    numbers as Python writes them, True/False. Rows given from Python (a
    DataFrame, tuples, dicts, a PCollection) become cells by this one rule."""
    if v is None:
        return ""
    if type(v).__module__ == "numpy" and hasattr(v, "item"):
        v = v.item()  # numpy's scalars as the Python numbers they hold
    if isinstance(v, float) and v != v:
        return ""
    if type(v).__name__ in ("NAType", "NaTType"):
        return ""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return v.strip()
    if hasattr(v, "__fspath__"):
        return os.fspath(v)
    return str(v).strip()


def row_cells(row, path_column: str, label_column: str):
    """A row given by a program ((path, label), or a dict of columns) as a
    table's cells ({column: text}), or a BadRow: the path must be text."""
    if isinstance(row, dict):
        cells = {str(k): v for k, v in row.items()}
    elif isinstance(row, (tuple, list)) and len(row) == 2:
        cells = {path_column: row[0], label_column or "label": row[1]}
    else:
        return BadRow(f"a row is {str(row)[:80]!r}: rows are (path, label) pairs or dicts of columns")
    path = cells.get(path_column)
    if path is not None and not isinstance(path, str) and not hasattr(path, "__fspath__") \
            and python_cell(path) != "":
        return BadRow(f"a row's {path_column!r} is {type(path).__name__} {str(path)[:80]!r}: paths are text")
    # the path exactly as given (`x/a.jpg ` is not `x/a.jpg`); blanks are a missing path
    return {k: (v if v.strip() else "") if k == path_column and isinstance(v, str) else python_cell(v)
            for k, v in cells.items()}


def iter_rows(stream: TextIO, fmt: str) -> Iterator[tuple[int, dict]]:
    """(row number from 1, {column: stripped string}) for each data row
    (JSON Lines: the line number); a bad row raises TableError."""
    _, rows = open_rows(stream, fmt)
    for k, (n, row) in enumerate(rows, 1):
        if isinstance(row, BadRow):
            raise TableError(row.detail)
        yield (n if fmt == "jsonl" else k), row


def read_columns(stream: TextIO, fmt: str, sample_rows: int = 1000,
                 bad: Optional[list] = None) -> tuple[list[str], list[dict]]:
    """The column names and the first good rows (at most `sample_rows`, and
    SAMPLE_CHARS of cells), for checks before the run starts; the bad rows
    among them, (line, BadRow), are added to `bad` if given."""
    header, rows = open_rows(stream, fmt)
    if header:
        looks_like_data = [c for c in header if has_image_extension(c)]
        if looks_like_data:
            raise TableError(f"its first row {header[:4]} looks like data, not a header: {looks_like_data[0]!r} "
                             "is an image file name. Add a header row naming the columns, e.g. filename,label")
    sample: list = []
    cols: dict = dict.fromkeys(header)
    chars = 0
    skipped = 0
    for n, row in rows:
        if isinstance(row, BadRow):
            skipped += 1
            if bad is not None:
                bad.append((n, row))
            if skipped >= sample_rows:  # a table of bad rows is not read whole before the run
                break
            continue  # rejected as bad_row when the run reads it
        sample.append(row)
        if not header:
            cols.update(dict.fromkeys(row))
        chars += sum(len(v) for v in row.values())
        if len(sample) >= sample_rows or chars >= SAMPLE_CHARS:
            break
    if len(cols) > MAX_COLUMNS:
        raise TableError(f"the table has {len(cols):,} columns; at most {MAX_COLUMNS:,} are allowed")
    return list(cols), sample


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


def label_column_of(columns: list[str], path_col: str, split_col: str, wanted: str, label_from: str,
                    regex: str = "") -> str:
    """The label column of a table (or DataFrame) with these columns, or ""
    for an unlabelled one. A known label name wins (pick_column); a table of
    a path and one other column uses that one. Several other columns, none
    known as the label (`filename,species,photographer`), are refused rather
    than read as an unlabelled dataset with the label as a bytes feature: an
    unlabelled dataset is asked for with --label_from none."""
    label_col = pick_column(columns, wanted, LABEL_COLUMNS, "label", required=False)
    if label_col or wanted or label_from not in ("auto", "table") or regex:
        return label_col
    rest = [c for c in columns if c and c not in (path_col, split_col)]
    if len(rest) == 1:
        return rest[0]  # a two-column table: path and label
    if not rest and label_from == "table":
        pick_column(columns, "", LABEL_COLUMNS, "label")  # raises: no label column
    if len(rest) > 1:
        shown = " or ".join(f"--label_column {_flag_value(c)}" for c in rest[:3])
        raise TableError(f"none of its columns {rest[:10]}{' ...' if len(rest) > 10 else ''} besides the path "
                         f"column {path_col!r} is a known label column ({', '.join(LABEL_COLUMNS)}): name the "
                         f"label with {shown}, or pass --label_from none for an unlabelled dataset (the other "
                         "columns are kept as features)")
    return ""


def _flag_value(text: str) -> str:
    """A value as it would be typed after a flag in a shell."""
    return text if re.fullmatch(r"[A-Za-z0-9_./:@%+=-]+", text) else "'" + text.replace("'", "'\\''") + "'"


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
    path = root.rstrip("/") + "/" + norm
    if "://" not in root:
        _confined(raw, path, root)
    return norm, path


def _confined(raw: str, path: str, root: str) -> None:
    """The text stays inside the root; a symlink on the way must too, or a
    link such as root/escape -> / would read /etc/shadow by a relative path."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise UnsafePath(f"{raw!r} leads outside the image root through a symbolic link (to {real!r})")


def has_image_extension(rel: str) -> bool:
    return posixpath.splitext(rel)[1].lower() in IMAGE_EXTENSIONS


def strip_extension(rel: str) -> Optional[str]:
    base, ext = posixpath.splitext(rel)
    return base if ext.lower() in IMAGE_EXTENSIONS else None
