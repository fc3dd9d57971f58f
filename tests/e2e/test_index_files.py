"""--index_files: an index per shard (`index/<shard>.idx`, one line `<offset> <length>`
per record, DALI's tfrecord2idx format) that the PyTorch `tfrecord` package
reads to split a shard across workers; out of the shards' glob (`train-*`),
staged and published like the shards, checked by verify, refused for
compressed shards.

The `tfrecord` package's reader (tfrecord.reader) imports without torch: its
package __init__ imports tfrecord.torch only if torch is there. The test reads
through that reader (what tfrecord.torch's datasets call in each DataLoader
worker with shard=(worker id, workers)), without torch.
"""
import hashlib
import os
import struct

import pytest

from conftest import convert, make_tree, manifest
from tfrecord_pipelines.outputs.verification import verify_output

DESCRIPTION = {"image/encoded": "byte", "image/class/label": "int", "image/class/text": "byte",
               "image/filename": "byte", "image/key/sha256": "byte"}


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("indexed")
    root = str(tmp / "imgs")
    labels = make_tree(root, per_class=10)
    out = str(tmp / "out")
    # At least 2 records a shard: the tfrecord package (1.14.6) cannot read a
    # one-line index (np.loadtxt gives a 1-D array).
    assert convert("--input", root, "--output", out, "--num_shards", "train=3,test=2", "--split",
                   "train=0.7,test=0.3",
                   "--index_files") == 0
    return root, labels, out


def _framing(path: str) -> list:
    """(offset, framed length) of each record, read from the shard's own headers."""
    got = []
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        got.append((pos, 12 + length + 4))
        pos += 12 + length + 4
    return got


def test_every_shard_has_its_index_listed_in_the_manifest(indexed):
    _, _, out = indexed
    m = manifest(out)
    for split in m["splits"].values():
        for e in split["shards"]:
            assert e["index"] == "index/" + e["name"] + ".idx"
            with open(os.path.join(out, e["index"])) as f:
                lines = [tuple(map(int, line.split(" "))) for line in f.read().splitlines()]
            assert lines == _framing(os.path.join(out, e["name"]))
            assert len(lines) == e["records"]
    names = os.listdir(out)
    assert not [n for n in names if n.startswith(".tfrecords-staging-")]
    assert not [n for n in names if n.endswith(".idx")]
    assert sorted("index/" + n for n in os.listdir(os.path.join(out, "index"))) == sorted(
        e["index"] for s in m["splits"].values() for e in s["shards"])


def test_the_split_glob_reads_only_shards(indexed):
    """`train-*` (the pattern of tensorflow/tpu's and Model Garden's readers, and
    of docs/reading.md) matches the shards and nothing else: TFRecordDataset over
    it reads every record of the split and no index as a corrupted record."""
    import tensorflow as tf
    _, _, out = indexed
    m = manifest(out)
    for split, info in m["splits"].items():
        files = tf.io.gfile.glob(out + f"/{split}-*")
        assert sorted(os.path.basename(f) for f in files) == sorted(e["name"] for e in info["shards"])
        assert sum(1 for _ in tf.data.TFRecordDataset(files)) == info["records"]


# Runs in a fresh interpreter, as a DataLoader worker would: the tfrecord package
# registers its own copy of TensorFlow's Example protos, which protobuf refuses
# in a process that imported TensorFlow (this one has).
READER = """
import base64, json, sys
from tfrecord.reader import tfrecord_loader
path, index, worker, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
description = json.loads(sys.argv[5])
for r in tfrecord_loader(path, index, description, shard=(worker, workers)):
    print(json.dumps({k: base64.b64encode(bytes(v)).decode() if d == "byte" else v.tolist()
                      for (k, d), v in zip(description.items(), (r[k] for k in description))}))
"""


