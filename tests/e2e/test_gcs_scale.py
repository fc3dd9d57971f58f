"""gs:// input through a proxy that behaves like a remote bucket
(tests/gcs_proxy.py: GCS's generation and precondition rules, faults, a dead
endpoint): one media request per read, pinned to the listed generation;
shards byte-identical to a local-disk conversion of the same files; faults
retried; a silent bucket fails the run in bounded time with a message."""
import os
import re

import pytest

from conftest import convert, make_tree, manifest, read_examples, scalar, sha256_file, shard_files
from gcs_emulator import BUCKET, bucket, download_prefix, gcs, gcs_proxied, upload_tree  # noqa: F401 (fixtures)


def _local_twin(tmp_path, labels_root, extra=()):
    out = str(tmp_path / "local-out")
    assert convert("--input", labels_root, "--output", out, "--num_shards", "3", *extra) == 0
    return out


def _same_shards(a, b):
    fa, fb = shard_files(a), shard_files(b)
    assert [os.path.basename(f) for f in fa] == [os.path.basename(f) for f in fb]
    assert [sha256_file(f) for f in fa] == [sha256_file(f) for f in fb]


def _labels_and_bytes(out, root):
    m = manifest(out)
    got = {}
    for split in m["splits"]:
        for row in read_examples(out, split):
            rel = scalar(row, "image/filename")
            with open(os.path.join(root, rel), "rb") as f:
                assert row["image/encoded"] == [f.read()], rel
            got[rel] = scalar(row, "image/class/text")
    return got


@pytest.mark.parametrize("reads", ["1", "2"])
def test_gs_input_reads_each_image_in_one_request_and_matches_local_disk(gcs_proxied, tmp_path, reads):
    root = str(tmp_path / "imgs")
    labels = make_tree(root, classes=("cat", "dog", "bird", "fish"), per_class=10)
    upload_tree(root, f"scale1-{reads}")
    gcs_proxied.reset_stats()
    out = str(tmp_path / "gs-out")
    assert convert("--input", f"gs://{BUCKET}/scale1-{reads}", "--output", out, "--num_shards", "3",
                   "--reads_per_image", reads, in_memory=False) == 0
    stats = gcs_proxied.stats()
    n = len(labels)
    # One media request per read, nothing else per image: the other requests
    # are listings, a few per folder. Beam's FileSystems took 6 per image.
    assert stats["media"] == n * int(reads), stats
    assert stats["requests"] - stats["media"] <= 20, stats
    assert _labels_and_bytes(out, root) == labels
    # Whatever the number of reads, the same shards as from local disk.
    _same_shards(out, _local_twin(tmp_path, root))


def test_an_object_rewritten_after_validation_is_a_changed_reject(gcs_proxied, tmp_path, monkeypatch):
    from tfrecord_pipelines.transforms.stages import write_shards
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=4)
    upload_tree(root, "scale2")
    victim = "dog/2.jpg"
    real = write_shards.read_again

    def rewrite_then_read(rec, policy):
        if rec.rel == victim:  # same size, other bytes: a new generation
            data = bucket().blob(f"scale2/{victim}").download_as_bytes()
            bucket().blob(f"scale2/{victim}").upload_from_string(data[::-1])
        return real(rec, policy)
    monkeypatch.setattr(write_shards, "read_again", rewrite_then_read)
    out = str(tmp_path / "out")
    assert convert("--input", f"gs://{BUCKET}/scale2", "--output", out, "--max_reject_fraction", "0.5",
                   "--reads_per_image", "2") == 0
    m = manifest(out)
    assert m["rejects_by_reason"] == {"changed": 1}
    assert gcs_proxied.stats()["faults"].get("generation_404") == 1
    expected = {k: v for k, v in labels.items() if k != victim}
    assert _labels_and_bytes(out, root) == expected


def test_transient_faults_are_retried_and_change_nothing(gcs_proxied, tmp_path):
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=12)
    upload_tree(root, "scale3")
    gcs_proxied.set(fail_503=0.15, reset_before=0.1, reset_after=0.1, fault_paths=["alt=media", "prefix="])
    out = str(tmp_path / "out")
    assert convert("--input", f"gs://{BUCKET}/scale3", "--output", out, "--num_shards", "3",
                   in_memory=False) == 0
    faults = gcs_proxied.stats()["faults"]
    gcs_proxied.set(fail_503=0.0, reset_before=0.0, reset_after=0.0)
    assert sum(faults.values()) >= 3, faults
    assert _labels_and_bytes(out, root) == labels
    _same_shards(out, _local_twin(tmp_path, root))


