"""Incremental versions (issue 23): a --versioned run copies the records of
unchanged images from the version LATEST names and reads only what changed,
and its output is byte-identical to a full conversion of the same inputs,
options and label map; a killed run resumes; a damaged previous version never
yields a wrong record; --keep_versions; --dry_run.

Every step is held against a fresh full conversion (shards, indexes,
provenance and every reader file byte for byte; the manifest but for how the
version was made), read back with TensorFlow against the source files, and
its reads are counted (Python's "open" audit event for files under the input
folder: these runs are in-process)."""
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import (ROOT, check_against_source, convert, files_of, image_bytes, make_tree, manifest, settle,
                      write)

OPTS = ["--num_shards", "3", "--split", "train=0.75,validation=0.25", "--index_files", "--max_reject_fraction", "0.3"]
HOW_MADE = ("run_id", "created", "version", "previous_version", "made", "report")


# ---- helpers -----------------------------------------------------------------------------------------------------

class Opens:
    """The files under `prefix` opened by this process (the "open" audit event)."""
    prefix = ""
    paths: list = []
    installed = False

    @classmethod
    def hook(cls, event, args):
        if cls.prefix and event == "open" and isinstance(args[0], str) and args[0].startswith(cls.prefix):
            cls.paths.append(args[0])

    @classmethod
    def watch(cls, folder: str) -> None:
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True
        cls.prefix, cls.paths = os.path.join(folder, ""), []

    @classmethod
    def taken(cls) -> set:
        got = {os.path.relpath(p, cls.prefix) for p in cls.paths}
        cls.paths = []
        return got


@pytest.fixture
def opens():
    yield Opens
    Opens.prefix, Opens.paths = "", []


def comparable(m: dict) -> dict:
    """The manifest without what records how and when the version was made."""
    m = copy.deepcopy(m)
    for k in HOW_MADE:
        m.pop(k, None)
    m["incremental"].pop("listed_at_ns")
    m["label_map"].pop("extended_with")
    for k in ("output", "root", "version", "previous_version"):  # where it went
        m["options"]["output"].pop(k)
    m["options"]["labels"].pop("frozen_map")
    return m


def assert_same_as_full(version_dir: str, source: str, scratch: str, *args) -> dict:
    """A fresh full conversion of the same inputs, options and label map
    writes exactly the files of `version_dir`; returns its manifest."""
    root = os.path.join(scratch, f"full-{time.time_ns()}")
    assert convert(*args, "--output", root, "--versioned", "--version", "full", "--extend_label_map",
                   "--label_map", os.path.join(version_dir, "label_map.json"), *OPTS) == 0
    full = os.path.join(root, "full")
    got, want = files_of(version_dir), files_of(full)
    assert sorted(got) == sorted(want)
    assert [n for n in got if got[n] != want[n]] == []
    got_m = manifest(full)
    assert comparable(manifest(version_dir)) == comparable(got_m)
    shutil.rmtree(root)
    return got_m


def expected_labels(images: str, out: str) -> dict:
    """{relative path: class} of the files under `images` that `out` did not reject."""
    rejected = {json.loads(line)["path"] for line in open(os.path.join(out, "rejects.jsonl"))}
    got = {}
    for dirpath, _, names in os.walk(images):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), images)
            if rel not in rejected:
                got[rel] = rel.split("/")[0]
    return got


def report_reads(out: str) -> set:
    """The rejected files whose pictures report.html shows: it opens them
    (transforms/storage/report_data.py), whether they were read again or not."""
    from tfrecord_pipelines.transforms.storage.report_data import NO_PREVIEW, PER_REASON
    shown, per = set(), {}
    for line in open(os.path.join(out, "rejects.jsonl")):
        r = json.loads(line)
        if r["reason"] not in {x.value for x in NO_PREVIEW} and per.get(r["reason"], 0) < PER_REASON:
            per[r["reason"]] = per.get(r["reason"], 0) + 1
            shown.add(r["path"])
    return shown


