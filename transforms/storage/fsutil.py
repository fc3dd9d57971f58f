"""File access for local paths and gs:// (any Beam filesystem) alike.

Everything goes through Beam's FileSystems except where it cannot do the job:
* listing: `FileSystems.match` treats `[1]`, `*`, `?` in names as glob
  characters and offers no quoting, so we list by prefix (`os.scandir` locally,
  the filesystem's prefix listing elsewhere) and names stay plain names;
* create-only writes (the lock and the manifest): on GCS this needs an
  `ifGenerationMatch=0` precondition, which FileSystems does not expose, so we
  use google-cloud-storage for it;
* local reads on the hot path use the builtin `open` (no wrapper per image).
"""
from __future__ import annotations

import errno
import os
import posixpath
import stat
from typing import Iterable, Iterator, Optional

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

_RAW = CompressionTypes.UNCOMPRESSED


class AlreadyExists(Exception):
    pass


class NotRegularFile(OSError):
    """The path names a FIFO, a device, a socket or a folder, not a file."""


_KINDS = {stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def open_regular_fd(path: str) -> tuple[int, os.stat_result]:
    """(fd, its stat) of a local regular file opened for reading; raises
    NotRegularFile for anything else. O_NONBLOCK: opening a FIFO returns at
    once instead of waiting for a writer (it changes nothing for a file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        if e.errno != errno.ENXIO:  # ENXIO: a socket (or a device without a driver) cannot be opened
            raise
        raise NotRegularFile(f"{path} is {_KINDS.get(stat.S_IFMT(os.stat(path).st_mode), 'not a file')}, not a "
                             "regular file") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(f"{path} is {_KINDS.get(stat.S_IFMT(st.st_mode), 'not a file')}, not a regular file")
    return fd, st


def is_local(path: str) -> bool:
    return "://" not in path


def join(base: str, *parts: str) -> str:
    if is_local(base):
        return os.path.join(base, *parts)
    return posixpath.join(base, *parts)


def normalize_root(path: str) -> str:
    """A root folder without trailing separator (local paths made absolute)."""
    if is_local(path):
        return os.path.abspath(path)
    return path.rstrip("/")


def read_bytes(path: str) -> bytes:
    """The whole file; locally only a regular file (NotRegularFile otherwise):
    a FIFO would block, /dev/zero never ends."""
    if is_local(path):
        with open_read(path) as f:
            return f.read()
    if path.startswith("gs://"):  # bounded by a deadline (gcs.set_timeout), one shared client
        from tfrecord_pipelines.transforms.storage import gcs
        return gcs.read_all(path)
    with FileSystems.open(path, compression_type=_RAW) as f:
        return f.read()


def open_read(path: str):
    """A binary file object; locally only of a regular file (NotRegularFile otherwise)."""
    if is_local(path):
        fd, _ = open_regular_fd(path)
        return os.fdopen(fd, "rb")
    if path.startswith("gs://"):
        from tfrecord_pipelines.transforms.storage import gcs
        return gcs.open_read(path)
    return FileSystems.open(path, compression_type=_RAW)


def open_write(path: str):
    if is_local(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "wb")
    return FileSystems.create(path, compression_type=_RAW)


def open_shard_write(path: str):
    """open_write, for a shard: locally a read-write file whose writes go
    straight to the kernel, each whole or raising (shard_file.py)."""
    if not is_local(path):
        return open_write(path)
    from tfrecord_pipelines.transforms.storage.shard_file import ShardFile
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return ShardFile(path)


def _local_temp(path: str) -> str:
    """A temp name beside `path` (same filesystem, so a rename or link is atomic),
    unique per call; layout.TEMP_RE recognises leftovers of a crash."""
    return f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:  # already gone, or the folder went away: nothing to clean
        pass


def write_bytes(path: str, data: bytes) -> None:
    """Writes a whole file under its final name atomically (temp + rename locally;
    a GCS object appears only when its upload completes). A failed write (disk
    full) leaves no temp file behind."""
    write_chunks(path, (data,))


def write_chunks(path: str, chunks: Iterable[bytes]) -> None:
    """write_bytes of the chunks' concatenation, a chunk at a time."""
    if is_local(path):
        tmp = _local_temp(path)
        try:
            with open_write(tmp) as f:
                for c in chunks:
                    f.write(c)
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise
        return
    with open_write(path) as f:
        for c in chunks:
            f.write(c)


def create_only(path: str, data: bytes) -> None:
    """Writes `path` only if it does not exist; raises AlreadyExists otherwise.
    The file appears complete or not at all (it is a success marker: the lock,
    the manifest). Writing the same bytes again counts as success: a retried
    upload whose first attempt went through must not fail on its own object."""
    if is_local(path):
        tmp = _local_temp(path)
        try:
            # No fsync, as in Beam's file sinks: on ext4 it would flush every
            # shard just written; `tfrecords verify` detects damage after a crash.
            with open_write(tmp) as f:
                f.write(data)
            _link_no_replace(tmp, path)
        finally:
            _remove_quietly(tmp)
        return
    if not path.startswith("gs://"):
        raise ValueError(f"create-only writes are supported for local and gs:// paths, not {path!r}")
    from google.api_core import exceptions as gexc
    bucket, name = path[5:].split("/", 1)
    blob = gcs_client().bucket(bucket).blob(name)
    # The precondition makes this race-free on GCS; the check before it also
    # holds where preconditions are not implemented (gcp-storage-emulator).
    if blob.exists():
        if _holds(blob, data):
            return
        raise AlreadyExists(path)
    try:
        blob.upload_from_string(data, if_generation_match=0)
    except gexc.PreconditionFailed:
        # The client retries an upload whose response was lost; if the first
        # attempt went through, the retry fails its own precondition. An object
        # holding exactly our bytes (the lock and manifest carry the run id) is
        # that earlier success, not another writer's.
        if _holds(blob, data):
            return
        raise AlreadyExists(path) from None


def _link_no_replace(tmp: str, path: str) -> None:
    """Gives the complete file `tmp` the name `path` unless `path` exists: a
    hard link fails on an existing name, so this is create-only and atomic."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        if _same_bytes(path, tmp):
            return
        raise AlreadyExists(path) from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        # No hard links on this filesystem (some FUSE and SMB mounts): a check
        # then a rename still never shows a partial file, with a small race.
        if os.path.lexists(path):
            raise AlreadyExists(path) from None
        os.rename(tmp, path)


def _same_bytes(path: str, tmp: str) -> bool:
    try:
        if os.path.getsize(path) != os.path.getsize(tmp):  # a FIFO has size 0: never opened below
            return False
        with open_read(path) as a, open_read(tmp) as b:
            return a.read() == b.read()
    except OSError:
        return False


def _holds(blob, data: bytes) -> bool:
    """Whether the GCS object holds exactly `data` (False if it is gone)."""
    from google.api_core import exceptions as gexc
    try:
        return blob.download_as_bytes() == data
    except gexc.NotFound:
        return False


def gcs_client():
    """This process's google-cloud-storage client (transforms/storage/gcs.py)."""
    from tfrecord_pipelines.transforms.storage import gcs
    return gcs.client()


def reset_clients() -> None:
    """Forget cached clients (tests move STORAGE_EMULATOR_HOST)."""
    from tfrecord_pipelines.transforms.storage import gcs
    gcs.reset()


def exists(path: str) -> bool:
    if is_local(path):
        return os.path.lexists(path)
    if path.startswith("gs://"):  # one request, with the deadline (Beam's retries for 120 s)
        from tfrecord_pipelines.transforms.storage import gcs
        return gcs.exists(path)
    return FileSystems.exists(path)


def size(path: str) -> int:
    if is_local(path):
        return os.path.getsize(path)
    return FileSystems.metadata(path).size_in_bytes


def rename(src: str, dst: str) -> None:
    if is_local(src):
        os.replace(src, dst)
    else:
        FileSystems.rename([src], [dst])


def rename_many(pairs: list[tuple[str, str]]) -> None:
    """Renames (src, dst) pairs; on object stores in batched requests."""
    for s, d in pairs:
        if is_local(s):
            rename(s, d)
    remote = [(s, d) for s, d in pairs if not is_local(s)]
    if remote:
        FileSystems.rename([s for s, _ in remote], [d for _, d in remote])


def list_sizes(path: str) -> dict[str, int]:
    """{name: size} of the files directly in folder `path` (empty if none), in one listing."""
    if is_local(path):
        try:
            return {e.name: e.stat().st_size for e in os.scandir(path) if e.is_file()}
        except (FileNotFoundError, NotADirectoryError):
            return {}
    prefix = path.rstrip("/") + "/"
    out = {}
    for p, size, _ in list_prefix(prefix):
        name = p[len(prefix):]
        if name and "/" not in name:
            out[name] = size
    return out


def delete(paths: list[str]) -> None:
    """Deletes files; missing ones are ignored (deletes must be retry-safe)."""
    local = [p for p in paths if is_local(p)]
    for p in local:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass
    remote = [p for p in paths if not is_local(p)]
    if remote:
        remote = [p for p in remote if FileSystems.exists(p)]
        if remote:
            FileSystems.delete(remote)


def delete_tree(path: str) -> None:
    """Removes a folder (a prefix on object stores) and everything below it."""
    if is_local(path):
        import shutil
        shutil.rmtree(path, ignore_errors=True)
        return
    names = [p for p, _, _ in list_prefix(path.rstrip("/") + "/")]
    if names:
        FileSystems.delete(names)


def list_prefix(prefix: str) -> Iterator[tuple[str, int, float]]:
    """(path, size, modification time) of every object under `prefix` on a
    non-local filesystem; the prefix is literal (no glob characters)."""
    fs = FileSystems.get_filesystem(prefix)
    # `_list` is the prefix listing `match` is built on; it is the only way to
    # list names that contain glob characters.
    for meta in fs._list(prefix):  # pylint: disable=protected-access
        yield meta.path, meta.size_in_bytes, meta.last_updated_in_seconds or 0.0


def list_dir(path: str) -> list[str]:
    """Names of the files directly in folder `path` (empty if it does not exist)."""
    if is_local(path):
        try:
            return sorted(e.name for e in os.scandir(path) if not e.is_dir())
        except FileNotFoundError:
            return []
    prefix = path.rstrip("/") + "/"
    if prefix.startswith("gs://"):  # one delimiter listing with a deadline, not the whole tree below
        from tfrecord_pipelines.transforms.storage import gcs
        paths = (o.path for o in gcs.list_objects(prefix, delimiter="/", timeout=gcs.timeout(), flag=True))
    else:
        paths = (p for p, _, _ in list_prefix(prefix))
    names = (p[len(prefix):] for p in paths)
    return sorted(n for n in names if n and "/" not in n)


def list_subdirs(path: str) -> list[str]:
    """Names of the folders directly in `path` (one level: on GCS a delimiter
    listing, never the whole tree)."""
    if is_local(path):
        try:
            return sorted(e.name for e in os.scandir(path) if e.is_dir())
        except (FileNotFoundError, NotADirectoryError):
            return []
    prefix = path.rstrip("/") + "/"
    if prefix.startswith("gs://"):
        from tfrecord_pipelines.transforms.storage import gcs
        return gcs.list_prefixes(prefix, gcs.timeout(), flag=True)
    dirs = set()
    for p, _, _ in list_prefix(prefix):
        rest = p[len(prefix):]
        if "/" in rest:
            dirs.add(rest.split("/", 1)[0])
    return sorted(dirs)


def is_dir(path: str) -> bool:
    if is_local(path):
        return os.path.isdir(path)
    prefix = path.rstrip("/") + "/"
    if prefix.startswith("gs://"):  # one page, with the deadline (Beam's listing retries for 120 s)
        from tfrecord_pipelines.transforms.storage import gcs
        return next(iter(gcs.list_objects(prefix, timeout=gcs.timeout(), flag=True)), None) is not None
    return next(iter(list_prefix(prefix)), None) is not None


def error_reason(e: BaseException) -> Optional[str]:
    """'missing' or 'unreadable' for an error opening/reading an input."""
    if isinstance(e, FileNotFoundError) or getattr(e, "errno", None) in (errno.ENOENT, errno.ENOTDIR):
        return "missing"
    msg = str(e).lower()
    if "not found" in msg or "no such" in msg or "404" in msg:
        return "missing"
    return "unreadable"
