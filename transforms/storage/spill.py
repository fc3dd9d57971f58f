"""Record batches kept out of the runner: on a local run, a batch that must
wait for a barrier (a side input, a GroupByKey) is written to a spill file
and only a small reference (`Spilled`) crosses the runner.

Beam's local runner holds every element waiting at a barrier in its own
process, decoded and copied by gRPC and protobuf on the way: about 1.5 KB of
memory per image however small the metadata (gigabytes at a few million
images). Spilled, an image costs its ~150 pickled bytes on disk and
about a byte of memory in the runner, so a run's memory no longer grows with
the dataset. On Dataflow the shuffle service is the right tool, and batches
travel inline as before (no spill folder). Either way the stages see the
same records in the same order, so the shards are byte-identical
(tests/e2e/test_spill.py).

The files live in the run's spill folder (local disk) and are removed with
it when the run ends; a reference is read, never consumed, so a retried or
twice-consumed batch reads the same records.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import threading
import uuid
from typing import Iterable, Iterator, NamedTuple, Union

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from tfrecord_pipelines.transforms.core.errors import ConversionError
from tfrecord_pipelines.transforms.core.records import Batch, pack, unpack


class SpillError(ConversionError, RuntimeError):
    """A spill file could not be written (a full disk): it says which disk, which
    is not --output's when the output is a bucket."""


def _spill_error(e: OSError, folder: str) -> SpillError:
    beside_output = ".tfrecords-staging-" in folder  # layout.STAGING_PREFIX: a local output's staging folder
    where = ("beside --output, in its staging folder" if beside_output else
             "in this machine's temp folder (TMPDIR), not in --output")
    fix = "free space on that disk" if beside_output else "free space there or point TMPDIR at a disk with room"
    return SpillError(f"{e.strerror or e} while writing spill files in {folder} ({where}; a run's record metadata "
                      f"waits there, about 1 KB per image): {fix}, or pass --spill off to keep it in memory "
                      "(about 1.5 KB per image); nothing was published")


class Spilled(NamedTuple):
    path: str
    offset: int
    length: int
    count: int


def spill(items: Iterable, folder: str) -> Union[Batch, Spilled]:
    """The batch put into this process's spill file of `folder` (a
    reference), or, with no folder, the batch itself."""
    if isinstance(items, Spilled):
        return items
    items = load(items)
    if not folder:
        return items
    return put(items, folder)


def spilled(batches, label: str, folder: str):
    """The PCollection of batches as spill references, for a step where a
    barrier follows (a side input, a GroupByKey); unchanged with no folder."""
    return batches | label >> beam.Map(spill, folder) if folder else batches


def put(items: list, folder: str) -> Spilled:
    """`items` appended to this process's spill file of `folder`, readable on
    its own by the reference returned.

    One file per process and folder, appended to by every batch and kept open
    until the run ends (release()): a file per batch made ~740 files at 50,000
    images, and removing them at the end took 0.25-1.8 s (a filesystem mounted
    with `discard` waits for the disk once per file freed, longest while the
    disk is busy taking the shards). Each batch is handed to the kernel before
    its reference is returned, so another process reads it at once."""
    data = pack(items)
    path, offset = _file_of(folder).append(data)
    return Spilled(path, offset, len(data), len(items))


def putter(folder: str):
    """How a stage hands on a batch that waits at a barrier: put into the
    spill folder on a local run, else packed (records.pack)."""
    return functools.partial(put, folder=folder) if folder else pack


class _File:
    """One process's spill file in one folder."""

    def __init__(self, folder: str):
        self.folder, self.pid = folder, os.getpid()
        self.lock = threading.Lock()
        try:
            os.makedirs(folder, exist_ok=True)  # once per process and folder
            self.path = os.path.join(folder, f"{uuid.uuid4().hex}.spill")
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as e:
            raise _spill_error(e, folder) from e
        self.offset, self.broken = 0, False

    def append(self, data: bytes) -> tuple:
        """(path, offset) of `data`, written whole."""
        with self.lock:
            at, view = self.offset, memoryview(data)
            try:
                while view:
                    view = view[os.write(self.fd, view):]
            except OSError as e:
                self._cut_back()
                raise _spill_error(e, self.folder) from e
            self.offset += len(data)
            return self.path, at

    def _cut_back(self) -> None:
        """The part of a batch that went in before an error, taken out again,
        so the next batch starts where the references say; a file that cannot
        be cut back is not written to again (the next batch starts a new one)."""
        try:
            os.ftruncate(self.fd, self.offset)
            os.lseek(self.fd, self.offset, os.SEEK_SET)
        except OSError:
            self.broken = True


_files: dict = {}  # folder: _File, this process's
_files_lock = threading.Lock()


