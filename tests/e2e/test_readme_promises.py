"""README promises that had no test of their own: unsupported JPEG
coding processes, the `changed` reject, a run failing on its reject fraction,
`ambiguous` ids, --include and hidden files, stale shards under --overwrite,
table options, verify's type checks and --fast, the unchanged versioned run,
Beam counters, label maps passed back, and the demo. Every output is read back
with TensorFlow and held against the source (bytes and labels)."""
import csv
import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import (ROOT, check_against_source, convert, image_bytes, make_tree, manifest, read_all, scalar, settle,
                      shard_checksums, shard_files, write)


def rejects(out, name="rejects.jsonl"):
    with open(os.path.join(out, name), encoding="utf-8") as f:
        return {json.loads(line)["path"]: json.loads(line) for line in f}


# --- JPEG coding processes TensorFlow does not decode -------------------------------------------

def _sof(data: bytes, code: int, precision: int = 8) -> bytes:
    """A baseline JPEG relabelled with another start-of-frame marker (and sample
    precision): what a lossless (SOF3) or 12-bit (SOF1, precision 12) JPEG
    declares in its header."""
    b = bytearray(data)
    i = b.index(b"\xff\xc0")
    b[i + 1] = code
    b[i + 4] = precision
    return bytes(b)


def test_lossless_and_12_bit_jpegs_are_unsupported_arithmetic_ones_are_written(tmp_path):
    """TensorFlow's libjpeg-turbo decodes arithmetic-coded JPEGs (sequential
    and progressive), not lossless or 12-bit ones."""
    import tensorflow as tf
    import corpus
    root = str(tmp_path / "images")
    labels = make_tree(root, per_class=3)
    odd = {"cat/lossless.jpg": _sof(image_bytes(seed=2), 0xC3),
           "dog/twelve_bit.jpg": _sof(image_bytes(seed=3), 0xC1, precision=12)}
    arithmetic = {"cat/arithmetic.jpg": corpus.ARITHMETIC_JPEG, "dog/arithmetic_p.jpg": corpus.ARITHMETIC_PROGRESSIVE_JPEG}
    for rel, data in {**odd, **arithmetic}.items():
        write(os.path.join(root, rel), data)
        if rel in odd:
            with pytest.raises(Exception):  # TensorFlow does not decode them: storing them would break training
                tf.io.decode_image(data, expand_animations=False)
    for mode in ("full", "header"):
        out = str(tmp_path / f"out_{mode}")
        assert convert("--input", root, "--output", out, "--validate", mode, "--max_reject_fraction", "0.5") == 0
        got = rejects(out)
        assert {p: r["reason"] for p, r in got.items()} == {p: "unsupported_format" for p in odd}, got
        assert manifest(out)["counts"]["listed"] == len(labels) + 4
        check_against_source(out, {**labels, **{p: p.split("/")[0] for p in arithmetic}}, root)


# --- the `changed` reject ------------------------------------------------------------------------

class _ChangeDuringWrite:
    """Through Python's "open" audit event (no product function is patched): when the
    first shard file is opened for writing (validation is over: a Beam stage boundary
    lies between), the chosen images are overwritten. In-process runs only."""
    armed = False
    busy = False
    out = ""
    changes: dict = {}
    done: list = []

    @classmethod
    def hook(cls, event, args):
        if not cls.armed or cls.busy or event != "open" or not isinstance(args[0], str):
            return
        path, mode = args[0], args[1] if isinstance(args[1], str) else ""
        flags = args[2] if isinstance(args[2], int) else 0
        base = os.path.basename(path)
        writing = "w" in mode or bool(flags & (os.O_WRONLY | os.O_RDWR))
        if path.startswith(cls.out) and writing and "-of-" in base and ".tfrecord" in base:
            cls.armed, cls.busy = False, True
            try:
                for target, data in cls.changes.items():
                    with open(target, "wb") as f:
                        f.write(data)
                    cls.done.append(target)
            finally:
                cls.busy = False


_hooks = []


def _raw_png(seed: int) -> bytes:
    """An uncompressed PNG: its size depends only on its dimensions, so two seeds
    give two valid images of exactly the same size."""
    return image_bytes(20, 20, fmt="PNG", seed=seed, compress_level=0)


