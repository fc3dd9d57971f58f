"""Reading input files: only regular files, bounded in size, read ahead in
order, each file listed once, and written only if it is exactly what was
validated."""
import os
import socket
import threading
import time

import pytest

from conftest import convert, image_bytes, make_tree, manifest, read_examples, scalar, sha256_file, shard_files, write
from tfrecord_pipelines.transforms.core import specs
from tfrecord_pipelines.transforms.core.images import ImagePolicy
from tfrecord_pipelines.transforms.core.records import Rec, fingerprint
from tfrecord_pipelines.transforms.core.specs import ReadPolicy
from tfrecord_pipelines.transforms.storage import reads
from tfrecord_pipelines.transforms.storage.reads import read_ahead


def _rejects(out):
    import json
    with open(os.path.join(out, "rejects.jsonl")) as f:
        return {r["path"]: r for r in map(json.loads, f)}


def _written(out):
    m = manifest(out)
    rows = [r for split in m["splits"] for r in read_examples(out, split)]
    return {scalar(r, "image/filename"): r for r in rows}


def _assert_written_as_source(out, root, labels):
    """Every file of `labels` written with its label and its bytes unchanged, and nothing else;
    the counts reconcile."""
    written = _written(out)
    assert {k: scalar(r, "image/class/text") for k, r in written.items()} == labels
    for rel, row in written.items():
        with open(os.path.join(root, rel), "rb") as f:
            assert row["image/encoded"] == [f.read()]
    m = manifest(out)
    assert m["counts"]["listed"] == m["counts"]["written"] + m["counts"]["rejected"]


def test_read_ahead_keeps_order_and_bounds_reads_in_flight():
    import concurrent.futures
    running, peak, lock = [0], [0], threading.Lock()

    def slow(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.002 * (i % 5))  # finish out of order
        with lock:
            running[0] -= 1
        if i == 7:
            raise ValueError("seven")
        return i * 10

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        got = list(read_ahead(range(40), slow, 4, pool))
    assert [i for i, _ in got] == list(range(40))
    assert [o.value for i, o in got if i != 7] == [i * 10 for i in range(40) if i != 7]
    assert isinstance(got[7][1].error, ValueError)
    assert peak[0] <= 4


def test_only_regular_files_are_read(tmp_path):
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=3)
    os.mkfifo(os.path.join(root, "cat", "fifo.jpg"))  # open() would wait for a writer forever
    os.symlink("/dev/zero", os.path.join(root, "cat", "zero.jpg"))  # never ends
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(os.path.join(root, "dog", "sock.jpg"))
    os.mkdir(os.path.join(root, "dog", "folder.jpg.d"))
    write(os.path.join(root, "bird", "huge.jpg"), image_bytes(64, 64) + b"\0" * 5000)
    out = str(tmp_path / "out")
    try:
        assert convert("--input", root, "--output", out, "--max_reject_fraction", "0.5",
                       "--max_file_bytes", "4000") == 0
    finally:
        sock.close()
    rej = _rejects(out)
    assert rej["cat/fifo.jpg"]["reason"] == "not_a_file" and "FIFO" in rej["cat/fifo.jpg"]["detail"]
    assert rej["cat/zero.jpg"]["reason"] == "not_a_file" and "device" in rej["cat/zero.jpg"]["detail"]
    assert rej["dog/sock.jpg"]["reason"] == "not_a_file" and "socket" in rej["dog/sock.jpg"]["detail"]
    assert rej["bird/huge.jpg"]["reason"] == "too_large" and "4,000" in rej["bird/huge.jpg"]["detail"]
    _assert_written_as_source(out, root, labels)


def test_no_file_contents_in_rejects(tmp_path):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=3)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:*:19000:0:99999:7:::\n")
    os.symlink(str(secret), os.path.join(root, "cat", "shadow.jpg"))
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "0.5") == 0
    with open(os.path.join(out, "rejects.jsonl")) as f:
        text = f.read()
    assert "cat/shadow.jpg" in text and "not_an_image" in text
    assert "root:" not in text


def test_symlinked_folders_that_alias_each_other_list_each_file_once(tmp_path):
    root = str(tmp_path / "imgs")
    labels = make_tree(root, classes=("x", "z"), per_class=3)
    os.symlink("../z", os.path.join(root, "x", "toz"))
    os.symlink("../x", os.path.join(root, "z", "tox"))
    os.symlink("0.jpg", os.path.join(root, "x", "same-as-0.jpg"))
    outside = str(tmp_path / "elsewhere")
    write(os.path.join(outside, "o.jpg"), image_bytes(20, 20, seed=99))
    os.symlink(outside, os.path.join(root, "x", "linked"))  # outside the root: followed
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--label_depth", "1") == 0
    written = _written(out)
    assert {k: scalar(r, "image/class/text") for k, r in written.items()} == {**labels, "x/linked/o.jpg": "x"}
    assert manifest(out)["counts"]["excluded"]["symlink_alias"] == 3
    shas = [scalar(r, "image/key/sha256") for r in written.values()]
    assert len(shas) == len(set(shas))


