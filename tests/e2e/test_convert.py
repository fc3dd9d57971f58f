"""End-to-end conversions on the local Beam runner, read back with TensorFlow:
every input form, label rules, key renaming, splits, shard rules, rejects."""
import csv
import hashlib
import json
import os

import pytest

from conftest import (check_against_source, convert, read_all, image_bytes, make_tree, manifest, read_examples, scalar,
                      assert_shard_matches, shard_files, write)


def by_filename(rows, key="image/filename"):
    return {scalar(r, key): r for r in rows}


def check_sources(rows, root):
    """Every record's image bytes are the source file's bytes, unchanged."""
    for r in rows:
        path = os.path.join(root, scalar(r, "image/filename"))
        raw = r["image/encoded"][0]
        with open(path, "rb") as f:
            assert raw == f.read()
        assert scalar(r, "image/key/sha256") == hashlib.sha256(raw).hexdigest()


@pytest.mark.parametrize("in_memory", [True, False], ids=["in_memory", "default_multi_process"])
@pytest.mark.beam_range
def test_folder_tree_end_to_end(tmp_path, in_memory):
    """Also on the default users get: the multi-process local runner on all cores."""
    root, out = str(tmp_path / "images"), str(tmp_path / "out")
    labels = make_tree(root, per_class=7)
    write(os.path.join(root, "cat", "really_a_png.jpg"), image_bytes(20, 10, fmt="PNG", seed=9))
    write(os.path.join(root, "dog", "gray.jpg"), image_bytes(20, 10, mode="L", seed=8))
    labels.update({"cat/really_a_png.jpg": "cat", "dog/gray.jpg": "dog"})
    assert convert("--input", root, "--output", out, "--num_shards", "3", in_memory=in_memory) == 0

    m = manifest(out)
    rows = read_examples(out, "train")
    assert len(rows) == len(labels) == m["counts"]["written"] == m["counts"]["listed"]
    got = by_filename(rows)
    assert set(got) == set(labels)
    ids = {"bird": 0, "cat": 1, "dog": 2}
    for rel, r in got.items():
        assert scalar(r, "image/class/text") == labels[rel]
        assert scalar(r, "image/class/label") == ids[labels[rel]]
    check_sources(rows, root)
    check_against_source(out, labels, root)
    assert scalar(got["cat/really_a_png.jpg"], "image/format") == "png"
    assert scalar(got["dog/gray.jpg"], "image/channels") == 1
    assert scalar(got["dog/gray.jpg"], "image/colorspace") == "Grayscale"
    counts = [s["records"] for s in m["splits"]["train"]["shards"]]
    assert len(counts) == 3 and max(counts) - min(counts) <= 1
    assert [os.path.basename(f) for f in shard_files(out)] == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    with open(os.path.join(out, "label_map.json")) as f:
        assert json.load(f) == ids
    for s in m["splits"]["train"]["shards"]:
        assert_shard_matches(out, s)
    assert m["splits"]["train"]["label_counts"] == {"bird": 7, "cat": 8, "dog": 8}


def write_table(path, header, rows, delimiter=","):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.mark.beam_range
def test_label_table_with_splits_and_typed_extra_columns(tmp_path):
    root, out = str(tmp_path / "photos"), str(tmp_path / "out")
    rows = []
    for i in range(12):
        rel = f"batch{i % 2}/img {i}.jpg"
        write(os.path.join(root, rel), image_bytes(10 + i, 10, seed=i))
        rows.append([rel, ["sun", "rain"][i % 2], "validation" if i < 4 else "train", 2000 + i, f"{i / 4}", f"ann{i}"])
    table = write_table(str(tmp_path / "meta" / "labels.csv"),
                        ["filename", "label", "split", "year", "score", "who"], rows)
    assert convert("--label_table", table, "--image_root", root, "--output", out) == 0
    m = manifest(out)
    assert {s: v["records"] for s, v in m["splits"].items()} == {"train": 8, "validation": 4}
    assert m["features"]["year"] == "int64" and m["features"]["score"] == "float" and m["features"]["who"] == "bytes"
    for split in ("train", "validation"):
        for r in read_examples(out, split):
            i = int(scalar(r, "image/filename").split(" ")[1].split(".")[0])
            assert scalar(r, "image/class/text") == ["sun", "rain"][i % 2]
            assert scalar(r, "image/class/label") == {"rain": 0, "sun": 1}[["sun", "rain"][i % 2]]
            assert scalar(r, "year") == 2000 + i and scalar(r, "score") == pytest.approx(i / 4)
            assert scalar(r, "who") == f"ann{i}"
            assert split == ("validation" if i < 4 else "train")
            check_sources([r], root)


