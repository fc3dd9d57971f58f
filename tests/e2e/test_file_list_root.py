"""The root a --file_list counts its folders from is the one the user would
name: a stray line (a path in another folder, a gs:// line of another bucket)
does not move it up silently; the run refuses it in one line naming
--image_root, and with --image_root the stray is a reject."""
from __future__ import annotations

import os

import pytest

import tfrecord_pipelines as tfp
from conftest import convert, make_tree, read_examples, scalar, write

LOCAL = {"direct_running_mode": "in_memory", "num_shards": 1, "max_reject_fraction": 1}


def _listing(tmp_path, lines: list) -> str:
    path = tmp_path / "listing.txt"
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


def _labels(out: str) -> dict:
    return {scalar(r, "image/filename"): scalar(r, "image/class/text")
            for r in read_examples(out, "train")}


def test_a_stray_line_in_another_folder_is_refused_not_a_root_moved_up(tmp_path, capsys):
    images = str(tmp_path / "data" / "images")
    tree = make_tree(images, classes=("cat", "dog"), per_class=3)
    stray = str(tmp_path / "data" / "other" / "x.jpg")
    write(stray, open(os.path.join(images, "cat", "0.jpg"), "rb").read())
    paths = [os.path.join(images, rel) for rel in sorted(tree)]
    for extra in (stray, str(tmp_path / "data" / "loose.jpg")):
        listing = _listing(tmp_path, paths[:3] + [extra] + paths[3:])
        assert convert("--file_list", listing, "--output", tmp_path / "out", "--split", "train") == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(err) == 1, err
        assert "1 of its 7 paths lie outside" in err[0] and f"--image_root {images}" in err[0]
        assert "would be labelled 'images'" in err[0]
        assert not os.path.exists(tmp_path / "out")
    # named: the stray is rejected as outside the root, every other record keeps its class
    listing = _listing(tmp_path, paths + [stray])
    r = tfp.convert(file_list=listing, image_root=images, output=str(tmp_path / "named"), split="train", **LOCAL)
    assert r.rejects_by_reason == {"unsafe_path": 1} and r.counts["written"] == 6
    assert _labels(str(tmp_path / "named")) == tree


def test_lines_of_another_bucket_are_refused_in_one_line(tmp_path, capsys):
    lines = [f"gs://ours/images/{c}/{k}.jpg" for c in ("cat", "dog") for k in range(3)] + ["gs://theirs/x.jpg"]
    assert convert("--file_list", _listing(tmp_path, lines), "--output", tmp_path / "out") == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1, err
    assert "1 of its 7 paths lie outside gs://ours (e.g. gs://theirs/x.jpg)" in err[0]
    assert "the paths share no folder" in err[0] and "--image_root" in err[0]
    # two buckets half and half: no root to guess
    lines = [f"gs://a/{c}/{k}.jpg" for c in ("cat", "dog") for k in range(3)] + [f"gs://b/x/{k}.jpg" for k in range(6)]
    assert convert("--file_list", _listing(tmp_path, lines), "--output", tmp_path / "out") == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "its paths share no folder" in err[0] and "--image_root" in err[0], err


@pytest.mark.parametrize("layout", ["rare_class", "tiny_split"])
def test_a_rare_class_or_a_tiny_split_is_no_stray(tmp_path, layout):
    root = str(tmp_path / "data")
    if layout == "rare_class":
        tree = make_tree(root, classes=("cat",), per_class=5)
        write(os.path.join(root, "rare", "0.jpg"), open(os.path.join(root, "cat", "0.jpg"), "rb").read())
        tree["rare/0.jpg"] = "rare"
        r = tfp.convert(file_list=_listing(tmp_path, [os.path.join(root, p) for p in sorted(tree)]),
                        output=str(tmp_path / "out"), split="train", **LOCAL)
        assert r.counts["written"] == 6
        assert _labels(str(tmp_path / "out")) == tree
    else:
        make_tree(os.path.join(root, "train"), classes=("cat", "dog"), per_class=3)
        make_tree(os.path.join(root, "validation"), classes=("cat",), per_class=1)
        paths = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)
        r = tfp.convert(file_list=_listing(tmp_path, paths), output=str(tmp_path / "out"), **LOCAL)
        assert r.counts["written"] == 7 and set(r.manifest["splits"]) == {"train", "validation"}
        assert r.manifest["label_map"]["classes"] == {"cat": 0, "dog": 1}