def test_a_same_size_rewrite_between_validation_and_writing_is_rejected(tmp_path, monkeypatch):
    from tfrecord_pipelines.transforms.stages import write_shards
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=4)
    victims = ["cat/1.jpg", "dog/2.jpg"]
    originals = {rel: sha256_file(os.path.join(root, rel)) for rel in labels}
    real = write_shards.read_again

    def rewrite_then_read(rec, policy):
        if rec.rel in victims:
            path = os.path.join(root, rec.rel)
            size = os.path.getsize(path)
            with open(path, "r+b") as f:  # same size, other bytes: undecodable
                f.seek(size // 2)
                f.write(b"\x00" * (size // 2 - 2))
        return real(rec, policy)
    monkeypatch.setattr(write_shards, "read_again", rewrite_then_read)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "0.5", "--reads_per_image", "2") == 0
    rej = _rejects(out)
    assert {k: v["reason"] for k, v in rej.items()} == {v: "changed" for v in victims}
    assert "same size" in rej["cat/1.jpg"]["detail"]
    written = _written(out)
    assert set(written) == set(labels) - set(victims)
    for rel, row in written.items():
        assert scalar(row, "image/key/sha256") == originals[rel]


def test_fingerprint_covers_every_byte():
    data = image_bytes(64, 64)
    mid = bytearray(data)
    mid[len(mid) // 2] ^= 1
    assert fingerprint(bytes(mid)) != fingerprint(data)


def test_unknown_size_reads_are_capped(tmp_path):
    path = str(tmp_path / "f.bin")
    write(path, b"x" * 100)
    policy = ReadPolicy(max_file_bytes=99)
    with pytest.raises(reads.TooLarge):
        reads.read_input(path, 0, -1, policy)
    assert reads.read_input(path, 0, -1, ReadPolicy(max_file_bytes=100))[0] == b"x" * 100


def test_reads_in_flight_defaults_by_scheme():
    p = ImagePolicy().reads
    assert p.in_flight_for("/data/x.jpg") == specs.LOCAL_IN_FLIGHT
    assert p.in_flight_for("gs://b/x.jpg") == specs.REMOTE_IN_FLIGHT
    assert ReadPolicy(in_flight=3).in_flight_for("gs://b/x.jpg") == 3


def test_rec_carries_the_generation():
    assert Rec(rel="a", path="gs://b/a", generation=7).generation == 7


def test_one_read_and_two_reads_write_the_same_shards_and_rejects(tmp_path):
    """With one read per image the writer validates; with two the
    ValidateImages stage does, before planning. Without rejects the shards are
    byte-identical; with rejects both reject the same files for the same
    reasons, and every good image is written, whole, under its label."""
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=6)
    outs = {}
    for reads in ("1", "2"):
        outs[reads] = str(tmp_path / f"out{reads}")
        assert convert("--input", root, "--output", outs[reads], "--num_shards", "3",
                       "--reads_per_image", reads, in_memory=False) == 0
    files = {r: [sha256_file(f) for f in shard_files(o)] for r, o in outs.items()}
    assert files["1"] == files["2"] and len(files["1"]) == 3

    good = dict(labels)
    write(os.path.join(root, "cat", "cut.jpg"), image_bytes(30, 30)[:200])
    write(os.path.join(root, "dog", "text.jpg"), b"hello")
    for reads in ("1", "2"):
        out = str(tmp_path / f"bad{reads}")
        assert convert("--input", root, "--output", out, "--num_shards", "2", "--reads_per_image", reads,
                       "--max_reject_fraction", "0.5") == 0
        assert {k: v["reason"] for k, v in _rejects(out).items()} == {"cat/cut.jpg": "truncated",
                                                                       "dog/text.jpg": "not_an_image"}
        _assert_written_as_source(out, root, good)
        assert manifest(out)["counts"]["rejected"] == 2


def test_names_that_are_not_utf8_are_records_not_crashes(tmp_path):
    """A folder or file name with bytes that are not UTF-8 (written by another
    system's locale): the file is written under its raw bytes name, or,
    where the name would be a class name, rejected with its reason."""
    root = str(tmp_path / "imgs")
    labels = make_tree(root, classes=("ok",), per_class=2)
    broot = os.fsencode(root)
    os.makedirs(os.path.join(broot, b"caf\xff"))
    with open(os.path.join(broot, b"caf\xff", b"a.jpg"), "wb") as f:
        f.write(image_bytes(20, 20, seed=5))
    odd = image_bytes(20, 20, seed=6)
    with open(os.path.join(broot, b"ok", b"b\xfe.jpg"), "wb") as f:
        f.write(odd)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "0.5") == 0
    rej = _rejects(out)
    assert rej == {"caf\\xff/a.jpg": {"path": "caf\\xff/a.jpg", "reason": "no_label",
                                       "detail": "no label: the path is not valid UTF-8, so its folder name "
                                                 "cannot be a class name"}}
    m = manifest(out)
    rows = read_examples(out, "train")
    by_name = {r["image/filename"][0]: r for r in rows}
    assert set(by_name) == {k.encode() for k in labels} | {b"ok/b\xfe.jpg"}
    assert by_name[b"ok/b\xfe.jpg"]["image/encoded"] == [odd]
    assert m["counts"]["listed"] == m["counts"]["written"] + m["counts"]["rejected"] == 4


def _progressive_with_scans(n: int) -> bytes:
    """A progressive JPEG whose last scan is repeated until it has n scans."""
    import re
    data = image_bytes(64, 48, progressive=True)
    sos = [m.start() for m in re.finditer(rb"\xff\xda", data)]
    last = data[sos[-1]:len(data) - 2]  # the last scan, up to EOI
    return data[:len(data) - 2] + last * (n - len(sos)) + b"\xff\xd9"


def _with_app_segments(total: int) -> bytes:
    data = image_bytes(64, 48)
    seg = b"\xff\xe1" + (65535).to_bytes(2, "big") + b"Exif\x00\x00" + b"\x00" * (65533 - 6)
    return data[:2] + seg * (total // 65535 + 2) + data[2:]


def test_images_that_cost_far_more_than_any_real_one_are_too_complex(tmp_path):
    from tfrecord_pipelines.transforms.core.images import MAX_JPEG_METADATA, MAX_JPEG_SCANS, BadImage, Validation, probe_image
    from tfrecord_pipelines.transforms.core.records import Reason
    ok = _progressive_with_scans(20)
    assert probe_image(ok, ImagePolicy(validation=Validation.FULL)).fmt == "jpeg"
    for data, what in ((_progressive_with_scans(MAX_JPEG_SCANS + 50), "scans"),
                       (_with_app_segments(MAX_JPEG_METADATA + 1), "metadata")):
        for mode in Validation:
            with pytest.raises(BadImage) as e:
                probe_image(data, ImagePolicy(validation=mode))
            assert e.value.reason is Reason.TOO_COMPLEX and what in str(e.value)
    # and end to end: rejected with the reason, the rest written
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=3)
    write(os.path.join(root, "cat", "scans.jpg"), _progressive_with_scans(MAX_JPEG_SCANS + 50))
    write(os.path.join(root, "dog", "exif.jpg"), _with_app_segments(MAX_JPEG_METADATA + 1))
    write(os.path.join(root, "dog", "fine.jpg"), ok)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "0.5") == 0
    assert {k: v["reason"] for k, v in _rejects(out).items()} == {"cat/scans.jpg": "too_complex",
                                                                   "dog/exif.jpg": "too_complex"}
    assert set(_written(out)) == set(labels) | {"dog/fine.jpg"}


