"""Rows from Python where a label table goes: a pandas DataFrame, or any
iterable of (path, label) pairs or of dicts ({"path": ..., "label": ...,
other columns}).

They are written as the CSV table the command would read, into a scratch
folder for the run, and converted as that table: the same column picking,
validation, reject reasons, determinism and counts, and shards byte for byte
those of `df.to_csv("t.csv", index=False)` converted with `--label_table t.csv
--image_root ROOT` (tests/e2e/test_api_rows.py). Each value becomes its cell as
pandas writes it (transforms/core/tables.py's python_cell): an empty cell for
None and NaN (a NaN label is a `no_label` reject, as an empty cell is), numbers
as Python prints them, so extra columns are typed as a table's are.

What has no table equivalent is refused before the run, in one line: a path
that is not text (a number in the path column usually means ids that pandas
read as numbers, losing their leading zeros), a DataFrame without a path
column, a dict row with a column the first row lacks.

Paths: with `image_root`, relative paths are relative to it and absolute
paths (or gs:// URIs) below it are made relative to it, as a table's. Without
it, the image root is the deepest folder all the paths share (relative paths
taken from the current folder), as an --input tree's root would be:
`image/filename` holds each path below it.

pandas is imported only by the caller's DataFrame: this module never imports it.
"""
from __future__ import annotations

import contextlib
import csv
import os
import shutil
import tempfile
import uuid
from typing import Iterable, Iterator

from tfrecord_pipelines.transforms.core import tables
from tfrecord_pipelines.transforms.core.errors import UsageError
from tfrecord_pipelines.transforms.core.specs import ROWS_FOLDER_PREFIX as FOLDER_PREFIX

PAIR_COLUMNS = ("path", "label")


def is_rows(value) -> bool:
    """True for rows given from Python (not a path to a table file)."""
    return value is not None and not isinstance(value, (str, bytes, os.PathLike)) and (
        _is_dataframe(value) or hasattr(value, "__iter__"))


def _is_dataframe(value) -> bool:
    return type(value).__name__ == "DataFrame" and hasattr(value, "itertuples") and hasattr(value, "columns")


def describe(rows) -> str:
    """How the manifest and messages name rows given from Python."""
    return "<pandas.DataFrame>" if _is_dataframe(rows) else "<Python rows>"


@contextlib.contextmanager
def as_table(rows, image_root: str = "", path_column: str = "", scratch: str = "",
             allow_empty: bool = False, job_removes: bool = False) -> Iterator[tuple[str, str]]:
    """Writes `rows` as a CSV table in a scratch folder (`scratch`: a folder
    the workers can read, a bucket's or a shared filesystem's, for a remote
    runner, made if missing; default a local temporary folder) and yields
    (table path, image root). The table is removed on leaving, unless
    `job_removes` and the block ends without an error: a detached remote job
    still has to read it, and its Publish step removes it (pipeline.py)."""
    header, body = _columns_and_rows(rows)
    where = describe(rows)
    if not header:
        raise UsageError(f"label_table {where}: no columns (give a path column and a label column, e.g. "
                         "pandas.DataFrame({'path': [...], 'label': [...]}))")
    try:
        path_col = tables.pick_column(header, path_column, tables.PATH_COLUMNS, "path")
    except tables.TableError as e:
        raise UsageError(f"label_table {where}: {e}") from None
    body = list(body)
    if not body and not allow_empty:
        raise UsageError(f"label_table {where} has no rows: nothing to convert")
    paths = [_path_text(where, path_col, r[header.index(path_col)], i) for i, r in enumerate(body)]
    root, paths = relative_paths(paths, image_root)
    index = header.index(path_col)
    cells = ([tables.python_cell(v) for v in r] for r in body)
    local = not scratch
    if local:
        folder = tempfile.mkdtemp(prefix=FOLDER_PREFIX)
    elif "://" in scratch:
        folder = scratch.rstrip("/") + f"/{FOLDER_PREFIX}{uuid.uuid4().hex[:12]}"
    else:  # a shared path: the workers' working folder is not ours
        folder = os.path.join(os.path.abspath(scratch), FOLDER_PREFIX + uuid.uuid4().hex[:12])
        try:
            os.makedirs(folder)
        except OSError as e:
            raise UsageError(f"temp_location {scratch!r}: cannot make the folder for the rows' table there "
                             f"({e.strerror or e}); give a folder the workers can read and this process can "
                             "write") from None
    table = os.path.join(folder, "rows.csv") if "://" not in folder else folder + "/rows.csv"
    try:
        _write(table, header, ([*r[:index], p, *r[index + 1:]] for r, p in zip(cells, paths)))
        yield table, root
    except BaseException:
        _remove(folder, local)
        raise
    if not job_removes:
        _remove(folder, local)


def _remove(folder: str, local: bool) -> None:
    if local:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        from tfrecord_pipelines.transforms.storage import fsutil
        fsutil.delete_tree(folder)


