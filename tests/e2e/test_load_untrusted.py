"""tfrecord_pipelines.load() reads an output as verify does, as untrusted
input: a FIFO shard, a 20 GB sparse LATEST, a shard or a version folder
linked out of the output are refused in one error, never a hang or another
dataset's records. Each call runs on a thread joined with a timeout, so a
regression fails instead of hanging the suite."""
from __future__ import annotations

import os
import shutil

import pytest

import tfrecord_pipelines as tfp
from conftest import convert, make_tree, manifest, within




def _count(out: str) -> int:
    return sum(1 for _ in tfp.load(out, decode=False))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load_untrusted")
    make_tree(str(tmp / "a"), classes=("cat", "dog"), per_class=3)
    make_tree(str(tmp / "b"), classes=("owl", "fox"), per_class=3)
    for name in ("a", "b"):
        assert convert("--input", tmp / name, "--output", tmp / f"out_{name}", "--num_shards", "2",
                       "--split", "train") == 0
    return tmp


def _copy(outputs, tmp_path) -> tuple[str, list]:
    out = str(tmp_path / "copy")
    shutil.copytree(outputs / "out_a", out)
    return out, [os.path.join(out, s["name"]) for s in manifest(out)["splits"]["train"]["shards"]]


def test_a_fifo_shard_is_refused_not_waited_on(outputs, tmp_path):
    out, shards = _copy(outputs, tmp_path)
    assert within(120, lambda: _count(out)) == 6
    os.remove(shards[1])
    os.mkfifo(shards[1])
    with pytest.raises(tfp.OutputError, match="FIFO") as e:
        within(60, lambda: _count(out))
    assert "tfrecords verify" in str(e.value)


def test_a_shard_linked_out_of_the_output_is_refused(outputs, tmp_path):
    out, shards = _copy(outputs, tmp_path)
    other = outputs / "out_b"
    theirs = [os.path.join(other, s["name"]) for s in manifest(other)["splits"]["train"]["shards"]]
    os.remove(shards[0])
    os.symlink(theirs[0], shards[0])  # another dataset's records under our shard's name
    with pytest.raises(tfp.OutputError, match="outside") as e:
        within(60, lambda: _count(out))
    assert "is a link to" in str(e.value)
    os.remove(shards[0])
    os.symlink("/dev/zero", shards[0])
    with pytest.raises(tfp.OutputError, match="character device"):
        within(60, lambda: _count(out))


def test_a_huge_sparse_latest_or_a_version_linked_out_is_refused(outputs, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    latest = root / "LATEST"
    with open(latest, "wb") as f:
        f.truncate(20 << 30)  # 20 GB that cost no disk
    with pytest.raises(tfp.OutputError, match="more than 4,096 bytes"):
        within(30, lambda: tfp.load(str(root)))
    os.remove(latest)
    os.mkfifo(latest)
    with pytest.raises(tfp.OutputError, match="FIFO"):
        within(30, lambda: tfp.load(str(root)))
    os.remove(latest)
    latest.write_text("20260101-000000\n")
    os.symlink(outputs / "out_b", root / "20260101-000000")  # a version folder that is another dataset
    with pytest.raises(tfp.OutputError, match="outside") as e:
        within(30, lambda: tfp.load(str(root)))
    assert "a link to" in str(e.value)