def same_size_rewrite(path: str) -> None:
    """Other bytes of the same length (a byte of the JPEG's scan data changed),
    with the old modification time put back: only the change time tells."""
    st = os.stat(path)
    data = bytearray(open(path, "rb").read())
    pos = next(i for i in range(len(data) // 2, len(data) - 4)
               if 0x10 <= data[i] <= 0xF0 and data[i - 1] != 0xFF and data[i + 1] != 0xFF)
    data[pos] ^= 0x01
    with open(path, "r+b") as f:
        f.write(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns


# ---- ten increments ----------------------------------------------------------------------------------------------

def test_ten_increments_are_each_byte_identical_to_a_full_conversion(tmp_path, opens, capsys):
    images, root, scratch = str(tmp_path / "images"), str(tmp_path / "ds"), str(tmp_path / "scratch")
    make_tree(images, per_class=10)
    write(os.path.join(images, "cat", "broken.jpg"), b"<html>not an image</html>")
    src = ["--input", images]

    def step(version: str, changes, reads: set, **counts) -> dict:
        changes()
        settle()
        opens.watch(images)
        assert convert(*src, "--output", root, "--versioned", "--version", version, "--extend_label_map", *OPTS) == 0
        out = os.path.join(root, version)
        # Exactly the new and changed files were read (and the rejected ones report.html shows).
        assert opens.taken() == reads | report_reads(out), version
        made = manifest(out)["made"]
        assert made["from_version"] and made["images_read"] == len(reads), made
        assert {k: made[k] for k in counts} == counts, made
        c = manifest(out)["counts"]
        assert c["listed"] == c["written"] + c["rejected"] + c["not_selected"]
        check_against_source(out, expected_labels(images, out), images)
        assert_same_as_full(out, images, scratch, *src)
        return made

    settle()
    opens.watch(images)
    assert convert(*src, "--output", root, "--versioned", "--version", "v01", "--extend_label_map", *OPTS) == 0
    assert len(opens.taken()) == 31
    assert manifest(os.path.join(root, "v01"))["made"]["full_because"] == "no previous version"
    assert_same_as_full(os.path.join(root, "v01"), images, scratch, *src)

    def add():
        for k in range(4):
            write(os.path.join(images, "cat", f"new{k}.jpg"), image_bytes(30, 20, seed=700 + k))
    made = step("v02", add, {f"cat/new{k}.jpg" for k in range(4)}, new=4, removed=0, changed=0)
    assert made["records_copied"] == 30 and made["unchanged"] == 31  # and the broken file's reject was carried
    capsys.readouterr()

    def remove():
        for rel in ("dog/0.jpg", "dog/1.jpg", "bird/2.jpg"):
            os.remove(os.path.join(images, rel))
    step("v03", remove, set(), removed=3, new=0)
    assert "incremental from version v02: 31 records copied, 0 images read (0 new, 0 changed), 3 removed" \
        in capsys.readouterr().out

    step("v04", lambda: write(os.path.join(images, "cat", "3.jpg"), image_bytes(40, 40, seed=4242)), {"cat/3.jpg"},
         changed=1)
    step("v05", lambda: same_size_rewrite(os.path.join(images, "bird", "4.jpg")), {"bird/4.jpg"}, changed=1)

    def new_class():
        for k in range(3):
            write(os.path.join(images, "ant", f"{k}.jpg"), image_bytes(20, 20, seed=800 + k))
    step("v06", new_class, {f"ant/{k}.jpg" for k in range(3)}, new=3)
    assert manifest(os.path.join(root, "v06"))["label_map"]["classes"] == {"bird": 0, "cat": 1, "dog": 2, "ant": 3}

    step("v07", lambda: os.rename(os.path.join(images, "cat", "5.jpg"), os.path.join(images, "cat", "5b.jpg")),
         {"cat/5b.jpg"}, new=1, removed=1)

    def replace_atomically():  # the same bytes under a new inode, as editors and rsync write
        path = os.path.join(images, "dog", "6.jpg")
        shutil.copyfile(path, path + ".tmp")
        os.replace(path + ".tmp", path)
    step("v08", replace_atomically, {"dog/6.jpg"}, changed=1)

    def swap_broken():
        os.remove(os.path.join(images, "cat", "broken.jpg"))
        write(os.path.join(images, "bird", "cut.jpg"), image_bytes(30, 30, seed=5)[:200])
    step("v09", swap_broken, {"bird/cut.jpg"}, new=1)
    assert manifest(os.path.join(root, "v09"))["rejects_by_reason"] == {"truncated": 1}

    def touch():
        os.utime(os.path.join(images, "cat", "7.jpg"), ns=(time.time_ns(), time.time_ns() - 10**9))
    step("v10", touch, {"cat/7.jpg"}, changed=1)
    assert open(os.path.join(root, "LATEST")).read() == "v10\n"


def test_a_label_changed_in_a_table_is_re_read_and_the_rest_copied(tmp_path, opens):
    images, root, scratch = str(tmp_path / "images"), str(tmp_path / "ds"), str(tmp_path / "scratch")
    labels = make_tree(images, per_class=6)
    table = str(tmp_path / "labels.csv")

    def write_table(labels: dict, extra: dict) -> None:
        with open(table, "w") as f:
            f.write("filename,label,score\n" + "".join(f"{rel},{lab},{extra.get(rel, 1)}\n"
                                                       for rel, lab in sorted(labels.items())))
    write_table(labels, {})
    settle()
    src = ["--label_table", table, "--image_root", images]
    assert convert(*src, "--output", root, "--versioned", "--version", "v1", "--extend_label_map", *OPTS) == 0
    labels["cat/2.jpg"] = "dog"      # a label changed in the table: re-read and encoded again
    write_table(labels, {"bird/3.jpg": 7})  # an extra column's value changed: likewise
    write(os.path.join(images, "cat", "9.jpg"), image_bytes(seed=99))
    labels["cat/9.jpg"] = "cat"
    write_table(labels, {"bird/3.jpg": 7})
    settle()
    opens.watch(images)
    assert convert(*src, "--output", root, "--versioned", "--version", "v2", "--extend_label_map", *OPTS) == 0
    # Two reads per image for a table (validate, then write): the same three files, twice.
    assert opens.taken() == {"cat/2.jpg", "bird/3.jpg", "cat/9.jpg"}
    out = os.path.join(root, "v2")
    made = manifest(out)["made"]
    assert (made["unchanged"], made["changed"], made["new"], made["records_copied"]) == (16, 2, 1, 16), made
    check_against_source(out, labels, images)
    assert_same_as_full(out, images, scratch, *src)


def test_changed_options_or_full_convert_everything_and_say_why(tmp_path, opens, capsys):
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    make_tree(images, per_class=4)
    settle()
    base = ["--input", images, "--output", root, "--versioned"]
    assert convert(*base, "--version", "v1", "--num_shards", "2") == 0
    write(os.path.join(images, "cat", "new.jpg"), image_bytes(seed=3))
    settle()
    capsys.readouterr()
    opens.watch(images)
    assert convert(*base, "--version", "v2", "--num_shards", "3") == 0
    assert len(opens.taken()) == 13
    assert "full conversion: options changed: shards.num_shards" in capsys.readouterr().out
    assert manifest(os.path.join(root, "v2"))["made"]["full_because"] == "options changed: shards.num_shards"
    write(os.path.join(images, "cat", "new2.jpg"), image_bytes(seed=4))
    settle()
    assert convert(*base, "--version", "v3", "--num_shards", "3", "--full") == 0
    assert len(opens.taken()) == 14
    assert "full conversion: --full was given" in capsys.readouterr().out


# ---- a damaged previous version ----------------------------------------------------------------------------------

@pytest.fixture
def two_versions(tmp_path):
    """v1 of a tree, then a change: (images, root, scratch, src args)."""
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    make_tree(images, per_class=8)
    settle()
    src = ["--input", images]
    assert convert(*src, "--output", root, "--versioned", "--version", "v1", "--extend_label_map", *OPTS) == 0
    write(os.path.join(images, "dog", "new.jpg"), image_bytes(seed=31))
    settle()
    return images, root, str(tmp_path / "scratch"), src


def run_v2(images, root, src):
    return convert(*src, "--output", root, "--versioned", "--version", "v2", "--extend_label_map", *OPTS)


def shard_entries(root: str, version: str = "v1") -> list:
    m = manifest(os.path.join(root, version))
    return [e for s in m["splits"].values() for e in s["shards"] if e["records"]]


def test_a_missing_or_damaged_previous_shard_is_read_from_the_sources(two_versions, opens, capsys):
    images, root, scratch, src = two_versions
    gone, hurt = shard_entries(root)[:2]
    os.remove(os.path.join(root, "v1", gone["name"]))
    with open(os.path.join(root, "v1", hurt["name"]), "r+b") as f:  # a byte of the first record's image
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0x40]))
    rotted(os.path.join(root, "v1", hurt["name"]))
    opens.watch(images)
    capsys.readouterr()
    assert run_v2(images, root, src) == 0
    out = os.path.join(root, "v2")
    made = manifest(out)["made"]
    # The missing shard is not the file pinned: its records are read; the flipped record is read again.
    assert made["records_of_untrusted_shards"] == gone["records"] and made["records_repaired"] == 1, made
    assert len(opens.taken()) == gone["records"] + 1 + 1  # the repaired ones and the new image
    assert "whose copy in v1 was damaged" in capsys.readouterr().out
    check_against_source(out, expected_labels(images, out), images)
    assert_same_as_full(out, images, scratch, *src)


