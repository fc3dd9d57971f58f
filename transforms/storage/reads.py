"""Reading input files: what may be read, how much, and how many at once.

Only regular files are read (a FIFO would block `open` forever, `/dev/zero`
never ends), and none over `max_file_bytes`. A gs:// object is read in one
request, pinned to the generation the listing saw (transforms/storage/gcs.py); other
schemes go through Beam's FileSystems.

`read_ahead` keeps a bounded number of reads in flight on a thread pool and
hands the results back in input order, so the stages that use it produce
exactly what a sequential loop would (byte-identical shards), while the
waits of a remote store overlap. Memory is bounded by reads in flight x file
size.
"""
from __future__ import annotations

import collections
import concurrent.futures
import errno
import os
import stat
import threading
import unicodedata
from typing import Callable, Iterable, Iterator, TypeVar

from tfrecord_pipelines.transforms.core.records import Reason, Rec, Reject, reject
from tfrecord_pipelines.transforms.core.specs import LOCAL_IN_FLIGHT, REMOTE_IN_FLIGHT, ReadPolicy
from tfrecord_pipelines.transforms.core.specs import is_remote
from tfrecord_pipelines.transforms.storage import fsutil, gcs
from tfrecord_pipelines.transforms.storage.gcs import StorageUnavailable

T = TypeVar("T")
R = TypeVar("R")


class NotAFile(Exception):
    """The path names something other than a regular file (FIFO, device, socket, folder)."""


class TooLarge(Exception):
    pass


_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def _read_local(path: str, cap: int) -> bytes:
    # O_NONBLOCK: opening a FIFO must not wait for a writer; it changes
    # nothing for a regular file.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno == errno.ENXIO:  # a socket (or a device with no driver) cannot be opened
            raise NotAFile(f"the path names {_KINDS.get(stat.S_IFMT(os.stat(path).st_mode), 'no file')}") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(f"the path names {_KINDS.get(stat.S_IFMT(st.st_mode), 'not a regular file')}")
        if st.st_size > cap:
            raise TooLarge(f"{st.st_size:,} bytes > --max_file_bytes {cap:,}")
        # Ask for the size fstat gave, and one byte more: a read of `cap` bytes would allocate
        # (and free) the whole cap each time, 60-80 us per image at 1 GiB; the extra byte shows a
        # file that grew while we read (or, like /proc files, reports no size).
        data = _read_upto(fd, st.st_size + 1)
        if len(data) > st.st_size:
            data += _read_upto(fd, cap + 1 - len(data))
            if len(data) > cap:
                raise TooLarge(f"more than --max_file_bytes {cap:,} bytes")
    finally:
        os.close(fd)
    return data


