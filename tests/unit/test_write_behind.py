"""A shard file written by a thread of its own (transforms/storage/write_behind.py):
the same bytes in the same order as plain writes, at most MAX_AHEAD bytes
waiting, and a write error raised to the producer, never lost."""
import errno
import fcntl
import os
import random
import threading
import time

import pytest

from tfrecord_pipelines.transforms.core.example_codec import encode_example
from tfrecord_pipelines.transforms.core.tfrecord_io import RecordWriter
from tfrecord_pipelines.transforms.storage import write_behind
from tfrecord_pipelines.transforms.storage.write_behind import WriteBehind

F_GETPIPE_SZ = 1032  # Linux


def test_the_file_holds_every_piece_in_order(tmp_path):
    rnd = random.Random(7)
    # Pieces from empty to several times MAX_AHEAD, many tiny ones (one writev gathers up to MAX_PIECES).
    pieces = [rnd.randbytes(rnd.choice([0, 1, 17, 4096, 200_000])) for _ in range(3000)]
    pieces += [os.urandom(write_behind.MAX_AHEAD * 2 + 3), b"end"]
    path = tmp_path / "f"
    with WriteBehind(str(path)) as f:
        for p in pieces:
            assert f.write(p) == len(p)
    assert path.read_bytes() == b"".join(pieces)


def test_a_shard_written_behind_is_the_shard_written_in_place(tmp_path):
    """The record writer over both sinks: the same file, the same CRC32C."""
    examples = [encode_example({"image/encoded": ("bytes", [os.urandom(n)]), "image/class/label": ("int64", [n])})
                for n in (0, 10, 130_000, 3 << 20, 5)]
    crcs = {}
    for name, sink in (("plain", lambda p: open(p, "wb")), ("behind", WriteBehind)):
        with sink(str(tmp_path / name)) as f:
            w = RecordWriter(f)
            for chunks, length in examples:
                w.write(chunks, length)
            crcs[name] = w.close()
    assert (tmp_path / "plain").read_bytes() == (tmp_path / "behind").read_bytes()
    assert crcs["plain"] == crcs["behind"]


def test_no_more_than_max_ahead_waits_for_a_slow_file(tmp_path, monkeypatch):
    """A FIFO nobody reads yet stands for a disk that does not keep up: the
    producer stops once MAX_AHEAD bytes (and the pipe's own buffer) wait."""
    monkeypatch.setattr(write_behind, "BATCH", 64 << 10)
    monkeypatch.setattr(write_behind, "MAX_AHEAD", 256 << 10)
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    total, piece = 16 << 20, os.urandom(64 << 10)
    got = []
    reader_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so that the writer's open does not block
    accepted = [0]

    def produce():
        with WriteBehind(fifo) as f:
            for _ in range(total // len(piece)):
                f.write(piece)
                accepted[0] += len(piece)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    time.sleep(0.5)
    waiting = accepted[0]
    pipe = fcntl.fcntl(reader_fd, F_GETPIPE_SZ)  # what the pipe itself holds (64 KiB by default)
    os.set_blocking(reader_fd, True)
    while True:  # drained whatever the check finds, so that the producer ends
        block = os.read(reader_fd, 1 << 20)
        if not block:
            break
        got.append(block)
    producer.join()
    os.close(reader_fd)
    assert waiting <= (256 << 10) + (64 << 10) + pipe + len(piece), waiting
    assert accepted[0] == total and b"".join(got) == piece * (total // len(piece))


def test_a_write_error_reaches_the_producer():
    """/dev/full fails every write with ENOSPC, as a full disk does."""
    f = WriteBehind("/dev/full")
    with pytest.raises(OSError) as e:
        try:
            for _ in range(200):  # the thread meets the error; a later write or the close raises it
                f.write(b"x" * (256 << 10))
        finally:
            f.close()
    assert e.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        f.write(b"more")  # nothing is accepted quietly after it


def test_a_failing_producer_keeps_its_own_error(tmp_path):
    """The producer's exception leaves the block as it is; the thread and the file are closed."""
    before = threading.active_count()
    with pytest.raises(KeyError):
        with WriteBehind(str(tmp_path / "f")) as f:
            f.write(b"abc")
            raise KeyError("the producer's")
    assert threading.active_count() == before


def test_a_flush_puts_every_byte_in_the_file_before_a_direct_write(tmp_path):
    """What the kernel copies into the file through its descriptor lands after
    every byte written before the flush, whether the thread was idle (the
    flush writes them itself) or busy with a hand-over of its own."""
    path = tmp_path / "f"
    big = os.urandom(write_behind.BATCH + 5)  # handed over to the thread at once
    with WriteBehind(str(path)) as f:
        f.write(b"small")  # waits in the pieces: the thread is idle at the flush
        f.flush()
        assert os.pread(f.fileno(), 100, 0) == b"small"
        os.write(f.fileno(), b"|direct|")
        f.write(big)
        f.write(b"tail")
        f.flush()
        os.write(f.fileno(), b"|again|")
        f.write(b"end")
    assert path.read_bytes() == b"small|direct|" + big + b"tail|again|end"


def test_a_flush_that_fails_keeps_failing():
    """A flush written on the caller's thread raises the disk's error, and
    nothing is accepted quietly after it."""
    f = WriteBehind("/dev/full")
    f.write(b"x" * 100)
    with pytest.raises(OSError) as e:
        f.flush()
    assert e.value.errno == errno.ENOSPC
    with pytest.raises(OSError):
        f.write(b"more")
    with pytest.raises(OSError):
        f.close()
