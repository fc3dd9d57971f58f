"""What may be published (transforms/core/publishable.py), the label column of
a table (tables.label_column_of) and the class names TFDS's labels file holds
(tfds_metadata.fits_labels_file), as pure functions."""
import itertools

import pytest

from tfrecord_pipelines.transforms.core import tables
from tfrecord_pipelines.transforms.core.publishable import (MAX_SHRINK, Guards, Previous, RejectFacts, RunFacts,
                                                             check_publishable)
from tfrecord_pipelines.transforms.core.tfds_metadata import fits_labels_file


def _facts(written, previous=None, **kw):
    return RunFacts(listed=kw.pop("listed", written), written=written, rejected=kw.pop("rejected", 0),
                    split_records=kw.pop("split_records", {"train": written}), previous=previous, **kw)


def _prev(written, **classes):
    return Previous("v1", written, {"train": written}, classes)


def test_the_shrink_bound_is_half_of_latest():
    assert MAX_SHRINK == 0.5
    assert check_publishable(_facts(50, _prev(100)), Guards()).refusal == ""  # exactly half: published
    refusal = check_publishable(_facts(49, _prev(100)), Guards()).refusal
    assert "49 records written, down 51% from 100 in version v1" in refusal and "--allow_shrink" in refusal
    assert check_publishable(_facts(49, _prev(100)), Guards(allow_shrink=True)).refusal == ""
    assert check_publishable(_facts(5, _prev(0)), Guards()).refusal == ""  # nothing to fall from


def test_empty_needs_allow_empty_and_a_versioned_fall_to_empty_also_allow_shrink():
    assert "the input holds no image file" in check_publishable(_facts(0), Guards()).refusal
    assert "the label table lists no row" in check_publishable(_facts(0, table_root="/t"), Guards()).refusal
    rejected = _facts(0, listed=3, rejected=3, by_reason={"missing": 2, "empty": 1})
    assert "all 3 listed records were rejected (missing 2, empty 1)" in check_publishable(rejected, Guards()).refusal
    assert check_publishable(_facts(0), Guards(allow_empty=True)).refusal == ""
    assert "down 100%" in check_publishable(_facts(0, _prev(7)), Guards(allow_empty=True)).refusal
    assert check_publishable(_facts(0, _prev(7)), Guards(allow_empty=True, allow_shrink=True)).refusal == ""


def test_undecodable_rows_refuse_unless_every_reject_is_accepted():
    facts = RejectFacts()
    for n in (40, 12):
        facts.add(f"(line {n})", "bad_row", f"line {n} is not valid utf-8 text (pass --table_encoding, e.g. latin-1)",
                  "")
    f = _facts(10, listed=12, rejected=2, fixes=facts.fixes)
    refusal = check_publishable(f, Guards(max_reject_fraction=0.5)).refusal
    assert "2 row(s) of the label table do not decode as utf-8 (first: line 12)" in refusal
    verdict = check_publishable(f, Guards(max_reject_fraction=1))
    assert verdict.refusal == "" and verdict.warnings == (
        "2 rejected as bad_row: line 12 is not valid utf-8 text (pass --table_encoding, e.g. latin-1)",)


