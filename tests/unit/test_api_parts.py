"""The pure parts of the Python API and of rows from Python: Python values as
flag text and as table cells, a listing's lines, the root paths share."""
from __future__ import annotations

import io
import os
import pathlib

import numpy as np
import pytest

from tfrecord_pipelines.options.keywords import text
from tfrecord_pipelines.transforms.core import tables


@pytest.mark.parametrize("value, flag_text", [
    (16, "16"), ("auto", "auto"), (0.8, "0.8"), (["*.jpg", "*.png"], "*.jpg,*.png"), (("a", "b"), "a,b"),
    ({"train": 0.8, "validation": 0.2}, "train=0.8,validation=0.2"), ({"train": 16, "validation": 2},
                                                                        "train=16,validation=2"),
    ({"image/encoded": "img", "image/filename": ""}, "image/encoded=img,image/filename="),
    (pathlib.Path("/data/images"), "/data/images"), ({"b", "a"}, "a,b"),
])
def test_python_values_as_flag_text(value, flag_text):
    assert text(value) == flag_text


@pytest.mark.parametrize("value, cell", [
    (None, ""), (float("nan"), ""), (np.float64("nan"), ""), (3, "3"), (np.int64(3), "3"), (0.1, "0.1"),
    (1e20, "1e+20"), (3.0, "3.0"), (np.float32(0.5), "0.5"), (True, "True"), (np.bool_(False), "False"),
    ("  cat ", "cat"), (pathlib.Path("a/b.jpg"), "a/b.jpg"), (float("inf"), "inf"),
])
def test_python_values_as_the_cells_pandas_writes(value, cell):
    assert tables.python_cell(value) == cell


def test_pandas_na_and_nat_are_empty_cells():
    import pandas as pd
    assert tables.python_cell(pd.NA) == "" and tables.python_cell(pd.NaT) == ""
    # the cells of a DataFrame's to_csv, for the same values
    df = pd.DataFrame({"x": [0.1, 1e20, 3.0, float("nan")], "y": [1, 2, 3, 4], "z": [True, False, None, "a"]})
    rows = [line.split(",") for line in df.to_csv(index=False).splitlines()[1:]]
    assert rows == [[tables.python_cell(v) for v in r] for r in df.itertuples(index=False, name=None)]


@pytest.mark.parametrize("paths, folder", [
    (["gs://b/x/cat/1.jpg", "gs://b/x/dog/2.jpg"], "gs://b/x"), (["gs://b/1.jpg", "gs://b/2.jpg"], "gs://b"),
    (["gs://a/1.jpg", "gs://b/2.jpg"], ""), (["/d/a/1.jpg", "/d/b/2.jpg"], "/d"), (["/1.jpg"], "/"),
    (["/d/1.jpg", "gs://e/2.jpg"], ""), (["/d/x/1.jpg", "/d/xy/2.jpg"], "/d"), ([], ""),
])
def test_common_folder(paths, folder):
    assert tables.common_folder(paths) == folder


def test_under_root_only_strips_a_whole_folder():
    assert tables.under_root("gs://b/x/cat/1.jpg", "gs://b/x") == "cat/1.jpg"
    assert tables.under_root("gs://b/xy/1.jpg", "gs://b/x") == "gs://b/xy/1.jpg"
    assert tables.under_root("/d/1.jpg", "/d/") == "1.jpg"
    assert tables.under_root("cat/1.jpg", "/d") == "cat/1.jpg"


def test_a_listing_as_gcloud_prints_it():
    listing = ("gs://b/images/:\ngs://b/images/cat/:\ngs://b/images/cat/1.jpg\ngs://b/images/cat/a b.jpg\n\n"
               "gs://b/images/dog/:\ngs://b/images/dog/\ngs://b/images/dog/2.jpg\r\n")
    header, rows = tables.open_rows(io.StringIO(listing, newline=""), tables.LIST_FORMAT)
    assert header == ["path"]
    assert [(n, r["path"]) for n, r in rows] == [(3, "gs://b/images/cat/1.jpg"), (4, "gs://b/images/cat/a b.jpg"),
                                                (8, "gs://b/images/dog/2.jpg")]
    assert tables.listing_folder("gs://b/images/:") == "gs://b/images"
    assert tables.listing_folder("gs://b/images/1.jpg") is None


def test_a_programs_rows_as_cells():
    assert tables.row_cells(("cat/1.jpg", 3), "path", "label") == {"path": "cat/1.jpg", "label": "3"}
    assert tables.row_cells({"path": "a.jpg", "label": None, "w": np.int64(2)}, "path", "label") == \
        {"path": "a.jpg", "label": "", "w": "2"}
    assert isinstance(tables.row_cells({"path": 3, "label": "x"}, "path", "label"), tables.BadRow)
    assert isinstance(tables.row_cells(("a.jpg",), "path", "label"), tables.BadRow)
    assert tables.row_cells({"path": None}, "path", "label") == {"path": ""}  # a missing path: a table's empty cell


def test_the_image_root_of_rows(tmp_path, monkeypatch):
    from tfrecord_pipelines.api.rows import relative_paths
    monkeypatch.chdir(tmp_path)
    assert relative_paths(["images/cat/1.jpg", "images/dog/2.jpg"]) == \
        (str(tmp_path / "images"), ["cat/1.jpg", "dog/2.jpg"])
    assert relative_paths(["/d/cat/1.jpg", "", "/d/dog/2.jpg"]) == ("/d", ["cat/1.jpg", "", "dog/2.jpg"])
    assert relative_paths(["gs://a/1.jpg", "gs://b/2.jpg"]) == (os.getcwd(), ["gs://a/1.jpg", "gs://b/2.jpg"])
    assert relative_paths(["/d/cat/1.jpg", "cat/2.jpg", "/e/3.jpg"], "/d") == \
        ("/d", ["cat/1.jpg", "cat/2.jpg", "/e/3.jpg"])  # outside the root: an unsafe_path reject, as in a table


def test_resize_keywords_take_their_choices_from_python():
    from tfrecord_pipelines.options.keywords import split_keywords
    from tfrecord_pipelines.transforms.core.errors import UsageError
    ours, _ = split_keywords("convert", {"resize_longest_side": 64, "resize_filter": "BICUBIC", "resize_png": "jpeg",
                                         "resize_smart": None}, ())
    assert (ours.resize_filter, ours.resize_png, ours.resize_smart) == ("bicubic", "jpeg", None)
    with pytest.raises(UsageError, match=r"resize_filter='cubic': invalid choice: 'cubic' \(choose from 'lanczos'"):
        split_keywords("convert", {"resize_filter": "cubic"}, ())
