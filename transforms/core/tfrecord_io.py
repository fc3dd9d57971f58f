"""TFRecord framing: write and read records with their masked CRC32C checks.

A record on disk is
    uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)
(little-endian), optionally inside one GZIP or ZLIB stream, as TensorFlow's
`TFRecordWriter` writes it. We frame records ourselves so that a shard can be
written as a stream of chunks (the image bytes are never copied), hashed as it
is written, and read back with the exact offset of any damage.
"""
from __future__ import annotations

import base64
import enum
import struct
import zlib
from typing import BinaryIO, Iterable, Iterator

import google_crc32c

from tfrecord_pipelines.transforms.core import crc_shift

_MASK_DELTA = 0xA282EAD8
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_SMALL = 4096


class Compression(str, enum.Enum):
    NONE = "none"
    GZIP = "gzip"
    ZLIB = "zlib"

    @property
    def suffix(self) -> str:
        return {"none": "", "gzip": ".gz", "zlib": ".zlib"}[self.value]

    @property
    def tf_name(self) -> str:
        """The `compression_type` to give `tf.data.TFRecordDataset`."""
        return {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}[self.value]


def mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc(chunks: Iterable[bytes]) -> int:
    crc = 0
    for c in chunks:
        crc = google_crc32c.extend(crc, c)
    return mask(crc)


def _compressor(compression: Compression):
    if compression is Compression.GZIP:
        # wbits 31 = gzip container; zlib writes mtime 0 and no file name, so
        # the output is deterministic.
        return zlib.compressobj(6, zlib.DEFLATED, 31)
    if compression is Compression.ZLIB:
        return zlib.compressobj(6, zlib.DEFLATED, 15)
    return None


def crc32c_text(crc: int) -> str:
    """A CRC32C as Cloud Storage writes it (base64 of the big-endian value),
    so a manifest's shard checksum compares directly with the object's own."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode("ascii")


class RecordWriter:
    """Frames records onto a binary file object, counting and checksumming the
    bytes that reach the file (after compression), so the shard's size and
    CRC32C are known the moment it is closed, without reading it again.

    Why CRC32C and not SHA-256 for the shard: it is there to catch damage in
    storage and transfer, which CRC32C does (every burst up to 32 bits, else
    1 in 2^32), not to resist a forger who could rewrite the manifest as well;
    it costs ~20 us per 116 KB record against ~75 us; and it is the checksum
    Cloud Storage keeps for every object, so a shard on GCS can be checked
    against the manifest without downloading it."""

    def __init__(self, sink: BinaryIO, compression: Compression = Compression.NONE):
        self._sink = sink
        self._compressor = _compressor(compression)
        self._crc = 0
        self.records = 0
        self.bytes_written = 0

    def _emit(self, data: bytes) -> None:
        if self._compressor is not None:
            data = self._compressor.compress(data)
            if not data:
                return
        self._crc = google_crc32c.extend(self._crc, data)
        self._sink.write(data)
        self.bytes_written += len(data)

    def write(self, chunks: list[bytes], length: int) -> int:
        """Frames one record given as chunks (see example_codec); small leading
        and trailing chunks share a write with the framing. Returns the
        framing's (masked) CRC32C of the record's bytes."""
        header = _U64.pack(length)
        first = header + _U32.pack(mask(google_crc32c.value(header)))
        data_crc = masked_crc(chunks)
        last = _U32.pack(data_crc)
        body = list(chunks)
        if body and len(body[0]) <= _SMALL:
            first += body.pop(0)
        if body and len(body[-1]) <= _SMALL:
            last = body.pop() + last
        self._emit(first)
        for c in body:
            self._emit(c)
        self._emit(last)
        self.records += 1
        return data_crc

    def write_framed(self, framed: bytes) -> None:
        """Writes one record already framed (checked by the caller), as a
        previous version's shard holds it."""
        self._emit(framed)
        self.records += 1

    @property
    def crc(self) -> int:
        """The running CRC32C (unmasked) of the bytes written so far."""
        return self._crc

    @property
    def sink(self):
        return self._sink

    def absorb(self, length: int, records: int, crc_after: int) -> None:
        """Counts `records` framed records, `length` bytes, that the caller put
        into the (uncompressed) file itself, after which the file's running
        CRC32C is `crc_after` (the caller read them back and checked them)."""
        if self._compressor is not None:
            raise ValueError("records are put into uncompressed shards only")
        self._crc = crc_after
        self.bytes_written += length
        self.records += records

    def write_run(self, data, records: int, crc_before: int, crc_after: int) -> None:
        """Writes framed records copied whole from another uncompressed shard,
        where they took its running CRC32C from crc_before to crc_after (the
        caller checked `data` against both): this shard's checksum moves by a
        shift, without another pass over the bytes."""
        if self._compressor is not None:
            raise ValueError("a run of framed records is copied into uncompressed shards only")
        self._crc = crc_shift.moved(crc_before, crc_after, self._crc, len(data))
        self._sink.write(data)
        self.bytes_written += len(data)
        self.records += records

    def close(self) -> str:
        """Flushes the compressor (not the sink) and returns the shard's
        CRC32C (crc32c_text)."""
        if self._compressor is not None:
            tail = self._compressor.flush()
            self._compressor = None
            if tail:
                self._crc = google_crc32c.extend(self._crc, tail)
                self._sink.write(tail)
                self.bytes_written += len(tail)
        return crc32c_text(self._crc)


