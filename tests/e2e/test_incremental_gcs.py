"""Incremental versions and resume with a bucket (issue 23), against the GCS
emulator behind tests/gcs_proxy.py (GCS's generation rules enforced, requests
counted by prefix): seven increments, each output byte-identical to a full
conversion, only the new and rewritten objects downloaded, the previous
version in a bucket too; a killed run writing into a bucket resumes from its
resume area there."""
import json
import os
import subprocess
import sys
import time

from conftest import ROOT, check_against_source, convert, image_bytes, make_tree, manifest, write
from gcs_emulator import BUCKET, bucket, download_prefix, gcs, gcs_proxied, list_names, upload_tree  # noqa: F401

OPTS = ["--num_shards", "3", "--split", "train=0.75,validation=0.25", "--extend_label_map"]


def files(prefix: str, local: str) -> dict:
    names = download_prefix(prefix, local)
    return {n: open(os.path.join(local, n), "rb").read() for n in names if n not in ("manifest.json", "report.html")}


def test_increments_in_a_bucket_are_byte_identical_and_read_only_what_changed(gcs_proxied, tmp_path, capsys):
    proxy = gcs_proxied
    local = str(tmp_path / "imgs")
    labels = make_tree(local, per_class=8)
    upload_tree(local, "inc1")
    root = f"gs://{BUCKET}/dsinc1"
    src = ["--input", f"gs://{BUCKET}/inc1"]

    def run(version: str) -> dict:
        proxy.reset_stats()
        assert convert(*src, "--output", root, "--versioned", "--version", version, *OPTS) == 0
        return proxy.stats()

    run("v1")
    steps = []

    def add():
        for k in range(3):
            data = image_bytes(30, 20, seed=300 + k)
            write(os.path.join(local, "cat", f"n{k}.jpg"), data)
            bucket().blob(f"inc1/cat/n{k}.jpg").upload_from_string(data)
            labels[f"cat/n{k}.jpg"] = "cat"
        return 3
    steps.append(add)

    def remove():
        for rel in ("dog/0.jpg", "bird/1.jpg"):
            bucket().blob(f"inc1/{rel}").delete()
            os.remove(os.path.join(local, rel))
            labels.pop(rel)
        return 0
    steps.append(remove)

    def rewrite():  # the same name, other bytes: a new generation
        data = image_bytes(18, 12, seed=4321)
        write(os.path.join(local, "cat", "2.jpg"), data)
        bucket().blob("inc1/cat/2.jpg").upload_from_string(data)
        return 1
    steps.append(rewrite)

    def new_class():
        for k in range(2):
            data = image_bytes(20, 20, seed=400 + k)
            write(os.path.join(local, "ant", f"{k}.jpg"), data)
            bucket().blob(f"inc1/ant/{k}.jpg").upload_from_string(data)
            labels[f"ant/{k}.jpg"] = "ant"
        return 2
    steps.append(new_class)

    def same_bytes_again():  # uploaded again unchanged: a new generation, so read again (and the same record)
        bucket().blob("inc1/dog/3.jpg").upload_from_filename(os.path.join(local, "dog", "3.jpg"))
        return 1
    steps.append(same_bytes_again)

    def rename():  # a copy and a delete: a new path, read; the old one removed
        bucket().copy_blob(bucket().blob("inc1/bird/4.jpg"), bucket(), "inc1/bird/4b.jpg")
        bucket().blob("inc1/bird/4.jpg").delete()
        os.rename(os.path.join(local, "bird", "4.jpg"), os.path.join(local, "bird", "4b.jpg"))
        labels["bird/4b.jpg"] = labels.pop("bird/4.jpg")
        return 1
    steps.append(rename)

    def truncated():  # read, and rejected
        bucket().blob("inc1/cat/cut.jpg").upload_from_string(image_bytes(30, 30, seed=9)[:150])
        return 1
    steps.append(truncated)

    for i, change in enumerate(steps, start=2):
        read = change()
        stats = run(f"v{i}")
        # The conversion's downloads from the input (pinned to the listed generation): exactly the new and
        # rewritten objects; the other requests are listings, and report.html's picture of a reject.
        assert stats["pinned_media_by_prefix"].get("inc1", 0) == read, stats
        assert stats["media_by_prefix"].get("inc1", 0) <= read + 1, stats
        out = str(tmp_path / f"v{i}")
        got = files(f"dsinc1/v{i}", out)
        m = manifest(out)
        written_new = read - m["counts"]["rejected"]
        assert m["made"]["images_read"] == read and m["made"]["records_copied"] == m["counts"]["written"] - written_new
        check_against_source(out, labels, local)
        # A fresh full conversion of the same inputs, options and label map writes the same files.
        full_root = f"gs://{BUCKET}/fullinc{i}"
        assert convert(*src, "--output", full_root, "--versioned", "--version", "full", *OPTS,
                       "--label_map", os.path.join(out, "label_map.json")) == 0
        assert got == files(f"fullinc{i}/full", str(tmp_path / f"full{i}"))
    assert manifest(str(tmp_path / "v5"))["label_map"]["classes"]["ant"] == 3
    assert manifest(str(tmp_path / "v8"))["rejects_by_reason"] == {"truncated": 1}


def test_a_killed_run_into_a_bucket_resumes_from_its_resume_area(gcs, tmp_path, capsys):
    local = str(tmp_path / "imgs")
    for c in range(2):
        for k in range(24):
            write(os.path.join(local, f"c{c}", f"{k:03d}.jpg"), image_bytes(30, 20, seed=c * 50 + k))
    time.sleep(2.1)
    root = f"gs://{BUCKET}/dskill"
    args = ["--input", local, "--output", root, "--versioned", "--version", "v1", "--num_shards", "6"]
    prefix = os.path.join(local, "")
    code = ("import os, sys, time\n"
            "def slow(event, a):\n"
            f"    if event == 'open' and isinstance(a[0], str) and a[0].startswith({prefix!r}):\n"
            "        time.sleep(0.05)\n"
            "sys.addaudithook(slow)\n"
            "from tfrecord_pipelines.commands.convert import run\nsys.exit(run(sys.argv[1:]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code, *args, "--progress", "off", "--direct_running_mode",
                             "in_memory"], cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))

    def done() -> int:
        return sum(n.endswith(".done") for n in list_names("dskill"))
    deadline = time.time() + 180
    while done() < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, 9)
    proc.wait()
    kept = done()
    assert 2 <= kept < 6
    capsys.readouterr()
    assert convert(*args) == 0
    assert f"resumed: {kept} shards" in capsys.readouterr().out
    assert not [n for n in list_names("dskill") if n.startswith(".tfrecords")]
    clean = f"gs://{BUCKET}/dsclean"
    assert convert(*args[:2], "--output", clean, *args[4:]) == 0
    assert files("dskill/v1", str(tmp_path / "a")) == files("dsclean/v1", str(tmp_path / "b"))
    m = json.loads(bucket().blob("dskill/v1/manifest.json").download_as_bytes())
    assert m["made"]["shards_resumed"] == kept