def _file_of(folder: str) -> _File:
    with _files_lock:
        f = _files.get(folder)
        if f is not None and f.pid == os.getpid():  # not a forked parent's: a child writes its own
            if not f.broken:
                return f
            with contextlib.suppress(OSError):
                os.close(f.fd)
        f = _files[folder] = _File(folder)
        return f


def release() -> None:
    """Closes this process's spill files (the run is over: nothing more is
    spilled, and their folders are about to be removed)."""
    with _files_lock:
        for f in _files.values():
            if f.pid == os.getpid():
                with contextlib.suppress(OSError):
                    os.close(f.fd)
        _files.clear()


def load(batch: Union[Batch, list, bytes, Spilled]) -> Batch:
    """The records of a batch, wherever they are: a reference's file, packed
    bytes (records.pack) or the list itself."""
    if isinstance(batch, Spilled):
        with open(batch.path, "rb") as f:
            f.seek(batch.offset)
            return unpack(f.read(batch.length))
    if isinstance(batch, bytes):
        return unpack(batch)
    return batch if isinstance(batch, Batch) else Batch(batch)


def count(batch: Union[Batch, list, bytes, Spilled]) -> int:
    return batch.count if isinstance(batch, Spilled) else len(load(batch))


def bucket_of(key, buckets: int) -> int:
    """A stable bucket for a key (str, bytes, int or a tuple of them): the
    same on every worker and run, unlike hash()."""
    data = key if isinstance(key, bytes) else pickle.dumps(key, protocol=4)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") % buckets


class Gather(beam.DoFn):
    """Gathers a bundle's items into groups by key, and hands the groups on
    (`emit`) every `flush` items and at the bundle's end: one element then
    carries many items, instead of each item crossing the runner alone.
    Subclasses say how an element gives items (`items`), an item's key
    (`key`), and what a flush emits (`emit`)."""

    def __init__(self, flush: int = 20000):
        self._flush = flush

    def items(self, element) -> Iterable:
        return (element,)

    def key(self, item):
        raise NotImplementedError

    def emit(self, groups: dict) -> list:
        raise NotImplementedError

    def start_bundle(self):
        self._groups: dict = {}
        self._waiting = 0

    def process(self, element):
        for item in self.items(element):
            self._groups.setdefault(self.key(item), []).append(item)
            self._waiting += 1
        if self._waiting >= self._flush:
            yield from self._drain()

    def finish_bundle(self):
        for kv in self._drain():
            yield GlobalWindows.windowed_value(kv)

    def _drain(self) -> list:
        out = self.emit(self._groups) if self._groups else []
        self._groups, self._waiting = {}, 0
        return out


class _BucketFn(Gather):
    """(key, value) pairs gathered by bucket across a bundle and spilled, a
    batch per bucket and flush: only (bucket, reference) pairs cross the runner."""

    def __init__(self, spill_dir: str, buckets: int, flush: int = 20000, batched: bool = False):
        super().__init__(flush)
        self._spill_dir, self._buckets, self._batched = spill_dir, buckets, batched

    def items(self, element):
        return element if self._batched else (element,)

    def key(self, pair):
        return bucket_of(pair[0], self._buckets)

    def emit(self, groups: dict) -> list:
        return [(b, put(pairs, self._spill_dir)) for b, pairs in sorted(groups.items())]


def _regroup(bucket: int, refs) -> Iterator[tuple]:
    groups: dict = {}
    for ref in refs:
        for key, value in load(ref):
            groups.setdefault(key, []).append(value)
    for key in sorted(groups, key=lambda k: pickle.dumps(k, protocol=4)):
        yield key, groups[key]


class GroupByKey(beam.PTransform):
    """Beam's GroupByKey, except that on a local run (a spill folder) the
    pairs wait in spill files, gathered into `buckets` groups by a stable hash
    of the key, and each bucket is grouped by key in memory on one worker
    (about N / buckets pairs). Without a folder it is Beam's GroupByKey."""

    def __init__(self, spill_dir: str, buckets: int = 256, batched: bool = False):
        super().__init__()
        self._spill_dir, self._buckets, self._batched = spill_dir, buckets, batched

    def expand(self, pairs):
        """`batched`: the elements are lists of pairs (one element per batch
        crosses the runner before the grouping, not one per pair)."""
        if not self._spill_dir:
            if self._batched:
                pairs = pairs | "Unbatch" >> beam.FlatMap(lambda b: b)
            return pairs | "Group" >> beam.GroupByKey()
        return (pairs
                | "Spill" >> beam.ParDo(_BucketFn(self._spill_dir, self._buckets, batched=self._batched))
                | "GroupBuckets" >> beam.GroupByKey()
                | "Regroup" >> beam.FlatMapTuple(_regroup))
