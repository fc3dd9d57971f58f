"""Reading the files of an output as untrusted input.

Datasets are shared, and a manifest is plain JSON anyone can edit: every
command that reads an output (verify, inspect, spec, report, and a
--versioned conversion reading the version LATEST names) reads its files
through here, so that what they hold can neither hang the reader nor lead it
to another file:

* only regular files are opened (fsutil.open_regular_fd: a FIFO never
  blocks, a device is refused);
* never a file outside the output: callers take names from layout's
  patterns, and a symbolic link that leads out of the output folder is
  refused (the path the open file really has is checked, after the open);
* at most a cap of bytes per kind of file, judged by the size before any
  byte is read (a sparse 1 TB manifest costs nothing), and on gs:// by a
  ranged read one byte past the cap.
"""
from __future__ import annotations

import os
from typing import BinaryIO, Iterator

from tfrecord_pipelines.transforms.storage import fsutil

# The largest manifest read: ~60 bytes a class and split, so about a million
# classes; parsing 64 MiB of hostile JSON peaks at ~1.6 GB. An output with a
# larger manifest is read with TFRECORDS_MAX_MANIFEST_BYTES raised.
MAX_MANIFEST_BYTES = int(os.environ.get("TFRECORDS_MAX_MANIFEST_BYTES", 64 << 20))
MAX_POINTER_BYTES = 4096          # LATEST: a version folder name
MAX_LOCK_BYTES = 64 << 10         # .tfrecords.lock: a small JSON object
MAX_INDEX_LINE_BYTES = 48         # a shard index line: "<offset> <length>\n"


class Refused(OSError):
    """A file of the output that is not read: larger than its cap, or a link
    leading out of the output (fsutil.NotRegularFile: not a file at all)."""


class TooLarge(Refused):
    pass


def _inside(real: str, folder: str) -> bool:
    folder = os.path.realpath(folder)
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


def _real_path(fd: int, path: str) -> str:
    """The path of the file `fd` has open (Linux: /proc, immune to a link
    swapped after a check), else the path's resolution."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def _open_local(path: str, within: str) -> tuple[int, int]:
    fd, st = fsutil.open_regular_fd(path)
    if within:
        real = _real_path(fd, path)
        if not _inside(real, within):
            os.close(fd)
            raise Refused(f"{path} is a link to {real}, outside {within}: not read")
    return fd, st.st_size


def read(path: str, max_bytes: int, within: str = "") -> bytes:
    """The whole of a file of the output. Raises FileNotFoundError (also for
    a missing gs:// object), fsutil.NotRegularFile, Refused (too large, or a
    link out of `within`)."""
    if fsutil.is_local(path):
        fd, size = _open_local(path, within)
        with os.fdopen(fd, "rb") as f:
            if size > max_bytes:
                raise TooLarge(f"{path} is {size:,} bytes, more than {max_bytes:,} bytes (the cap for its kind "
                               "of file): not read")
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:  # it grew while we read
            raise TooLarge(f"{path} holds more than {max_bytes:,} bytes (the cap for its kind of file): not read")
        return data
    if path.startswith("gs://"):
        from google.api_core import exceptions as gexc

        from tfrecord_pipelines.transforms.storage import gcs
        try:
            return gcs.read(path, 0, timeout=gcs.timeout(), max_bytes=max_bytes)[0]
        except gexc.NotFound:
            raise FileNotFoundError(f"{path}: no such object") from None
        except gcs.TooLarge:
            raise TooLarge(f"{path} holds more than {max_bytes:,} bytes (the cap for its kind of file): "
                           "not read") from None
    with fsutil.open_read(path) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(f"{path} holds more than {max_bytes:,} bytes (the cap for its kind of file): not read")
    return data


def check_file(path: str, within: str) -> None:
    """That a file of the output is a regular file inside `within`, for a
    reader that opens it itself (tf.data): opened without blocking and closed.
    Raises FileNotFoundError, fsutil.NotRegularFile, Refused. Nothing to check
    in a bucket (no links, FIFOs or devices there)."""
    if fsutil.is_local(path):
        fd, _ = _open_local(path, within)
        os.close(fd)


def inside(path: str, folder: str) -> bool:
    """Whether a local `path` really (through its links) lies inside `folder`."""
    return _inside(os.path.realpath(path), folder)


def open_stream(path: str, within: str = "") -> BinaryIO:
    """A file of the output opened for reading in pieces (a shard, the
    rejects): a regular file inside `within`; its size does not matter, as
    it is never held whole."""
    if fsutil.is_local(path):
        fd, _ = _open_local(path, within)
        return os.fdopen(fd, "rb")
    return fsutil.open_read(path)


def read_lines(path: str, max_bytes: int, max_line: int, within: str = "") -> Iterator[bytes]:
    """The lines (without their end) of the first `max_bytes` of a file, each
    cut to `max_line` bytes: a file of one endless line costs the caps."""
    with open_stream(path, within) as f:
        left = max_bytes
        while left > 0:
            line = f.readline(min(max_line + 1, left))
            if not line:
                return
            left -= len(line)
            if not line.endswith(b"\n"):  # cut at max_line (or max_bytes): skip the rest of it, within max_bytes
                while left > 0 and (rest := f.readline(min(1 << 16, left))):
                    left -= len(rest)
                    if rest.endswith(b"\n"):
                        break
            yield line.rstrip(b"\n")[:max_line]


def count_lines(path: str, within: str = "") -> int:
    """The number of lines of a file of the output, read in pieces."""
    n, last = 0, b"\n"
    with open_stream(path, within) as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")