def test_gs_to_gs_through_faults(gcs_proxied, tmp_path):
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=5)
    upload_tree(root, "scale4")
    gcs_proxied.set(fail_503=0.1, fault_paths=["alt=media", "prefix="])
    assert convert("--input", f"gs://{BUCKET}/scale4", "--output", f"gs://{BUCKET}/scale4-out",
                   "--num_shards", "3") == 0
    gcs_proxied.set(fail_503=0.0)
    local = str(tmp_path / "dl")
    download_prefix("scale4-out", local)
    assert _labels_and_bytes(local, root) == labels
    _same_shards(local, _local_twin(tmp_path, root))


def test_a_bucket_that_stops_answering_fails_the_run_with_a_message(gcs_proxied, tmp_path, capsys):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=3)
    upload_tree(root, "scale5")
    gcs_proxied.set(blackhole=True, fault_paths=["alt=media"])  # listing answers, reads never do
    out = str(tmp_path / "out")
    try:  # before the deadlines, this read hung for more than 400 s
        code = convert("--input", f"gs://{BUCKET}/scale5", "--output", out, "--io_timeout", "2")
    finally:
        gcs_proxied.set(blackhole=False)
    err = capsys.readouterr().err
    assert code == 1
    assert f"gs://{BUCKET}/scale5/" in err and "no usable answer from Cloud Storage within --io_timeout 2" in err, err
    assert "Traceback" not in err
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def test_the_progress_line_says_what_a_stalled_run_waits_on(tmp_path):
    """Nothing moving for a while: the line names the input it reads and the
    deadline, instead of minutes of silence."""
    from tfrecord_pipelines.console.progress_line import ProgressLine
    from tfrecord_pipelines.transforms.storage.progress import Progress
    folder = str(tmp_path / "progress")
    os.makedirs(folder)
    line = ProgressLine(folder, "off", f"gs://{BUCKET}/images", 120.0)
    p = Progress(folder, "write")
    p.add(5, 1000)
    p.flush(force=True)
    assert "nothing new" not in line.line()
    line._changed -= ProgressLine.STALL_SECONDS + 5  # as if that long had passed with no new record
    text = line.line()
    assert re.search(rf"nothing new for 2\d s: reading gs://{BUCKET}/images", text), text
    assert "--io_timeout 120 s" in text
    p.add(1, 10)
    p.flush(force=True)
    assert "nothing new" not in line.line()


def test_a_bucket_whose_listing_stalls_fails_within_io_timeout(gcs_proxied, tmp_path, capsys):
    """Listings answer nothing (reads would): the run stops after about
    --io_timeout with one line naming the bucket, the bound and the fix. It
    took 123 s and ended in Beam's RetryError('Timeout of 120.0s exceeded')."""
    import time
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=2)
    upload_tree(root, "scale6")
    gcs_proxied.set(blackhole=True, fault_paths=["prefix="])  # every listing; reads and writes answer
    started = time.monotonic()
    try:
        code = convert("--input", f"gs://{BUCKET}/scale6", "--output", str(tmp_path / "out"), "--io_timeout", "3")
    finally:
        gcs_proxied.set(blackhole=False, fault_paths=[])
    seconds = time.monotonic() - started
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: listing gs://{BUCKET}/scale6/ failed: no usable answer from Cloud Storage "
                               "within --io_timeout 3 s"), lines
    assert lines[0].endswith(f"check that this machine reaches bucket {BUCKET} (network, proxy, "
                             f"STORAGE_EMULATOR_HOST={gcs_proxied.url}), or raise --io_timeout"), lines
    assert seconds < 30, seconds


def test_the_listing_stage_takes_the_io_timeout(gcs_proxied, tmp_path):
    """The tree's listing inside the pipeline (ListInputs: its pieces, then
    each piece) waits --io_timeout, not the 120 s default, on a bucket that
    stopped answering after the options were checked."""
    import collections
    import time

    from tfrecord_pipelines.transforms.storage import gcs, listing
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=2)
    upload_tree(root, "scale7")
    tree = f"gs://{BUCKET}/scale7"
    assert sorted(listing.folder_units(tree, 2.0)) == ["", "bird", "cat", "dog"]
    gcs_proxied.set(blackhole=True, fault_paths=["prefix="])
    try:
        for attempt in (lambda: listing.folder_units(tree, 2.0),
                        lambda: list(listing.walk_unit(tree, "cat", ("*",), collections.Counter(), timeout=2.0))):
            started = time.monotonic()
            with pytest.raises(gcs.StorageUnavailable, match=r"within --io_timeout 2 s"):
                attempt()
            assert time.monotonic() - started < 20
    finally:
        gcs_proxied.set(blackhole=False, fault_paths=[])