def rotted(*paths: str) -> None:
    """The files keep their pins (transforms/storage/copy_trust.py), as after a
    disk's flipped bit, or as in a bucket, where nothing is pinned: what the
    checks behind the pins see. An edit by hand is never copied
    (tests/e2e/test_copy_trust.py)."""
    from tfrecord_pipelines.transforms.storage import copy_trust
    for p in paths:
        assert copy_trust.pin(p)


def _rewrite_provenance(root: str, shard: str, edit) -> None:
    """Edits a provenance file of v1 and, to get past its CRC32C, the manifest
    too; both keep their pins (rotted)."""
    import google_crc32c
    from tfrecord_pipelines.transforms.core.tfrecord_io import crc32c_text
    path = os.path.join(root, "v1", "provenance", shard + ".jsonl")
    data = edit(open(path, "rb").read())
    with open(path, "wb") as f:
        f.write(data)
    mpath = os.path.join(root, "v1", "manifest.json")
    m = json.load(open(mpath))
    m["incremental"]["provenance"][shard].update(bytes=len(data), crc32c=crc32c_text(google_crc32c.value(data)))
    with open(mpath, "w") as f:
        json.dump(m, f)
    rotted(path, mpath)


def test_damaged_or_forged_provenance_never_yields_a_wrong_record(two_versions, opens, capsys):
    images, root, scratch, src = two_versions
    a, b, c = shard_entries(root)[:3]
    # a: cut short (its CRC32C no longer the manifest's): its records are read from their sources.
    path = os.path.join(root, "v1", "provenance", a["name"] + ".jsonl")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) // 2])

    # b: a record pointing outside the shard, manifest updated to match: refused whole.
    def outside(data):
        lines = data.splitlines(keepends=True)
        row = json.loads(lines[0])
        row[3] = 10**9
        return json.dumps(row).encode() + b"\n" + b"".join(lines[1:])
    _rewrite_provenance(root, b["name"], outside)

    # c: two records' places swapped (a forger who also fixed the offsets' order and the CRCs):
    # each copy holds another file's record, so both are read from their sources.
    def swapped(data):
        rows = [json.loads(x) for x in data.splitlines()]
        recs = [r for r in rows if r[3] >= 0]
        recs[0][0], recs[1][0] = recs[1][0], recs[0][0]
        recs[0][1], recs[1][1] = recs[1][1], recs[0][1]
        recs[0][2], recs[1][2] = recs[1][2], recs[0][2]
        return b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    _rewrite_provenance(root, c["name"], swapped)
    opens.watch(images)
    capsys.readouterr()
    assert run_v2(images, root, src) == 0
    out = os.path.join(root, "v2")
    made = manifest(out)["made"]
    assert made["records_of_damaged_provenance"] == a["records"] + b["records"], made
    assert made["records_repaired"] == 2, made
    assert len(opens.taken()) == a["records"] + b["records"] + 2 + 1
    assert "provenance of" in capsys.readouterr().out
    check_against_source(out, expected_labels(images, out), images)
    assert_same_as_full(out, images, scratch, *src)


