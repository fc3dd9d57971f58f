"""Labels and splits: Unicode forms of class folders, a strict
number grammar, ratio splits over split folders."""
import json
import os
import unicodedata

import pytest

from conftest import convert, image_bytes, manifest, read_examples, scalar, write
from tfrecord_pipelines.options.config import LabelSource, LabelSpec
from tfrecord_pipelines.transforms.core.labels import LabelError, Stats, build_label_map, is_float, is_int

NFC = unicodedata.normalize("NFC", "경복궁")
NFD = unicodedata.normalize("NFD", "경복궁")


def test_nfc_and_nfd_class_folders_are_one_class(tmp_path):
    assert NFC != NFD
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    write(os.path.join(root, "train", NFC, "a.jpg"), image_bytes(seed=1))
    write(os.path.join(root, "train", "zoo", "b.jpg"), image_bytes(seed=2))
    write(os.path.join(root, "validation", NFD, "c.jpg"), image_bytes(seed=3))  # as macOS writes it
    write(os.path.join(root, "validation", "zoo", "d.jpg"), image_bytes(seed=4))
    assert convert("--input", root, "--output", out) == 0
    m = manifest(out)
    assert m["label_map"]["classes"] == {"zoo": 0, NFC: 1}
    for split in ("train", "validation"):
        rows = read_examples(out, split)
        got = {scalar(r, "image/class/text"): scalar(r, "image/class/label") for r in rows}
        assert got == {"zoo": 0, NFC: 1}, split


def test_true_unicode_collision_is_an_error_naming_both_folders(tmp_path, capsys):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    write(os.path.join(root, NFC, "a.jpg"), image_bytes(seed=1))
    write(os.path.join(root, NFD, "b.jpg"), image_bytes(seed=2))
    assert convert("--input", root, "--output", out) == 1
    err = capsys.readouterr().err
    assert repr(NFC) in err and repr(NFD) in err and "different Unicode forms" in err
    assert "Traceback" not in err
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def test_collision_check_is_per_folder_not_per_name():
    spec = LabelSpec(LabelSource.FOLDER, split_folders=True)
    s = Stats()
    s.folders |= {f"train/{NFC}", f"validation/{NFD}"}  # one class in two splits: fine
    build_label_map(s, spec)
    s.folders.add(f"train/{NFD}")
    with pytest.raises(LabelError, match="different Unicode forms"):
        build_label_map(s, spec)


@pytest.mark.parametrize("text", ["1_1", "0228103492_3", " 1", "1 ", "\u0663", "inf", "nan", "-inf", "1e5_0",
                                  "0x10", "1.5.2", "", "+", "1e", "\u00b2", "99999999999999999999"])
def test_strict_number_grammar_refuses(text):
    assert not is_int(text)
    if text != "99999999999999999999":
        assert not is_float(text)


@pytest.mark.parametrize("text", ["0", "-3", "+7", "0000971160", "1.5", ".5", "-2.", "1e-3", "6.094467065223975",
                                  "9223372036854775807"])
def test_strict_number_grammar_accepts(text):
    assert is_float(text)


def test_underscore_folders_are_class_names_not_numbers(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    for k, name in enumerate(("1_1", "1_2", "2_1")):
        write(os.path.join(root, name, f"{k}.jpg"), image_bytes(seed=k))
    assert convert("--input", root, "--output", out) == 0
    lm = manifest(out)["label_map"]
    assert lm["kind"] == "class" and lm["classes"] == {"1_1": 0, "1_2": 1, "2_1": 2}
    rows = read_examples(out, "train")
    assert all("image/target" not in r or not r["image/target"] for r in rows)
    assert sorted(scalar(r, "image/class/text") for r in rows) == ["1_1", "1_2", "2_1"]


def test_underscore_ids_in_a_table_stay_bytes_and_float_labels_refuse_them(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    write(os.path.join(root, "a.jpg"), image_bytes(seed=1))
    write(os.path.join(root, "b.jpg"), image_bytes(seed=2))
    table = write(os.path.join(root, "t.csv"), b"file,label,photo_id\na.jpg,1.5,0228103492_3\nb.jpg,1_1,7\n")
    assert convert("--label_table", table, "--output", out, "--label_type", "float",
                   "--max_reject_fraction", "1") == 0
    m = manifest(out)
    assert m["features"]["photo_id"] == "bytes"
    assert m["rejects_by_reason"] == {"bad_label": 1}
    rows = read_examples(out, "train")
    assert [scalar(r, "photo_id") for r in rows] == ["0228103492_3"]
    rejects = [json.loads(x) for x in open(os.path.join(out, "rejects.jsonl"))]
    assert rejects[0]["path"] == "b.jpg" and "'1_1'" in rejects[0]["detail"]


def test_split_fraction_with_underscore_is_refused(tmp_path, capsys):
    root = str(tmp_path / "imgs")
    write(os.path.join(root, "a", "x.jpg"), image_bytes())
    assert convert("--input", root, "--output", str(tmp_path / "o"), "--split", "train=0_8,validation=0.2") == 2
    assert "fraction '0_8' of 'train' is not a number" in capsys.readouterr().err


def _split_tree(root):
    for split in ("train", "val"):
        for k, name in enumerate(("cat", "dog")):
            write(os.path.join(root, split, name, f"{k}.jpg"), image_bytes(seed=k + (10 if split == "val" else 0)))


@pytest.mark.parametrize("split", ["train=0.8,validation=0.2", "train"])
def test_ratio_split_over_split_folders_is_refused(tmp_path, capsys, split):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    _split_tree(root)
    assert convert("--input", root, "--output", out, "--split", split) == 2
    err = capsys.readouterr().err
    assert "train/, val/" in err and "look like splits" in err and "--split folders" in err
    assert "--label_depth 2" in err
    assert not os.path.exists(out) or not os.listdir(out)


def test_split_folders_with_label_depth_2_redraws_splits_by_ratio(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    _split_tree(root)
    assert convert("--input", root, "--output", out, "--split", "a=0.5,b=0.5", "--label_depth", "2") == 0
    m = manifest(out)
    assert m["label_map"]["classes"] == {"cat": 0, "dog": 1}
    texts = [scalar(r, "image/class/text") for s in m["splits"] for r in read_examples(out, s)]
    assert sorted(texts) == ["cat", "cat", "dog", "dog"]


def test_valid_is_a_split_folder_too(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    for split in ("train", "valid"):
        write(os.path.join(root, split, "cat", f"{split}.jpg"), image_bytes(seed=len(split)))
    assert convert("--input", root, "--output", out) == 0
    m = manifest(out)
    assert sorted(m["splits"]) == ["train", "valid"] and m["label_map"]["classes"] == {"cat": 0}


def test_frozen_label_map_in_nfd_matches_nfc_labels(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    write(os.path.join(root, NFC, "a.jpg"), image_bytes(seed=1))
    lm = write(str(tmp_path / "map.json"), json.dumps({NFD: 5}).encode())
    assert convert("--input", root, "--output", out, "--label_map", lm) == 0
    (row,) = read_examples(out, "train")
    assert scalar(row, "image/class/label") == 5 and scalar(row, "image/class/text") == NFC
    both = write(str(tmp_path / "both.json"), json.dumps({NFD: 5, NFC: 6}).encode())
    assert convert("--input", root, "--output", str(tmp_path / "o2"), "--label_map", both) == 2
