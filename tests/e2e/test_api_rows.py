"""Rows from Python where a label table goes (tfrecord_pipelines/rows.py): a
pandas DataFrame, (path, label) pairs, dicts; and --file_list, a listing of
paths. Each is converted as the equivalent table: byte-identical shards,
the same rejects and reasons, the same one-line errors."""
from __future__ import annotations

import glob
import json
import os

import numpy as np
import pandas as pd
import pytest

import tfrecord_pipelines as tfp
from conftest import check_against_source, convert, make_tree, manifest, read_examples, scalar, write
from gcs_emulator import BUCKET, gcs, upload_tree  # noqa: F401 (gcs: the emulator's fixture)

LOCAL = {"direct_running_mode": "in_memory", "num_shards": 2, "max_reject_fraction": 1}


def _same_output(a: str, b: str) -> None:
    """Byte-identical shards, rejects and label map."""
    ma, mb = manifest(a), manifest(b)
    names = [e["name"] for s in ma["splits"].values() for e in s["shards"]]
    assert names == [e["name"] for s in mb["splits"].values() for e in s["shards"]] and names
    for name in names + ["rejects.jsonl", "label_map.json"]:
        with open(os.path.join(a, name), "rb") as x, open(os.path.join(b, name), "rb") as y:
            assert x.read() == y.read(), name
    assert ma["counts"] == mb["counts"] and ma["features"] == mb["features"]


@pytest.fixture
def photos(tmp_path):
    root = str(tmp_path / "photos")
    labels = make_tree(root, classes=("cat", "dog"), per_class=5)
    return root, labels


def test_a_dataframe_gives_the_shards_of_the_same_table(photos, tmp_path, monkeypatch):
    """A DataFrame with absolute paths, labels and typed extra columns, against
    its to_csv() converted by the command with --image_root."""
    root, labels = photos
    rels = sorted(labels)
    df = pd.DataFrame({"filename": [os.path.join(root, r) for r in rels], "label": [labels[r] for r in rels],
                       "weight": [0.5 + i for i in range(len(rels))], "source": [f"cam{i % 3}" for i in range(len(rels))],
                       "year": [2000 + i for i in range(len(rels))]})
    df.loc[3, "label"] = np.nan                             # a missing label: no_label, as an empty cell
    df = pd.concat([df, df.iloc[[0]], df.iloc[[1]].assign(label="bird")], ignore_index=True)  # duplicate, conflict
    ours = str(tmp_path / "ours")
    r = tfp.convert(label_table=df, output=ours, split={"train": 0.6, "validation": 0.4}, **LOCAL)
    table = tmp_path / "table.csv"
    df.assign(filename=[os.path.relpath(p, root) for p in df["filename"]]).to_csv(table, index=False)
    theirs = str(tmp_path / "theirs")
    monkeypatch.chdir(tmp_path)
    assert convert("--label_table", table, "--image_root", root, "--output", theirs, "--num_shards", "2",
                   "--split", "train=0.6,validation=0.4", "--max_reject_fraction", "1") == 0
    _same_output(ours, theirs)
    assert r.rejects_by_reason == {"conflicting_labels": 2, "duplicate": 1, "no_label": 1}
    m = manifest(ours)
    assert m["options"]["inputs"]["table"] == "<pandas.DataFrame>" and m["options"]["inputs"]["root"] == root
    assert m["features"]["weight"] == "float" and m["features"]["year"] == "int64" and m["features"]["source"] == "bytes"
    rows = {scalar(x, "image/filename"): x for s in m["splits"] for x in read_examples(ours, s)}
    assert rows["cat/0.jpg"]["year"] == [2000] and rows["dog/4.jpg"]["source"] == [b"cam0"]


def test_pairs_and_dicts_relative_paths_and_an_image_root(photos, tmp_path, monkeypatch):
    root, labels = photos
    monkeypatch.chdir(os.path.dirname(root))
    pairs = [(os.path.join("photos", rel), lab) for rel, lab in sorted(labels.items())]
    out = str(tmp_path / "pairs")
    r = tfp.convert(label_table=iter(pairs), output=out, **LOCAL)  # a one-pass iterator is enough
    assert r.counts["written"] == 10 and manifest(out)["options"]["inputs"]["root"] == root
    check_against_source(out, labels, root)  # image/filename relative to the folder the paths share
    dicts = [{"path": rel, "label": lab, "score": i} for i, (rel, lab) in enumerate(sorted(labels.items()))]
    out2 = str(tmp_path / "dicts")
    tfp.convert(label_table=dicts, image_root=root, output=out2, **LOCAL)
    check_against_source(out2, labels, root)
    assert manifest(out2)["features"]["score"] == "int64"


