"""ArrayRecord shards (--output_format array_record): Grain's random-access
format, and TFDS's `as_data_source`. The same Examples as the TFRecord shards,
one record each, in the same order.

Options, set explicitly because they are part of the file (ArrayRecord
stores them in its footer) and of its bytes:
- group_size:1: each record is a chunk of its own, so reading record i reads
  only record i (what Grain's global shuffle does); TFDS writes the same. A
  larger group packs records for compression, and a random read decodes the
  whole group.
- uncompressed: JPEG and PNG bytes do not compress, and a reader then pays
  no decompression per record. (--compression gzip|zlib is refused with
  this format; they are TFRecord's stream compressions.)
- max_parallelism:1: chunks encoded one at a time, in order. The Python
  binding writes without a thread pool anyway; stated so the output does
  not depend on a default.
The same records give the same bytes (tests/e2e/test_array_record.py holds 1
and 2 workers to it).

ArrayRecord's writer and reader (the C++ binding) take a local file path
only. On a remote store (gs://) a shard is written to a local temp file,
checksummed, then uploaded to its staging name through Beam's FileSystems;
a remote shard is read back by copying it to a local temp file first.

array_record is imported where it is used, so the TFRecord path does not
need it (array-record 0.8.6 requires Python >= 3.11).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import BinaryIO, Iterator, Optional

import google_crc32c

from tfrecord_pipelines.transforms.core.specs import OutputFormat
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression, RecordError, RecordWriter, crc32c_text, iter_records
from tfrecord_pipelines.transforms.storage import fsutil, scratch

WRITER_OPTIONS = "group_size:1,uncompressed,max_parallelism:1"
_BLOCK = 8 << 20
_READ_BATCH = 256


def _module():
    try:
        from array_record.python import array_record_module
    except ImportError as e:  # a Python or platform array-record has no wheel for
        raise RuntimeError(f"--output_format array_record needs the array-record package "
                           f"(pip install array-record; Python >= 3.11): {e}") from None
    return array_record_module


class ArrayRecordShardWriter:
    """A shard writer with RecordWriter's interface: write(chunks, length),
    records, bytes_written, close() -> the file's CRC32C (crc32c_text).

    bytes_written counts the records' bytes while writing (ArrayRecord
    buffers chunks, so the file's size is known only at the end) and is the
    file's size once closed, as the manifest records it."""

    def __init__(self, path: str):
        self._path = path
        if fsutil.is_local(path):
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            self._local = path
        else:
            # In a scratch folder of its own, which a later run reclaims if this one is killed.
            self._local = os.path.join(scratch.make("shard"), "shard.array_record")
        self._writer = _module().ArrayRecordWriter(self._local, WRITER_OPTIONS)
        self.records = 0
        self.bytes_written = 0

    def write(self, chunks: list[bytes], length: int) -> None:
        self._writer.write(b"".join(chunks))
        self.records += 1
        self.bytes_written += length

    def close(self) -> str:
        self._writer.close()
        crc, size = 0, 0
        with open(self._local, "rb") as f:
            while block := f.read(_BLOCK):
                crc = google_crc32c.extend(crc, block)
                size += len(block)
        if self._local != self._path:
            with open(self._local, "rb") as src, fsutil.open_write(self._path) as dst:
                shutil.copyfileobj(src, dst, _BLOCK)
            self.discard()
        self.bytes_written = size
        return crc32c_text(crc)

    def discard(self) -> None:
        """Removes the local temp file of a remote shard (nothing for a local one)."""
        if self._local != self._path:
            shutil.rmtree(os.path.dirname(self._local), ignore_errors=True)


@contextlib.contextmanager
def shard_writer(path: str, output_format: OutputFormat, compression: Compression = Compression.NONE):
    """A writer for one shard at `path` in the given format; the caller calls
    its close() (which returns the CRC32C) inside the block."""
    if output_format is OutputFormat.ARRAY_RECORD:
        writer = ArrayRecordShardWriter(path)
        try:
            yield writer
        finally:
            writer.discard()
        return
    with fsutil.open_shard_write(path) as sink:
        yield RecordWriter(sink, compression)


class ArrayRecordError(RecordError):
    """Damage found by ArrayRecord's reader: a record index, no byte offset
    (chunks are located through the file's footer)."""

    def __init__(self, index: int, message: str):
        Exception.__init__(self, f"record {index}: {message}" if index >= 0 else message)
        self.offset = None
        self.index = index


def iter_array_records(f: BinaryIO, path: str, drain: bool = True) -> Iterator[tuple[None, bytes]]:
    """Yields (None, data) for each record of the ArrayRecord shard at `path`,
    whose open file is `f`. With `drain`, every byte of `f` is read first
    (so a checksumming view sees the whole file); a remote shard is always
    read through `f` into a local copy. Raises ArrayRecordError on damage."""
    if fsutil.is_local(path):
        if drain:
            while f.read(_BLOCK):
                pass
        yield from _records(path)
        return
    fd, local = tempfile.mkstemp(suffix=".array_record", prefix="tfrecords-")
    try:
        with os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(f, dst, _BLOCK)
        yield from _records(local)
    finally:
        os.remove(local)


def _records(local: str) -> Iterator[tuple[None, bytes]]:
    try:
        reader = _module().ArrayRecordReader(local)
    except (RuntimeError, ValueError) as e:
        raise ArrayRecordError(-1, f"not a readable ArrayRecord file: {str(e)[:300]}") from None
    if not reader.ok():  # the reader does not raise on a damaged footer; close() says why
        why = "its footer or postscript is missing or damaged"
        try:
            reader.close()
        except RuntimeError as e:
            why = str(e)[:300]
        raise ArrayRecordError(-1, f"not a readable ArrayRecord file: {why}")
    try:
        n = reader.num_records()
        for begin in range(0, n, _READ_BATCH):
            try:
                batch = reader.read(begin, min(n, begin + _READ_BATCH))
            except (RuntimeError, IndexError) as e:
                raise ArrayRecordError(begin, f"records {begin}-{min(n, begin + _READ_BATCH) - 1} cannot be "
                                              f"read: {str(e)[:300]}") from None
            for data in batch:
                yield None, data
    finally:
        with contextlib.suppress(Exception):
            reader.close()


def records_of(f: BinaryIO, path: str, output_format: OutputFormat,
               compression: Compression = Compression.NONE, drain: bool = True
               ) -> Iterator[tuple[Optional[int], bytes]]:
    """(byte offset or None, record) of a shard of either format; RecordError on damage."""
    if output_format is OutputFormat.ARRAY_RECORD:
        return iter_array_records(f, path, drain)
    return iter_records(f, compression)
