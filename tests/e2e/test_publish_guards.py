"""No run that looks successful and is not: a run that would
publish a dataset the user did not ask for (no label column recognised, no
record, a versioned run that lost most of its records, undecodable table
rows) fails before publishing with one line naming the cause and the fix; a
class or split that lost every record, and each reject reason that names its
fix, is said on the console; LATEST is told as it is; an output reached
through a symlink into the input is refused; TFDS gets class names it reads
back as written, or none."""
import json
import os
import shutil

import pytest

from conftest import convert, image_bytes, make_tree, manifest, read_all, read_examples, scalar, write
from tfrecord_pipelines.transforms.core import publishable

MANIFEST = "manifest.json"


def _error(err: str) -> str:
    """The one error line (notes may follow it on lines of their own)."""
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _published(out: str) -> bool:
    return os.path.exists(os.path.join(out, MANIFEST))


def _latest(root: str) -> str:
    with open(os.path.join(root, "LATEST")) as f:
        return f.read().strip()


def _files(root: str) -> set:
    return {os.path.relpath(os.path.join(d, n), root) for d, _, names in os.walk(root) for n in names}


def _labels(out: str, split: str = "train") -> dict:
    return {scalar(r, "image/filename"): scalar(r, "image/class/text") for r in read_examples(out, split)}


# ---- 1. a label table whose label column is not recognised ----------------------------------------------------------

def _table(path: str, fmt: str, columns: list, rows: list) -> str:
    if fmt == "jsonl":
        text = "".join(json.dumps(dict(zip(columns, r))) + "\n" for r in rows)
    else:
        sep = "\t" if fmt == "tsv" else ","
        text = sep.join(columns) + "\n" + "".join(sep.join(r) + "\n" for r in rows)
    return write(path, text.encode())


@pytest.mark.parametrize("fmt,columns", [
    ("csv", ["filename", "species", "photographer"]),
    ("tsv", ["filename", "species", "photographer"]),
    ("jsonl", ["filename", "species", "photographer"]),
    ("csv", ["filename", "Species", "photographer"]),
    ("csv", ["filename", "split", "breed", "owner_id"]),
    ("csv", ["image_id", "photo_id", "sample_id"]),
])
def test_a_table_without_a_recognised_label_column_is_refused(tmp_path, capsys, fmt, columns):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    labels = make_tree(root, per_class=2)
    rows = [[rel] + [cls if k == 0 else f"v{i}" for k in range(len(columns) - 1)]
            for i, (rel, cls) in enumerate(sorted(labels.items()))]
    if "split" in columns:
        rows = [[r[0], "train", *r[1:-1]] for r in rows]
    table = _table(str(tmp_path / f"t.{fmt}"), fmt, columns, rows)
    assert convert("--label_table", table, "--image_root", root, "--output", out) == 2
    line = _error(capsys.readouterr().err)
    label = [c for c in columns[1:] if c != "split"][0]
    assert "is a known label column" in line and f"--label_column {label}" in line and "--label_from none" in line
    assert not os.path.exists(out)
    # Named, it is the label; or the dataset is unlabelled on purpose.
    assert convert("--label_table", table, "--image_root", root, "--output", out, "--label_column", label) == 0
    assert _labels(out) == labels
    unlabelled = str(tmp_path / "unlabelled")
    assert convert("--label_table", table, "--image_root", root, "--output", unlabelled, "--label_from", "none") == 0
    m = manifest(unlabelled)
    assert m["label_map"]["kind"] == "none" and "image/class/label" not in m["features"]
    got = {scalar(r, "image/filename"): scalar(r, label) for r in read_examples(unlabelled, "train")}
    assert got == labels