def test_integer_labels_with_a_missing_one_stay_integers(photos, tmp_path):
    """read_csv of a label column with an empty cell gives floats (1.0, NaN):
    they are written as integers, so the labels stay class ids."""
    root, labels = photos
    rels = sorted(labels)
    df = pd.DataFrame({"path": [os.path.join(root, r) for r in rels],
                       "label": [float(i % 3) if i != 2 else np.nan for i in range(len(rels))]})
    assert df["label"].dtype == float
    r = tfp.convert(label_table=df, output=str(tmp_path / "out"), **LOCAL)
    assert r.manifest["label_map"]["kind"] == "int" and r.rejects_by_reason == {"no_label": 1}


def test_mixed_label_types_are_cells_as_in_a_table(photos, tmp_path):
    """A table has only text: 1 and "cat" are the class names "1" and "cat";
    with label_type int the non-integers are bad_label rejects, as in a table."""
    root, labels = photos
    rels = sorted(labels)
    df = pd.DataFrame({"path": [os.path.join(root, r) for r in rels],
                       "label": [1 if i % 2 else "cat" for i in range(len(rels))]})
    r = tfp.convert(label_table=df, output=str(tmp_path / "a"), **LOCAL)
    assert r.manifest["label_map"]["classes"] == {"1": 0, "cat": 1}
    r = tfp.convert(label_table=df, output=str(tmp_path / "b"), label_type="int", **LOCAL)
    assert r.rejects_by_reason == {"bad_label": 5} and r.counts["written"] == 5


@pytest.mark.parametrize("make, message", [
    (lambda root: pd.DataFrame({"a": [f"{root}/cat/0.jpg"], "b": ["cat"], "c": [1]}),
     "label_table <pandas.DataFrame>: no path column found among ['a', 'b', 'c']; name it with --path_column"),
    (lambda root: pd.DataFrame({"path": [971160, 971161], "label": ["a", "b"]}),
     "path column 'path' holds int '971160' in row 0; paths are text"),
    (lambda root: pd.DataFrame({"path": pd.Series([], dtype=str), "label": pd.Series([], dtype=str)}),
     "label_table <pandas.DataFrame> has no rows: nothing to convert"),
    (lambda root: pd.DataFrame(), "label_table <pandas.DataFrame>: no columns"),
    (lambda root: [("a.jpg", "cat", "extra")], "row 0 is \"('a.jpg', 'cat', 'extra')\"; rows are (path, label) pairs"),
    (lambda root: [{"path": "a.jpg"}, {"path": "b.jpg", "label": "x"}], "row 1 has column 'label' that the first row lacks"),
    (lambda root: pd.DataFrame({"path": ["a.jpg"], "label": ["x"]}).set_axis(["path", "path"], axis=1),
     "repeat a name"),
])
def test_bad_rows_fail_in_one_line_before_the_run(photos, tmp_path, make, message):
    root, _ = photos
    out = tmp_path / "out"
    with pytest.raises(tfp.UsageError) as e:
        tfp.convert(label_table=make(root), output=str(out), **LOCAL)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()


def test_a_missing_path_is_rejected_as_an_empty_cell(photos, tmp_path):
    root, labels = photos
    df = pd.DataFrame({"path": [os.path.join(root, "cat/0.jpg"), None, os.path.join(root, "cat/nope.jpg")],
                       "label": ["cat", "cat", "cat"]})
    r = tfp.convert(label_table=df, output=str(tmp_path / "out"), image_root=root, **LOCAL)
    assert r.rejects_by_reason == {"missing": 2}
    assert sorted(x["path"] for x in r.rejects()) == ["(line 3)", "cat/nope.jpg"]


def test_our_code_never_imports_pandas():
    """Rows are read through a DataFrame's own methods: pandas is the
    caller's import, never ours (Beam's type hints import it in a run anyway)."""
    import ast
    from conftest import ROOT
    found = []
    for path in glob.glob(os.path.join(ROOT, "pipelines", "**", "*.py"), recursive=True) + \
            glob.glob(os.path.join(ROOT, "transforms", "**", "*.py"), recursive=True):
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [(path, n) for n in names if n.split(".")[0] == "pandas"]
    assert found == []