def test_records_the_kernel_copies_are_those_read_and_written_here(two_versions, opens, monkeypatch):
    """A local previous version's runs are copied by the kernel (copy_file_range)
    and checked as this shard holds them; where the kernel cannot copy, they
    are read, checked and written by this process. Both give the same version,
    byte for byte, and read only the new image from the source."""
    from tfrecord_pipelines.transforms.storage import previous
    images, root, scratch, src = two_versions
    other = root + "-read"
    shutil.copytree(root, other)
    rotted(*(os.path.join(d, n) for d, _, names in os.walk(os.path.join(other, "v1")) for n in names))  # a copy
    kernel = previous.copy_range
    copied = []

    def spy(*args):
        copied.append(kernel(*args))
        return copied[-1]

    monkeypatch.setattr(previous, "copy_range", spy)
    opens.watch(images)
    assert run_v2(images, root, src) == 0
    assert copied and sum(copied) == sum(e["bytes"] for e in shard_entries(root))  # every record of v1
    assert len(opens.taken()) == 1

    def unsupported(*_):
        raise previous.CopyUnsupported(95, "not here")

    monkeypatch.setattr(previous, "copy_range", unsupported)
    assert run_v2(images, other, src) == 0
    assert files_of(os.path.join(root, "v2")) == files_of(os.path.join(other, "v2"))
    assert manifest(os.path.join(root, "v2"))["made"]["records_copied"] == \
        manifest(os.path.join(other, "v2"))["made"]["records_copied"] > 0
    assert_same_as_full(os.path.join(root, "v2"), images, scratch, *src)


def test_a_latest_without_a_readable_version_needs_full(two_versions, capsys):
    images, root, scratch, src = two_versions
    os.remove(os.path.join(root, "v1", "manifest.json"))
    assert run_v2(images, root, src) == 2
    err = capsys.readouterr().err
    assert "whose manifest cannot be read" in err and "--full" in err
    assert convert(*src, "--output", root, "--versioned", "--version", "v2", "--full", *OPTS) == 0
    assert "full conversion: LATEST names v1, whose manifest cannot be read" in capsys.readouterr().out


# ---- resume --------------------------------------------------------------------------------------------------------

def _start(args: list, slow_reads_under: str = "", seconds: float = 0.0, hold_renames_into: str = "",
           gate: str = "") -> subprocess.Popen:
    """A conversion in its own process group, slowed or held through audit
    hooks (no product code is patched) so the test can kill it where it wants."""
    code = "import os, sys, time\n"
    if slow_reads_under:
        prefix = os.path.join(slow_reads_under, "")
        wait = (f"        if not os.path.exists({gate + '.reached'!r}):\n"
                f"            open({gate + '.reached'!r}, 'w').close()\n"
                f"        while not os.path.exists({gate!r}):\n            time.sleep(0.02)\n") if gate else ""
        code += ("def slow(event, a):\n"
                 f"    if event == 'open' and isinstance(a[0], str) and a[0].startswith({prefix!r}):\n"
                 f"{wait}        time.sleep({seconds})\n"
                 "sys.addaudithook(slow)\n")
    if hold_renames_into:
        code += ("renames = []\n"
                 "def hold(event, a):\n"
                 "    if event in ('os.rename', 'os.replace') and isinstance(a[1], str) and "
                 f"os.path.dirname(os.path.abspath(a[1])) == {hold_renames_into!r}:\n"
                 "        renames.append(a[1])\n"
                 "        if len(renames) >= 2:\n"
                 f"            open({gate + '.reached'!r}, 'w').close()\n"
                 "            while True:\n                time.sleep(1)\n"
                 "sys.addaudithook(hold)\n")
    code += "from tfrecord_pipelines.commands.convert import run\nsys.exit(run(sys.argv[1:]))\n"
    return subprocess.Popen([sys.executable, "-c", code, *args, "--progress", "off", "--direct_running_mode",
                             "in_memory"], cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, proc, timeout=180):
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)


