"""Label tables: parsing quirks and path safety (pure functions)."""
import io

import pytest

from tfrecord_pipelines.transforms.core import tables


def rows(text: str, fmt: str = "csv"):
    stream = tables.text_stream(io.BytesIO(text.encode("utf-8")))
    return list(tables.iter_rows(stream, fmt))


def test_bom_crlf_quotes_spaces_and_blank_lines():
    text = '\ufefffilename,label,note\r\n"a, b.jpg", cat ,"line1\nline2"\r\n\r\n  c.jpg,  6.5 ,\r\n'
    got = rows(text)
    assert got == [(1, {"filename": "a, b.jpg", "label": "cat", "note": "line1\nline2"}),
                   (2, {"filename": "c.jpg", "label": "6.5", "note": ""})]


def test_space_after_comma_as_in_regression_tables():
    got = rows("id,score\n0000971160_1, 6.094467065223975\n")
    assert got[0][1] == {"id": "0000971160_1", "score": "6.094467065223975"}


def test_tsv_and_jsonl():
    assert rows("path\tlabel\nx.jpg\tdog\n", "tsv")[0][1] == {"path": "x.jpg", "label": "dog"}
    got = rows('{"file": "x.jpg", "label": 3, "w": 1.5}\n\n{"file": "y.jpg", "label": "b"}\n', "jsonl")
    assert got == [(1, {"file": "x.jpg", "label": "3", "w": "1.5"}), (3, {"file": "y.jpg", "label": "b"})]
    with pytest.raises(tables.TableError, match="line 1"):
        rows("not json\n", "jsonl")


def test_formats_from_names():
    assert tables.table_format("gs://b/x/labels.csv.gz") == "csv"
    assert tables.table_format("a.TSV") == "tsv" and tables.table_format("a.jsonl") == "jsonl"
    with pytest.raises(tables.TableError, match="extension"):
        tables.table_format("labels.parquet")


def test_column_choice():
    assert tables.pick_column(["Filename", "Label"], "", tables.PATH_COLUMNS, "path") == "Filename"
    with pytest.raises(tables.TableError, match="columns are"):
        tables.pick_column(["a", "b"], "nope", tables.PATH_COLUMNS, "path")
    with pytest.raises(tables.TableError, match="--path_column"):
        tables.pick_column(["a", "b"], "", tables.PATH_COLUMNS, "path")


@pytest.mark.parametrize("raw", ["../../etc/passwd", "a/../../x.jpg", "/etc/passwd", "gs://other-bucket/x.jpg",
                                 "C:\\data\\x.jpg", "file:///etc/passwd", "."])
def test_paths_escaping_the_root_are_unsafe(raw):
    with pytest.raises(tables.UnsafePath):
        tables.resolve_path(raw, "/data/images", allow_absolute=False)


def test_relative_paths_are_confined_and_normalised():
    assert tables.resolve_path("./a/../b/x.jpg", "/data/images", False) == ("b/x.jpg", "/data/images/b/x.jpg")
    assert tables.resolve_path("x [1].jpg", "gs://bkt/imgs", False) == ("x [1].jpg", "gs://bkt/imgs/x [1].jpg")
    assert tables.resolve_path("/abs/x.jpg", "/data", True) == ("/abs/x.jpg", "/abs/x.jpg")


def test_extension_detection_for_ids():
    assert tables.has_image_extension("a/b.JPG") and not tables.has_image_extension("0000971160_1")
    assert tables.strip_extension("a/b.png") == "a/b" and tables.strip_extension("a/b.txt") is None


@pytest.mark.parametrize("header,fmt,sep", [
    ("filename,label", "csv", ","), ("filename;label", "csv", ";"), ("filename\tlabel", "csv", "\t"),
    ("filename|label", "csv", "|"), ("filename", "csv", ","), ("filename\tlabel", "tsv", "\t"),
    ("filename,label", "tsv", ","), ("file;name,label", "csv", ","), ("filename;label|x", "csv", ","),
])
def test_the_delimiter_comes_from_the_header_line(header, fmt, sep):
    assert tables.sniff_delimiter(header + "\n", fmt) == sep


def test_a_semicolon_table_after_blank_lines_keeps_its_line_numbers():
    assert rows("\n\nfilename;label\na.jpg; cat\n\nb.jpg;dog\n") == [
        (1, {"filename": "a.jpg", "label": "cat"}), (2, {"filename": "b.jpg", "label": "dog"})]
    _, got = tables.open_rows(tables.text_stream(io.BytesIO(b"\nfilename;label\na.jpg;cat\n")), "csv")
    assert [n for n, _ in got] == [3]


def test_a_csv_path_cell_is_stripped_and_its_written_form_kept_aside():
    text = 'path,label\nx/a.jpg  , cat \n" x/b.jpg",dog\nx/c.jpg,cat\n   ,cat\n'
    _, got = tables.open_rows(tables.text_stream(io.BytesIO(text.encode())), "csv", exact=("path",))
    padded: dict = {}
    got = list(tables.strip_path_cells(got, "path", padded))
    assert [row["path"] for _, row in got] == ["x/a.jpg", "x/b.jpg", "x/c.jpg", ""]
    assert [row["label"] for _, row in got] == ["cat", "dog", "cat", "cat"]
    assert padded == {2: "x/a.jpg  ", 3: " x/b.jpg"}  # a blank cell is a missing path, not a padded one