def test_a_gzipped_label_table(tmp_path):
    import csv
    import gzip
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=3)
    table = str(tmp_path / "labels.csv.gz")
    with gzip.open(table, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["filename", "label"])
        w.writerows(sorted(labels.items()))
    out = str(tmp_path / "out")
    assert convert("--label_table", table, "--image_root", root, "--output", out) == 0
    _assert_written_as_source(out, root, labels)


def test_hidden_top_folders_are_counted_like_nested_ones(tmp_path):
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=2)
    write(os.path.join(root, ".git", "objects", "x.jpg"), image_bytes(seed=7))
    write(os.path.join(root, "cat", ".thumbs", "y.jpg"), image_bytes(seed=8))
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out) == 0
    assert manifest(out)["counts"]["excluded"] == {"hidden": 2}
    _assert_written_as_source(out, root, labels)


def test_a_table_path_through_a_symlink_out_of_the_root_is_unsafe(tmp_path):
    import csv
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=2)
    secret = tmp_path / "elsewhere"
    write(str(secret / "x.jpg"), image_bytes(seed=11))
    os.symlink(str(secret), os.path.join(root, "escape"))
    table = str(tmp_path / "t.csv")
    with open(table, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["filename", "label"])
        w.writerows(sorted(labels.items()))
        w.writerow(["escape/x.jpg", "cat"])
    out = str(tmp_path / "out")
    assert convert("--label_table", table, "--image_root", root, "--output", out,
                   "--max_reject_fraction", "0.5") == 0
    rej = _rejects(out)
    assert rej["escape/x.jpg"]["reason"] == "unsafe_path" and "symbolic link" in rej["escape/x.jpg"]["detail"]
    _assert_written_as_source(out, root, labels)


def test_local_reads_take_files_whole_even_without_a_size(tmp_path):
    path = str(tmp_path / "f.bin")
    write(path, b"abc" * 1000)
    assert reads.read_local(path, 1 << 30) == (b"abc" * 1000, path)
    assert reads.read_local(path, 3000)[0] == b"abc" * 1000
    with pytest.raises(reads.TooLarge):
        reads.read_local(path, 2999)
    # /proc files report size 0 and still have content: read to the cap
    cmdline = reads.read_local("/proc/self/cmdline", 1 << 20)[0]
    assert cmdline and b"python" in cmdline
    with pytest.raises(reads.TooLarge):
        reads.read_local("/proc/self/cmdline", 3)
