"""What a run may copy without checking it against its source: files it
wrote itself and that nobody changed since (pins).

Whoever can write a dataset root can edit a previous version, or a staged
shard in a resume area, consistently: an image swapped in one record, the
record's CRCs, the provenance file, the manifest (or the done-record)
recomputed. Every check that reads only the dataset root then passes, since
the CRCs are no secret and CRC32C is no digest. So, on local disk, each file
a run writes for a later run to copy (a staged shard and its index and
provenance files, its done-record; a published shard, its provenance file,
the manifest) is pinned: its identity right after it was written or moved,
(device, inode, change time in ns, modification time in ns, size), is
recorded in the user's state folder, outside the dataset root
(`$XDG_STATE_HOME/tfrecord-pipelines/pins/`, by default
`~/.local/state/...`). Any write, truncation, `chmod`, link or replacement
of the file gives it a new change time or inode, and no one but root (by
setting the system clock) can set a change time back. A file whose identity
is not the one pinned is not copied blindly: the previous version's records
in it are read from their sources, and a staged shard is written again.

A pin is also carried across a move that this package makes (publish moves a
staged shard into the version folder, a killed publish's recovery moves it
back): the file is pinned after the move only if it was pinned, unchanged,
just before it (rename_pinned). Pins are advice about trust, never a reason
to fail a run: a state folder that cannot be written leaves files unpinned
(they are read again next time). Object stores are not pinned here (a
bucket's writers are trusted as the bucket's permissions say).
"""
from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import os
import shutil
import stat
import time
import uuid
from typing import Optional

from tfrecord_pipelines.transforms.core import provenance
from tfrecord_pipelines.transforms.storage import fsutil

log = logging.getLogger(__name__)

FOLDER_FILE = "folder"   # in each pin folder: the real path of the folder whose files it pins


def pins_root() -> str:
    """Where pins live: the user's state folder (read at each call, so a
    caller's environment decides), never inside a dataset root."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "tfrecord-pipelines", "pins")


def identity(st) -> tuple:
    """What a pin records of a file: a write, truncation, chmod, link or
    replacement changes the change time (or the inode)."""
    return (st.st_dev, st.st_ino, st.st_ctime_ns, st.st_mtime_ns, st.st_size)


def current(path: str) -> Optional[tuple]:
    """The identity of the regular file at `path` (not following a link), or None."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return identity(st) if stat.S_ISREG(st.st_mode) else None


def fd_identity(fd: int) -> tuple:
    return identity(os.fstat(fd))


def _key(folder: str) -> str:
    return hashlib.sha256(folder.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _where(path: str) -> tuple:
    """(pin folder, pin file) of `path`, keyed by its folder's real path and its name."""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    base = os.path.basename(path)
    pins = os.path.join(pins_root(), _key(folder))
    return pins, os.path.join(pins, _key(base)), folder, base


def pin(path: str, ident: Optional[tuple] = None) -> bool:
    """Records the identity of the local file `path` (`ident`, or as it is
    now). False (and nothing recorded) where it cannot be."""
    if not fsutil.is_local(path):
        return False
    ident = ident or current(path)
    if ident is None:
        return False
    pins, pin_file, folder, base = _where(path)
    try:
        if not os.path.isdir(pins):
            os.makedirs(pins, mode=0o700, exist_ok=True)
            _write(os.path.join(pins, FOLDER_FILE), folder.encode("utf-8", "surrogateescape"))
        _write(pin_file, json.dumps([base, *ident], ensure_ascii=True).encode("ascii"))
        return True
    except OSError as e:  # a state folder that cannot be written: the file is simply not trusted next time
        log.info("copy trust: %s cannot be pinned in %s (%s)", path, pins_root(), e)
        return False


def _write(path: str, data: bytes) -> None:
    temp = f"{path}.{uuid.uuid4().hex}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(temp, path)


def recorded(path: str) -> Optional[tuple]:
    """The identity pinned for the local file `path`, or None."""
    if not fsutil.is_local(path):
        return None
    try:
        pins, pin_file, _, base = _where(path)
        with open(pin_file, "rb") as f:
            row = json.loads(f.read(4096))
    except (OSError, ValueError):
        return None
    if not (isinstance(row, list) and len(row) == 6 and row[0] == base
            and all(type(v) is int for v in row[1:])):  # noqa: E721 (not bool)
        return None
    return tuple(row[1:])


def pinned(path: str) -> bool:
    """Whether the local file `path` is the one pinned, unchanged since."""
    want = recorded(path)
    return want is not None and current(path) == want


def rename_pinned(pairs: list) -> None:
    """fsutil.rename_many, carrying pins: a local file pinned and unchanged
    just before its move is pinned again right after it (the move itself
    changes its change time)."""
    local = [(s, d) for s, d in pairs if fsutil.is_local(s)]
    for s, d in local:
        ok = pinned(s)
        fsutil.rename(s, d)
        if ok:
            pin(d)
    fsutil.rename_many([(s, d) for s, d in pairs if not fsutil.is_local(s)])


def unpin_folder(folder: str) -> None:
    """Forgets every pin of files directly in the local `folder`."""
    if not fsutil.is_local(folder):
        return
    pins = os.path.join(pins_root(), _key(os.path.realpath(os.path.abspath(folder))))
    shutil.rmtree(pins, ignore_errors=True)


def prune() -> None:
    """Forgets the pins of folders that no longer exist (removed versions,
    finished resume areas): a few bytes per file, kept from growing."""
    root = pins_root()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for n in names:
        pins = os.path.join(root, n)
        try:
            with open(os.path.join(pins, FOLDER_FILE), "rb") as f:
                folder = f.read(1 << 16).decode("utf-8", "surrogateescape")
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                continue
            try:  # a pin folder being made by another run has its folder file a moment later
                if time.time() - os.stat(pins).st_mtime < 3600:
                    continue
            except OSError:
                continue
            folder = ""
        if not folder or not os.path.isdir(folder):
            shutil.rmtree(pins, ignore_errors=True)


# ---- a previous version ---------------------------------------------------------------------------------------


def with_pins(prev, manifest_name: str = "manifest.json"):
    """`prev` (provenance.PreviousVersion) with what was pinned of each shard:
    a local version's shards carry (shard identity, provenance file identity)
    when the manifest read is the one pinned (checked after it was read: a
    change before or since shows) and both files were pinned; else ()."""
    if not fsutil.is_local(prev.folder):
        return prev
    manifest_ok = pinned(os.path.join(prev.folder, manifest_name))
    shards = []
    for s in prev.shards:
        pair = (recorded(os.path.join(prev.folder, s.name)),
                recorded(os.path.join(prev.folder, provenance.provenance_name(s.name))))
        shards.append(s._replace(trust=pair if manifest_ok and None not in pair else ()))
    return dataclasses.replace(prev, shards=tuple(shards), pinned=True)


def why_untrusted(prev, shard) -> str:
    """Why the records of `shard` (a PrevShard of a pinned version) must not
    be copied ("" if they may): its files are not those this machine's run
    published. Called after its provenance file was read."""
    if not prev.pinned:
        return ""
    if not shard.trust:
        return "its manifest, shard or provenance file was not pinned by a run on this machine"
    if current(os.path.join(prev.folder, provenance.provenance_name(shard.name))) != shard.trust[1]:
        return "its provenance file changed since it was published"
    if current(os.path.join(prev.folder, shard.name)) != shard.trust[0]:
        return "its shard changed since it was published"
    return ""


class Changed(OSError):
    """A previous shard whose identity is not the one pinned (checked on the
    descriptor it was copied through, after the copy)."""