def test_regression_table_with_extensionless_ids_tsv_and_jsonl(tmp_path):
    root = str(tmp_path / "faces")
    targets = {}
    for i in range(6):
        ident = f"00009711{i}0_1"
        write(os.path.join(root, ident + (".jpg" if i % 2 else ".png")), image_bytes(12, 12, fmt="JPEG" if i % 2 else "PNG", seed=i))
        targets[ident] = 6.094467065223975 + i
    csv_path = str(tmp_path / "scores.csv")
    with open(csv_path, "w") as f:
        f.write("id,score\n" + "".join(f"{k}, {v!r}\n" for k, v in targets.items()) + "missing_one, 1.0\n")
    jsonl = str(tmp_path / "scores.jsonl")
    with open(jsonl, "w") as f:
        f.writelines(json.dumps({"image": k, "target": v}) + "\n" for k, v in targets.items())
    tsv = write_table(str(tmp_path / "scores.tsv"), ["path", "y"], [[k, v] for k, v in targets.items()], "\t")
    for n, table in enumerate((csv_path, jsonl, tsv)):
        out = str(tmp_path / f"out{n}")
        assert convert("--label_table", table, "--image_root", root, "--output", out,
                       "--max_reject_fraction", "0.2") == 0
        m = manifest(out)
        assert m["label_map"]["kind"] == "float" and m["features"]["image/target"] == "float"
        expected = {ident + (".jpg" if i % 2 else ".png"): v for i, (ident, v) in enumerate(targets.items())}
        check_against_source(out, expected, root, label_key="image/target")
        if table == csv_path:
            assert m["rejects_by_reason"] == {"missing": 1}


def test_regex_labels_on_a_flat_folder(tmp_path):
    root, out = str(tmp_path / "flat"), str(tmp_path / "out")
    for i in range(4):
        write(os.path.join(root, f"cat.{i}.jpg"), image_bytes(seed=i))
        write(os.path.join(root, f"dog.{i}.jpg"), image_bytes(seed=10 + i))
    write(os.path.join(root, "README.jpg"), image_bytes(seed=99))
    assert convert("--input", root, "--output", out, "--label_regex", r"^([a-z]+)\.\d+\.jpg$",
                   "--max_reject_fraction", "0.2") == 0
    m = manifest(out)
    expected = {f"{c}.{i}.jpg": c for c in ("cat", "dog") for i in range(4)}
    rows = check_against_source(out, expected, root)  # each file its own label: swapped labels fail
    for rel, r in rows.items():
        assert scalar(r, "image/class/label") == {"cat": 0, "dog": 1}[expected[rel]]
    assert m["rejects_by_reason"] == {"no_label": 1}


def test_nested_tree_non_ascii_names_spaces_and_glob_characters(tmp_path):
    root, out = str(tmp_path / "data [v1]"), str(tmp_path / "out")
    names = ["서울/반여3동 행정복지센터/반여3동_039.JPG", "서울/반여3동 행정복지센터/photo [1].jpg",
             "부산/해운대 해수욕장/*star?.jpg", "부산/해운대 해수욕장/a b.jpg"]
    for i, rel in enumerate(names):
        write(os.path.join(root, rel), image_bytes(seed=i))
    assert convert("--input", root, "--output", out, "--label_depth", "2") == 0
    rows = read_examples(out, "train")
    got = by_filename(rows)
    assert set(got) == set(names)
    for rel, r in got.items():
        assert scalar(r, "image/class/text") == rel.split("/")[1]
    check_sources(rows, root)


