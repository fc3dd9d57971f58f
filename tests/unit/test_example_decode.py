"""The report's own Example reader (transforms/core/example_decode.py), held
against protobuf's parser on records written by our encoder and by protobuf
itself (packed and unpacked lists, unknown fields, repeated keys), and
refusing damaged records."""
import random
import struct

import pytest
from tensorflow.core.example import example_pb2

from test_codec import random_features
from tfrecord_pipelines.transforms.core import example_decode
from tfrecord_pipelines.transforms.core.example_codec import encode_example_bytes


def _protobuf_values(record: bytes) -> dict:
    ex = example_pb2.Example.FromString(record)
    out = {}
    for key, f in ex.features.feature.items():
        kind = f.WhichOneof("kind")
        out[key] = list(getattr(f, kind).value) if kind else []
    return out


def test_every_feature_reads_as_protobuf_reads_it():
    rng = random.Random(5)
    for _ in range(300):
        record = encode_example_bytes(random_features(rng))
        assert example_decode.decode(record) == _protobuf_values(record)


def test_records_protobuf_wrote_unpacked_and_with_unknown_fields():
    ex = example_pb2.Example()
    ex.features.feature["i"].int64_list.value.extend([1, -2, 2**40])
    ex.features.feature["f"].float_list.value.extend([0.5, -1.25])
    ex.features.feature["b"].bytes_list.value.extend([b"x", b""])
    record = ex.SerializeToString()
    assert example_decode.decode(record) == _protobuf_values(record)
    # unpacked int64 (field 1, varint) and float (field 1, fixed32) values, and an unknown field 9
    unpacked_ints = b"\x08\x05\x08\x07"
    unpacked_floats = b"\x0d" + struct.pack("<f", 2.5)
    feature_i = b"\x1a" + bytes([len(unpacked_ints)]) + unpacked_ints
    feature_f = b"\x12" + bytes([len(unpacked_floats)]) + unpacked_floats
    entries = b""
    for key, feat in ((b"u", feature_i), (b"v", feature_f)):
        entry = b"\x0a" + bytes([len(key)]) + key + b"\x12" + bytes([len(feat)]) + feat
        entries += b"\x0a" + bytes([len(entry)]) + entry
    record = b"\x0a" + bytes([len(entries)]) + entries + b"\x48\x01"  # field 9, varint: unknown, skipped
    assert example_decode.decode(record) == _protobuf_values(record) == {"u": [5, 7], "v": [2.5]}


def test_a_repeated_key_keeps_the_last_entry_as_protobuf_does():
    a = encode_example_bytes({"k": ("int64", [1])})
    b = encode_example_bytes({"k": ("int64", [2])})
    record = a + b  # concatenated messages merge: the map's last entry wins
    assert example_decode.decode(record) == _protobuf_values(record) == {"k": [2]}


def test_rows_have_every_asked_key():
    record = encode_example_bytes({"a": ("bytes", [b"x"]), "b": ("int64", [3])})
    assert example_decode.decode_rows([record], ["a", "c"]) == [{"a": [b"x"], "c": None}]


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_damaged_records_raise(cut):
    record = encode_example_bytes({"image/encoded": ("bytes", [b"x" * 100]), "n": ("int64", [300])})
    with pytest.raises(ValueError):
        example_decode.decode(record[:-cut])
