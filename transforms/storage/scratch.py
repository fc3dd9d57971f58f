"""A run's scratch folders on this machine's temp folder (TMPDIR), and their
reclaiming after a run that could not remove its own.

A run keeps local files outside its output: the launcher's folder (progress
files, error notes, and, when --output is a bucket, the spill files: about
1 KB per image), the workers' zygote socket, the external merge of a large
rejects file, an ArrayRecord shard on its way to a bucket. A run removes them
when it ends; a run killed with SIGKILL cannot. So each folder names its owner
(`owner.json`: host, pid and the process's start time, which a reused pid does
not share), and the next run, or `tfrecords cleanup`, removes the folders
whose owner is gone. A launcher's folder may also name the staging folder of
its local output (where a local output's spill files and unfinished shards
wait), which goes with it: no other run uses a dead run's staging folder.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
import time
from typing import Iterator, NamedTuple, Optional

PREFIX = "tfrecords-"
OWNER = "owner.json"
# A folder of ours without an owner file (its disk was full, or an older version made it) is
# removed only when this old: it may be a run's that has not written its owner file yet.
ORPHAN_SECONDS = 24 * 3600


def _start_ticks(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (Linux), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _owner() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_ticks(os.getpid()),
            "created": time.time()}


def make(kind: str, staging: str = "") -> str:
    """A new scratch folder `TMPDIR/tfrecords-<kind>-XXXX` owned by this process;
    `staging`: a local output's staging folder that is this run's as well."""
    folder = tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-")
    info = dict(_owner(), staging=staging)
    try:
        with open(os.path.join(folder, OWNER), "w", encoding="utf-8") as f:
            json.dump(info, f)
    except OSError:
        pass  # a full disk: the folder is an orphan, reclaimed when old (ORPHAN_SECONDS)
    return folder


@contextlib.contextmanager
def folder(kind: str, staging: str = "") -> Iterator[str]:
    """make(), removed on leaving however the block leaves."""
    path = make(kind, staging)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def alive(info: dict) -> bool:
    """Whether the owner named by an owner file may still be running. A
    process of another host is assumed alive (a shared temp folder)."""
    if info.get("host") != socket.gethostname():
        return True
    try:
        pid = int(info.get("pid"))
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True
    start = info.get("start")
    now = _start_ticks(pid)
    return start is None or now is None or now == start


class Reclaimed(NamedTuple):
    path: str
    bytes: int


def _size(path: str) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass
    return total


def _owner_of(path: str) -> Optional[dict]:
    try:
        with open(os.path.join(path, OWNER), encoding="utf-8") as f:
            info = json.load(f)
        return info if isinstance(info, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def reclaim(tempdir: str = "", now: Optional[float] = None) -> list:
    """Removes the scratch folders in `tempdir` (default: this process's temp
    folder) whose owner is gone, with the local staging folders they name;
    returns what was removed."""
    tempdir = tempdir or tempfile.gettempdir()
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(tempdir))
    except OSError:
        return removed
    for e in entries:
        try:
            # Only our own folders: in a shared /tmp another user could plant an owner file.
            if not e.name.startswith(PREFIX) or not e.is_dir(follow_symlinks=False) or \
                    e.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        info = _owner_of(e.path)
        if info is None or not info:
            try:
                old = now - e.stat(follow_symlinks=False).st_mtime > ORPHAN_SECONDS
            except OSError:
                continue
            if not old:
                continue
        elif alive(info):
            continue
        staging = info.get("staging") if info else ""
        for path in ([staging] if isinstance(staging, str) and _is_staging(staging) else []) + [e.path]:
            if os.path.isdir(path):
                size = _size(path)
                shutil.rmtree(path, ignore_errors=True)
                removed.append(Reclaimed(path, size))
    return removed


def _is_staging(path: str) -> bool:
    """Only ever a staging folder of an output (layout.STAGING_PREFIX), never
    whatever a damaged owner file names."""
    from tfrecord_pipelines.transforms.storage import layout
    return os.path.isabs(path) and os.path.basename(path.rstrip(os.sep)).startswith(layout.STAGING_PREFIX)
