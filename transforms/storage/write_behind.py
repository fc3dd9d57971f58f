"""A local shard file written by a thread of its own, behind the code that
produces its bytes.

A shard's writer alternates between producing bytes (reading and checking
images, encoding Examples, reading and checking a previous version's
records) and `write()` calls that copy them into the page cache. The second
can block for a long time: once the kernel holds as many dirty pages as it
allows, every writer sleeps until the disk catches up. Done in order, the
producing waited for the writes and the writes for the producing; here the
writes run on a thread (os.writev releases the GIL) while the producer goes
on, at most MAX_AHEAD bytes ahead. The file's bytes and their order are the
same; close() returns once every byte is written, and raises the first write
error (a full disk) there, or at the next write().
"""
from __future__ import annotations

import os
import queue
import threading

MAX_AHEAD = 32 << 20   # bytes handed over and not yet written
BATCH = 1 << 20        # small pieces gathered into one hand-over (one writev)
MAX_PIECES = 512       # pieces per writev (the kernel's IOV_MAX is 1024)
_DONE = None


class WriteBehind:
    """A binary, write-only file object (write, close, context manager) for a
    new local file at `path`."""

    def __init__(self, path: str):
        # Read-write: a run copied into the file by the kernel is read back to be checked (write_shards.py).
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        self._queue: queue.Queue = queue.Queue()
        self._batch = BATCH
        self._units = max(1, MAX_AHEAD // BATCH)
        self._room = threading.Semaphore(self._units)  # BATCH-sized units of bytes handed over, not yet written
        self._pieces: list = []
        self._gathered = 0
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._drain, name="tfrecords-write-behind", daemon=True)
        self._thread.start()

    def write(self, data) -> int:
        if self._error is not None:
            raise self._error
        n = len(data)
        if n:
            self._pieces.append(data)
            self._gathered += n
            if self._gathered >= self._batch or len(self._pieces) >= MAX_PIECES:
                self._hand_over()
        return n

    def _hand_over(self) -> None:
        if self._pieces:
            units = min(self._units, -(-self._gathered // self._batch))
            for _ in range(units):  # waits while MAX_AHEAD bytes are waiting to be written
                self._room.acquire()
            self._queue.put((self._pieces, units))
            self._pieces, self._gathered = [], 0

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if item is _DONE:
                self._queue.task_done()
                return
            pieces, units = item
            try:
                if self._error is None:  # after an error the rest is dropped; the producer raises it
                    _write_all(self._fd, pieces)
            except BaseException as e:  # noqa: BLE001 (handed to the producer)
                self._error = e
            finally:
                for _ in range(units):
                    self._room.release()
                self._queue.task_done()

    def flush(self) -> None:
        """Returns once every byte written so far is in the file (raises a
        write error met meanwhile)."""
        if self._error is None and self._pieces and self._queue.unfinished_tasks == 0:
            # The thread is idle (only this thread hands work over): the pieces are written here. Handed over, the
            # caller would only wait for the thread to wake, write and wake it in turn; a shard copied by the kernel
            # flushes before each of its ~30 runs (write_shards.py). On an incremental run (bench.incremental's
            # change) writing here rather than handing over changes neither the wall nor the CPU beyond the noise,
            # and keeps one handover fewer per run.
            pieces, self._pieces, self._gathered = self._pieces, [], 0
            try:
                _write_all(self._fd, pieces)
            except BaseException as e:
                self._error = e
                raise
            return
        if self._error is None:
            self._hand_over()
        self._queue.join()
        if self._error is not None:
            raise self._error

    def fileno(self) -> int:
        """The file's descriptor: what is done through it directly must
        follow a flush() (the thread writes at the file's position)."""
        return self._fd

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._error is None:
                self._hand_over()
        finally:
            self._queue.put(_DONE)
            self._thread.join()
            os.close(self._fd)
        if self._error is not None:
            raise self._error

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.close()
        else:  # already failing: stop the thread and close the file, keep the first error
            self._pieces, self._gathered = [], 0
            try:
                self.close()
            except BaseException:  # noqa: BLE001
                pass
        return False


def _write_all(fd: int, pieces: list) -> None:
    """All of `pieces`, in order (a regular file's writev may still write less)."""
    total = sum(map(len, pieces))
    done = os.writev(fd, pieces)
    if done == total:
        return
    rest = b"".join(pieces)[done:]
    while rest:
        n = os.write(fd, rest)
        rest = rest[n:]
