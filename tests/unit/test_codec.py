"""The Example encoder and the TFRecord framing, held against protobuf and
TensorFlow's own readers."""
import io
import os
import random
import zlib

import pytest

from tfrecord_pipelines.transforms.core.example_codec import BYTES, FLOAT, INT64, encode_example, encode_example_bytes, varint
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression, RecordError, RecordWriter, iter_records


def random_features(rng: random.Random) -> dict:
    f = {}
    for i in range(rng.randint(0, 8)):
        key = rng.choice(["image/encoded", "label", "ä/ключ", "z", "a b", "image/class/label", f"k{i}"])
        kind = rng.choice([BYTES, INT64, FLOAT])
        n = rng.choice([0, 1, 1, 3])
        if kind == BYTES:
            vals = [bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 5, 5000]))) for _ in range(n)]
        elif kind == INT64:
            vals = [rng.choice([0, 1, 127, 128, 300, -1, -(2**63), 2**63 - 1, rng.randint(-10**12, 10**12)])
                    for _ in range(n)]
        else:
            vals = [rng.choice([0.0, 1.5, -2.25, 3.0e38, 1e-30]) for _ in range(n)]
        f[key] = (kind, vals)
    return f


def test_encoding_is_protobufs_deterministic_serialization():
    from tensorflow.core.example import example_pb2
    rng = random.Random(7)
    for _ in range(300):
        f = random_features(rng)
        data = encode_example_bytes(f)
        ex = example_pb2.Example.FromString(data)
        assert ex.SerializeToString(deterministic=True) == data
        for key, (kind, vals) in f.items():
            feat = ex.features.feature[key]
            got = {BYTES: feat.bytes_list.value, INT64: feat.int64_list.value, FLOAT: feat.float_list.value}[kind]
            if kind == FLOAT:
                assert list(got) == pytest.approx(vals, rel=1e-6)
            else:
                assert list(got) == vals


def test_large_values_stay_separate_chunks_and_lengths_add_up():
    img = os.urandom(100_000)
    chunks, n = encode_example({"image/encoded": (BYTES, [img]), "image/height": (INT64, [3])})
    assert any(c is img for c in chunks)  # not copied
    assert n == sum(len(c) for c in chunks) == len(encode_example_bytes({"image/encoded": (BYTES, [img]),
                                                                          "image/height": (INT64, [3])}))


def test_varint():
    assert varint(0) == b"\x00" and varint(127) == b"\x7f" and varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"


@pytest.mark.parametrize("compression", list(Compression))
def test_tensorflow_reads_our_records(tmp_path, compression):
    import tensorflow as tf
    path = str(tmp_path / "x.tfrecord")
    payloads = [os.urandom(n) for n in (0, 1, 100, 70_000)]
    with open(path, "wb") as f:
        w = RecordWriter(f, compression)
        for p in payloads:
            w.write([p[:10], p[10:]] if len(p) > 10 else [p], len(p))
        checksum = w.close()
    from conftest import shard_checksums
    sums = shard_checksums(path)  # the whole-file checksum a manifest records: sha256 hex or crc32c base64
    assert checksum in (sums["sha256"], sums["crc32c"])
    assert w.bytes_written == os.path.getsize(path)
    got = [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=compression.tf_name)]
    assert got == payloads
    with open(path, "rb") as f:
        assert [d for _, d in iter_records(f, compression)] == payloads


def test_tensorflow_written_records_read_by_ours(tmp_path):
    import tensorflow as tf
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for p in (b"", b"abc", b"x" * 5000):
            w.write(p)
    with open(path, "rb") as f:
        assert [d for _, d in iter_records(f)] == [b"", b"abc", b"x" * 5000]


def _framed(payloads):
    buf = io.BytesIO()
    w = RecordWriter(buf)
    for p in payloads:
        w.write([p], len(p))
    return bytearray(buf.getvalue())


@pytest.mark.parametrize("where,expect", [
    (0, "length CRC"),         # a bit of the length
    (9, "length CRC"),         # a bit of the length CRC
    (12 + 3, "data CRC"),      # a bit of the data
    (12 + 50 + 1, "data CRC"),  # a bit of the data CRC
])
def test_damage_is_found_with_its_offset(where, expect):
    data = _framed([b"a" * 50, b"b" * 50])
    second = 12 + 50 + 4
    data[second + where] ^= 0x10
    with pytest.raises(RecordError, match=expect) as e:
        list(iter_records(io.BytesIO(bytes(data))))
    assert e.value.offset == second and e.value.index == 1


def test_cut_and_trailing_garbage():
    data = bytes(_framed([b"a" * 50, b"b" * 50]))
    with pytest.raises(RecordError, match="ends inside a record"):
        list(iter_records(io.BytesIO(data[:-3])))
    with pytest.raises(RecordError, match="header"):
        list(iter_records(io.BytesIO(data + b"junk")))
    with pytest.raises(RecordError, match="length CRC"):
        list(iter_records(io.BytesIO(data + b"j" * 40)))
    # A cut exactly at a record boundary reads as a shorter, valid file:
    # only the manifest's count can catch it (see test_verify).
    assert len(list(iter_records(io.BytesIO(data[:66])))) == 1


def test_compressed_stream_damage():
    buf = io.BytesIO()
    w = RecordWriter(buf, Compression.GZIP)
    w.write([b"z" * 1000], 1000)
    w.close()
    data = buf.getvalue()
    with pytest.raises((RecordError, zlib.error)):
        list(iter_records(io.BytesIO(data[:-5]), Compression.GZIP))
    with pytest.raises(RecordError, match="after the end"):
        list(iter_records(io.BytesIO(data + b"more"), Compression.GZIP))
