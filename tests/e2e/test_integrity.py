"""The success marker means a complete output, whatever the fault: disk full
while publishing, temp files of an earlier failure, a damaged manifest, a run
whose lock was taken over, the output folder removed while publishing. And
failed runs do not pile up their rejects."""
from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, convert, make_tree, manifest, read_examples, scalar, shard_files, write
from tfrecord_pipelines.outputs.verification import verify_output
from tfrecord_pipelines.transforms.storage import fsutil, layout


class SmallDisk:
    """A folder on a small filesystem that a test can fill at a chosen moment.

    A real 4 MB tmpfs where this process may mount one (root with
    CAP_SYS_ADMIN): the kernel itself answers ENOSPC. Elsewhere (a container
    without that capability) disk full is simulated in-process: every file
    that fsutil opens for writing then fails with ENOSPC, as a full disk does.
    """

    def __init__(self, base: str, monkeypatch):
        self.dir = os.path.join(base, "small")
        os.makedirs(self.dir)
        self.mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", self.dir],
                                      capture_output=True).returncode == 0
        self.full = False
        if not self.mounted:
            monkeypatch.setattr(fsutil, "open", self._open, raising=False)
        print(f"disk full by {'a real tmpfs' if self.mounted else 'in-process injection'}")

    def _open(self, path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        if self.full and any(c in mode for c in "wxa") and str(path).startswith(self.dir):
            return _FullDiskFile(f)
        return f

    def fill(self) -> None:
        self.full = True
        if not self.mounted:
            return
        chunk = b"\0" * 65536
        with open(os.path.join(self.dir, "filler"), "wb", buffering=0) as f:
            for size in (65536, 4096, 1):  # down to the last byte
                try:
                    while True:
                        f.write(chunk[:size])
                except OSError as e:
                    assert e.errno == errno.ENOSPC

    def free(self) -> None:
        self.full = False
        if self.mounted:
            os.remove(os.path.join(self.dir, "filler"))

    def close(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", self.dir], check=True)


class _FullDiskFile:
    def __init__(self, f):
        self._f = f

    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    disk = SmallDisk(str(tmp_path), monkeypatch)
    try:
        yield disk
    finally:
        disk.close()


def fill_before(monkeypatch, disk: SmallDisk, function: str, name: str) -> None:
    """Fills the disk just before fsutil.<function> writes a file called `name`."""
    real = getattr(fsutil, function)

    def writing(path, data):
        if os.path.basename(path) == name:
            disk.fill()
        return real(path, data)
    monkeypatch.setattr(fsutil, function, writing)


def temp_files(out: str) -> list:
    return [n for n in os.listdir(out) if ".tmp-" in n]


def assert_fails_then_rerun_resumes(images, out, disk, capsys, labels):
    err = capsys.readouterr().err
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert temp_files(out) == [] and not os.path.exists(os.path.join(out, ".tfrecords.lock"))
    assert not verify_output(out).ok
    disk.free()
    # The same command again: the failed publish is undone and its shards kept (resume), not refused.
    assert convert("--input", images, "--output", out) == 0
    assert "was undone" in capsys.readouterr().err and manifest(out)["made"]["shards_resumed"] == 1
    assert verify_output(out).ok and len(read_examples(out, "train")) == len(labels)
    return err


def test_disk_full_while_writing_the_manifest(tree, small_disk, monkeypatch, capsys):
    images, labels = tree
    out = os.path.join(small_disk.dir, "out")
    fill_before(monkeypatch, small_disk, "create_only", "manifest.json")
    assert convert("--input", images, "--output", out) == 1
    monkeypatch.undo()
    err = assert_fails_then_rerun_resumes(images, out, small_disk, capsys, labels)
    assert "No space left on device" in err and "nothing was published" in err and "Traceback" not in err


def test_disk_full_while_writing_the_label_map(tree, small_disk, monkeypatch, capsys):
    images, labels = tree
    out = os.path.join(small_disk.dir, "out")
    fill_before(monkeypatch, small_disk, "write_chunks", "label_map.json")
    assert convert("--input", images, "--output", out) == 1
    monkeypatch.undo()
    err = assert_fails_then_rerun_resumes(images, out, small_disk, capsys, labels)
    assert "No space left on device" in err and "Traceback" not in err


def test_leftover_temp_files_are_removed(tree, tmp_path):
    images, _ = tree
    out = str(tmp_path / "out")
    assert convert("--input", images, "--output", out) == 0
    left = ["label_map.json.tmp-4242", "schema.pbtxt.tmp-4242", "manifest.json.tmp-77-0badc0de"]
    for name in left + ["notes.txt.tmp-1"]:  # the last is not ours: it stays
        with open(os.path.join(out, name), "wb") as f:
            f.write(b"")
    assert convert("--input", images, "--output", out, "--overwrite") == 0
    assert temp_files(out) == ["notes.txt.tmp-1"]
    # Without --overwrite too: a folder holding only temp files of a failed run.
    out2 = str(tmp_path / "out2")
    os.makedirs(out2)
    for name in left:
        open(os.path.join(out2, name), "wb").close()
    assert convert("--input", images, "--output", out2) == 0
    assert temp_files(out2) == [] and verify_output(out2).ok


def test_unreadable_manifest_is_an_incomplete_dataset(tree, tmp_path, capsys):
    images, _ = tree
    out = str(tmp_path / "out")
    assert convert("--input", images, "--output", out) == 0
    open(os.path.join(out, "manifest.json"), "wb").close()  # 0 bytes, as disk full left it before
    capsys.readouterr()
    assert convert("--input", images, "--output", out) == 2
    err = capsys.readouterr().err
    assert "an incomplete dataset (manifest.json cannot be read" in err and "a complete dataset" not in err
    report = verify_output(out)
    assert not report.ok and "manifest.json cannot be read" in report.errors[0]
    assert convert("--input", images, "--output", out, "--overwrite") == 0 and verify_output(out).ok


def _convert_in_subprocess(*args) -> subprocess.CompletedProcess:
    code = "import sys\nfrom tfrecord_pipelines.commands.convert import run\nsys.exit(run(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *args, "--progress", "off", "--direct_running_mode",
                           "in_memory"], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _snapshot(out: str) -> dict:
    """{name: sha256} of the files in `out`."""
    return {n: hashlib.sha256(open(os.path.join(out, n), "rb").read()).hexdigest() for n in sorted(os.listdir(out))
            if os.path.isfile(os.path.join(out, n))}


@pytest.mark.parametrize("how", ["break_lock", "expired"])
def test_lock_taken_over_publishes_nothing(tree, tmp_path, monkeypatch, capsys, how):
    """Run A's lock is taken over by run B (--break_lock, or A's lock expired)
    while A is still converting; B publishes a complete dataset. When A gets to
    publishing it must publish nothing: B's output stays exactly as B left it."""
    from tfrecord_pipelines.transforms.stages import publish as publish_mod
    images, labels = tree
    out = str(tmp_path / "out")
    real = publish_mod.publish
    taken = str(tmp_path / "taken.json")  # Beam pickles the step (and this closure): state goes by file

    def publish_after_takeover(*a, **kw):
        b_args = ["--input", images, "--output", out, "--num_shards", "2"]
        b = _convert_in_subprocess(*b_args, *(["--break_lock"] if how == "break_lock" else []))
        with open(taken, "w") as f:
            json.dump({"code": b.returncode, "err": b.stderr, "files": _snapshot(out)}, f)
        return real(*a, **kw)
    monkeypatch.setattr(publish_mod, "publish", publish_after_takeover)
    ttl = ["--lock_ttl_hours", "0.0001"] if how == "expired" else []  # 0.36 s
    assert convert("--input", images, "--output", out, "--num_shards", "1", *ttl) == 1
    err = capsys.readouterr().err
    assert "no longer holds the lock" in err and "nothing was published" in err and "Traceback" not in err
    with open(taken) as f:
        b = json.load(f)
    assert b["code"] == 0 and "taking over the lock of run" in b["err"], b["err"]
    assert _snapshot(out) == b["files"]  # B's dataset, untouched
    assert len(shard_files(out)) == 2 and manifest(out)["splits"]["train"]["num_shards"] == 2
    assert verify_output(out).ok and len(read_examples(out, "train")) == len(labels)
    assert not [d for d in os.listdir(out) if d.startswith(".tfrecords")]  # no staging, no lock left


def test_lock_deleted_by_hand_publishes_nothing(tree, tmp_path, monkeypatch, capsys):
    """Deleting the lock (`gcloud storage rm .../.tfrecords.lock`, as README
    offers) hands the output to whoever comes next: the old run must not
    publish into it any more."""
    from tfrecord_pipelines.transforms.stages import publish as publish_mod
    images, _ = tree
    out = str(tmp_path / "out")
    real = publish_mod.publish

    def publish_after_rm(*a, **kw):
        os.remove(os.path.join(out, ".tfrecords.lock"))
        return real(*a, **kw)
    monkeypatch.setattr(publish_mod, "publish", publish_after_rm)
    assert convert("--input", images, "--output", out) == 1
    err = capsys.readouterr().err
    assert "no longer holds the lock" in err and "it is gone" in err
    assert not os.path.exists(os.path.join(out, "manifest.json")) and not shard_files(out)


def test_output_removed_while_publishing(tree, tmp_path, monkeypatch, capsys):
    images, _ = tree
    out = str(tmp_path / "out")
    real = fsutil.write_chunks

    def write_chunks(path, chunks):
        if os.path.basename(path) == "rejects.jsonl":  # the shards are in; the rest is still to come
            shutil.rmtree(out)
        return real(path, chunks)
    monkeypatch.setattr(fsutil, "write_chunks", write_chunks)
    assert convert("--input", images, "--output", out) == 1
    captured = capsys.readouterr()
    assert "missing after publishing" in captured.err and "Converted in" not in captured.out
    assert "Traceback" not in captured.err
    assert not os.path.exists(os.path.join(out, "manifest.json")) and not shard_files(out)
    assert not verify_output(out).ok


def test_failed_rejects_keep_only_the_latest(tmp_path, capsys):
    images = str(tmp_path / "images")
    make_tree(images, per_class=1)
    for k in range(3):
        with open(os.path.join(images, "cat", f"bad{k}.jpg"), "wb") as f:
            f.write(b"not an image")
    out = str(tmp_path / "out")
    messages = []
    for _ in range(layout.KEEP_FAILED_REJECTS + 2):
        assert convert("--input", images, "--output", out, "--max_reject_fraction", "0.1") == 1
        messages.append(capsys.readouterr().err)
    kept = sorted(glob.glob(os.path.join(out, "failed-*.rejects.jsonl")))
    assert len(kept) == layout.KEEP_FAILED_REJECTS == 3
    named = re.search(r"(\S+failed-\S+\.rejects\.jsonl)", messages[-1]).group(1)
    assert named in kept  # the failing run names its own file, which is kept
    with open(named) as f:
        assert sorted(json.loads(line)["reason"] for line in f) == ["not_an_image"] * 3


def test_create_only_is_atomic_and_idempotent_for_the_same_bytes(tmp_path):
    path = str(tmp_path / "d" / "marker.json")
    fsutil.create_only(path, b"ours")
    fsutil.create_only(path, b"ours")  # a retry of our own write: success
    with pytest.raises(fsutil.AlreadyExists):
        fsutil.create_only(path, b"theirs")
    assert open(path, "rb").read() == b"ours" and os.listdir(tmp_path / "d") == ["marker.json"]


def test_create_only_without_hard_links(tmp_path, monkeypatch):
    """Some mounts (FUSE, SMB) refuse hard links: create-only falls back to a
    check and a rename, still never showing a partial file."""
    def no_links(src, dst):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))
    monkeypatch.setattr(os, "link", no_links)
    path = str(tmp_path / "marker.json")
    fsutil.create_only(path, b"ours")
    with pytest.raises(fsutil.AlreadyExists):
        fsutil.create_only(path, b"theirs")
    assert open(path, "rb").read() == b"ours" and os.listdir(tmp_path) == ["marker.json"]


