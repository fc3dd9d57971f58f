"""CRC32C arithmetic without the bytes (transforms/core/crc_shift.py), held to
google_crc32c over the bytes themselves, and what the writer builds on it: a
run of framed records copied whole moves a shard's checksum by a shift."""
import io
import os
import random

import google_crc32c
import pytest

from tfrecord_pipelines.transforms.core import crc_shift
from tfrecord_pipelines.transforms.core.example_codec import encode_example
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression, RecordWriter, crc32c_text


def test_shifts_agree_with_the_checksum_of_the_bytes():
    rnd = random.Random(3)
    for _ in range(300):
        a, b = rnd.randbytes(rnd.randrange(0, 5000)), rnd.randbytes(rnd.randrange(0, 5000))
        c = rnd.getrandbits(32)
        assert crc_shift.extend_by(google_crc32c.extend(c, a), google_crc32c.value(b), len(b)) == \
            google_crc32c.extend(c, a + b)
        x, z = rnd.getrandbits(32), rnd.getrandbits(32)
        assert crc_shift.moved(x, google_crc32c.extend(x, b), z, len(b)) == google_crc32c.extend(z, b)
    big = os.urandom(3 << 20)  # every bit of the length up to 2^21 used
    assert crc_shift.extend_by(11, google_crc32c.value(big), len(big)) == google_crc32c.extend(11, big)
    assert crc_shift.shift(0, 10**12) == 0 and crc_shift.shift(12345, 0) == 12345
    with pytest.raises(ValueError):
        crc_shift.shift(1, -1)


def _records(n: int, seed: int) -> list:
    rnd = random.Random(seed)
    return [encode_example({"image/encoded": ("bytes", [rnd.randbytes(rnd.randrange(50, 3000))]),
                            "image/filename": ("bytes", [f"x/{seed}-{i}.jpg".encode()])}) for i in range(n)]


def test_a_copied_run_moves_the_checksum_as_writing_its_bytes_would():
    old = io.BytesIO()
    w = RecordWriter(old)
    cums = [w.crc]
    for chunks, length in _records(6, 1):
        w.write(chunks, length)
        cums.append(w.crc)
    w.close()
    data = old.getvalue()
    ends = [0]
    for chunks, length in _records(6, 1):
        ends.append(ends[-1] + length + 16)
    # Records 2..4 of the old shard, after one record of the new one's own.
    new = io.BytesIO()
    w2 = RecordWriter(new)
    w2.write(*_records(1, 9)[0])
    w2.write_run(data[ends[2]:ends[5]], 3, cums[2], cums[5])
    w2.write(*_records(1, 8)[0])
    assert w2.records == 5 and w2.bytes_written == len(new.getvalue())
    assert w2.close() == crc32c_text(google_crc32c.value(new.getvalue()))
    with pytest.raises(ValueError):
        RecordWriter(io.BytesIO(), Compression.GZIP).write_run(data[:ends[1]], 1, cums[0], cums[1])
    # The same run put into the file past the writer (the kernel's copy: write_shards.py), then counted.
    new3 = io.BytesIO()
    w3 = RecordWriter(new3)
    w3.write(*_records(1, 9)[0])
    run = data[ends[2]:ends[5]]
    w3.sink.write(run)
    w3.absorb(len(run), 3, google_crc32c.extend(w3.crc, run))
    w3.write(*_records(1, 8)[0])
    assert new3.getvalue() == new.getvalue()
    assert w3.records == 5 and w3.bytes_written == len(new3.getvalue())
    assert w3.close() == crc32c_text(google_crc32c.value(new3.getvalue()))
    with pytest.raises(ValueError):
        RecordWriter(io.BytesIO(), Compression.GZIP).absorb(ends[1], 1, cums[1])
