"""Reading a few features of serialized tf.train.Example records, without
TensorFlow or tfx-bsl (the report samples a few dozen records: importing
tfx-bsl and pyarrow for them cost ~0.17 s of CPU in the publish step).

The wire format, as example_codec writes it and protobuf parses it:
Example.features (1) -> Features.feature (1): map entries of key (1) and
Feature (2); Feature.bytes_list (1) / float_list (2) / int64_list (3), each
with repeated `value` (1), packed or not. Unknown fields are skipped; a
truncated or malformed record raises ValueError. When a message repeats a
field, protobuf's merge rules apply: the last map entry of a key wins.
"""
from __future__ import annotations

import struct
from typing import Iterable, Optional


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: memoryview) -> Iterable[tuple[int, int, object]]:
    """(field number, wire type, value) of a message: an int for varints and
    fixed widths, a memoryview for length-delimited fields."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise ValueError("truncated field")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            if pos + 4 > end:
                raise ValueError("truncated field")
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 1:
            if pos + 8 > end:
                raise ValueError("truncated field")
            value, pos = buf[pos:pos + 8], pos + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield field, wire, value


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _values(feature: memoryview) -> list:
    out: list = []
    for kind, wire, body in _fields(feature):
        if wire != 2 or kind not in (1, 2, 3):
            continue
        for field, vwire, v in _fields(body):
            if field != 1:
                continue
            if kind == 1:
                out.append(bytes(v))
            elif kind == 2:
                if vwire == 2:  # packed
                    if len(v) % 4:
                        raise ValueError("packed floats of a length not divisible by 4")
                    out += [x for (x,) in struct.iter_unpack("<f", v)]
                else:
                    out.append(struct.unpack("<f", v)[0])
            else:
                if vwire == 2:  # packed
                    pos = 0
                    while pos < len(v):
                        x, pos = _varint(v, pos)
                        out.append(_signed(x))
                else:
                    out.append(_signed(v))
    return out


def decode(record: bytes, wanted: Optional[set] = None) -> dict:
    """{key: [values]} of the Example's features (only `wanted` keys, when
    given); bytes values as bytes, floats as float, int64 as int."""
    out: dict = {}
    for field, wire, features in _fields(memoryview(record)):
        if field != 1 or wire != 2:
            continue
        for ffield, fwire, entry in _fields(features):
            if ffield != 1 or fwire != 2:
                continue
            key, value = None, memoryview(b"")
            for efield, ewire, v in _fields(entry):
                if efield == 1 and ewire == 2:
                    key = bytes(v).decode("utf-8", "surrogateescape")
                elif efield == 2 and ewire == 2:
                    value = v
            if key is not None and (wanted is None or key in wanted):
                out[key] = _values(value)
    return out


def decode_rows(records: Iterable[bytes], keys: Iterable[str]) -> list:
    """One dict per record with every key of `keys`: its values, or None when
    the record lacks it (the shape of tfx-bsl's decoded rows)."""
    keys = list(keys)
    wanted = set(keys)
    rows = []
    for r in records:
        got = decode(r, wanted)
        rows.append({k: got.get(k) for k in keys})
    return rows