class RecordError(Exception):
    """Damage found while reading a shard; `offset` is in uncompressed bytes."""

    def __init__(self, offset: int, index: int, message: str):
        super().__init__(f"record {index} at byte offset {offset}: {message}")
        self.offset = offset
        self.index = index


class _Decompressing:
    """A read(n) view of a compressed stream that returns exactly n bytes
    unless the stream ends."""

    def __init__(self, raw: BinaryIO, compression: Compression):
        wbits = 31 if compression is Compression.GZIP else 15
        self._raw = raw
        self._d = zlib.decompressobj(wbits)
        self._buf = bytearray()
        self.trailing = b""

    def read(self, n: int) -> bytes:
        while len(self._buf) < n and not self._d.eof:
            block = self._raw.read(1 << 20)
            if not block:
                break
            self._buf += self._d.decompress(block)
        if self._d.eof and self._d.unused_data:
            self.trailing = self._d.unused_data
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out


MAX_RECORD_BYTES = (1 << 31) - 1  # protobuf's limit on a message: no Example is larger


def iter_records(f: BinaryIO, compression: Compression = Compression.NONE) -> Iterator[tuple[int, bytes]]:
    """Yields (offset, data) for each record; raises RecordError on any damage:
    a cut header, a bad length CRC, a cut body, a bad data CRC, or (for a
    compressed shard) a broken or trailing stream."""
    src = _Decompressing(f, compression) if compression is not Compression.NONE else f
    offset = 0
    index = 0
    while True:
        header = src.read(12)
        if not header:
            break
        if len(header) < 12:
            raise RecordError(offset, index, f"file ends inside a record header ({len(header)} of 12 bytes)")
        (length,) = _U64.unpack_from(header)
        (length_crc,) = _U32.unpack_from(header, 8)
        if mask(google_crc32c.value(header[:8])) != length_crc:
            raise RecordError(offset, index, "length CRC mismatch (corrupt length or length CRC)")
        if length > MAX_RECORD_BYTES:  # a crafted length would have us allocate it before reading
            raise RecordError(offset, index, f"a record of {length:,} bytes: more than a tf.train.Example can "
                                             f"hold ({MAX_RECORD_BYTES:,})")
        body = src.read(length + 4)
        if len(body) < length + 4:
            raise RecordError(offset, index, f"file ends inside a record: {length + 4} bytes expected, {len(body)} present")
        data = body[:length]
        (data_crc,) = _U32.unpack_from(body, length)
        if mask(google_crc32c.value(data)) != data_crc:
            raise RecordError(offset, index, "data CRC mismatch (corrupt data or data CRC)")
        yield offset, data
        offset += 12 + length + 4
        index += 1
    if compression is not Compression.NONE:
        if not src._d.eof:
            raise RecordError(offset, index, f"{compression.value} stream is cut short")
        if src.trailing or f.read(1):
            raise RecordError(offset, index, f"bytes after the end of the {compression.value} stream")
