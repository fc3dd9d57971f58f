"""Scheduled reprocessing: versioned outputs, the LATEST pointer, unchanged
inputs publishing nothing, and class ids carried from version to version."""
import json
import os

from conftest import convert, image_bytes, make_tree, manifest, read_examples, scalar, settle, shard_files, write


def latest(root):
    with open(os.path.join(root, "LATEST")) as f:
        return f.read().strip()


def ids(out):
    return manifest(out)["label_map"]["classes"]


def test_versions_latest_unchanged_and_stable_ids(tmp_path, capsys):
    images, root = str(tmp_path / "images"), str(tmp_path / "dataset")
    make_tree(images, classes=("cat", "dog"), per_class=3)
    settle()  # files written just before a run are not trusted unchanged by the next one
    base = ["--input", images, "--output", root, "--versioned", "--num_shards", "2"]

    assert convert(*base, "--version", "v1") == 0
    assert latest(root) == "v1"
    v1 = os.path.join(root, "v1")
    assert ids(v1) == {"cat": 0, "dog": 1} and manifest(v1)["version"] == "v1"
    capsys.readouterr()

    # Nothing changed: nothing published, the pointer stays.
    assert convert(*base, "--version", "v2") == 0
    assert "unchanged: inputs and options are the same as version v1" in capsys.readouterr().out
    assert latest(root) == "v1" and not os.path.exists(os.path.join(root, "v2"))

    # Unless asked to republish: identical shards under a new version.
    assert convert(*base, "--version", "v2", "--republish_unchanged") == 0
    assert latest(root) == "v2"
    same = [open(f, "rb").read() for f in shard_files(os.path.join(root, "v2"))]
    assert same == [open(f, "rb").read() for f in shard_files(v1)]

    # New images of a new class "ant", which would sort first: ids stay; the class is refused by default ...
    for k in range(3):
        write(os.path.join(images, "ant", f"{k}.jpg"), image_bytes(seed=500 + k))
    assert convert(*base, "--version", "v3", "--max_reject_fraction", "0.5") == 0
    v3 = os.path.join(root, "v3")
    assert latest(root) == "v3" and ids(v3) == {"cat": 0, "dog": 1}
    assert manifest(v3)["rejects_by_reason"] == {"unknown_label": 3} and manifest(v3)["previous_version"] == "v2"
    # ... or added after the existing ones with --extend_label_map, and published with the version.
    assert convert(*base, "--version", "v4", "--extend_label_map") == 0
    v4 = os.path.join(root, "v4")
    assert ids(v4) == {"cat": 0, "dog": 1, "ant": 2}
    with open(os.path.join(v4, "label_map.json")) as f:
        assert json.load(f) == {"cat": 0, "dog": 1, "ant": 2}
    got = {scalar(r, "image/class/text"): scalar(r, "image/class/label") for r in read_examples(v4, "train")}
    assert got == {"cat": 0, "dog": 1, "ant": 2}

    # Changed options are a change too.
    assert convert(*base, "--version", "v5", "--seed", "3") == 0
    assert latest(root) == "v5"


def test_a_failed_run_never_moves_the_pointer(tmp_path, capsys):
    images, root = str(tmp_path / "images"), str(tmp_path / "dataset")
    make_tree(images, per_class=2)
    assert convert("--input", images, "--output", root, "--versioned", "--version", "good") == 0
    for k in range(4):
        write(os.path.join(images, "cat", f"broken{k}.jpg"), b"")
    assert convert("--input", images, "--output", root, "--versioned", "--version", "bad") == 1
    assert "were rejected, above --max_reject_fraction" in capsys.readouterr().err
    assert latest(root) == "good"
    assert not os.path.exists(os.path.join(root, "bad", "manifest.json"))
    assert not os.path.exists(os.path.join(root, ".tfrecords.lock"))


def test_first_scheduled_run_may_extend_an_empty_map(tmp_path):
    images, root = str(tmp_path / "images"), str(tmp_path / "dataset")
    make_tree(images, per_class=1)
    assert convert("--input", images, "--output", root, "--versioned", "--extend_label_map") == 0
    version = latest(root)
    assert version.startswith("v2") and ids(os.path.join(root, version)) == {"bird": 0, "cat": 1, "dog": 2}