def _gcloud_listing(root: str) -> str:
    """What `gcloud storage ls -r ROOT` prints: a folder line per folder, its files, a blank line."""
    lines = []
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        lines.append(folder + "/:")
        lines += [os.path.join(folder, f) for f in sorted(files)]
        lines.append("")
    return "\n".join(lines) + "\n"


def test_a_file_list_converts_as_the_tree(tmp_path):
    root = str(tmp_path / "data")
    make_tree(os.path.join(root, "train"), per_class=3)
    make_tree(os.path.join(root, "validation"), per_class=2)
    write(os.path.join(root, "train", "cat", "broken.jpg"), b"oops")
    listing = tmp_path / "listing.txt"
    listing.write_text(_gcloud_listing(root))
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert convert("--file_list", listing, "--output", a, "--num_shards", "2", "--max_reject_fraction", "1") == 0
    assert convert("--input", root, "--output", b, "--num_shards", "2", "--max_reject_fraction", "1") == 0
    _same_output(a, b)
    assert set(manifest(a)["splits"]) == {"train", "validation"}
    assert manifest(a)["rejects_by_reason"] == {"not_an_image": 1}
    # A plain list of relative paths, labels one level down, against the API too.
    (tmp_path / "data" / "plain.txt").write_text("".join(f"{p}\n" for p in sorted(
        os.path.relpath(f, root) for f in glob.glob(os.path.join(root, "train", "*", "*.jpg")))))
    r = tfp.convert(file_list=tmp_path / "data" / "plain.txt", output=str(tmp_path / "c"), split="train",
                    label_depth=2, **LOCAL)
    assert r.manifest["label_map"]["classes"] == {"bird": 0, "cat": 1, "dog": 2}
    assert r.rejects_by_reason == {"not_an_image": 1} and r.counts["written"] == 9


def test_a_file_list_outside_its_root_and_bad_lists(tmp_path, capsys):
    root = str(tmp_path / "data")
    make_tree(root, per_class=2)
    listing = tmp_path / "l.txt"
    listing.write_text(f"{root}/cat/0.jpg\n/etc/passwd\n")
    with pytest.raises(tfp.UsageError, match="no such file"):
        tfp.convert(file_list=str(tmp_path / "none.txt"), output=str(tmp_path / "o"))
    r = tfp.convert(file_list=listing, image_root=root, output=str(tmp_path / "o"), **LOCAL)
    assert r.rejects_by_reason == {"unsafe_path": 1} and r.counts["written"] == 1
    assert convert("--file_list", listing, "--input", root, "--output", tmp_path / "o2") == 2
    assert "give exactly one of --input" in capsys.readouterr().err
    assert json.loads((tmp_path / "o" / "rejects.jsonl").read_text().splitlines()[0])["path"] == "/etc/passwd"


def test_a_gcloud_listing_of_a_bucket_converts_as_the_bucket(gcs, tmp_path):  # noqa: F811 (the fixture)
    """What `gcloud storage ls -r gs://...` prints, against the GCS emulator:
    the same shards, rejects and label map as --input of the bucket folder."""
    root = str(tmp_path / "data")
    make_tree(os.path.join(root, "train"), per_class=3)
    make_tree(os.path.join(root, "validation"), per_class=2)
    write(os.path.join(root, "train", "cat", "broken.jpg"), b"oops")
    upload_tree(root, "file_list/data")
    uri = f"gs://{BUCKET}/file_list/data"
    listing = tmp_path / "listing.txt"
    listing.write_text(_gcloud_listing(root).replace(root, uri))
    assert listing.read_text().startswith(f"{uri}/:\n")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    r = tfp.convert(file_list=str(listing), output=a, **{**LOCAL, "num_shards": 2, "max_reject_fraction": 1})
    assert convert("--input", uri, "--output", b, "--num_shards", "2", "--max_reject_fraction", "1") == 0
    _same_output(a, b)
    assert r.counts["written"] == 15 and r.rejects_by_reason == {"not_an_image": 1}
    assert set(r.splits) == {"train", "validation"}
