"""Create-only writes on GCS (the lock, the manifest) retried after a lost
response. Real GCS enforces ifGenerationMatch=0, so the retry of an upload
that went through fails its own precondition (412); the emulator ignores
preconditions, so these tests go through tests/gcs_proxy.py, which enforces
them and can lose a response after the upload is applied."""
from __future__ import annotations

import os

import pytest

from conftest import convert, make_tree, read_examples, scalar
from gcs_emulator import BUCKET, bucket, download_prefix, gcs, gcs_proxied, list_names  # noqa: F401 (fixtures)
from tfrecord_pipelines.transforms.storage import fsutil

CREATE_ONLY = "ifGenerationMatch=0"  # in the query of create-only uploads, and of nothing else we send


def test_create_only_retry_after_a_lost_response(gcs_proxied, tmp_path):
    """Every create-only upload is applied, then its connection reset before
    the answer: the client retries, meets its own object (412), and must take
    it as its success. Before: the run found "another conversion" holding the
    lock (its own), exited 2 and left the lock behind."""
    images = str(tmp_path / "images")
    labels = make_tree(images, per_class=2)
    gcs_proxied.set(reset_after=1.0, fault_paths=[CREATE_ONLY])
    try:
        assert convert("--input", images, "--output", f"gs://{BUCKET}/lost1") == 0
        faults = gcs_proxied.stats()["faults"]
    finally:
        gcs_proxied.set(reset_after=0.0, fault_paths=[])
    assert faults.get("reset_after", 0) >= 2 and faults.get("412", 0) >= 2, faults  # the lock and the manifest
    names = list_names("lost1")
    assert ".tfrecords.lock" not in names and "manifest.json" in names
    local = str(tmp_path / "dl")
    download_prefix("lost1", local)
    got = {scalar(r, "image/filename"): scalar(r, "image/class/text") for r in read_examples(local, "train")}
    assert got == labels
    from tfrecord_pipelines.outputs.verification import verify_output
    assert verify_output(f"gs://{BUCKET}/lost1").ok


def test_create_only_still_refuses_another_writers_object(gcs_proxied):
    path = f"gs://{BUCKET}/co/marker"
    fsutil.create_only(path, b"first")
    fsutil.create_only(path, b"first")  # the same bytes: our own earlier success
    with pytest.raises(fsutil.AlreadyExists):
        fsutil.create_only(path, b"second")
    assert bucket().blob("co/marker").download_as_bytes() == b"first"
    assert os.environ["STORAGE_EMULATOR_HOST"] == gcs_proxied.url


def test_output_removed_while_publishing_to_a_bucket(gcs, tmp_path, monkeypatch, capsys):
    """The same check on GCS: every object under the output deleted while
    publishing (after the shards are in): exit 1, no manifest, no summary."""
    images = str(tmp_path / "images")
    make_tree(images, per_class=2)
    real = fsutil.write_chunks

    def write_chunks(path, chunks):
        if path.endswith("/rejects.jsonl"):
            for blob in bucket().list_blobs(prefix="gone1/"):
                blob.delete()
        return real(path, chunks)
    monkeypatch.setattr(fsutil, "write_chunks", write_chunks)
    assert convert("--input", images, "--output", f"gs://{BUCKET}/gone1") == 1
    captured = capsys.readouterr()
    assert "missing after publishing" in captured.err and "Converted in" not in captured.out
    assert "manifest.json" not in list_names("gone1")
