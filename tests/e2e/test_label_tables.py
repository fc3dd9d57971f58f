"""Label tables: a bad row anywhere is a `bad_row` reject with its
line number (never a traceback), what a row can cost is bounded, the encoding
can be chosen, and a table without a header or a folder named x.csv is refused."""
import io
import json
import os

import pytest

from conftest import convert, image_bytes, manifest, read_examples, scalar, write
from tfrecord_pipelines.transforms.core import tables


def _rejects(out):
    return [json.loads(x) for x in open(os.path.join(out, "rejects.jsonl"))]


def _images(root, n=3):
    for k in range(n):
        write(os.path.join(root, f"{k}.jpg"), image_bytes(seed=k))


def test_cell_over_128_kib_is_read_and_over_the_cap_is_a_bad_row(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    _images(root)
    big, huge = "x" * 200_000, "y" * (tables.MAX_CELL + 10)
    text = f'file,label,note\n0.jpg,a,"{big}"\n1.jpg,b,"{huge}"\n2.jpg,a,short\n'
    table = write(os.path.join(root, "t.csv"), text.encode())
    assert convert("--label_table", table, "--output", out, "--max_reject_fraction", "1") == 0
    rows = {scalar(r, "image/filename"): r for r in read_examples(out, "train")}
    assert set(rows) == {"0.jpg", "2.jpg"} and scalar(rows["0.jpg"], "note") == big
    (rej,) = _rejects(out)
    assert rej["reason"] == "bad_row" and rej["path"] == "(line 3)" and "limit" in rej["detail"]
    c = manifest(out)["counts"]
    assert c["listed"] == c["written"] + c["rejected"] == 3


def _long_table(bad_line: bytes, fmt: str, n: int = 1100, at: int = 1050) -> bytes:
    """n rows naming missing files (cheap to reject) and one real image; the
    bad line replaces data row `at`, beyond the rows checked before the run."""
    lines = [b"file,label"] if fmt == "csv" else []
    for k in range(n):
        if k == at:
            lines.append(bad_line)
        elif k == 0:
            lines.append(b"0.jpg,a" if fmt == "csv" else b'{"file": "0.jpg", "label": "a"}')
        else:
            name = f"missing_{k}.jpg".encode()
            lines.append(name + b",a" if fmt == "csv" else b'{"file": "' + name + b'", "label": "a"}')
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize("fmt,bad,expect", [
    ("csv", "caf\xe9.jpg,a".encode("latin-1"), "not valid utf-8 text"),
    ("jsonl", b'["not", "an", "object"]', "is a JSON list, not an object"),
    ("jsonl", b'{"file": "x.jpg", "label": ', "is not valid JSON"),
])
def test_bad_row_after_the_first_thousand_is_a_reject_with_its_line(tmp_path, capsys, fmt, bad, expect):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    _images(root, 1)
    table = write(os.path.join(root, f"t.{fmt}"), _long_table(bad, fmt))
    assert convert("--label_table", table, "--output", out, "--max_reject_fraction", "1") == 0
    assert "Traceback" not in capsys.readouterr().err
    line = 1050 + (2 if fmt == "csv" else 1)
    bad_rows = [r for r in _rejects(out) if r["reason"] == "bad_row"]
    assert len(bad_rows) == 1 and bad_rows[0]["path"] == f"(line {line})" and expect in bad_rows[0]["detail"]
    m = manifest(out)
    assert m["counts"]["listed"] == 1100 and m["counts"]["written"] == 1
    assert m["rejects_by_reason"] == {"missing": 1098, "bad_row": 1}
    assert [scalar(r, "image/filename") for r in read_examples(out, "train")] == ["0.jpg"]


def test_table_encoding_option(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    write(os.path.join(root, "café.jpg"), image_bytes(seed=1))
    table = write(os.path.join(root, "t.csv"), "file,label\ncafé.jpg,crème\n".encode("latin-1"))
    assert convert("--label_table", table, "--output", out, "--table_encoding", "latin-1") == 0
    (row,) = read_examples(out, "train")
    assert scalar(row, "image/filename") == "café.jpg" and scalar(row, "image/class/text") == "crème"


def test_table_encoding_must_exist(tmp_path, capsys):
    table = write(str(tmp_path / "t.csv"), b"file,label\na.jpg,x\n")
    assert convert("--label_table", table, "--output", str(tmp_path / "o"), "--table_encoding", "klingon") == 2
    assert "--table_encoding 'klingon' is not an encoding" in capsys.readouterr().err


def test_header_less_table_is_refused(tmp_path, capsys):
    root = str(tmp_path / "imgs")
    _images(root, 2)
    table = write(os.path.join(root, "t.csv"), b"0.jpg,cat\n1.jpg,dog\n")
    assert convert("--label_table", table, "--output", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "looks like data, not a header: '0.jpg' is an image file name" in err and "filename,label" in err
    ids = write(os.path.join(root, "ids.csv"), b"0000971160_1, 6.09\n0000971160_2, 1.5\n")
    assert convert("--label_table", ids, "--output", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "looks like data" in err and "Traceback" not in err


def test_table_path_that_is_a_folder(tmp_path, capsys):
    folder = tmp_path / "x.csv"
    folder.mkdir()
    assert convert("--label_table", str(folder), "--output", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "is a folder, not a table file" in err and "Traceback" not in err


def test_too_many_columns_is_refused_before_the_run(tmp_path, capsys):
    header = ",".join(["file", "label"] + [f"c{k}" for k in range(tables.MAX_COLUMNS)])
    table = write(str(tmp_path / "t.csv"), (header + "\n" + "a.jpg,x" + ",1" * tables.MAX_COLUMNS + "\n").encode())
    assert convert("--label_table", table, "--output", str(tmp_path / "o")) == 2
    assert f"at most {tables.MAX_COLUMNS:,} are allowed" in capsys.readouterr().err


def _read(data: bytes, fmt: str, encoding="utf-8"):
    _, rows = tables.open_rows(tables.text_stream(io.BytesIO(data), encoding), fmt)
    return list(rows)


def test_bounds_on_lines_cells_and_keys():
    long_line = b"a.jpg," + b"z" * (tables.MAX_LINE + 5) + b"\nb.jpg,ok\n"
    got = _read(b"file,label\n" + long_line, "csv")
    assert isinstance(got[0][1], tables.BadRow) and "characters or more" in got[0][1].detail
    assert got[1] == (3, {"file": "b.jpg", "label": "ok"})
    wide = b"file,label\n" + b",".join([b"v"] * (tables.MAX_COLUMNS + 1)) + b"\nc.jpg,x\n"
    got = _read(wide, "csv")
    assert "cells, above the limit" in got[0][1].detail and got[1] == (3, {"file": "c.jpg", "label": "x"})
    keys = json.dumps({f"k{i}": i for i in range(tables.MAX_COLUMNS + 1)}).encode()
    big_cell = json.dumps({"file": "a.jpg", "label": "w" * (tables.MAX_CELL + 1)}).encode()
    got = _read(keys + b"\n" + b'{"file": "ok.jpg"}\n', "jsonl")
    assert "keys, above the limit" in got[0][1].detail and got[1] == (2, {"file": "ok.jpg"})
    assert isinstance(_read(big_cell + b"\n", "jsonl")[0][1], tables.BadRow)


def test_line_numbers_count_quoted_newlines_and_blank_lines():
    got = _read(b'file,note\n"a.jpg","x\ny"\n\nb.jpg,\xff\nc.jpg,z\n', "csv")
    assert got[0] == (2, {"file": "a.jpg", "note": "x\ny"})
    assert got[1][0] == 5 and "line 5 is not valid utf-8" in got[1][1].detail
    assert got[2] == (6, {"file": "c.jpg", "note": "z"})


def test_header_naming_a_column_twice_is_refused(tmp_path, capsys):
    table = write(str(tmp_path / "t.csv"), b"file,label,label\na.jpg,cat,dog\n")
    assert convert("--label_table", table, "--output", str(tmp_path / "o")) == 2
    assert "the header names column(s) ['label'] more than once" in capsys.readouterr().err


def test_json_integer_beyond_pythons_digit_limit_is_a_bad_row():
    got = _read(b'{"file": "a.jpg", "label": ' + b"9" * 5000 + b'}\n{"file": "b.jpg"}\n', "jsonl")
    assert isinstance(got[0][1], tables.BadRow) and "not valid JSON" in got[0][1].detail
    assert got[1] == (2, {"file": "b.jpg"})


@pytest.mark.parametrize("sep", [";", "\t", "|"])
def test_a_table_separated_by_another_delimiter_is_read_as_its_header_says(tmp_path, sep):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    _images(root)
    text = f"filename{sep}label\n0.jpg{sep}cat\n1.jpg{sep}dog\n2.jpg{sep}cat\n"  # as a comma-decimal Excel saves
    table = write(os.path.join(root, "t.csv"), text.encode())
    assert convert("--label_table", table, "--output", out) == 0
    got = {scalar(r, "image/filename"): scalar(r, "image/class/text") for r in read_examples(out, "train")}
    assert got == {"0.jpg": "cat", "1.jpg": "dog", "2.jpg": "cat"}
    assert manifest(out)["label_map"]["classes"] == {"cat": 0, "dog": 1}


def test_a_header_mixing_delimiters_is_refused_naming_them(tmp_path, capsys):
    root = str(tmp_path / "imgs")
    _images(root, 2)
    table = write(os.path.join(root, "t.csv"), b"filename;label|split\n0.jpg;cat|train\n1.jpg;dog|train\n")
    assert convert("--label_table", table, "--output", str(tmp_path / "o")) == 2
    err = capsys.readouterr().err
    assert "no path column found among ['filename;label|split']" in err, err
    assert "hold ';' and '|'" in err and "save the table with one delimiter" in err, err
    assert "Traceback" not in err and not os.path.exists(tmp_path / "o")


def test_white_space_around_a_label_is_not_part_of_it_in_a_table_or_a_folder(tmp_path):
    # One rule (docs/labels.md): `cat ` in a cell and a folder `cat ` are both the class `cat`.
    root = str(tmp_path / "imgs")
    write(os.path.join(root, "cat ", "0.jpg"), image_bytes(seed=0))
    write(os.path.join(root, " dog", "1.jpg"), image_bytes(seed=1))
    flat = str(tmp_path / "flat")
    _images(flat, 2)
    table = write(os.path.join(flat, "t.csv"), b'filename,label\n0.jpg,"cat "\n1.jpg," dog"\n')
    by_folder, by_table = str(tmp_path / "folder"), str(tmp_path / "table")
    assert convert("--input", root, "--output", by_folder) == 0
    assert convert("--label_table", table, "--output", by_table) == 0
    for out in (by_folder, by_table):
        got = sorted(scalar(r, "image/class/text") for r in read_examples(out, "train"))
        assert got == ["cat", "dog"], out
        assert manifest(out)["label_map"]["classes"] == {"cat": 0, "dog": 1}, out


def test_folders_differing_only_in_end_spaces_are_refused_naming_both(tmp_path, capsys):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    write(os.path.join(root, "cat", "0.jpg"), image_bytes(seed=0))
    write(os.path.join(root, "cat ", "1.jpg"), image_bytes(seed=1))
    assert convert("--input", root, "--output", out) == 1
    err = capsys.readouterr().err
    assert "folders 'cat' and 'cat ' have names that differ only in white space at their ends" in err, err
    assert "Traceback" not in err and not os.path.exists(os.path.join(out, "manifest.json"))
