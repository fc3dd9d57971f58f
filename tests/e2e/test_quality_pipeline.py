"""The data-quality checks end to end: conversions of a tree with planted
exact duplicates (within and across splits, equal and conflicting labels) and
near duplicates (resized, recompressed, cropped), the manifest's "quality"
section, the keep_one and reject policies, read back with TensorFlow."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from conftest import convert, manifest, read_all, sha256_file, shard_files, write
from photos import jpeg, photo
from tfrecord_pipelines.transforms.core import quality

# Exact copies: (source, copy). The kept copy is the smallest path.
EXACT = [("train/cat/p0.jpg", "train/cat/p0_copy.jpg"),          # within a split, same label
         ("train/cat/p1.jpg", "train/dog/p1_as_dog.jpg"),        # within a split, conflicting labels
         ("train/dog/p10.jpg", "validation/dog/leak.jpg"),       # across splits, same label
         ("train/cat/p2.jpg", "validation/dog/leak_other.jpg")]  # across splits, conflicting labels
NEAR = {("train/cat/p3.jpg", "validation/cat/p3_small.jpg"),     # resized to half
        ("train/dog/p11.jpg", "validation/dog/p11_q60.jpg"),     # recompressed at quality 60
        ("train/cat/p4.jpg", "train/cat/p4_crop.jpg")}           # cropped by 2.5% on each side


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("quality") / "images")
    seeds = {f"train/cat/p{i}.jpg": i for i in range(6)}
    seeds.update({f"train/dog/p{i}.jpg": i for i in range(10, 16)})
    seeds.update({f"validation/cat/v{i}.jpg": i for i in range(20, 23)})
    seeds.update({f"validation/dog/v{i}.jpg": i for i in range(30, 33)})
    seeds["validation/owl/o.jpg"] = 40  # a class train does not have
    for rel, seed in seeds.items():
        write(os.path.join(root, rel), jpeg(photo(seed)))
    for src, dst in EXACT:
        os.makedirs(os.path.dirname(os.path.join(root, dst)), exist_ok=True)
        shutil.copyfile(os.path.join(root, src), os.path.join(root, dst))
    p3, p11, p4 = photo(3), photo(11), photo(4)
    w, h = p3.size
    write(os.path.join(root, "validation/cat/p3_small.jpg"), jpeg(p3.resize((w // 2, h // 2))))
    write(os.path.join(root, "validation/dog/p11_q60.jpg"), jpeg(p11, 60))
    write(os.path.join(root, "train/cat/p4_crop.jpg"), jpeg(p4.crop((w // 40, h // 40, w - w // 40, h - h // 40))))
    listed = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
    return root, listed


def run(root, out, *args):
    assert convert("--input", root, "--output", out, "--split", "folders", *args) == 0
    return manifest(out)


def label_of(rel):
    return rel.split("/")[1]


@pytest.fixture(scope="module")
def keep_all(planted, tmp_path_factory):
    root, _ = planted
    out = str(tmp_path_factory.mktemp("keep_all") / "out")
    return out, run(root, out, "--min_class_count", "3")


def test_every_planted_exact_duplicate_is_reported_and_written(planted, keep_all):
    root, listed = planted
    out, m = keep_all
    d = m["quality"]["duplicates"]
    assert (d["policy"], d["groups"], d["extra_copies"]) == ("keep_all", 4, 4)
    assert (d["within_split"], d["across_splits"], d["conflicting_labels"]) == (2, 2, 2)
    by_files = {tuple(f["path"] for f in e["files"]): e for e in d["examples"]}
    assert set(by_files) == {tuple(sorted(p)) for p in EXACT}
    for (a, b) in EXACT:
        e = by_files[tuple(sorted((a, b)))]
        assert e["sha256"] == sha256_file(os.path.join(root, a))
        assert e["across_splits"] == (a.split("/")[0] != b.split("/")[0])
        assert e["conflicting_labels"] == (label_of(a) != label_of(b))
        assert {f["label"] for f in e["files"]} == {label_of(a), label_of(b)}
    rows, splits = read_all(out)  # keep_all writes every copy
    assert sorted(rows) == listed
    assert m["counts"]["written"] == len(listed)


def test_every_planted_near_duplicate_is_found_and_no_distinct_photo(keep_all):
    _, m = keep_all
    n = m["quality"]["near_duplicates"]
    assert (n["hash"], n["bits"], n["max_distance"]) == ("dct64", 64, 8)
    got = {tuple(sorted((e["a"]["path"], e["b"]["path"]))) for e in n["examples"]}
    found = sorted((e["distance"], e["a"]["path"], e["b"]["path"]) for e in n["examples"])
    print(f"\nnear-duplicate distances: {found}")
    assert got == {tuple(sorted(p)) for p in NEAR}  # all planted pairs, and no pair of distinct photos
    assert n["pairs"] == 3 and n["across_splits"] == 2
    for e in n["examples"]:
        assert 0 <= e["distance"] <= 8 and e["a"]["sha256"] != e["b"]["sha256"]


def test_class_balance_and_sizes(keep_all, planted):
    _, listed = planted
    _, m = keep_all
    b = m["quality"]["balance"]
    assert b["per_split"] == {"train": {"cat": 8, "dog": 7}, "validation": {"cat": 4, "dog": 6, "owl": 1}}
    assert b["per_split"]["train"] == m["splits"]["train"]["label_counts"]
    assert b["missing_from_train"] == {"validation": ["owl"]}
    assert b["min_count"] == 3 and b["below_min"] == {"train": ["owl"], "validation": ["owl"]}
    sizes = m["quality"]["sizes"]
    assert sum(sizes["width"]["counts"]) == sum(sizes["aspect"]["counts"]) == len(listed)
    assert sizes["width"]["counts"][sizes["width"]["edges"].index(256)] == len(listed) - 1  # 320 wide but one
    assert sizes["width"]["counts"][sizes["width"]["edges"].index(128)] == 1              # the half-size copy


def test_keep_one_writes_the_smallest_path_of_each_content(planted, tmp_path):
    root, listed = planted
    out = str(tmp_path / "out")
    m = run(root, out, "--duplicates", "keep_one")
    extras = {max(p) for p in EXACT}
    rows, _ = read_all(out)
    assert sorted(rows) == sorted(set(listed) - extras)
    c = m["counts"]
    assert (c["written"], c["rejected"], c["not_selected"]) == (len(listed) - 4, 0, 4)
    assert c["listed"] == c["written"] + c["rejected"] + c["not_selected"]
    d = m["quality"]["duplicates"]
    assert (d["policy"], d["groups"], d["extra_copies"], d["removed"]) == ("keep_one", 4, 4, 4)
    assert m["options"]["images"]["reads"]["once"] is False  # found before planning: two reads


def test_reject_lists_the_extra_copies_as_duplicate_content(planted, tmp_path):
    root, listed = planted
    out = str(tmp_path / "out")
    m = run(root, out, "--duplicates", "reject", "--max_reject_fraction", "0.5")
    with open(os.path.join(out, "rejects.jsonl")) as f:
        rejects = [json.loads(line) for line in f]
    assert {r["path"]: r["reason"] for r in rejects} == {max(p): "duplicate_content" for p in EXACT}
    for r in rejects:
        kept = min(p for p in EXACT if r["path"] in p)
        assert kept[0] in r["detail"]
    rows, _ = read_all(out)
    assert sorted(rows) == sorted(set(listed) - {max(p) for p in EXACT})
    c = m["counts"]
    assert (c["written"], c["rejected"], c["not_selected"]) == (len(listed) - 4, 4, 0)
    assert m["rejects_by_reason"] == {"duplicate_content": 4}


def test_checks_change_no_shard_and_can_be_turned_off(planted, keep_all, tmp_path):
    root, _ = planted
    out_on, _ = keep_all
    out = str(tmp_path / "off")
    m = run(root, out, "--quality", "off")
    assert m["quality"] is None
    on = [sha256_file(p) for p in shard_files(out_on)]
    assert on and on == [sha256_file(p) for p in shard_files(out)]


def test_header_validation_reports_why_there_are_no_near_duplicates(planted, tmp_path):
    root, _ = planted
    m = run(root, str(tmp_path / "out"), "--validate", "header")
    n = m["quality"]["near_duplicates"]
    assert n["hash"] is None and "--validate header" in n["why_not"]
    assert m["quality"]["duplicates"]["groups"] == 4  # exact duplicates need no decode


def test_stratified_ratio_split_gives_each_class_its_fraction(tmp_path):
    root = str(tmp_path / "images")
    for c, n in (("a", 10), ("b", 20), ("c", 5)):
        for i in range(n):
            write(os.path.join(root, c, f"{i}.jpg"), jpeg(photo(100 + i, 96, 72)))
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--split", "train=0.8,validation=0.2", "--stratify",
                   "--near_duplicates", "0") == 0
    m = manifest(out)
    assert m["quality"]["balance"]["per_split"] == {"train": {"a": 8, "b": 16, "c": 4},
                                                   "validation": {"a": 2, "b": 4, "c": 1}}
    assert m["quality"]["near_duplicates"]["why_not"].startswith("turned off")
    _, splits = read_all(out)
    assert sum(s == "validation" for s in splits.values()) == 7


@pytest.mark.parametrize("args, message", [
    (("--duplicates", "keep_one", "--reads_per_image", "1"), "--reads_per_image 2"),
    (("--duplicates", "reject", "--quality", "off"), "--quality off"),
    (("--stratify",), "--stratify needs ratio splits"),
    (("--near_duplicates", "65"), "--near_duplicates 65"),
    (("--min_class_count", "-1"), "--min_class_count -1"),
])
def test_bad_quality_options_are_refused(planted, tmp_path, capsys, args, message):
    root, _ = planted
    assert convert("--input", root, "--output", str(tmp_path / "out"), *args) == 2
    assert message in capsys.readouterr().err


def test_the_figures_are_the_same_on_the_multi_process_runner(planted, keep_all, tmp_path):
    root, _ = planted
    _, m = keep_all
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--split", "folders", "--min_class_count", "3",
                   in_memory=False) == 0
    assert manifest(out)["quality"] == m["quality"]


def test_split_salt_draws_another_ratio_split(tmp_path):
    root = str(tmp_path / "images")
    for i in range(40):
        write(os.path.join(root, "a", f"{i}.jpg"), jpeg(photo(200 + i, 96, 72)))
    got = []
    for salt in ("", "other"):
        out = str(tmp_path / f"out{salt}")
        assert convert("--input", root, "--output", out, "--split", "train=0.5,validation=0.5",
                       "--split_salt", salt, "--quality", "off") == 0
        got.append(read_all(out)[1])
    assert set(got[0]) == set(got[1]) and got[0] != got[1]


@pytest.mark.parametrize("reads", ["1", "2"])
def test_near_duplicates_are_found_across_the_hash_batches(tmp_path, reads):
    """The stages that decode (the shard writer with one read per image,
    ValidateImages with two) hash quality.HASH_BATCH records at a time: in one
    shard of more than twice as many, every planted pair is found, no pair of
    distinct images is, and every record written has its row."""
    root = str(tmp_path / "images")
    rng = np.random.default_rng(0)
    noise = 2 * quality.HASH_BATCH + 40
    for i in range(noise):
        write(os.path.join(root, "noise", f"{i:04d}.jpg"),
              jpeg(Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))))
    pairs = set()
    for s in range(4):
        p = photo(300 + s, 96, 72)
        write(os.path.join(root, "photos", f"{s}.jpg"), jpeg(p))
        write(os.path.join(root, "photos", f"{s}_q60.jpg"), jpeg(p, 60))
        pairs.add((f"photos/{s}.jpg", f"photos/{s}_q60.jpg"))
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--num_shards", "1", "--reads_per_image", reads) == 0
    m = manifest(out)
    q = m["quality"]
    assert {tuple(sorted((e["a"]["path"], e["b"]["path"]))) for e in q["near_duplicates"]["examples"]} == pairs
    assert q["near_duplicates"]["pairs"] == len(pairs)
    counted = sum(n for classes in q["balance"]["per_split"].values() for n in classes.values())
    assert counted == m["counts"]["written"] == noise + 2 * len(pairs)