def test_reject_facts_do_not_depend_on_the_order_rejects_arrive_in():
    rejects = [("b.webp", "unsupported_format", "webp ... use --reencode jpeg|png", "train"),
               ("a.webp", "unsupported_format", "webp ... use --reencode jpeg|png", "train"),
               ("x/1.jpg", "missing", "FileNotFoundError", "validation"),
               ("(line 3)", "missing", "line 3 has an empty 'file' cell", ""),
               ("c.jpg", "truncated", "JPEG stream ends", "train")]
    seen = set()
    for order in itertools.permutations(rejects):
        facts = RejectFacts()
        for r in order:
            facts.add(*r)
        seen.add((repr(sorted(facts.fixes.items())), repr(sorted(facts.by_split.items()))))
    assert len(seen) == 1
    facts = RejectFacts()
    for r in rejects:
        facts.add(*r)
    assert facts.fixes == {("unsupported_format", ("--reencode",)): [2, ("a.webp", "webp ... use --reencode jpeg|png")],
                           ("missing", ()): [1, ("x/1.jpg", "FileNotFoundError")]}
    assert facts.by_split == {"train": 3, "validation": 1}
    lines = check_publishable(_facts(5, fixes=facts.fixes, table_root="/imgs"), Guards()).warnings
    assert "1 rejected as missing: the table's paths were looked for under --image_root /imgs (e.g. /imgs/x/1.jpg)" \
        in lines[0]
    assert lines[1] == "2 rejected as unsupported_format: webp ... use --reencode jpeg|png (e.g. a.webp)"
    # A folder tree's missing file (gone since it was listed) is no --image_root matter.
    assert len(check_publishable(_facts(5, fixes=facts.fixes), Guards()).warnings) == 1


def test_lost_classes_and_splits():
    f = _facts(6, split_records={"train": 6, "validation": 0}, rejected_by_split={"validation": 2, "train": 1},
               requested_splits=("train", "validation", "test"), class_records={"a": 6, "b": 0, "old": 0},
               unlisted_classes=frozenset({"old"}),
               previous=Previous("v1", 9, {"train": 6, "validation": 2, "dev": 1}, {"a": 5, "old": 4}))
    assert check_publishable(f, Guards()).warnings == (
        "split(s) with every record rejected, none written: 'validation' (2 rejected)",
        "split(s) asked for by --split got no record of the 6 listed: 'test'",
        "split(s) that version v1 had and this one has not: 'dev' (1 record then)",
        "class(es) whose every listed record was rejected, none written: 'b'",
        "class(es) that version v1 had and this one has not: 'old' (4 records then)")
    many = _facts(1, class_records={"a": 1, **{f"c{i:02d}": 0 for i in range(12)}})
    (line,) = check_publishable(many, Guards()).warnings
    assert line.endswith("'c09' and 2 more")


@pytest.mark.parametrize("columns,expect", [
    (["filename", "label", "note"], "label"),
    (["filename", "Class", "note"], "Class"),
    (["filename", "species"], "species"),
    (["filename"], ""),
    (["filename", "split", "species"], "species"),
])
def test_label_column_of(columns, expect):
    split = "split" if "split" in columns else ""
    assert tables.label_column_of(columns, "filename", split, "", "auto") == expect


def test_label_column_of_refuses_several_unknown_columns():
    columns = ["filename", "species", "photographer"]
    with pytest.raises(tables.TableError, match="--label_column species or --label_column photographer"):
        tables.label_column_of(columns, "filename", "", "", "auto")
    with pytest.raises(tables.TableError, match="--label_column 'my species'"):
        tables.label_column_of(["filename", "my species", "x"], "filename", "", "", "table")
    assert tables.label_column_of(columns, "filename", "", "species", "auto") == "species"
    assert tables.label_column_of(columns, "filename", "", "", "none") == ""
    assert tables.label_column_of(columns, "filename", "", "", "auto", regex="^(.)") == ""
    with pytest.raises(tables.TableError, match="no label column found"):
        tables.label_column_of(["filename"], "filename", "", "", "table")


@pytest.mark.parametrize("name,fits", [
    ("cat", True), ("a b", True), ("caf\u00e9", True), ("", False), ("   ", False), (" cat", False),
    ("cat ", False), ("\tcat", False), ("c\nat", False), ("c\rat", False), ("\u00a0cat", False), ("cat\u3000", False),
    ("c\u00a0at", True),
])
def test_names_tfds_reads_back_as_written(name, fits):
    assert fits_labels_file(name) is fits
    # TFDS's own reading of its labels file, as class_label_feature._load_names_from_file does it
    read_back = [n.strip() for n in (name + "\n").replace("\r", "\n").split("\n") if n.strip()]
    assert (read_back == [name]) is fits