def _convert_changing(tmp_path, *args):
    """Converts a tree while, once the first shard file is opened for writing, two of
    its images are replaced: one by a valid PNG of exactly the same size, one by a
    JPEG of another size. Returns (out, labels, root, {rel: new bytes})."""
    root, out = str(tmp_path / "images"), str(tmp_path / "out")
    labels = make_tree(root, per_class=6)
    write(os.path.join(root, "cat", "raw.png"), _raw_png(1))
    labels["cat/raw.png"] = "cat"
    new = {"cat/raw.png": _raw_png(2), "dog/3.jpg": image_bytes(40, 40, seed=99)}
    assert len(new["cat/raw.png"]) == os.path.getsize(os.path.join(root, "cat", "raw.png"))
    if _ChangeDuringWrite.hook not in _hooks:
        sys.addaudithook(_ChangeDuringWrite.hook)
        _hooks.append(_ChangeDuringWrite.hook)
    _ChangeDuringWrite.out, _ChangeDuringWrite.done = out, []
    _ChangeDuringWrite.changes = {os.path.join(root, rel): data for rel, data in new.items()}
    _ChangeDuringWrite.armed = True
    try:
        assert convert("--input", root, "--output", out, "--max_reject_fraction", "0.5", *args) == 0
    finally:
        _ChangeDuringWrite.armed = False
    assert sorted(_ChangeDuringWrite.done) == sorted(_ChangeDuringWrite.changes)
    m = manifest(out)
    assert m["counts"]["listed"] == len(labels) == m["counts"]["written"] + m["counts"]["rejected"]
    return out, labels, root, new


def test_a_file_changed_between_validation_and_writing_is_rejected(tmp_path):
    """Validated first, read again to write (--reads_per_image 2): a file whose bytes
    changed in between is rejected as `changed`, whether or not its size changed."""
    out, labels, root, new = _convert_changing(tmp_path, "--reads_per_image", "2")
    got = rejects(out)
    assert {p: r["reason"] for p, r in got.items()} == {rel: "changed" for rel in new}, got
    assert manifest(out)["rejects_by_reason"] == {"changed": 2}
    check_against_source(out, {k: v for k, v in labels.items() if k not in new}, root)


def test_a_file_changed_before_a_single_read_is_written_as_read(tmp_path):
    """Read once, validated as written (--reads_per_image 1): what is written is the
    bytes that were validated, never a mix of two versions: each changed file is
    written with its new bytes or rejected as `changed`."""
    out, labels, root, new = _convert_changing(tmp_path, "--reads_per_image", "1")
    got = rejects(out)
    assert set(got) <= set(new) and all(r["reason"] == "changed" for r in got.values()), got

    def source(rel):
        if rel in new:
            return new[rel]
        with open(os.path.join(root, rel), "rb") as f:
            return f.read()
    check_against_source(out, {k: v for k, v in labels.items() if k not in got}, source)


# --- the reject fraction -------------------------------------------------------------------------

def test_too_many_rejects_publish_nothing_and_keep_the_rejects(tmp_path, capsys):
    root, out = str(tmp_path / "images"), str(tmp_path / "out")
    make_tree(root, per_class=3)
    bad = {f"cat/empty{k}.jpg": b"" for k in range(2)}
    bad["dog/page.jpg"] = b"<html>no</html>"
    for rel, data in bad.items():
        write(os.path.join(root, rel), data)
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "0.1") == 1
    err = capsys.readouterr().err
    assert "above --max_reject_fraction" in err
    names = os.listdir(out)
    assert "manifest.json" not in names and not shard_files(out), names  # nothing published
    # No lock or staging left; the complete shards wait in the resume area for a rerun (with another
    # --max_reject_fraction, say), which keeps them.
    assert [n for n in names if n.startswith(".")] == [n for n in names if n.startswith(".tfrecords-resume-")], names
    assert len([n for n in names if n.startswith(".tfrecords-resume-")]) == 1, names
    failed = glob.glob(os.path.join(out, "failed-*.rejects.jsonl"))
    assert len(failed) == 1, names
    kept = rejects(out, os.path.basename(failed[0]))
    assert {p: r["reason"] for p, r in kept.items()} == {"cat/empty0.jpg": "empty", "cat/empty1.jpg": "empty",
                                                         "dog/page.jpg": "not_an_image"}
    assert os.path.basename(failed[0]) in err
    # Pass 1 to never fail: the refused run's shard is kept, not written again.
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "1") == 0
    assert manifest(out)["rejects_by_reason"] == {"empty": 2, "not_an_image": 1}
    assert "resumed: 1 shard" in capsys.readouterr().out and manifest(out)["made"]["shards_resumed"] == 1