def test_a_two_column_table_still_uses_its_second_column(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    labels = make_tree(root, per_class=2)
    table = _table(str(tmp_path / "t.csv"), "csv", ["filename", "species"], sorted(map(list, labels.items())))
    assert convert("--label_table", table, "--image_root", root, "--output", out) == 0
    assert _labels(out) == labels


# ---- 2. no record written ---------------------------------------------------------------------------------------------

def test_an_empty_input_publishes_nothing_unless_allowed(tmp_path, capsys):
    from tfrecord_pipelines.commands.verify import main as verify
    images, out = str(tmp_path / "share"), str(tmp_path / "out")
    for c in ("cat", "dog"):  # class folders whose files are not there (an unmounted share)
        os.makedirs(os.path.join(images, c))
    assert convert("--input", images, "--output", out) == 1
    line = _error(capsys.readouterr().err)
    assert "no record was written" in line and "--allow_empty" in line and "nothing was published" in line
    assert not _published(out)
    assert convert("--input", images, "--output", out, "--allow_empty") == 0
    assert "the dataset is EMPTY" in capsys.readouterr().err
    assert manifest(out)["counts"]["written"] == 0
    assert verify([out]) == 0
    assert "OK, but EMPTY: 0 records" in capsys.readouterr().out


def test_a_table_whose_every_file_is_missing_names_image_root(tmp_path, capsys):
    root, meta = str(tmp_path / "imgs"), str(tmp_path / "meta")
    labels = make_tree(root, per_class=2)
    table = _table(os.path.join(meta, "t.csv"), "csv", ["filename", "label"], sorted(map(list, labels.items())))
    out = str(tmp_path / "out")
    # The images are not beside the table, where their paths are looked for by default.
    assert convert("--label_table", table, "--output", out) == 1
    err = capsys.readouterr().err
    assert "above --max_reject_fraction" in _error(err)
    assert f"6 rejected as missing: the table's paths were looked for under --image_root {meta}" in err
    assert not _published(out)
    assert convert("--label_table", table, "--output", out, "--max_reject_fraction", "1") == 1
    err = capsys.readouterr().err
    assert "no record was written: all 6 listed records were rejected (missing 6)" in _error(err)
    assert "pass --image_root" in err and not _published(out)
    assert convert("--label_table", table, "--output", out, "--image_root", root) == 0
    assert _labels(out) == labels


def test_every_image_rejected_publishes_nothing(tmp_path, capsys):
    images, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    for k in range(3):
        write(os.path.join(images, "cat", f"{k}.jpg"), b"<html>not found</html>")
    assert convert("--input", images, "--output", out, "--max_reject_fraction", "1") == 1
    assert "all 3 listed records were rejected (not_an_image 3)" in _error(capsys.readouterr().err)
    assert not _published(out)


# ---- 3. versioned runs: never an empty version, nor one that lost most of its records, made current ------------------

def test_latest_never_moves_to_an_empty_or_shrunken_version(tmp_path, capsys):
    images, root = str(tmp_path / "imgs"), str(tmp_path / "ds")
    labels = make_tree(images, classes=("cat", "dog", "bird"), per_class=4)
    base = ["--input", images, "--output", root, "--versioned"]
    assert convert(*base, "--version", "v1") == 0
    capsys.readouterr()
    # One image removed: a small change publishes.
    os.remove(os.path.join(images, "cat", "3.jpg"))
    del labels["cat/3.jpg"]
    assert convert(*base, "--version", "v2") == 0 and _latest(root) == "v2"
    capsys.readouterr()
    # The share unmounted: empty; --allow_empty alone does not make it current either.
    shutil.move(images, images + ".away")
    os.makedirs(images)
    for extra in ([], ["--allow_empty"]):
        assert convert(*base, "--version", "v3", *extra) == 1
        line = _error(capsys.readouterr().err)
        assert ("no record was written" if not extra else "down 100% from 11 in version v2") in line
        assert _latest(root) == "v2" and not _published(os.path.join(root, "v3"))
    # Two classes of three gone: over half of the records.
    shutil.rmtree(images)
    shutil.move(images + ".away", images)
    for c in ("cat", "dog"):
        shutil.rmtree(os.path.join(images, c))
    assert convert(*base, "--version", "v4") == 1
    err = capsys.readouterr().err
    line = _error(err)
    assert "4 records written, down 64% from 11 in version v2" in line and "--allow_shrink" in line
    assert "LATEST still names v2" in line
    assert "class(es) that version v2 had and this one has not: 'cat' (3 records then), 'dog' (4 records then)" in err
    assert _latest(root) == "v2" and not _published(os.path.join(root, "v4"))
    assert convert(*base, "--version", "v4", "--allow_shrink") == 0
    err = capsys.readouterr().err
    assert "class(es) that version v2 had and this one has not: 'cat'" in err
    assert _latest(root) == "v4"
    assert _labels(os.path.join(root, "v4")) == {k: v for k, v in labels.items() if v == "bird"}
    assert manifest(os.path.join(root, "v4"))["label_map"]["classes"] == {"bird": 0, "cat": 1, "dog": 2}


def test_allow_shrink_needs_versioned(tmp_path, capsys):
    images = str(tmp_path / "imgs")
    make_tree(images, per_class=1)
    assert convert("--input", images, "--output", str(tmp_path / "o"), "--allow_shrink") == 2
    assert "--allow_shrink needs --versioned" in _error(capsys.readouterr().err)


# ---- 4. a class or split that lost all its records, and the fixes rejects carry --------------------------------------

def test_a_class_whose_every_image_is_rejected_is_named(tmp_path, capsys):
    images, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    labels = make_tree(images, classes=[f"c{i:02d}" for i in range(20)], per_class=2)
    for k in range(2):  # within --max_reject_fraction 0.05: the run publishes, and says what it lost
        write(os.path.join(images, "c07", f"{k}.jpg"), image_bytes()[:200])
        del labels[f"c07/{k}.jpg"]
    assert convert("--input", images, "--output", out) == 0
    err = capsys.readouterr().err
    assert "warning: class(es) whose every listed record was rejected, none written: 'c07'" in err
    assert _labels(out) == labels
    assert manifest(out)["warnings"] == ["class(es) whose every listed record was rejected, none written: 'c07'"]
    # Over the threshold, the failure names the class too.
    for k in range(2):
        write(os.path.join(images, "c08", f"{k}.jpg"), b"")
    assert convert("--input", images, "--output", str(tmp_path / "o2")) == 1
    err = capsys.readouterr().err
    assert "above --max_reject_fraction" in _error(err)
    assert "note: class(es) whose every listed record was rejected, none written: 'c07', 'c08'" in err


def test_a_split_that_got_no_record_is_named(tmp_path, capsys):
    images, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    labels = make_tree(images, per_class=2)
    assert convert("--input", images, "--output", out, "--split", "train=0.99,test=0.01") == 0
    assert "warning: split(s) asked for by --split got no record of the 6 listed: 'test'" in capsys.readouterr().err
    rows, splits = read_all(out)
    assert set(rows) == set(labels) and set(splits.values()) == {"train"}
    # A split whose every record is rejected (split folders: validation/ holds only broken files).
    tree = str(tmp_path / "tree")
    make_tree(os.path.join(tree, "train"), per_class=2)
    for c in ("cat", "dog"):
        write(os.path.join(tree, "validation", c, "x.jpg"), b"not an image")
    assert convert("--input", tree, "--output", str(tmp_path / "o2"), "--max_reject_fraction", "0.5") == 0
    err = capsys.readouterr().err
    assert "warning: split(s) with every record rejected, none written: 'validation' (2 rejected)" in err


def test_reject_fixes_are_printed_with_their_count(tmp_path, capsys):
    images, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(images, per_class=10)
    write(os.path.join(images, "cat", "x.webp"), image_bytes(fmt="WEBP"))
    assert convert("--input", images, "--output", out) == 0
    err = capsys.readouterr().err
    assert "warning: 1 rejected as unsupported_format:" in err and "use --reencode jpeg|png" in err
    assert "(e.g. cat/x.webp)" in err


def _latin1_table(path: str, images: str, rows_before: int = 0) -> dict:
    """Twenty classes, one with an accented name, in a Latin-1 table; the
    accented rows come after `rows_before` rows of missing files."""
    labels, lines = {}, ["filename,label"]
    lines += [f"gone/{k}.jpg,c00" for k in range(rows_before)]
    for i in range(20):
        name = "Caf\u00e9" if i == 13 else f"c{i:02d}"
        for k in range(2):
            rel = f"c{i:02d}/{k}.jpg"
            write(os.path.join(images, rel), image_bytes(seed=i * 10 + k))
            lines.append(f"{rel},{name}")
            labels[rel] = name
    write(path, ("\n".join(lines) + "\n").encode("latin-1"))
    return labels


def test_a_latin1_table_read_as_utf8_fails_naming_table_encoding(tmp_path, capsys):
    images, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    table = str(tmp_path / "t.csv")
    labels = _latin1_table(table, images)
    # The rows checked before the run show it: refused at once.
    assert convert("--label_table", table, "--image_root", images, "--output", out) == 2
    line = _error(capsys.readouterr().err)
    assert "2 of its first rows do not decode as utf-8 (first: line 28)" in line and "--table_encoding" in line
    assert not os.path.exists(out)
    # Past those rows, the publish step refuses it (the 1,000 missing files are within --max_reject_fraction 0.99;
    # undecodable rows never are, short of 1) ...
    late = str(tmp_path / "late.csv")
    _latin1_table(late, images, rows_before=1000)
    assert convert("--label_table", late, "--image_root", images, "--output", out,
                   "--max_reject_fraction", "0.99") == 1
    err = capsys.readouterr().err
    assert "2 row(s) of the label table do not decode as utf-8 (first: line 1028)" in _error(err)
    assert "note: 2 rejected as bad_row: line 1028 is not valid utf-8 text (pass --table_encoding" in err
    assert not _published(out)
    # ... unless every reject is accepted: then it publishes 19 classes and still prints the fix with its count.
    assert convert("--label_table", table, "--image_root", images, "--output", out, "--max_reject_fraction", "1") == 0
    assert "warning: 2 rejected as bad_row: line 28 is not valid utf-8 text (pass --table_encoding, e.g. latin-1)" \
        in capsys.readouterr().err
    assert len(manifest(out)["label_map"]["classes"]) == 19
    right = str(tmp_path / "right")
    assert convert("--label_table", table, "--image_root", images, "--output", right, "--table_encoding",
                   "latin-1") == 0
    assert _labels(right) == labels and manifest(right)["warnings"] == []


# ---- 5. TFDS's labels file --------------------------------------------------------------------------------------------

# White space at a name's ends is not part of a label (transforms/core/labels.py label_name): what is left that
# TFDS's one-name-a-line labels file would misread is a line break inside a name.
@pytest.mark.parametrize("odd", ["b\nc", "b\rc"])
def test_tfds_never_reads_class_names_shifted(tmp_path, capsys, odd):
    import tensorflow_datasets as tfds
    images, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    labels = make_tree(images, classes=("a", odd, "e", "z"), per_class=2)
    assert convert("--input", images, "--output", out, "--num_shards", "1") == 0
    assert "warning: TFDS: class name(s)" in capsys.readouterr().err
    m = manifest(out)
    assert repr(odd) in m["tfds"]["class_names_why_not"]
    assert not [n for n in os.listdir(out) if n.endswith(".labels.txt")]
    ids = m["label_map"]["classes"]
    feature = tfds.builder_from_directory(out).info.features["image/class/label"]
    assert not isinstance(feature, tfds.features.ClassLabel)
    seen = {}
    for ex in tfds.builder_from_directory(out).as_dataset(split="train"):
        rel = ex["image/filename"].numpy().decode()
        seen[rel] = int(ex["image/class/label"])
        assert ex["image/class/text"].numpy().decode() == labels[rel]
    assert seen == {rel: ids[name] for rel, name in labels.items()}


def test_tfds_class_names_that_fit_its_labels_file_are_written(tmp_path):
    import tensorflow_datasets as tfds
    images, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(images, classes=("a b", "caf\u00e9", "x.y"), per_class=1)
    assert convert("--input", images, "--output", out) == 0
    assert "class_names_why_not" not in manifest(out)["tfds"]
    names = tfds.builder_from_directory(out).info.features["image/class/label"].names
    assert names == ["a b", "caf\u00e9", "x.y"]


# ---- 6. output and input apart, through symlinks too ------------------------------------------------------------------

def test_an_output_through_a_symlink_into_the_input_is_refused(tmp_path, capsys):
    images = str(tmp_path / "imgs")
    make_tree(images, per_class=2)
    before = _files(images)
    os.symlink(os.path.join(images, "cat"), str(tmp_path / "link"))
    for out in (str(tmp_path / "link" / "out"), str(tmp_path / "link")):
        assert convert("--input", images, "--output", out) == 2
        line = _error(capsys.readouterr().err)
        assert "is inside the input folder" in line and "through symbolic links" in line
    assert _files(images) == before  # not even a lock file was written there
    # The reverse: the input inside the output, directly or through a link; a versioned root counts as the output.
    outer = str(tmp_path / "outer")
    make_tree(os.path.join(outer, "images"), per_class=1)
    os.symlink(outer, str(tmp_path / "outer_link"))
    for out, extra in ((outer, []), (str(tmp_path / "outer_link"), []), (outer, ["--versioned"])):
        assert convert("--input", os.path.join(outer, "images"), "--output", out, *extra) == 2
        assert "is inside --output" in _error(capsys.readouterr().err)
    assert not [n for n in os.listdir(outer) if n != "images"]


def test_buckets_are_compared_by_prefix():
    from tfrecord_pipelines.outputs.output_guard import check_apart
    from tfrecord_pipelines.options.parse import UsageError
    for out, inp in (("gs://b/in/out", "gs://b/in"), ("gs://b/in", "gs://b/in/"), ("gs://b/x", "gs://b/x/y")):
        with pytest.raises(UsageError):
            check_apart(out, inp)
    for out, inp in (("gs://b/in-out", "gs://b/in"), ("gs://c/in", "gs://b/in"), ("gs://b/in", "/data/in")):
        check_apart(out, inp)


# ---- 7. --input given a file -------------------------------------------------------------------------------------------

def test_input_that_is_a_file_points_to_label_table(tmp_path, capsys):
    table = write(str(tmp_path / "labels.csv"), b"filename,label\na.jpg,cat\n")
    assert convert("--input", table, "--output", str(tmp_path / "o")) == 2
    line = _error(capsys.readouterr().err)
    assert "is a file, not a folder of images: for a label table use --label_table" in line
    image = write(str(tmp_path / "a.jpg"), image_bytes())
    assert convert("--input", image, "--output", str(tmp_path / "o")) == 2
    assert "is a file, not a folder: --input takes the folder that holds the images" in _error(
        capsys.readouterr().err)


# ---- 8. LATEST as it is -------------------------------------------------------------------------------------------------

def test_a_run_that_read_latest_before_another_published_stops(tmp_path, capsys, monkeypatch):
    """Run A reads LATEST (v1) while configuring; run B publishes v2 before A
    takes the root's lock. A would carry v1's class ids into a version that
    replaces v2: it stops instead, and LATEST stays v2."""
    from tfrecord_pipelines.transforms.storage import run_lock
    images, root = str(tmp_path / "imgs"), str(tmp_path / "ds")
    make_tree(images, classes=("cat", "dog"), per_class=2)
    base = ["--input", images, "--output", root, "--versioned"]
    assert convert(*base, "--version", "v1") == 0
    write(os.path.join(images, "ant", "0.jpg"), image_bytes(seed=77))
    acquire, state = run_lock.acquire, {"b": None}

    def acquire_after_b(*args, **kwargs):
        if state["b"] is None:
            state["b"] = True
            state["b"] = convert(*base, "--version", "v2", "--extend_label_map")
        return acquire(*args, **kwargs)

    monkeypatch.setattr(run_lock, "acquire", acquire_after_b)
    capsys.readouterr()
    assert convert(*base, "--version", "v3", "--extend_label_map") == 1
    assert state["b"] == 0
    line = _error(capsys.readouterr().err)
    assert "now names v2, not v1 as when this run read it" in line and "rerun" in line
    assert _latest(root) == "v2" and not os.path.exists(os.path.join(root, "v3"))


def test_latest_moved_while_a_run_publishes_is_told(tmp_path, capsys, monkeypatch):
    """LATEST changes while a run holds the lock (taken over, or edited by
    hand): the run's version is complete, but it does not replace the other
    one, and the console says so and exits 1."""
    images, root = str(tmp_path / "imgs"), str(tmp_path / "ds")
    make_tree(images, per_class=2)
    base = ["--input", images, "--output", root, "--versioned"]
    assert convert(*base, "--version", "v1") == 0
    shutil.copytree(os.path.join(root, "v1"), os.path.join(root, "other"))
    check = publishable.check_publishable

    def meanwhile(*args):
        write(os.path.join(root, "LATEST"), b"other\n")
        return check(*args)

    monkeypatch.setattr(publishable, "check_publishable", meanwhile)
    capsys.readouterr()
    assert convert(*base, "--version", "v2", "--republish_unchanged") == 1
    captured = capsys.readouterr()
    line = _error(captured.err)
    assert "version v2 is complete" in line and "was not made current" in line and "names other" in line
    assert "now names it" not in captured.out
    assert _latest(root) == "other" and _published(os.path.join(root, "v2"))