def _kill(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _done_records(parent: str) -> int:
    areas = [d for d in os.listdir(parent) if d.startswith(".tfrecords-resume-")] if os.path.isdir(parent) else []
    try:
        return sum(n.endswith(".done") for a in areas for n in os.listdir(os.path.join(parent, a)))
    except FileNotFoundError:  # the area went with a publish between the two listings
        return 0


@pytest.fixture(scope="module")
def bigger(tmp_path_factory):
    """A tree of 96 images, and an uninterrupted versioned conversion of it."""
    base = tmp_path_factory.mktemp("resume")
    images = str(base / "images")
    for c in range(3):
        for k in range(32):
            write(os.path.join(images, f"c{c}", f"{k:03d}.jpg"), image_bytes(30 + k % 7, 20, seed=c * 100 + k))
    settle()
    clean = str(base / "clean")
    assert convert("--input", images, "--output", clean, "--versioned", "--version", "v1", *RESUME_OPTS) == 0
    return images, os.path.join(clean, "v1")


RESUME_OPTS = ["--num_shards", "6", "--split", "train=0.75,validation=0.25"]


def test_killed_while_writing_then_resumed_is_byte_identical(bigger, tmp_path, capsys):
    images, clean = bigger
    root = str(tmp_path / "ds")
    args = ["--input", images, "--output", root, "--versioned", "--version", "v1", *RESUME_OPTS]
    proc = _start(args, slow_reads_under=images, seconds=0.03)
    _wait_for(lambda: _done_records(root) >= 3, proc)
    _kill(proc)  # SIGKILL of the whole process group, mid-write
    kept = _done_records(root)
    assert 3 <= kept < 12 and not os.path.exists(os.path.join(root, "v1", "manifest.json"))
    capsys.readouterr()
    assert convert(*args) == 0
    assert f"resumed: {kept} shards" in capsys.readouterr().out
    assert manifest(os.path.join(root, "v1"))["made"]["shards_resumed"] == kept
    assert files_of(os.path.join(root, "v1")) == files_of(clean)
    assert not [d for d in os.listdir(root) if d.startswith(".tfrecords")]  # the resume area is gone


def test_killed_while_publishing_then_resumed_is_byte_identical(bigger, tmp_path, capsys):
    images, clean = bigger
    root = str(tmp_path / "ds")
    gate = str(tmp_path / "gate")
    args = ["--input", images, "--output", root, "--versioned", "--version", "v1", *RESUME_OPTS]
    proc = _start(args, hold_renames_into=os.path.join(root, "v1"), gate=gate)
    _wait_for(lambda: os.path.exists(gate + ".reached"), proc)
    _kill(proc)  # one shard under its final name, no manifest
    assert len([n for n in os.listdir(os.path.join(root, "v1")) if n.endswith(".tfrecord")]) == 1
    capsys.readouterr()
    assert convert(*args) == 0
    got = capsys.readouterr()
    assert "was undone" in got.err and "resumed: 12 shards" in got.out
    assert files_of(os.path.join(root, "v1")) == files_of(clean)


@pytest.mark.beam_range
def test_an_incremental_run_killed_and_resumed_is_byte_identical_to_a_full_one(bigger, tmp_path, capsys):
    images, _ = bigger
    work = str(tmp_path / "images")
    shutil.copytree(images, work)
    settle()
    root = str(tmp_path / "ds")
    base = ["--input", work, "--output", root, "--versioned", *RESUME_OPTS]
    assert convert(*base, "--version", "v1") == 0
    for c in range(3):
        for k in range(6):  # new images in every shard
            write(os.path.join(work, f"c{c}", f"new{k}.jpg"), image_bytes(25, 25, seed=900 + 10 * c + k))
    settle()
    proc = _start([*base, "--version", "v2"], slow_reads_under=work, seconds=0.15)
    _wait_for(lambda: _done_records(root) >= 2, proc)
    _kill(proc)
    kept = _done_records(root)
    capsys.readouterr()
    assert convert(*base, "--version", "v2") == 0
    assert f"resumed: {kept} shards" in capsys.readouterr().out
    full = str(tmp_path / "full")
    assert convert("--input", work, "--output", full, *RESUME_OPTS) == 0
    got = files_of(os.path.join(root, "v2"))
    assert {n: v for n, v in got.items() if not n.startswith("provenance/")} == files_of(full)


DETECTION_OPTS = ["--num_shards", "6", "--masks", "png"]


def test_a_detection_run_killed_and_resumed_is_byte_identical(tmp_path, capsys):
    """--annotations runs resume too: the kept shards' box statistics come back
    from their done-records, so the manifest's detection section is the
    uninterrupted run's."""
    from detection_data import make_coco
    src = make_coco(str(tmp_path / "coco"), n=48, seed=4)
    for k in (3, 30):  # rejected, with their boxes counted as in rejected images
        write(os.path.join(src["images"], f"{1000 + k:012d}.jpg"), b"\xff\xd8 not a JPEG")
    settle()
    clean = str(tmp_path / "clean")
    assert convert("--annotations", src["json"], "--output", clean, *DETECTION_OPTS) == 0
    out = str(tmp_path / "out")
    args = ["--annotations", src["json"], "--output", out, *DETECTION_OPTS]
    proc = _start(args, slow_reads_under=src["images"], seconds=0.1)
    _wait_for(lambda: _done_records(out) >= 2, proc)
    _kill(proc)
    kept = _done_records(out)
    assert 2 <= kept < 6 and not os.path.exists(os.path.join(out, "manifest.json"))
    capsys.readouterr()
    assert convert(*args) == 0
    assert f"resumed: {kept} shards" in capsys.readouterr().out
    assert files_of(out) == files_of(clean)
    got, want = manifest(out), manifest(clean)
    assert got["made"]["shards_resumed"] == kept
    assert got["detection"] == want["detection"] and got["detection"]["reconciles"]
    lost = len(src["expected"][f"{1003:012d}.jpg"]) + len(src["expected"][f"{1030:012d}.jpg"])
    assert got["counts"]["rejected"] == 2 and got["detection"]["boxes"]["in_rejected_images"] == lost > 0
    assert got["detection"]["boxes"]["written"] == sum(map(len, src["expected"].values())) - lost
    assert got["quality"] == want["quality"]


def test_a_detection_run_killed_then_its_boxes_edited_is_not_resumed(tmp_path, capsys):
    """A box may change while its image does not: the annotation file is part
    of the run's fingerprint, so the killed run's shards are not kept."""
    from detection_data import make_coco
    from test_detection import read_detection
    src = make_coco(str(tmp_path / "coco"), n=48, seed=5)
    settle()
    out = str(tmp_path / "out")
    args = ["--annotations", src["json"], "--output", out, *DETECTION_OPTS]
    proc = _start(args, slow_reads_under=src["images"], seconds=0.1)
    _wait_for(lambda: _done_records(out) >= 2, proc)
    _kill(proc)
    doc = src["doc"]
    moved = doc["annotations"][0]
    moved["bbox"] = [1, 1, 3, 3]  # the same image file, another box
    with open(src["json"], "w") as f:
        json.dump(doc, f)
    capsys.readouterr()
    assert convert(*args) == 0
    assert "resumed:" not in capsys.readouterr().out
    assert manifest(out)["made"]["shards_resumed"] == 0
    clean = str(tmp_path / "clean")
    assert convert("--annotations", src["json"], "--output", clean, *DETECTION_OPTS) == 0
    assert files_of(out) == files_of(clean)
    image = next(im["file_name"] for im in doc["images"] if im["id"] == moved["image_id"])
    w, h = next((im["width"], im["height"]) for im in doc["images"] if im["id"] == moved["image_id"])
    row = read_detection(out, "train")[image]
    boxes = zip(*(row[f"image/object/bbox/{k}"].tolist() for k in ("xmin", "ymin", "xmax", "ymax")))
    assert any(np.allclose(b, (1 / w, 1 / h, 4 / w, 4 / h)) for b in boxes)


def test_two_runs_racing_on_one_root_the_lock_refuses_one(bigger, tmp_path, capsys):
    images, _ = bigger
    work = str(tmp_path / "images")
    shutil.copytree(images, work)
    settle()
    root = str(tmp_path / "ds")
    base = ["--input", work, "--output", root, "--versioned", *RESUME_OPTS]
    assert convert(*base, "--version", "v1") == 0
    write(os.path.join(work, "c1", "new.jpg"), image_bytes(seed=5))
    settle()
    gate = str(tmp_path / "gate")
    first = _start([*base, "--version", "v2"], slow_reads_under=work, gate=gate)  # holds at its first read
    _wait_for(lambda: os.path.exists(gate + ".reached"), first)
    capsys.readouterr()
    assert convert(*base, "--version", "v3") == 2
    assert "another conversion is writing" in capsys.readouterr().err
    open(gate, "w").close()
    assert first.wait(timeout=300) == 0, first.communicate()
    assert open(os.path.join(root, "LATEST")).read() == "v2\n"
    assert manifest(os.path.join(root, "v2"))["made"]["images_read"] == 1
    full = str(tmp_path / "full")
    assert convert("--input", work, "--output", full, *RESUME_OPTS) == 0
    got = files_of(os.path.join(root, "v2"))
    assert {n: v for n, v in got.items() if not n.startswith("provenance/")} == files_of(full)


# ---- retention and the dry run -------------------------------------------------------------------------------------

def test_keep_versions_removes_the_oldest_and_says_so(tmp_path, capsys):
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    make_tree(images, per_class=2)
    base = ["--input", images, "--output", root, "--versioned"]
    for k in range(1, 4):
        write(os.path.join(images, "cat", f"n{k}.jpg"), image_bytes(seed=k))
        assert convert(*base, "--version", f"v{k}") == 0
    # No manifest, and a file no run writes: never counted as a version, never removed
    # (tests/e2e/test_leftovers.py: the folders killed runs left are).
    write(os.path.join(root, "v0-failed", "notes.txt"), b"mine")
    capsys.readouterr()
    write(os.path.join(images, "cat", "n4.jpg"), image_bytes(seed=4))
    assert convert(*base, "--version", "v4", "--keep_versions", "2") == 0
    assert "removed versions (--keep_versions): v1, v2" in capsys.readouterr().out
    assert sorted(d for d in os.listdir(root) if not d.startswith(".")) == ["LATEST", "v0-failed", "v3", "v4"]
    assert manifest(os.path.join(root, "v4"))["made"]["versions_removed"] == ["v1", "v2"]
    assert convert(*base, "--version", "v5", "--keep_versions", "-1") == 2


def test_a_dry_run_says_what_would_happen_and_reads_and_writes_nothing(tmp_path, opens, capsys):
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    make_tree(images, per_class=6)
    settle()
    base = ["--input", images, "--output", root, "--versioned", *OPTS]
    assert convert(*base, "--version", "v1") == 0
    assert convert(*base, "--version", "v2", "--republish_unchanged") == 0
    for k in range(2):
        write(os.path.join(images, "dog", f"new{k}.jpg"), image_bytes(seed=60 + k))
    os.remove(os.path.join(images, "cat", "0.jpg"))
    settle()
    before = sorted((d, sorted(f)) for d, _, f in os.walk(root))
    opens.watch(images)
    capsys.readouterr()
    assert convert(*base, "--dry_run", "--keep_versions", "2") == 0
    out = capsys.readouterr().out
    assert opens.taken() == set()
    assert sorted((d, sorted(f)) for d, _, f in os.walk(root)) == before
    assert "dry run: nothing was read, locked or written" in out and "listed 19 files" in out
    assert "from version v2: unchanged 17, new 2, changed 0, removed 1" in out
    assert "would publish version v" in out and "would remove versions (--keep_versions 2): v1" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["train"], ["validation"])}
    assert sum(int(r[1]) for r in rows.values()) == 19 and sum(int(r[2]) for r in rows.values()) == 2
    assert all(r[3] == "3" for r in rows.values())
    # What reading the two new files and copying the 17 others would cost, by their sizes (pipelines/run/cpu_estimate.py).
    from tfrecord_pipelines.transforms.core.units import human_bytes
    new_bytes = sum(os.path.getsize(os.path.join(images, "dog", f"new{k}.jpg")) for k in range(2))
    all_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(images) for f in files)
    assert (f"estimated CPU for the 2 images to read ({human_bytes(new_bytes)}, full validation) and the 17 records "
            f"to copy ({human_bytes(all_bytes - new_bytes)}): ") in out, out
    # Nothing changed: it says it would publish nothing.
    assert convert(*base, "--version", "v3") == 0
    capsys.readouterr()
    assert convert(*base, "--dry_run") == 0
    out = capsys.readouterr().out
    assert "would publish nothing: inputs and options are the same as version v3" in out
    assert "estimated CPU: none (no image to read)" in out