# --- tables: ambiguous ids, .gz, named columns, extra columns, label types ----------------------

def write_csv(path, header, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_an_id_matching_several_files_is_ambiguous(tmp_path):
    root, out = str(tmp_path / "pool"), str(tmp_path / "out")
    expected = {}
    for i in range(8):
        write(os.path.join(root, f"id{i}.jpg"), image_bytes(seed=i))
        expected[f"id{i}.jpg"] = ["a", "b"][i % 2]
    write(os.path.join(root, "id0.png"), image_bytes(fmt="PNG", seed=50))  # id0 now names two files
    table = write_csv(str(tmp_path / "t.csv"), ["id", "label"], [[f"id{i}", ["a", "b"][i % 2]] for i in range(8)])
    assert convert("--label_table", table, "--image_root", root, "--output", out, "--max_reject_fraction", "0.2") == 0
    got = rejects(out)
    assert list(got) == ["id0"] and got["id0"]["reason"] == "ambiguous", got
    del expected["id0.jpg"]
    check_against_source(out, expected, root)


def test_named_columns_split_column_and_chosen_extra_columns(tmp_path):
    root, out = str(tmp_path / "pool"), str(tmp_path / "out")
    rows, expected, splits = [], {}, {}
    for i in range(10):
        rel = f"p{i}.jpg"
        write(os.path.join(root, rel), image_bytes(seed=i))
        kind, part = ["x", "y"][i % 2], "test" if i < 3 else "train"
        # Column names that automatic detection would not pick, and a decoy "label" column.
        rows.append([rel, kind, part, f"decoy{i}", 100 + i, f"note{i}"])
        expected[rel], splits[rel] = kind, part
    table = write_csv(str(tmp_path / "meta.csv"), ["picture", "kind", "part", "label", "year", "note"], rows)
    assert convert("--label_table", table, "--image_root", root, "--output", out, "--path_column", "picture",
                   "--label_column", "kind", "--split_column", "part", "--extra_columns", "year") == 0
    m = manifest(out)
    assert {s: v["records"] for s, v in m["splits"].items()} == {"train": 7, "test": 3}
    assert "year" in m["features"] and "note" not in m["features"] and "label" not in m["features"]
    assert m["features"]["year"] == "int64"
    got = check_against_source(out, expected, root)
    _, where = read_all(out)
    for rel, r in got.items():
        assert where[rel] == splits[rel]
        assert scalar(r, "image/class/label") == {"x": 0, "y": 1}[expected[rel]]
        assert scalar(r, "year") == 100 + int(rel[1:-4])


@pytest.mark.parametrize("label_type", ["class", "int", "float"])
def test_label_type_forces_the_kind(tmp_path, label_type):
    root, out = str(tmp_path / "pool"), str(tmp_path / "out")
    values = ["3", "10", "2", "3"]  # integers: inferred as int labels without --label_type
    expected = {}
    for i, v in enumerate(values):
        write(os.path.join(root, f"{i}.jpg"), image_bytes(seed=i))
        expected[f"{i}.jpg"] = v
    table = write_csv(str(tmp_path / "t.csv"), ["filename", "label"], [[k, v] for k, v in expected.items()])
    assert convert("--label_table", table, "--image_root", root, "--output", out, "--label_type", label_type) == 0
    m = manifest(out)
    assert m["label_map"]["kind"] == label_type
    if label_type == "float":
        rows = check_against_source(out, {k: float(v) for k, v in expected.items()}, root, label_key="image/target")
        assert m["features"]["image/target"] == "float" and "image/class/label" not in m["features"]
    else:
        rows = check_against_source(out, expected, root)
        # class: names sorted as strings ("10" < "2" < "3"), ids 0..N-1; int: the values themselves
        ids = {"10": 0, "2": 1, "3": 2} if label_type == "class" else {v: int(v) for v in values}
        for rel, r in rows.items():
            assert scalar(r, "image/class/label") == ids[expected[rel]]


def test_split_folders_named_explicitly(tmp_path):
    root, out = str(tmp_path / "data"), str(tmp_path / "out")
    expected = {}
    for split in ("train", "holdout"):  # "holdout" is not a name that auto-detection knows
        for c in ("ant", "bee"):
            for k in range(3):
                rel = f"{split}/{c}/{k}.jpg"
                write(os.path.join(root, rel), image_bytes(seed=len(expected)))
                expected[rel] = c
    assert convert("--input", root, "--output", out, "--split", "folders") == 0
    m = manifest(out)
    assert {s: v["records"] for s, v in m["splits"].items()} == {"train": 6, "holdout": 6}
    got = check_against_source(out, expected, root)
    _, where = read_all(out)
    assert all(where[rel] == rel.split("/")[0] for rel in got)


# --- listing: --include, hidden files and dot-folders --------------------------------------------

def test_include_patterns_and_hidden_files(tmp_path):
    root, out = str(tmp_path / "images"), str(tmp_path / "out")
    labels = make_tree(root, per_class=2)
    write(os.path.join(root, "cat", "upper.JPG"), image_bytes(seed=31))  # matches *.jpg: case-insensitive
    labels["cat/upper.JPG"] = "cat"
    write(os.path.join(root, "cat", "x.png"), image_bytes(fmt="PNG", seed=32))
    write(os.path.join(root, "dog", "notes.txt"), b"hello")
    write(os.path.join(root, "dog", ".hidden", "b.jpg"), image_bytes(seed=33))  # a dot-folder
    write(os.path.join(root, "bird", ".DS_Store"), b"\x00\x00\x00\x01Bud1")
    assert convert("--input", root, "--output", out, "--include", "*.jpg") == 0
    m = manifest(out)
    assert m["counts"]["excluded"] == {"hidden": 2, "not_included": 2}, m["counts"]
    assert m["counts"]["listed"] == len(labels) == m["counts"]["written"]
    check_against_source(out, labels, root)
    out2 = str(tmp_path / "out2")
    assert convert("--input", root, "--output", out2, "--include", "*.jpg,*.png") == 0
    assert manifest(out2)["counts"]["excluded"] == {"hidden": 2, "not_included": 1}
    check_against_source(out2, dict(labels, **{"cat/x.png": "cat"}), root)


# --- stale shards of another compression or split -------------------------------------------------

def test_overwrite_removes_stale_shards_of_another_compression_and_split(tmp_path):
    root, out = str(tmp_path / "images"), str(tmp_path / "out")
    labels = make_tree(root, per_class=4)
    assert convert("--input", root, "--output", out, "--split", "train=0.5,validation=0.5", "--num_shards", "2",
                   "--compression", "gzip") == 0
    old = sorted(os.path.basename(f) for f in shard_files(out))
    assert any(n.startswith("validation-") for n in old) and all(n.endswith(".tfrecord.gz") for n in old)
    assert convert("--input", root, "--output", out, "--num_shards", "2", "--overwrite") == 0
    assert sorted(n for n in os.listdir(out) if "-of-" in n) == ["train-00000-of-00002.tfrecord",
                                                                 "train-00001-of-00002.tfrecord"]
    check_against_source(out, labels, root)
    from tfrecord_pipelines.outputs.verification import verify_output
    assert verify_output(out).ok


# --- verify: feature types and --fast --------------------------------------------------------------

def _rewrite_shard(out: str, split: str, change) -> str:
    """Rewrites the first shard of `split` with valid framing after change(example)
    edits its first record, and updates the manifest's bytes and sha256 for that
    shard, so only the checks of the records' content can catch the edit."""
    import tensorflow as tf
    m = manifest(out)
    entry = m["splits"][split]["shards"][0]
    path = os.path.join(out, entry["name"])
    records = [r.numpy() for r in tf.data.TFRecordDataset([path])]
    ex = tf.train.Example.FromString(records[0])
    change(ex)
    records[0] = ex.SerializeToString()
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    sums = shard_checksums(path)
    for key in ("bytes", "sha256", "crc32c"):  # whichever the manifest records
        if key in entry:
            entry[key] = sums[key]
    for key in ("bytes",):
        if key in m["splits"][split]:
            m["splits"][split][key] = sum(s["bytes"] for s in m["splits"][split]["shards"])
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(m, f)
    return entry["name"]


def test_verify_checks_feature_types_and_fast_skips_image_hashes(tmp_path, capsys):
    from tfrecord_pipelines.commands.verify import main as verify_main
    root = str(tmp_path / "images")
    make_tree(root, per_class=2)
    base = str(tmp_path / "clean")
    assert convert("--input", root, "--output", base, "--num_shards", "1") == 0
    assert verify_main([base, "--quiet"]) == 0

    # A label stored as bytes where the manifest says int64.
    typed = str(tmp_path / "typed")
    subprocess.run(["cp", "-r", base, typed], check=True)

    def label_as_bytes(ex):
        ex.features.feature["image/class/label"].ClearField("int64_list")
        ex.features.feature["image/class/label"].bytes_list.value.append(b"1")
    name = _rewrite_shard(typed, "train", label_as_bytes)
    capsys.readouterr()
    assert verify_main([typed, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{name}: record 0" in err and "manifest's features" in err, err
    assert verify_main([typed, "--quiet", "--fast"]) == 1  # --fast still parses every Example

    # Other image bytes under the recorded sha256: only the (not --fast) image check sees it.
    swapped = str(tmp_path / "swapped")
    subprocess.run(["cp", "-r", base, swapped], check=True)

    def other_image(ex):
        ex.features.feature["image/encoded"].bytes_list.value[0] = image_bytes(seed=1234)
    name = _rewrite_shard(swapped, "train", other_image)
    capsys.readouterr()
    assert verify_main([swapped, "--quiet"]) == 1
    assert f"{name}: record 0" in capsys.readouterr().err
    assert verify_main([swapped, "--quiet", "--fast"]) == 0


# --- versioned runs: unchanged inputs stop before reading an image -----------------------------------

class _Opens:
    """Counts open() calls under a folder, through Python's "open" audit event."""
    prefix = ""
    paths: list = []

    @classmethod
    def hook(cls, event, args):
        if cls.prefix and event == "open" and isinstance(args[0], str) and args[0].startswith(cls.prefix):
            cls.paths.append(args[0])


def test_an_unchanged_versioned_run_reads_no_image(tmp_path, capsys):
    images, root = str(tmp_path / "images"), str(tmp_path / "dataset")
    labels = make_tree(images, per_class=3)
    settle()  # files written just before a run are not trusted unchanged by the next one
    base = ["--input", images, "--output", root, "--versioned"]
    if _Opens.hook not in _hooks:
        sys.addaudithook(_Opens.hook)
        _hooks.append(_Opens.hook)
    _Opens.prefix, _Opens.paths = os.path.join(images, ""), []
    try:
        assert convert(*base, "--version", "v1") == 0
        assert len(set(_Opens.paths)) == len(labels)  # the hook sees this run's reads
        _Opens.paths = []
        capsys.readouterr()
        assert convert(*base, "--version", "v2") == 0
        assert "unchanged" in capsys.readouterr().out
        assert _Opens.paths == []  # stopped after the listing: not one image opened
    finally:
        _Opens.prefix = ""
    assert not os.path.exists(os.path.join(root, "v2"))
    check_against_source(os.path.join(root, "v1"), labels, images)


class _NoManifest:
    """Fails, through Python's "open" audit event, every open for writing of a
    manifest (or its temp file) in one folder, as a full disk would."""
    folder = ""

    @classmethod
    def hook(cls, event, args):
        if not cls.folder or event != "open" or not isinstance(args[0], str):
            return
        mode, flags = args[1] if isinstance(args[1], str) else "", args[2] if isinstance(args[2], int) else 0
        writing = "w" in mode or "x" in mode or bool(flags & (os.O_WRONLY | os.O_RDWR))
        if writing and os.path.dirname(os.path.abspath(args[0])) == cls.folder \
                and os.path.basename(args[0]).startswith("manifest"):
            raise OSError(28, "No space left on device (injected)", args[0])


def test_latest_moves_only_after_the_manifest(tmp_path):
    images, root = str(tmp_path / "images"), str(tmp_path / "dataset")
    labels = make_tree(images, per_class=2)
    base = ["--input", images, "--output", root, "--versioned"]
    assert convert(*base, "--version", "v1") == 0
    write(os.path.join(images, "cat", "new.jpg"), image_bytes(seed=80))
    labels["cat/new.jpg"] = "cat"
    if _NoManifest.hook not in _hooks:
        sys.addaudithook(_NoManifest.hook)
        _hooks.append(_NoManifest.hook)
    _NoManifest.folder = os.path.join(root, "v2")
    try:
        assert convert(*base, "--version", "v2") != 0  # the manifest of v2 cannot be written
    finally:
        _NoManifest.folder = ""
    with open(os.path.join(root, "LATEST")) as f:
        assert f.read() == "v1\n"
    assert not os.path.exists(os.path.join(root, "v2", "manifest.json"))
    assert not os.path.exists(os.path.join(root, ".tfrecords.lock"))
    assert convert(*base, "--version", "v3") == 0
    with open(os.path.join(root, "LATEST")) as f:
        assert f.read() == "v3\n"
    check_against_source(os.path.join(root, "v3"), labels, images)


# --- Beam counters ------------------------------------------------------------------------------------

def test_beam_counters(tmp_path, monkeypatch):
    import apache_beam as beam
    from apache_beam.metrics.metric import MetricsFilter
    root, out = str(tmp_path / "images"), str(tmp_path / "out")
    labels = make_tree(root, per_class=3)
    write(os.path.join(root, "cat", "bad.jpg"), b"<html>")
    results = []
    original = beam.Pipeline.run

    def run(self, *a, **k):  # observes the result; the run itself is untouched
        results.append(original(self, *a, **k))
        return results[-1]
    monkeypatch.setattr(beam.Pipeline, "run", run)
    assert convert("--input", root, "--output", out, "--num_shards", "2", "--max_reject_fraction", "0.2") == 0
    result, = results
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed
                for c in result.metrics().query(MetricsFilter().with_namespace("tfrecords"))["counters"]}
    m = manifest(out)
    assert counters["records_written"] == len(labels) == m["counts"]["written"]
    assert counters["images_valid"] == len(labels) and counters["images_rejected"] == 1
    assert counters["bytes_written"] == sum(s["bytes"] for s in m["splits"]["train"]["shards"])
    check_against_source(out, labels, root)


# --- label maps: a text file, and label_map.json passed back ------------------------------------------

def test_text_label_map_and_label_map_json_passed_back(tmp_path):
    root = str(tmp_path / "images")
    labels = make_tree(root, per_class=2)
    text_map = write(str(tmp_path / "classes.txt"), b"dog\ncat\nbird\n")  # one name per line: ids 0, 1, 2
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--label_map", text_map) == 0
    ids = {"dog": 0, "cat": 1, "bird": 2}
    assert manifest(out)["label_map"]["classes"] == ids
    rows = check_against_source(out, labels, root)
    assert all(scalar(r, "image/class/label") == ids[labels[rel]] for rel, r in rows.items())
    # The output's label_map.json, passed back, gives the same ids to a grown dataset.
    write(os.path.join(root, "ant", "0.jpg"), image_bytes(seed=70))  # "ant" sorts first
    out2 = str(tmp_path / "out2")
    assert convert("--input", root, "--output", out2, "--label_map", os.path.join(out, "label_map.json"),
                   "--extend_label_map") == 0
    ids2 = dict(ids, ant=3)
    with open(os.path.join(out2, "label_map.json")) as f:
        assert json.load(f) == ids2
    rows = check_against_source(out2, dict(labels, **{"ant/0.jpg": "ant"}), root)
    assert all(scalar(r, "image/class/label") == ids2[scalar(r, "image/class/text")] for r in rows.values())


# --- make demo ----------------------------------------------------------------------------------------

def test_demo(tmp_path):
    """What `make demo` runs (python -m tfrecord_pipelines.demo), into a temporary folder: 320
    JPEGs and two broken files, converted 80/20, verified, with README's summary."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("STORAGE_EMULATOR_HOST", None)
    p = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.demo", "--dir", str(tmp_path / "demo")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    text = p.stdout
    assert "listed 322 = written 320 + rejected 2" in text, text
    assert "rejected by reason: not_an_image 1, truncated 1" in text, text
    assert "OK:" in text
    out, data = str(tmp_path / "demo" / "out"), str(tmp_path / "demo" / "data" / "train")
    m = manifest(out)
    assert {s: v["records"] for s, v in m["splits"].items()} == {"train": 252, "validation": 68}
    for split, v in m["splits"].items():
        assert f"{split:<16} {v['records']:>7}" in text  # the summary table of README
    images = {os.path.relpath(os.path.join(d, f), data): os.path.basename(d)
              for d, _, fs in os.walk(data) for f in fs}
    broken = {rel for rel in images if rel.endswith(("truncated.JPEG", "notes.jpg"))}
    assert len(broken) == 2 and set(rejects(out)) == broken
    check_against_source(out, {k: v for k, v in images.items() if k not in broken}, data)