def test_manifest_reader_names_what_is_wrong(tree, tmp_path):
    images, _ = tree
    out = str(tmp_path / "out")
    assert convert("--input", images, "--output", out) == 0
    good = manifest(out)
    layout.check_manifest(good)
    for damage, expected in ((lambda m: m.pop("counts"), "'counts' is missing"),
                             (lambda m: m["splits"]["train"]["shards"][0].update(records="9"), "shard entry"),
                             (lambda m: m.update(format="other/v9"), "format is 'other/v9'")):
        m = json.loads(json.dumps(good))
        damage(m)
        with pytest.raises(layout.ManifestError, match=expected):
            layout.parse_manifest(json.dumps(m).encode())
    with pytest.raises(layout.ManifestError, match="not valid JSON"):
        layout.parse_manifest(b"")


def _large_jpeg_with_prefix(prefix_comment: bytes, seed: int) -> bytes:
    """A noisy 64x48 JPEG whose first bytes (SOI, two comment segments of
    `prefix_comment`) are shared with any other made with the same comment;
    the pixels differ by seed."""
    import io as _io

    import numpy as np
    from PIL import Image as _Image
    arr = np.random.RandomState(seed).randint(0, 255, (48, 64, 3)).astype("uint8")
    buf = _io.BytesIO()
    _Image.fromarray(arr).save(buf, "JPEG", quality=90)
    data = buf.getvalue()
    segment = b"\xff\xfe" + (len(prefix_comment) + 2).to_bytes(2, "big") + prefix_comment
    return data[:2] + segment * 2 + data[2:]