def test_a_dry_runs_estimate_counts_a_tables_images_at_the_measured_size_when_it_lists_no_sizes(tmp_path, capsys):
    """A label table's rows carry no sizes until the images are read: the
    dry run's CPU estimate says so and counts each image at the size its
    rates were measured on (pipelines/run/cpu_estimate.py), in the mode asked."""
    from tfrecord_pipelines.run import cpu_estimate
    images = str(tmp_path / "images")
    truth = make_tree(images, per_class=3)
    table = tmp_path / "labels.csv"
    table.write_text("filename,label\n" + "".join(f"{rel},{label}\n" for rel, label in sorted(truth.items())))
    assert convert("--label_table", str(table), "--image_root", images, "--output", str(tmp_path / "out"),
                   "--validate", "header", "--dry_run") == 0
    out = capsys.readouterr().out
    assert "note: the table gives no file sizes" in out
    assert (f"estimated CPU for the {len(truth)} images to read (no sizes listed: ~{cpu_estimate.KB_WHEN_UNSIZED} KB "
            "each, header checks): ") in out, out
    assert not os.path.exists(tmp_path / "out")


# ---- other options -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra,also_read", [
    # Two reads, duplicates dropped before planning: the copy not written is read again each time.
    (["--duplicates", "keep_one"], {"dog/copy.jpg"}),
    (["--resize_shorter_side", "14"], set()),              # re-encoded records
    # No file name inside the Example to check (nor for report.html to find the duplicate pair's
    # pictures in the shards: it opens those two files).
    (["--feature_keys", "image/filename="], {"cat/0.jpg", "dog/copy.jpg"}),
    (["--quality", "off", "--validate", "header"], set()),
], ids=["keep_one", "resize", "no_filename", "header_no_quality"])
def test_incremental_with_other_options_is_byte_identical(tmp_path, opens, extra, also_read):
    images, root, scratch = str(tmp_path / "images"), str(tmp_path / "ds"), str(tmp_path / "scratch")
    make_tree(images, per_class=6)
    with open(os.path.join(images, "cat", "0.jpg"), "rb") as f:
        write(os.path.join(images, "dog", "copy.jpg"), f.read())  # an exact duplicate
    settle()
    src = ["--input", images]
    base = [*src, "--output", root, "--versioned", "--extend_label_map", *OPTS, *extra]
    assert convert(*base, "--version", "v1") == 0
    write(os.path.join(images, "bird", "new.jpg"), image_bytes(22, 18, seed=61))
    write(os.path.join(images, "cat", "4.jpg"), image_bytes(26, 14, seed=62))
    settle()
    opens.watch(images)
    assert convert(*base, "--version", "v2") == 0
    assert opens.taken() == {"bird/new.jpg", "cat/4.jpg"} | also_read
    out = os.path.join(root, "v2")
    assert manifest(out)["made"]["from_version"] == "v1"
    assert_same_as_full(out, images, scratch, *src, *extra)