def _columns_and_rows(rows) -> tuple[list, Iterable[list]]:
    """(header, rows of raw values) of a DataFrame, pairs or dicts."""
    if _is_dataframe(rows):
        header = [str(c) for c in rows.columns]
        if len(set(header)) != len(header):
            raise UsageError(f"label_table <pandas.DataFrame>: column names {header} repeat a name")
        return header, _integers_kept(rows).itertuples(index=False, name=None)
    it = iter(rows)
    first = next(it, None)
    if first is None:
        return list(PAIR_COLUMNS), []
    if isinstance(first, dict):
        header = [str(k) for k in first]
        return header, (_dict_row(header, r, i) for i, r in enumerate(_chain(first, it)))
    return list(PAIR_COLUMNS), (_pair(r, i) for i, r in enumerate(_chain(first, it)))


def _chain(first, rest) -> Iterator:
    yield first
    yield from rest


def _integers_kept(df):
    """A column of integers with a missing value is float in pandas (read_csv
    of a column with an empty cell): written as 1.0, 2.0 it would turn class
    ids into regression targets. Such columns are written as integers."""
    import numpy as np
    fixed = {}
    for c in df.columns:
        col = df[c]
        if col.dtype.kind == "f" and col.isna().any():
            known = col.dropna().to_numpy()
            if len(known) and np.all(np.isfinite(known)) and np.all(known == np.floor(known)) \
                    and np.all(np.abs(known) < 2**53):
                fixed[c] = col.astype("Int64")
    return df.assign(**fixed) if fixed else df


def _pair(row, i: int) -> list:
    if isinstance(row, (str, bytes)) or not isinstance(row, (tuple, list)) or len(row) != 2:
        raise UsageError(f"label_table <Python rows>: row {i} is {str(row)[:80]!r}; rows are (path, label) pairs "
                         "or dicts {'path': ..., 'label': ...}")
    return list(row)


def _dict_row(header: list, row, i: int) -> list:
    if not isinstance(row, dict):
        raise UsageError(f"label_table <Python rows>: row {i} is a {type(row).__name__}, the first row a dict; "
                         "give every row as a dict")
    values = {str(k): v for k, v in row.items()}
    extra = [k for k in values if k not in header]
    if extra:
        raise UsageError(f"label_table <Python rows>: row {i} has column {extra[0]!r} that the first row lacks; "
                         f"the first row names the columns ({header})")
    return [values.get(h) for h in header]


def _path_text(where: str, column: str, value, i: int) -> str:
    """A path cell as text, exactly as given (`x/a.jpg ` is not `x/a.jpg`):
    "" (a missing path, rejected as a table's empty cell is) for None or NaN
    or blanks; UsageError for what is not a path."""
    if isinstance(value, str):
        return value if value.strip() else ""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if tables.python_cell(value) == "" and not isinstance(value, (bytes, bool)):
        return ""
    hint = (": a column of ids read by pandas as numbers has lost any leading zeros; read it as text "
            "(pandas.read_csv(..., dtype=str))" if isinstance(value, (int, float)) or type(value).__module__ == "numpy"
            else "")
    raise UsageError(f"label_table {where}: path column {column!r} holds {type(value).__name__} {str(value)[:80]!r} "
                     f"in row {i}; paths are text (str or a path object){hint}")


def relative_paths(paths: list, image_root: str = "") -> tuple[str, list]:
    """(the image root, the paths relative to it where they are below it).
    Without `image_root`: the deepest folder all paths share (relative paths
    taken from the current folder), as an --input tree's root would be."""
    from tfrecord_pipelines.transforms.storage import fsutil
    if image_root:
        root = fsutil.normalize_root(os.fspath(image_root))
        if fsutil.is_local(root):
            root = os.path.abspath(root)
        return root, [tables.under_root(p, root) if p else p for p in paths]
    full = [p if not p or tables.is_absolute(p) else os.path.abspath(p) for p in paths]
    common = tables.common_folder(p for p in full if p)
    if not common:  # no path, or paths with no folder in common (two buckets): relative to here
        return os.getcwd(), paths
    return common, [tables.under_root(p, common) if p else p for p in full]


def scratch_folder(options) -> str:
    """Where a remote runner's workers can read the rows' table: Beam's
    --temp_location; "" (a local temporary folder) for a local run."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    from tfrecord_pipelines.run import runtime
    if runtime.is_local(options):
        return ""
    temp = options.view_as(GoogleCloudOptions).temp_location
    if not temp:
        raise UsageError("rows from Python on a remote runner need temp_location= (a gs:// folder, or a path on "
                         "a filesystem its workers share, that they can read): the rows are written there as a "
                         "table for the run")
    return temp


def job_removes(options, detach: bool) -> bool:
    """Whether the job, not this process, removes the rows' table: a remote
    job the launcher does not wait for (detach), which reads it later."""
    from apache_beam.options.pipeline_options import TestOptions

    from tfrecord_pipelines.run import runtime
    return not runtime.is_local(options) and detach and not options.view_as(TestOptions).dry_run


def _write(path: str, header: list, rows: Iterable[list]) -> None:
    import io
    buf = io.StringIO()
    # every cell quoted: the reader skips blanks before an unquoted cell, and a path is taken as given
    w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    w.writerow(header)
    for r in rows:
        w.writerow(r)
    data = buf.getvalue().encode("utf-8", "surrogateescape")
    if "://" in path:
        from tfrecord_pipelines.transforms.storage import fsutil
        fsutil.write_bytes(path, data)
    else:
        with open(path, "wb") as f:
            f.write(data)


