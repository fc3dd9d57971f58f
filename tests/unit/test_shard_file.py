"""A local shard file (transforms/storage/shard_file.py): the same bytes in the
same order as a plain file's, every write whole or raising, and what the
kernel writes through its descriptor lands after every write before it."""
import errno
import os
import random

import pytest

from tfrecord_pipelines.transforms.core.example_codec import encode_example
from tfrecord_pipelines.transforms.core.tfrecord_io import RecordWriter
from tfrecord_pipelines.transforms.storage import fsutil
from tfrecord_pipelines.transforms.storage.shard_file import ShardFile


def test_the_file_holds_every_piece_in_order(tmp_path):
    rnd = random.Random(7)
    pieces = [rnd.randbytes(rnd.choice([0, 1, 17, 4096, 200_000])) for _ in range(3000)]
    pieces += [os.urandom(4 << 20), memoryview(b"from a view"), b"end"]
    path = tmp_path / "f"
    with ShardFile(str(path)) as f:
        for p in pieces:
            assert f.write(p) == len(p)
    assert path.read_bytes() == b"".join(bytes(p) for p in pieces)


def test_a_shard_file_holds_the_shard_a_plain_file_does(tmp_path):
    """The record writer over both sinks: the same file, the same CRC32C."""
    examples = [encode_example({"image/encoded": ("bytes", [os.urandom(n)]), "image/class/label": ("int64", [n])})
                for n in (0, 10, 130_000, 3 << 20, 5)]
    crcs = {}
    for name, sink in (("plain", lambda p: open(p, "wb")), ("shard", fsutil.open_shard_write)):
        with sink(str(tmp_path / "out" / name) if name == "shard" else str(tmp_path / name)) as f:
            w = RecordWriter(f)
            for chunks, length in examples:
                w.write(chunks, length)
            crcs[name] = w.close()
    assert (tmp_path / "plain").read_bytes() == (tmp_path / "out" / "shard").read_bytes()
    assert crcs["plain"] == crcs["shard"]


def test_a_short_write_is_finished_not_dropped(tmp_path, monkeypatch):
    """A regular file's write may take fewer bytes (a signal, a disk filling
    up): the rest is written, in order."""
    real = os.write
    calls = []

    def short(fd, data):
        calls.append(len(data))
        return real(fd, bytes(data)[:max(1, len(data) // 3)])
    path = tmp_path / "f"
    data = os.urandom(100_000)
    with ShardFile(str(path)) as f:
        monkeypatch.setattr(os, "write", short)
        assert f.write(data) == len(data)
        monkeypatch.undo()
    assert path.read_bytes() == data and len(calls) > 3


def test_a_write_error_reaches_the_writer():
    """/dev/full fails every write with ENOSPC, as a full disk does: the write
    that meets it raises, and so does every one after it."""
    with ShardFile("/dev/full") as f:
        for _ in range(2):
            with pytest.raises(OSError) as e:
                f.write(b"x" * (256 << 10))
            assert e.value.errno == errno.ENOSPC


def test_a_direct_write_lands_after_every_write_before_it(tmp_path):
    """What the kernel copies into the file through its descriptor (a run of a
    previous version's shard) lands after every byte written before it."""
    path = tmp_path / "f"
    big = os.urandom((1 << 20) + 5)
    with ShardFile(str(path)) as f:
        f.write(b"small")
        f.flush()
        assert os.pread(f.fileno(), 100, 0) == b"small"
        os.write(f.fileno(), b"|direct|")
        f.write(big)
        f.write(b"tail")
        f.flush()
        os.write(f.fileno(), b"|again|")
        f.write(b"end")
    assert path.read_bytes() == b"small|direct|" + big + b"tail|again|end"


def test_a_failing_writer_closes_the_file_and_keeps_its_own_error(tmp_path):
    with pytest.raises(KeyError):
        with ShardFile(str(tmp_path / "f")) as f:
            f.write(b"abc")
            fd = f.fileno()
            raise KeyError("the writer's")
    with pytest.raises(OSError):
        os.fstat(fd)
    assert (tmp_path / "f").read_bytes() == b"abc"
