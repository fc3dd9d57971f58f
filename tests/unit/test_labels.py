"""Label derivation, label maps and their application (pure functions)."""
import pytest

from tfrecord_pipelines.options.config import LabelSource, LabelSpec, LabelType
from tfrecord_pipelines.transforms.core.labels import LabelError, Stats, assign_label, build_label_map, raw_label
from tfrecord_pipelines.transforms.core.records import Reason, Rec, Reject


def rec(rel, label=None, extras=()):
    return Rec(rel=rel, path="/x/" + rel, label_text=label, extras=extras)


def stats_of(*texts, extras=()):
    s = Stats()
    for t in texts:
        s.add(rec("a.jpg", t, extras))
    return s


def test_folder_levels():
    spec = LabelSpec(LabelSource.FOLDER)
    assert raw_label(rec("cat/1.jpg"), spec) == "cat"
    assert raw_label(rec("1.jpg"), spec) is None  # too shallow
    nested = LabelSpec(LabelSource.FOLDER, depth=2)
    assert raw_label(rec("서울/반여3동 행정복지센터/반여3동_039.JPG"), nested) == "반여3동 행정복지센터"
    assert raw_label(rec("서울/x.jpg"), nested) is None
    parent = LabelSpec(LabelSource.FOLDER, depth=-1)
    assert raw_label(rec("a/b/c/x.jpg"), parent) == "c"
    splits = LabelSpec(LabelSource.FOLDER, split_folders=True)
    assert raw_label(rec("validation/dog/x.jpg"), splits) == "dog"


def test_regex_labels():
    spec = LabelSpec(LabelSource.REGEX, regex=r"^([a-z]+)\.\d+\.jpg$")
    assert raw_label(rec("train/cat.123.jpg"), spec) == "cat"
    assert raw_label(rec("train/Cat.x.jpg"), spec) is None
    named = LabelSpec(LabelSource.REGEX, regex=r"(?P<id>\d+)_(?P<label>[a-z]+)")
    assert raw_label(rec("7_dog.png"), named) == "dog"


def test_class_names_map_to_sorted_ids_with_offset():
    lm = build_label_map(stats_of("dog", "cat", "bird", "cat"), LabelSpec(LabelSource.TABLE))
    assert lm.kind == "class" and lm.as_dict() == {"bird": 0, "cat": 1, "dog": 2}
    lm1 = build_label_map(stats_of("dog", "cat"), LabelSpec(LabelSource.TABLE, offset=1))
    assert lm1.as_dict() == {"cat": 1, "dog": 2}


def test_integer_labels_keep_their_values():
    lm = build_label_map(stats_of("0", "2", "10"), LabelSpec(LabelSource.FOLDER))
    assert lm.kind == "int"
    out = assign_label(rec("10/x.jpg", "10"), lm, lm.as_dict())
    assert out.label_id == 10
    # Mixed names and numbers are all names, sorted.
    mixed = build_label_map(stats_of("1", "cat"), LabelSpec(LabelSource.FOLDER))
    assert mixed.kind == "class" and mixed.as_dict() == {"1": 0, "cat": 1}


def test_float_targets_and_bad_values():
    lm = build_label_map(stats_of("6.094467065223975", "1", "2.5"), LabelSpec(LabelSource.TABLE))
    assert lm.kind == "float"
    assert assign_label(rec("a.jpg", "6.094467065223975"), lm, {}).target == pytest.approx(6.094467065223975)
    forced = build_label_map(stats_of("x"), LabelSpec(LabelSource.TABLE, label_type=LabelType.FLOAT))
    bad = assign_label(rec("a.jpg", "nan"), forced, {})
    assert isinstance(bad, Reject) and bad.reason == Reason.BAD_LABEL.value


def test_frozen_map_wins_and_unknown_labels_are_rejected():
    spec = LabelSpec(LabelSource.TABLE, frozen_map=(("dog", 0), ("cat", 7)))
    lm = build_label_map(stats_of("cat", "dog", "emu"), spec)
    assert lm.as_dict() == {"dog": 0, "cat": 7}
    out = assign_label(rec("e.jpg", "emu"), lm, lm.as_dict())
    assert isinstance(out, Reject) and out.reason == "unknown_label" and "emu" in out.detail
    ext = build_label_map(stats_of("cat", "emu", "ant"), LabelSpec(LabelSource.TABLE, frozen_map=spec.frozen_map,
                                                                   extend_map=True))
    assert ext.as_dict() == {"dog": 0, "cat": 7, "ant": 8, "emu": 9} and ext.new_names == ("ant", "emu")


def test_empty_label_is_rejected():
    lm = build_label_map(stats_of("a"), LabelSpec(LabelSource.TABLE))
    out = assign_label(rec("x.jpg", None), lm, lm.as_dict())
    assert isinstance(out, Reject) and out.reason == "no_label"


def test_extra_columns_are_typed_from_all_values():
    s = stats_of("a", extras=(("year", "2001"), ("score", "0.5"), ("who", "ann")))
    s.add(rec("b.jpg", "a", (("year", ""), ("score", "3"), ("who", "7"))))
    lm = build_label_map(s, LabelSpec(LabelSource.TABLE), ("year", "score", "who"))
    assert dict(lm.extra_kinds) == {"year": "int64", "score": "float", "who": "bytes"}
    out = assign_label(rec("b.jpg", "a", (("year", ""), ("score", "3"), ("who", "7"))), lm, lm.as_dict())
    assert out.features == (("year", "int64", []), ("score", "float", [3.0]), ("who", "bytes", [b"7"]))


def test_merge_is_order_independent():
    a, b = stats_of("x", "1"), stats_of("2")
    merged = Stats().merge(a).merge(b)
    assert merged.names == {"x", "1", "2"} and not merged.all_int


def test_too_many_names(monkeypatch):
    import tfrecord_pipelines.transforms.core.labels as labels
    monkeypatch.setattr(labels, "MAX_CLASSES", 2)
    with pytest.raises(LabelError, match="too many"):
        build_label_map(stats_of("a", "b", "c"), LabelSpec(LabelSource.TABLE))