def read_with_tfrecord_package(path: str, index: str, worker: int, workers: int) -> list:
    import base64
    import json
    import subprocess
    import sys
    got = subprocess.run([sys.executable, "-c", READER, path, index, str(worker), str(workers),
                          json.dumps(DESCRIPTION)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    rows = [json.loads(line) for line in got.stdout.splitlines()]
    return [{k: base64.b64decode(v) if DESCRIPTION[k] == "byte" else v for k, v in r.items()} for r in rows]


def test_the_pytorch_tfrecord_reader_splits_shards_across_two_workers(indexed):
    root, labels, out = indexed
    m = manifest(out)
    classes = m["label_map"]["classes"]
    seen = []
    for split in m["splits"].values():
        for e in split["shards"]:
            path, index = os.path.join(out, e["name"]), os.path.join(out, e["index"])
            per_worker = [read_with_tfrecord_package(path, index, i, 2) for i in (0, 1)]
            assert all(per_worker), "each worker gets part of the shard"
            assert sum(map(len, per_worker)) == e["records"]
            seen += [r for rows in per_worker for r in rows]
    assert sorted(r["image/filename"].decode() for r in seen) == sorted(labels)  # each exactly once
    for r in seen:
        rel = r["image/filename"].decode()
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        assert r["image/encoded"] == data, rel
        assert r["image/key/sha256"].decode() == hashlib.sha256(data).hexdigest()
        assert r["image/class/text"].decode() == labels[rel]
        assert r["image/class/label"] == [classes[labels[rel]]]


def test_verify_checks_the_index(indexed, tmp_path):
    import shutil
    _, _, good = indexed
    assert verify_output(good).ok
    out = str(tmp_path / "copy")
    shutil.copytree(good, out)
    e = manifest(out)["splits"]["train"]["shards"][0]
    idx = os.path.join(out, e["index"])
    with open(idx) as f:
        lines = f.read().splitlines()
    off, length = lines[1].split(" ")
    lines[1] = f"{off} {int(length) + 1}"
    with open(idx, "w") as f:
        f.write("\n".join(lines) + "\n")
    errors = verify_output(out).errors
    assert any(e["index"] in err and "line 2" in err for err in errors), errors
    os.remove(idx)
    assert any(f"{e['index']}: missing" in err for err in verify_output(out).errors)
    for stale in ("index/train-00000-of-00009.tfrecord.idx", "train-00000-of-00009.tfrecord.idx"):
        with open(os.path.join(out, stale), "w") as f:  # in index/, or beside the shards (earlier versions)
            f.write("0 10\n")
        assert any(f"{stale}: a shard index not in the manifest" in err for err in verify_output(out).errors)


def test_a_run_without_index_files_removes_stale_indexes(indexed, tmp_path):
    import shutil
    root, _, good = indexed
    out = str(tmp_path / "again")
    shutil.copytree(good, out)
    with open(os.path.join(out, "train-00000-of-00009.tfrecord.idx"), "w") as f:  # where earlier versions wrote one
        f.write("0 10\n")
    assert convert("--input", root, "--output", out, "--num_shards", "2", "--overwrite") == 0
    assert not [n for n in os.listdir(out) if n.endswith(".idx")]
    assert not os.path.exists(os.path.join(out, "index"))
    assert all("index" not in e for s in manifest(out)["splits"].values() for e in s["shards"])
    assert verify_output(out).ok
    # Same shards with and without indexes: the index changes nothing else.
    assert convert("--input", root, "--output", str(tmp_path / "idx"), "--num_shards", "2", "--index_files") == 0
    names = [e["name"] for e in manifest(out)["splits"]["train"]["shards"]]
    assert names == [e["name"] for e in manifest(str(tmp_path / "idx"))["splits"]["train"]["shards"]]
    for n in names:
        with open(os.path.join(out, n), "rb") as fa, open(os.path.join(tmp_path, "idx", n), "rb") as fb:
            assert fa.read() == fb.read()


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_index_files_are_refused_for_compressed_shards(tmp_path, capsys, compression):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=1)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--index_files", "--compression", compression,
                   in_memory=False) == 2
    err = capsys.readouterr().err
    assert f"--index_files cannot be used with --compression {compression}" in err
    assert "use --compression none" in err
    assert not os.path.exists(os.path.join(out, "manifest.json"))
