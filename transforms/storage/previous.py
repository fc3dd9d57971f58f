"""Reading the previous version of an incremental run: its shards'
provenance files, and byte ranges of its shards.

The previous version is untrusted input (someone may have edited or damaged
it): only regular files are opened, no read goes past what the manifest
says a file holds, a provenance file must have the manifest's CRC32C and
parse whole (transforms/core/provenance.py), and every record copied is
checked by the writer before it is written. Those checks read only the
dataset root, so whoever can write it could pass them; on local disk a
shard is copied from only while it and its provenance file are the files
pinned when they were published (transforms/storage/copy_trust.py), checked
on the descriptor after each read or copy. A failure here is never an
error of the run: the records concerned are read from their sources.
"""
from __future__ import annotations

import errno
import os
import stat

import google_crc32c

from tfrecord_pipelines.transforms.core import provenance
from tfrecord_pipelines.transforms.core.specs import ReadPolicy
from tfrecord_pipelines.transforms.core.tfrecord_io import crc32c_text
from tfrecord_pipelines.transforms.storage import copy_trust, fsutil, gcs, reads


class Damaged(Exception):
    """A part of the previous version that cannot be used; the message says why."""


def read_provenance(folder: str, shard: provenance.PrevShard, timeout: float) -> list:
    """The entries of one shard's provenance file (provenance.Entry), or Damaged."""
    path = fsutil.join(folder, provenance.provenance_name(shard.name))
    try:
        # Size -1: on GCS a ranged read, so an object larger than the manifest says costs no more.
        data, _, _ = reads.read_input(path, 0, -1, ReadPolicy(max_file_bytes=max(1, shard.prov_bytes),
                                                              timeout=timeout))
    except gcs.StorageUnavailable:
        raise
    except reads.TooLarge:
        raise Damaged(f"{provenance.provenance_name(shard.name)} is larger than the manifest says") from None
    except Exception as e:  # missing, not a regular file, unreadable
        raise Damaged(f"{provenance.provenance_name(shard.name)} cannot be read ({type(e).__name__})") from None
    if len(data) != shard.prov_bytes or crc32c_text(google_crc32c.value(data)) != shard.prov_crc32c:
        raise Damaged(f"{provenance.provenance_name(shard.name)} does not have the manifest's size and CRC32C")
    try:
        return provenance.parse_entries(data, shard.bytes, shard.records, shard.crc)
    except provenance.ProvenanceError as e:
        raise Damaged(f"{provenance.provenance_name(shard.name)}: {e}") from None


def read_range(folder: str, name: str, start: int, end: int, timeout: float, expect: tuple = ()) -> bytes:
    """Bytes [start, end) of the previous shard `name` (fewer if the file is
    shorter); OSError and the stores' errors when it cannot be read;
    copy_trust.Changed when a local shard is not the file `expect` (its
    pinned identity) says, checked after the read."""
    path = fsutil.join(folder, name)
    if fsutil.is_local(path):
        return _pread(path, start, end, expect)
    if path.startswith("gs://"):
        return gcs.read_range(path, start, end, timeout)
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.seek(start)
        return f.read(end - start)


class CopyUnsupported(OSError):
    """The kernel cannot copy between these files (another filesystem on an
    old kernel, a filesystem without copy_file_range)."""


def copy_range(folder: str, name: str, start: int, end: int, dst_fd: int, expect: tuple = ()) -> int:
    """Bytes [start, end) of the local previous shard `name` appended to the
    file `dst_fd` (at its position) by the kernel, without passing through
    this process: the number copied, fewer if the shard is shorter. The
    caller checks what arrived. OSError when the shard cannot be opened;
    CopyUnsupported when the kernel cannot copy; copy_trust.Changed when the
    shard is not the file `expect` (its pinned identity) says, checked on the
    descriptor after the copy (the caller then cuts the copy off)."""
    if not hasattr(os, "copy_file_range"):  # Linux only
        raise CopyUnsupported(errno.ENOSYS, "copy_file_range is not available")
    path = os.path.join(folder, name)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        pos = start
        while pos < end:
            try:
                n = os.copy_file_range(fd, dst_fd, end - pos, pos)
            except OSError as e:
                if e.errno in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF) \
                        and pos == start:
                    raise CopyUnsupported(e.errno, f"copy_file_range: {e.strerror}") from None
                raise
            if n == 0:
                break
            pos += n
        _drop_cached(fd, start, pos)
        _check_pinned(fd, path, expect)
        return pos - start
    finally:
        os.close(fd)


def _pread(path: str, start: int, end: int, expect: tuple = ()) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        parts, pos = [], start
        while pos < end:
            got = os.pread(fd, end - pos, pos)
            if not got:
                break
            parts.append(got)
            pos += len(got)
        _drop_cached(fd, start, pos)
        _check_pinned(fd, path, expect)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(fd)


def _check_pinned(fd: int, path: str, expect: tuple) -> None:
    """After the bytes were taken: the file is the one pinned (a change
    before or during the read gives it another change time)."""
    if expect and copy_trust.fd_identity(fd) != tuple(expect):
        raise copy_trust.Changed(errno.ESTALE, "changed since it was published", path)


def _drop_cached(fd: int, start: int, end: int) -> None:
    """The previous version's pages just copied leave the page cache: the
    version being written supersedes it, and the pages the copy allocates are
    then those just freed rather than fresh memory (on a virtual machine,
    fresh memory costs a host fault per page), and the dataset does not sit
    in the cache twice: dropping the pages saves about a quarter of the time
    a kernel copy of a version of gigabytes takes. A range read again (a
    damaged run checked record by record) comes from the disk again."""
    if end > start and hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        except OSError:  # advice only
            pass
