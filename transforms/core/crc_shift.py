"""CRC32C arithmetic without the bytes: where the checksum of a concatenation
follows from the checksums of its parts.

CRC32C is linear over GF(2). With `extend(c, M)` the checksum of bytes M
continued from the checksum c of what came before (google_crc32c.extend), and
L_n the linear map "run the register over n zero bytes":

    extend(c, M) = L_len(M)(c) XOR extend(0, M)
    extend(c1, M) XOR extend(c2, M) = L_len(M)(c1 XOR c2)

So a run of bytes copied from a file whose running checksum is known at the
run's two ends (a previous version's shard, whose provenance records it at
every record boundary: transforms/core/provenance.py) moves the new file's
running checksum by one shift, without reading those bytes again: an
incremental version copies gigabytes of unchanged records with one CRC pass
(the check that they are the bytes recorded) instead of two.

L_n is applied as the product of the maps L_(2^k) for the set bits of n, each
held as four 256-entry tables (a 32x32 bit matrix applied a byte at a time).
"""
from __future__ import annotations

import functools

_POLY = 0x82F63B78   # CRC32C (Castagnoli), reflected
_BITS = 48           # shifts up to 2**48 bytes


@functools.lru_cache(maxsize=1)
def _tables() -> list:
    """tables[k][j][b] = L_(2^k)(b << 8j), for k < _BITS and j < 4 (~5 ms, once)."""
    byte_table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        byte_table.append(c)
    # L_1 on the 32 basis vectors; then L_(2^(k+1)) = L_(2^k) composed with itself.
    basis = [(1 << i >> 8) ^ byte_table[(1 << i) & 0xFF] for i in range(32)]
    out = []
    for _ in range(_BITS):
        level = []
        for j in range(4):
            row = [0] * 256
            for bit in range(8):  # row[b] is the XOR of the images of b's bits
                step, image = 1 << bit, basis[8 * j + bit]
                row[step:2 * step] = [v ^ image for v in row[:step]]
            level.append(row)
        out.append(level)
        basis = [_apply(level, v) for v in basis]
    return out


def _apply(level: list, x: int) -> int:
    t0, t1, t2, t3 = level
    return t0[x & 0xFF] ^ t1[(x >> 8) & 0xFF] ^ t2[(x >> 16) & 0xFF] ^ t3[x >> 24]


def shift(crc: int, n: int) -> int:
    """L_n(crc): the register `crc` run over n zero bytes."""
    if n < 0 or n >= 1 << _BITS:
        raise ValueError(f"a shift of {n} bytes is out of range")
    tables = _tables()
    k = 0
    while n:
        if n & 1:
            t0, t1, t2, t3 = tables[k]
            crc = t0[crc & 0xFF] ^ t1[(crc >> 8) & 0xFF] ^ t2[(crc >> 16) & 0xFF] ^ t3[crc >> 24]
        n >>= 1
        k += 1
    return crc


def extend_by(crc: int, part_crc: int, part_len: int) -> int:
    """extend(crc, M) from M's own checksum extend(0, M) and length."""
    return shift(crc, part_len) ^ part_crc


def moved(crc_before: int, crc_after: int, new_before: int, n: int) -> int:
    """The running checksum after n bytes that took a file's checksum from
    crc_before to crc_after, continued instead from new_before."""
    return crc_after ^ shift(new_before ^ crc_before, n)