def test_large_images_sharing_a_prefix_are_distinct(tmp_path):
    """Every other test image is under 24 KB: a content hash of only the first
    64 KiB would pass them all. Two different images of ~140 KB whose first
    130 KB are the same bytes must hash differently, and a true copy must still be
    found, with each record's bytes read back whole."""
    import hashlib
    comment = bytes(range(256)) * 255  # 65,280 bytes in each of two COM segments
    a, b = _large_jpeg_with_prefix(comment, 1), _large_jpeg_with_prefix(comment, 2)
    shared = next(i for i in range(min(len(a), len(b))) if a[i] != b[i])
    assert shared > 65536 + 4096 and len(a) > shared and len(b) > shared, (shared, len(a), len(b))
    root = str(tmp_path / "images")
    files = {"cat/a.jpg": a, "cat/b.jpg": b, "dog/a_copy.jpg": a}
    for rel, data in files.items():
        write(os.path.join(root, rel), data)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out) == 0
    rows = {scalar(r, "image/filename"): r for r in read_examples(out, "train")}
    assert set(rows) == set(files)
    for rel, data in files.items():
        assert rows[rel]["image/encoded"][0] == data, rel
        assert scalar(rows[rel], "image/key/sha256") == hashlib.sha256(data).hexdigest(), rel
    assert scalar(rows["cat/a.jpg"], "image/key/sha256") != scalar(rows["cat/b.jpg"], "image/key/sha256")
    groups = manifest(out)["quality"]["duplicates"]["examples"]
    assert [sorted(f["path"] for f in g["files"]) for g in groups] == [["cat/a.jpg", "dog/a_copy.jpg"]], groups
    out2 = str(tmp_path / "out2")
    assert convert("--input", root, "--output", out2, "--duplicates", "reject", "--max_reject_fraction", "1") == 0
    with open(os.path.join(out2, "rejects.jsonl"), encoding="utf-8") as f:
        rejected = {json.loads(line)["path"]: json.loads(line)["reason"] for line in f}
    assert rejected == {"dog/a_copy.jpg": "duplicate_content"}
    kept = {scalar(r, "image/filename"): r["image/encoded"][0] for r in read_examples(out2, "train")}
    assert kept == {"cat/a.jpg": a, "cat/b.jpg": b}
