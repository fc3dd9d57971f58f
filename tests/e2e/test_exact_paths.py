"""A path given as a typed string is taken exactly as given: `x/a.jpg ` (a
trailing space) and `x/a.jpg` are two files, from a DataFrame, Python rows or
a JSON Lines table alike. A hand-written CSV's path cell loses the white space at
its ends, but never names a file other than the one written there."""
from __future__ import annotations

import json
import os

import pandas as pd

import tfrecord_pipelines as tfp
from conftest import image_bytes, read_examples, scalar, write

LOCAL = {"direct_running_mode": "in_memory", "num_shards": 1, "max_reject_fraction": 1}


def _images(out: str) -> dict:
    return {scalar(r, "image/filename"): (r["image/encoded"][0], scalar(r, "image/class/text"))
            for r in read_examples(out, "train")}


def test_a_path_with_a_trailing_space_is_its_own_file(tmp_path):
    root = str(tmp_path / "photos")
    spaced, plain = image_bytes(20, 16, seed=1), image_bytes(24, 18, seed=2)
    write(os.path.join(root, "x", "a.jpg "), spaced)
    write(os.path.join(root, "x", "a.jpg"), plain)
    write(os.path.join(root, "x", "b.jpg"), image_bytes(22, 14, seed=3))
    rows = [("x/a.jpg ", "cat"), ("x/b.jpg", "dog")]
    jsonl_table = tmp_path / "labels.jsonl"
    jsonl_table.write_text("".join(json.dumps({"path": p, "label": label}) + "\n" for p, label in rows))
    sources = {"dataframe": pd.DataFrame(rows, columns=["path", "label"]), "pairs": rows,
               "jsonl": str(jsonl_table)}
    for name, table in sources.items():
        out = str(tmp_path / name)
        r = tfp.convert(label_table=table, image_root=root, output=out, split="train", **LOCAL)
        assert r.counts["written"] == 2 and r.counts["rejected"] == 0, (name, r.rejects_by_reason)
        got = _images(out)
        assert got["x/a.jpg "] == (spaced, "cat"), name
        assert "x/a.jpg" not in got, name
    # a path given with a trailing space whose file does not exist is missing, never the other file
    os.remove(os.path.join(root, "x", "a.jpg "))
    r = tfp.convert(label_table=pd.DataFrame(rows, columns=["path", "label"]), image_root=root,
                    output=str(tmp_path / "gone"), split="train", **LOCAL)
    assert r.rejects_by_reason == {"missing": 1} and r.counts["written"] == 1


def test_a_csv_path_cell_with_spaces_at_its_ends(tmp_path):
    """A hand-written CSV's cells lose the white space at their ends (its layout): `x/a.jpg  ` names
    x/a.jpg, unless a file named `x/a.jpg  ` exists too; then the row is rejected as ambiguous, naming
    both, and neither image is written for it. The label keeps its rule: `  cat ` is cat."""
    root = str(tmp_path / "photos")
    plain, spaced = image_bytes(24, 18, seed=2), image_bytes(20, 16, seed=1)
    write(os.path.join(root, "x", "a.jpg"), plain)
    write(os.path.join(root, "x", "b.jpg"), image_bytes(22, 14, seed=3))
    for ext, sep in (("csv", ","), ("tsv", "\t")):
        table = tmp_path / f"labels.{ext}"
        table.write_text(f"path{sep}label\nx/a.jpg  {sep}  cat \nx/b.jpg{sep}dog\n")
        out = str(tmp_path / f"stripped-{ext}")
        r = tfp.convert(label_table=str(table), image_root=root, output=out, split="train", **LOCAL)
        assert r.counts["written"] == 2 and r.counts["rejected"] == 0, (ext, r.rejects_by_reason)
        assert _images(out)["x/a.jpg"] == (plain, "cat"), ext
    write(os.path.join(root, "x", "a.jpg  "), spaced)
    for present in (("x/a.jpg", "x/a.jpg  "), ("x/a.jpg  ",)):
        if present == ("x/a.jpg  ",):
            os.remove(os.path.join(root, "x", "a.jpg"))
        for ext in ("csv", "tsv"):
            out = str(tmp_path / f"{ext}-{len(present)}")
            r = tfp.convert(label_table=str(tmp_path / f"labels.{ext}"), image_root=root, output=out,
                            split="train", **LOCAL)
            assert (r.counts["written"], r.counts["rejected"], r.rejects_by_reason) == (1, 1, {"ambiguous": 1}), \
                (ext, present)
            got = _images(out)
            assert set(got) == {"x/b.jpg"}, (ext, present)
            [rej] = list(r.rejects())
            assert rej["path"] == "x/a.jpg" and rej["reason"] == "ambiguous", rej
            assert "'x/a.jpg  ' has white space at its ends" in rej["detail"] and "names 'x/a.jpg'" in rej["detail"] \
                and "a file 'x/a.jpg  ' exists" in rej["detail"], rej
            assert ("(no such file)" in rej["detail"]) == (len(present) == 1), rej
