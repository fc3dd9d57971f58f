"""The same input and options give byte-identical shards, whatever the runner
mode, worker count or run."""
import os

import pytest

from conftest import check_against_source, convert, image_bytes, manifest, shard_files, write


def shard_bytes(out):
    return {os.path.basename(f): open(f, "rb").read() for f in shard_files(out)}


@pytest.mark.beam_range
def test_same_bytes_in_process_multi_process_and_again(tmp_path, monkeypatch):
    root = str(tmp_path / "images")
    for c in range(4):
        for k in range(15):
            write(os.path.join(root, f"class_{c}", f"{k:03d}.jpg"), image_bytes(20 + k % 5, 15, seed=c * 50 + k))
    write(os.path.join(root, "class_0", "broken.jpg"), image_bytes()[:100])
    args = ["--input", root, "--split", "train=0.7,validation=0.3", "--num_shards", "train=4,validation=2",
            "--seed", "42", "--max_reject_fraction", "0.1"]
    # ("multi_processing x1" would be turned into in_memory by the runner, so it is not a
    # case of its own: the multi-process cases below run two worker processes or more.)
    runs = {
        "in_memory": ["--direct_running_mode", "in_memory"],
        "multi_processing x2": ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
        "multi_processing x3, Beam's own workers": ["--direct_running_mode", "multi_processing",
                                                    "--direct_num_workers", "3"],
        "the default (all cores)": [],
        "in_memory again": ["--direct_running_mode", "in_memory"],
    }
    results = {}
    for name, mode in runs.items():
        out = str(tmp_path / "".join(c if c.isalnum() else "_" for c in name))
        monkeypatch.setenv("TFRECORDS_SPEEDUPS", "0" if "Beam's own" in name else "1")
        assert convert(*args, "--output", out, *mode, in_memory=False) == 0
        results[name] = shard_bytes(out)
        m = manifest(out)
        assert m["counts"]["written"] == 60 and m["rejects_by_reason"] == {"truncated": 1}
    first = results["in_memory"]
    assert len(first) == 6
    check_against_source(str(tmp_path / "in_memory"),
                         {f"class_{c}/{k:03d}.jpg": f"class_{c}" for c in range(4) for k in range(15)}, root)
    for name, got in results.items():
        assert got == first, f"{name} differs from in_memory"


@pytest.mark.beam_range
def test_seed_changes_the_order_not_the_content(tmp_path):
    import tensorflow as tf
    root = str(tmp_path / "images")
    for k in range(12):
        write(os.path.join(root, "a", f"{k}.jpg"), image_bytes(seed=k))
    outs, records = [], []
    for seed in ("1", "2"):
        out = str(tmp_path / f"seed{seed}")
        assert convert("--input", root, "--output", out, "--seed", seed, "--num_shards", "1") == 0
        outs.append(shard_bytes(out)["train-00000-of-00001.tfrecord"])
        records.append([r.numpy() for r in tf.data.TFRecordDataset(shard_files(out))])
    assert outs[0] != outs[1]
    # The same serialized records, byte for byte, in another order.
    assert records[0] != records[1] and sorted(records[0]) == sorted(records[1]) and len(records[0]) == 12