@pytest.mark.parametrize("extra,why", [
    (["--compression", "gzip"], "uncompressed TFRecord"),
    (["--output_format", "array_record"], "uncompressed TFRecord"),
])
def test_compressed_or_array_record_shards_are_converted_in_full(tmp_path, capsys, extra, why):
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    make_tree(images, per_class=2)
    base = ["--input", images, "--output", root, "--versioned", *extra]
    assert convert(*base, "--version", "v1") == 0
    assert "provenance" not in os.listdir(os.path.join(root, "v1"))
    write(os.path.join(images, "cat", "new.jpg"), image_bytes(seed=8))
    capsys.readouterr()
    assert convert(*base, "--version", "v2") == 0
    assert f"full conversion: records are copied from {why} shards only" in capsys.readouterr().out


def test_a_publish_journal_moves_only_between_its_area_and_its_output(tmp_path):
    """A killed publish is undone from its journal; a journal (damaged, or
    planted) naming files elsewhere moves nothing."""
    from tfrecord_pipelines.transforms.storage import resume
    root = str(tmp_path / "ds")
    area = os.path.join(root, ".tfrecords-resume-0123456789abcdef")
    os.makedirs(os.path.join(root, "v9"))
    write(os.path.join(root, "v9", "train-00000-of-00001.tfrecord"), b"shard")
    write(os.path.join(root, "v9", "label_map.json"), b"{}")
    outside = write(str(tmp_path / "precious.txt"), b"keep me")
    resume.write_journal(area, os.path.join(root, "v9"),
                         [(os.path.join(area, "train-00000-of-00001.tfrecord.abc"),
                           os.path.join(root, "v9", "train-00000-of-00001.tfrecord"))],
                         ["label_map.json"], versioned=True)
    assert resume.recover(root) == [f"a run killed while publishing into {root}/v9 was undone: 1 of its files moved "
                                    "back to be resumed"]
    assert os.listdir(area) == ["train-00000-of-00001.tfrecord.abc"] and not os.path.exists(os.path.join(root, "v9"))
    for moves, companions in (([(outside, os.path.join(area, "x"))], []),           # from outside the output
                              ([(os.path.join(area, "y"), os.path.join(root, "v9", "../../precious.txt"))], []),
                              ([], ["../precious.txt"])):                           # a companion outside
        os.makedirs(os.path.join(root, "v9"), exist_ok=True)
        resume.write_journal(area, os.path.join(root, "v9"), moves, companions, versioned=True)
        assert resume.recover(root) == []
        assert open(outside, "rb").read() == b"keep me" and not os.path.exists(os.path.join(root, "JOURNAL"))
        assert "publishing.json" not in os.listdir(area)


def test_an_unreadable_provenance_file_is_a_warning_and_its_records_are_read(two_versions, capsys):
    """A provenance file that cannot be read (a FIFO in its place: never
    opened for reading, so no hang): the summary warns, says its records are
    counted as new, and the version is the full conversion's."""
    images, root, scratch, src = two_versions
    a = shard_entries(root)[0]
    path = os.path.join(root, "v1", "provenance", a["name"] + ".jsonl")
    os.remove(path)
    os.mkfifo(path)
    capsys.readouterr()
    assert run_v2(images, root, src) == 0
    out = capsys.readouterr().out
    assert manifest(os.path.join(root, "v2"))["made"]["records_of_damaged_provenance"] == a["records"]
    assert (f"warning: version v1: the provenance of {a['records']:,} records is damaged or cannot be read; they "
            "were read from their sources and are counted as new above") in out, out
    assert f"({a['records'] + 1:,} new, 0 changed" in out, out
    check_against_source(os.path.join(root, "v2"), expected_labels(images, os.path.join(root, "v2")), images)
    assert_same_as_full(os.path.join(root, "v2"), images, scratch, *src)