def test_split_folders_and_integer_class_folders(tmp_path):
    root, out = str(tmp_path / "imagenet"), str(tmp_path / "out")
    expected = {}
    for split, n in (("train", 4), ("validation", 2)):
        for c, cls in enumerate(("0", "1", "7")):
            for k in range(n):
                rel = f"{split}/{cls}/{k}.jpg"
                write(os.path.join(root, rel), image_bytes(seed=k * 10 + c + (50 if split == "train" else 0)))
                expected[rel] = cls
    assert convert("--input", root, "--output", out) == 0
    m = manifest(out)
    assert {s: v["records"] for s, v in m["splits"].items()} == {"train": 12, "validation": 6}
    assert m["label_map"]["kind"] == "int"
    rows = check_against_source(out, expected, root)
    _, splits = read_all(out)
    for rel, r in rows.items():
        assert scalar(r, "image/class/label") == int(expected[rel])
        assert splits[rel] == rel.split("/")[0]


def test_frozen_label_map_offset_and_unknown_labels(tmp_path, tree):
    root, labels = tree
    frozen = str(tmp_path / "map.json")
    with open(frozen, "w") as f:
        json.dump({"dog": 5, "cat": 3}, f)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--label_map", frozen, "--max_reject_fraction", "1") == 0
    m = manifest(out)
    assert m["rejects_by_reason"] == {"unknown_label": 6}
    check_against_source(out, {k: v for k, v in labels.items() if v != "bird"}, root)
    for r in read_examples(out, "train"):
        assert scalar(r, "image/class/label") == {"dog": 5, "cat": 3}[scalar(r, "image/class/text")]
    with open(os.path.join(out, "rejects.jsonl")) as f:
        rejects = [json.loads(line) for line in f]
    assert {r["path"] for r in rejects} == {k for k, v in labels.items() if v == "bird"}
    assert all(r["reason"] == "unknown_label" and "'bird'" in r["detail"] for r in rejects)
    out1 = str(tmp_path / "out1")
    assert convert("--input", root, "--output", out1, "--label_offset", "1") == 0
    assert manifest(out1)["label_map"]["classes"] == {"bird": 1, "cat": 2, "dog": 3}


def test_renamed_keys_serve_an_existing_training_script(tmp_path, tree):
    import tensorflow as tf
    root, labels = tree
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--feature_keys",
                   "image/encoded=image_raw,image/class/label=label,image/filename=id,image/colorspace=") == 0
    m = manifest(out)
    assert "image/colorspace" not in m["features"] and "image_raw" in m["features"]
    files = [os.path.join(out, s["name"]) for s in m["splits"]["train"]["shards"]]
    spec = {"image_raw": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64),
            "id": tf.io.FixedLenFeature([], tf.string)}
    n = 0
    for ex in tf.data.TFRecordDataset(files).map(lambda x: tf.io.parse_single_example(x, spec)):
        rel = ex["id"].numpy().decode()
        assert int(ex["label"]) == {"bird": 0, "cat": 1, "dog": 2}[labels[rel]]
        assert tf.io.decode_jpeg(ex["image_raw"]).shape[2] == 3
        with open(os.path.join(root, rel), "rb") as f:
            assert ex["image_raw"].numpy() == f.read()
        n += 1
    assert n == len(labels)
    # read_examples follows the renamed keys: every image decodes to its recorded shape.
    assert len(read_examples(out, "train")) == len(labels)


