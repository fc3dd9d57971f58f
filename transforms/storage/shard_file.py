"""A local shard file, written in place by the thread that produces its bytes.

Each record's bytes go to the kernel while they are still in the CPU's
cache, a few hundred microseconds after they were read and encoded. Written
by another thread tens of megabytes later, they would be read back from
memory by the kernel's copy into the page cache: that copy takes about five
times as long (~250 us more per 110 KB image), which makes a header-mode
conversion about half again as slow, even when the disk's dirty-page
throttling stalls the writes (bench/HISTORY.md). Opened read-write: a run copied into
the file by the kernel is read back to be checked (write_shards.py).
"""
from __future__ import annotations

import os


class ShardFile:
    """A binary, write-only file object (write, flush, fileno, close, context
    manager) for a new local file at `path`; every write() is whole or raises."""

    def __init__(self, path: str):
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        self._closed = False

    def write(self, data) -> int:
        n = len(data)
        done = os.write(self._fd, data) if n else 0
        if done < n:  # a regular file may still take less (a signal, a disk filling up): the rest, or its error
            rest = memoryview(data)[done:]
            while rest:
                rest = rest[os.write(self._fd, rest):]
        return n

    def flush(self) -> None:
        """Nothing waits: every write() is in the file when it returns."""

    def fileno(self) -> int:
        """The file's descriptor, for what the kernel writes into it directly
        (at the file's position, after every write() so far)."""
        return self._fd

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._fd)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.close()
        return False