def _read_upto(fd: int, n: int) -> bytes:
    """Up to `n` bytes, fewer only at the end of the file."""
    data = os.read(fd, n)
    if not 0 < len(data) < n:
        return data
    parts, got = [data], len(data)  # a short read before the end (a signal, a network filesystem)
    while got < n and (more := os.read(fd, n - got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def read_local(path: str, cap: int) -> tuple[bytes, str]:
    """The bytes and the path they came from. A name in the other Unicode
    normal form (NFC/NFD: macOS writes NFD, most tables hold NFC) is tried
    when the name as given does not exist."""
    try:
        return _read_local(path, cap), path
    except FileNotFoundError:
        for form in ("NFC", "NFD"):
            alt = unicodedata.normalize(form, path)
            if alt != path:
                try:
                    return _read_local(alt, cap), alt
                except FileNotFoundError:
                    pass
        raise


def read_input(path: str, generation: int, size: int, policy: ReadPolicy) -> tuple[bytes, str, int]:
    """(bytes, path read, generation read) of one input file. Raises NotAFile,
    TooLarge, FileNotFoundError (or a store's NotFound), gcs.StorageUnavailable."""
    if not is_remote(path):
        return (*read_local(path, policy.max_file_bytes), 0)
    if path.startswith("gs://"):
        try:
            data, gen = gcs.read(path, generation, policy.timeout, policy.max_file_bytes, size)
        except gcs.TooLarge as e:
            raise TooLarge(f"{e.seen:,}+ bytes > --max_file_bytes {policy.max_file_bytes:,}") from e
        return data, path, gen
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        data = f.read(policy.max_file_bytes + 1)
    if len(data) > policy.max_file_bytes:
        raise TooLarge(f"more than --max_file_bytes {policy.max_file_bytes:,} bytes")
    return data, path, 0


class Outcome:
    """A read's result or its exception, for the caller to decide on in order."""
    __slots__ = ("value", "error")

    def __init__(self, value=None, error: BaseException = None):
        self.value, self.error = value, error


def read_ahead(items: Iterable[T], fn: Callable[[T], R], in_flight: int,
               pool: concurrent.futures.Executor) -> Iterator[tuple[T, Outcome]]:
    """(item, Outcome of fn(item)) in input order, with at most `in_flight`
    calls running or finished-but-not-yet-consumed."""
    if in_flight <= 1:
        for item in items:
            yield item, _call(fn, item)
        return
    pending = collections.deque()
    it = iter(items)
    for item in it:
        pending.append((item, pool.submit(_call, fn, item)))
        if len(pending) >= in_flight:
            break
    while pending:
        item, fut = pending.popleft()
        outcome = fut.result()
        nxt = next(it, _END)
        if nxt is not _END:
            pending.append((nxt, pool.submit(_call, fn, nxt)))
        yield item, outcome


_END = object()


def _call(fn, item) -> Outcome:
    try:
        return Outcome(fn(item))
    except Exception as e:  # handed to the caller, which knows what a failure means
        return Outcome(error=e)


_pools: dict = {}
_pools_lock = threading.Lock()


# Reads in flight for local files when --reads_in_flight is automatic (0):
# one per worker process (with a worker per core, threads would only contend
# for the GIL), or one per core for a run in the launcher's own process
# (pipelines/run/small_run.py), whose reads, checks, decodes and hashes (all
# releasing the GIL) then run on the other cores: the writing thread's CPU
# per image falls by about half in header mode and nine tenths in full mode,
# for little or no more CPU in all. Set for each run by its launcher
# (pipelines/run/conversion.py).
_local_auto = LOCAL_IN_FLIGHT


def set_local_in_flight(n: int) -> None:
    global _local_auto
    _local_auto = max(1, n)


def in_flight(policy: ReadPolicy, path: str) -> int:
    """Reads at once for files like `path`: --reads_in_flight, else by scheme."""
    if policy.in_flight:
        return policy.in_flight
    return REMOTE_IN_FLIGHT if is_remote(path) else _local_auto


def close_pools() -> None:
    """Lets this process's read threads go (the end of a run in a caller's process)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.shutdown(wait=True)


def make_pool(policy: ReadPolicy, path: str) -> concurrent.futures.ThreadPoolExecutor:
    """The process's read pool for this many reads in flight. Shared by every
    DoFn instance of the process: a Dataflow worker runs a dozen bundles at
    once, and a pool each would be hundreds of threads."""
    size = max(1, in_flight(policy, path))
    key = (os.getpid(), size)  # a forked worker starts with no threads of its own
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = concurrent.futures.ThreadPoolExecutor(max_workers=size,
                                                                       thread_name_prefix="tfrecords-read")
    return pool


def read_record(rec: Rec, policy: ReadPolicy) -> tuple[bytes, Rec]:
    """The record's bytes, and the record updated with where and which
    version they came from."""
    data, path, generation = read_input(rec.path, rec.generation, rec.size, policy)
    if path == rec.path and generation in (0, rec.generation):
        return data, rec
    return data, rec._replace(path=path, generation=generation or rec.generation)


def read_reject(rec: Rec, e: Exception) -> Reject:
    """The reject for a read that failed on this one file. A store that does
    not answer at all is no reason to reject a file: that error is raised."""
    if isinstance(e, StorageUnavailable):
        raise e
    if isinstance(e, NotAFile):
        return reject(rec, Reason.NOT_A_FILE, str(e))
    if isinstance(e, TooLarge):
        return reject(rec, Reason.TOO_LARGE, str(e))
    # any filesystem's error: FileNotFoundError, BeamIOError, 404s ...
    return reject(rec, Reason(fsutil.error_reason(e)), f"{type(e).__name__}: {e}"[:500])
