"""tf.train.Example in protobuf wire format, without importing TensorFlow.

Importing TensorFlow costs ~2.6 s and ~600 MB in every worker process, and the
`tf.train.*` wrappers cost 150-190 us a record. The Example schema is tiny and
frozen, so we write its wire format directly. The output is byte-identical to
`example_pb2.Example.SerializeToString(deterministic=True)`; tests/unit/test_codec.py
holds it against protobuf and TensorFlow's own parser.

A large bytes value (the image) is never copied: encoding returns a list of
chunks in which the value appears as-is, with the total length, so the record
can be CRC'd, hashed and written piece by piece.
"""
from __future__ import annotations

import struct
from typing import Mapping, Sequence, Union

BYTES, INT64, FLOAT = "bytes", "int64", "float"
FEATURE_KINDS = (BYTES, INT64, FLOAT)

# (kind, values); values is a sequence of bytes, ints or floats.
FeatureValue = tuple[str, Sequence[Union[bytes, int, float]]]
Chunks = list[bytes]

_TAG_1_LEN = b"\x0a"  # field 1, wire type 2 (length-delimited)
_TAG_2_LEN = b"\x12"
_TAG_3_LEN = b"\x1a"
_KIND_TAG = {BYTES: _TAG_1_LEN, FLOAT: _TAG_2_LEN, INT64: _TAG_3_LEN}
_INLINE_LIMIT = 4096  # values longer than this stay separate chunks


_SMALL = [bytes((i,)) for i in range(128)]


def varint(n: int) -> bytes:
    """Unsigned LEB128; negative int64 values use their 64-bit two's complement."""
    if 0 <= n < 128:
        return _SMALL[n]
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _feature(kind: str, values: Sequence) -> tuple[list, int]:
    """One `Feature` message as (pieces, total length); a large bytes value is
    its own piece, never copied."""
    if kind == BYTES:
        pieces: list = []
        size = 0
        for v in values:
            head = _TAG_1_LEN + varint(len(v))
            pieces += (head, v)
            size += len(head) + len(v)
    else:
        if kind == INT64:
            packed = b"".join([varint(int(v)) for v in values])
        elif kind == FLOAT:
            packed = struct.pack("<%df" % len(values), *values)
        else:
            raise ValueError(f"unknown feature kind {kind!r}; allowed: {FEATURE_KINDS}")
        # A packed repeated field is omitted entirely when empty.
        pieces = [_TAG_1_LEN, varint(len(packed)), packed] if packed else []
        size = len(packed) + 1 + len(pieces[1]) if packed else 0
    head = _KIND_TAG[kind] + varint(size)
    return [head, *pieces], len(head) + size


_KEY_FIELD: dict = {}
_ORDER: dict = {}


def _key_field(key: str) -> bytes:
    kf = _KEY_FIELD.get(key)
    if kf is None:
        kb = key.encode("utf-8")
        kf = _KEY_FIELD[key] = _TAG_1_LEN + varint(len(kb)) + kb
    return kf


def sort_keys(keys) -> list:
    """Feature keys in the order deterministic serialization writes them: by
    their UTF-8 bytes."""
    return sorted(keys, key=lambda k: k.encode("utf-8"))


def entry(key: str, kind: str, values: Sequence) -> tuple[list, int]:
    """One entry of the Example's feature map (key and Feature) as (pieces,
    length): one piece, or a head and the large bytes value as it is."""
    pieces, flen = _feature(kind, values)
    key_field = _key_field(key)
    value_head = _TAG_2_LEN + varint(flen)
    entry_len = len(key_field) + len(value_head) + flen
    head = _TAG_1_LEN + varint(entry_len) + key_field + value_head
    if flen <= _INLINE_LIMIT:
        return [b"".join([head, *pieces])], len(head) + flen
    return [head, *pieces], len(head) + flen


def bytes_entry(key: str, value: bytes) -> tuple[list, int]:
    """entry(key, BYTES, [value]), the shard writer's commonest case, without
    the general path's lists."""
    n = len(value)
    value_head = _TAG_1_LEN + varint(n)             # BytesList.value
    list_len = len(value_head) + n
    list_head = _TAG_1_LEN + varint(list_len)       # Feature.bytes_list
    flen = len(list_head) + list_len
    feature_head = _TAG_2_LEN + varint(flen)        # the map entry's value
    key_field = _key_field(key)
    head = (_TAG_1_LEN + varint(len(key_field) + len(feature_head) + flen) + key_field + feature_head
            + list_head + value_head)
    if n <= _INLINE_LIMIT:
        return [head + value], len(head) + n
    return [head, value], len(head) + n


def assemble(pieces: list, total: int) -> tuple[Chunks, int]:
    """The Example from its entries' pieces, in order (`total`: their summed
    length), as (chunks, length). Small pieces are joined into few chunks;
    values over 4 KB stay chunks of their own."""
    head = _TAG_1_LEN + varint(total)
    if not pieces or max(map(len, pieces)) <= _INLINE_LIMIT:
        return [b"".join([head, *pieces])], total + len(head)
    chunks: Chunks = []
    buf = bytearray(head)
    for piece in pieces:
        if len(piece) > _INLINE_LIMIT:
            chunks += (bytes(buf), piece)
            buf = bytearray()
        else:
            buf += piece
    if buf:
        chunks.append(bytes(buf))
    return chunks, total + len(head)


def encode_example(features: Mapping[str, FeatureValue]) -> tuple[Chunks, int]:
    """Encodes an Example as (chunks, total length), map keys in sorted order.

    Sorting by the UTF-8 bytes of the key is what protobuf's deterministic
    serialization does, so equal inputs always give equal bytes.
    """
    names = tuple(features)
    order = _ORDER.get(names)
    if order is None:
        order = _ORDER[names] = sort_keys(names)
    pieces: list = []
    total = 0
    for key in order:
        p, n = entry(key, *features[key])
        pieces += p
        total += n
    return assemble(pieces, total)


def encode_example_bytes(features: Mapping[str, FeatureValue]) -> bytes:
    chunks, _ = encode_example(features)
    return b"".join(chunks)