def test_shard_size_multiple_and_per_split_counts(tmp_path, tree):
    root, labels = tree
    total = sum(os.path.getsize(os.path.join(root, r)) for r in labels)
    out = str(tmp_path / "by_size")
    assert convert("--input", root, "--output", out, "--shard_size", str(total // 4 + 1)) == 0
    assert manifest(out)["splits"]["train"]["num_shards"] == 4
    check_against_source(out, labels, root)
    out = str(tmp_path / "multiple")
    assert convert("--input", root, "--output", out, "--shard_size", str(total // 4 + 1), "--shard_multiple", "3") == 0
    assert manifest(out)["splits"]["train"]["num_shards"] == 6
    out = str(tmp_path / "per_split")
    assert convert("--input", root, "--output", out, "--split", "train=0.5,test=0.5",
                   "--num_shards", "train=3,test=2") == 0
    m = manifest(out)
    assert {s: v["num_shards"] for s, v in m["splits"].items()} == {"train": 3, "test": 2}
    assert sum(v["records"] for v in m["splits"].values()) == len(labels)
    check_against_source(out, labels, root)
    for v in m["splits"].values():
        counts = [s["records"] for s in v["shards"]]
        assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize("compression,suffix", [("gzip", ".gz"), ("zlib", ".zlib")])
@pytest.mark.beam_range
def test_compressed_shards(tmp_path, tree, compression, suffix):
    root, labels = tree
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--compression", compression, "--num_shards", "2") == 0
    m = manifest(out)
    assert all(s["name"].endswith(".tfrecord" + suffix) for s in m["splits"]["train"]["shards"])
    rows = read_examples(out, "train")
    assert len(rows) == len(labels)
    check_sources(rows, root)


def test_cap_per_split_is_a_deterministic_sample(tmp_path, tree):
    root, labels = tree
    outs = [str(tmp_path / f"out{i}") for i in range(2)]
    for out in outs:
        assert convert("--input", root, "--output", out, "--max_examples_per_split", "5") == 0
    m = manifest(outs[0])
    assert m["counts"]["written"] == 5 and m["counts"]["not_selected"] == len(labels) - 5
    assert m["counts"]["listed"] == len(labels)
    assert [open(f, "rb").read() for f in shard_files(outs[0])] == [open(f, "rb").read() for f in shard_files(outs[1])]
    # The sample is the first 5 of the split in shuffle order: the order a full run with
    # the same seed writes into a single shard.
    full, capped = str(tmp_path / "full"), str(tmp_path / "capped")
    assert convert("--input", root, "--output", full, "--num_shards", "1", "--seed", "7") == 0
    assert convert("--input", root, "--output", capped, "--num_shards", "1", "--seed", "7",
                   "--max_examples_per_split", "5") == 0
    order = [scalar(r, "image/filename") for r in read_examples(full, "train")]
    assert len(order) == len(labels)
    sample = [scalar(r, "image/filename") for r in read_examples(capped, "train")]
    assert sample == order[:5]
    check_against_source(capped, {rel: labels[rel] for rel in order[:5]}, root)
    assert order[:5] != sorted(labels)[:5]  # a shuffle, not the listing order


@pytest.mark.beam_range
def test_bad_files_are_quarantined_with_reasons(tmp_path, tree):
    root, labels = tree
    write(os.path.join(root, "cat", "empty.jpg"), b"")
    write(os.path.join(root, "cat", "page.jpg"), b"<html><body>404</body></html>")
    write(os.path.join(root, "dog", "cut.jpg"), image_bytes(40, 30)[:300])
    write(os.path.join(root, "dog", ".DS_Store"), b"\x00\x00\x00\x01Bud1")
    write(os.path.join(root, "bird", "anim.gif"), image_bytes(fmt="GIF", mode="P"))
    os.symlink(os.path.join(root, "nowhere.jpg"), os.path.join(root, "bird", "broken_link.jpg"))
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "0.5") == 0
    m = manifest(out)
    assert m["rejects_by_reason"] == {"empty": 1, "missing": 1, "not_an_image": 1, "truncated": 1,
                                      "unsupported_format": 1}
    assert m["counts"]["listed"] == len(labels) + 5 == m["counts"]["written"] + m["counts"]["rejected"]
    assert m["counts"]["excluded"] == {"hidden": 1}
    with open(os.path.join(out, "rejects.jsonl")) as f:
        rejects = {json.loads(line)["path"]: json.loads(line)["reason"] for line in f}
    assert rejects == {"cat/empty.jpg": "empty", "bird/broken_link.jpg": "missing", "cat/page.jpg": "not_an_image",
                       "dog/cut.jpg": "truncated", "bird/anim.gif": "unsupported_format"}
    assert len(read_examples(out, "train")) == len(labels)


def test_output_holding_a_dataset_is_refused_unless_overwrite(tmp_path, tree, capsys):
    root, _ = tree
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--num_shards", "4") == 0
    before = {f: open(f, "rb").read() for f in shard_files(out)}
    assert convert("--input", root, "--output", out, "--num_shards", "2") == 2
    assert "already holds a complete dataset" in capsys.readouterr().err
    assert {f: open(f, "rb").read() for f in shard_files(out)} == before
    assert convert("--input", root, "--output", out, "--num_shards", "2", "--overwrite") == 0
    assert [os.path.basename(f) for f in shard_files(out)] == ["train-00000-of-00002.tfrecord",
                                                               "train-00001-of-00002.tfrecord"]
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # no lock, no staging left


def test_output_inside_the_input_is_refused(tree, capsys):
    root, _ = tree
    assert convert("--input", root, "--output", os.path.join(root, "out")) == 2
    assert "inside the input folder" in capsys.readouterr().err
