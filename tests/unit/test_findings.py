"""The findings of a manifest (transforms/core/findings.py): what report.html's
"Look at these" box and the console say, with their counts."""
from __future__ import annotations

from tfrecord_pipelines.transforms.core.findings import MAX_NAMES, findings


def test_each_finding_with_its_count():
    m = {"quality": {"duplicates": {"across_splits": 2, "conflicting_labels": 1},
                     "near_duplicates": {"across_splits": 1243},
                     "balance": {"missing_from_train": {"validation": ["owl"]},
                                 "below_min": {"test": ["a", "b"]}, "min_count": 1}},
         "counts": {"listed": 100, "rejected": 7},
         "rejects_by_reason": {"corrupt": 2, "unsupported_format": 5},
         "splits": {"train": {"shards": [{"records": 3}, {"records": 0}]}}}
    got = findings(m)
    assert [(f.kind, f.count) for f in got] == [
        ("duplicates_across_splits", 2), ("conflicting_labels", 1), ("near_duplicates_across_splits", 1243),
        ("classes_missing_from_train", 1), ("classes_below_min", 2), ("rejected", 7), ("empty_shards", 1)]
    texts = [f.text for f in got]
    assert texts[0].startswith("2 groups of identical images span splits")
    assert texts[1] == "1 group of identical images carries different labels"
    assert texts[2].startswith("1,243 near-duplicate pairs span splits")
    assert texts[3] == "split validation has 1 class that train lacks: owl"
    assert texts[4] == "split test: 2 classes have no records: a, b"
    assert texts[5] == "7 of 100 listed records (7.0%) were rejected (unsupported_format 5, corrupt 2)"
    assert texts[6] == "empty shards in train (1)"
    assert findings(m, check=True)[5].text.startswith("7 of 100 listed records (7.0%) would be rejected")


def test_nothing_to_look_at_and_damaged_parts_read_as_absent():
    assert findings({}) == []
    assert findings({"counts": {"listed": 5, "rejected": 0}, "splits": {"train": {"shards": [{"records": 5}]}}}) == []
    damaged = {"quality": {"duplicates": {"across_splits": True}, "near_duplicates": "x", "balance": []},
               "counts": {"listed": "5", "rejected": 2}, "splits": {"train": None}, "rejects_by_reason": []}
    assert findings(damaged) == []
    assert findings("not a manifest") == []


def test_long_class_lists_are_cut():
    names = [f"c{i}" for i in range(MAX_NAMES + 5)]
    (f,) = findings({"quality": {"balance": {"missing_from_train": {"val": names}}}})
    assert f.count == MAX_NAMES + 5 and f.text.endswith(f"c{MAX_NAMES - 1}, ... ({MAX_NAMES + 5:,} in all)")
