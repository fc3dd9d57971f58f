"""The folders of a dataset root that a run creates, copies from or removes:
never through a symbolic link, never into another filesystem mounted there.

A dataset root may be shared, and whoever may write in it can plant a link
or a folder of their own under a name a run is about to use (version names
are the UTC time, so the next ones are known); an administrator may have
bind-mounted a folder inside an old version. A version folder is
therefore a real folder of the root: not a link, owned by this user, on the
root's filesystem and no mount point; a version is removed only when nothing
under it is another filesystem (a bind mount, checked in the mount table, as
it keeps the device number), and the removal itself never follows a link
(shutil.rmtree works from open folder descriptors on Linux). Local paths
only: a bucket has no links or mounts.
"""
from __future__ import annotations

import os
import shutil
import stat
import sys

from tfrecord_pipelines.transforms.storage import fsutil, untrusted

MOUNTINFO = "/proc/self/mountinfo"


class Refused(OSError):
    """A folder of the root that is not used, and why (the message)."""


def _unescape(field: str) -> str:
    """A mount table path: spaces, tabs, newlines and backslashes are octal escapes there."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points_under(path: str) -> list:
    """The mount points at or below the local `path` (its real path), from
    this process's mount table; [] where there is none to read (not Linux)."""
    real = os.path.realpath(path)
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as f:
            points = [_unescape(line.split(" ")[4]) for line in f if line.count(" ") >= 5]
    except OSError:
        return []
    return sorted(p for p in points if p == real or p.startswith(real.rstrip(os.sep) + os.sep))


def why_not_in_root(root: str, name: str) -> str:
    """"" when ROOT/NAME is missing or a folder of the root itself: not a
    link, on the root's filesystem, not a mount point; else what it is."""
    path = os.path.join(root, name)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"{path} is a symbolic link (to {target})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if st.st_dev != os.stat(root).st_dev or os.path.realpath(path) in mount_points_under(path):
        return f"{path} is another filesystem mounted in the root"
    return ""


def why_not_a_folder_of(root: str, name: str) -> str:
    """"" when ROOT/NAME is missing or a real folder of the root to write in:
    why_not_in_root's, owned by this user, with no mount below; else what it
    is instead."""
    why = why_not_in_root(root, name)
    path = os.path.join(root, name)
    if why or not os.path.lexists(path):
        return why
    uid = os.lstat(path).st_uid
    if hasattr(os, "geteuid") and uid != os.geteuid():
        return f"{path} belongs to another user (uid {uid})"
    if mount_points_under(path):
        return f"{path} holds another filesystem mounted inside it"
    return ""


def make_version_folder(root: str, name: str) -> None:
    """Creates the version folder ROOT/NAME (mkdir, which never follows a
    link), or keeps it when it already is a real folder of the root (a rerun
    of a killed `--version NAME` run); Refused when the path is anything else.
    Nothing to do in a bucket."""
    if not fsutil.is_local(root):
        return
    try:
        os.mkdir(os.path.join(root, name))
        return
    except FileExistsError:
        pass
    why = why_not_a_folder_of(root, name)
    if why:
        raise Refused(f"{why}: a version is written only into a folder of the dataset root, made by this run or "
                      f"an earlier run of yours. Nothing was written; remove {os.path.join(root, name)}, or name "
                      "the version with --version")


def check_version_folder(root: str, name: str) -> None:
    """Refused unless ROOT/NAME (existing) is still a real folder of the root."""
    if fsutil.is_local(root):
        why = why_not_a_folder_of(root, name) or ("" if os.path.isdir(os.path.join(root, name))
                                                  else f"{os.path.join(root, name)} is gone")
        if why:
            raise Refused(why)


def _other_filesystem(path: str) -> str:
    """The first entry under the real folder `path` on another device than
    `path` itself (entries looked at without following links), or ""."""
    dev = os.lstat(path).st_dev
    stack = [path]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for e in entries:
                st = e.stat(follow_symlinks=False)
                if st.st_dev != dev:
                    return e.path
                if stat.S_ISDIR(st.st_mode):
                    stack.append(e.path)
    return ""


def why_not_removable(path: str) -> str:
    """"" when the local folder `path` can be removed whole without leaving
    its filesystem; else why not (a link, not a folder, a mount inside)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"{path} is gone"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    mounts = mount_points_under(path)
    try:
        other = mounts[0] if mounts else _other_filesystem(path)
    except OSError as e:
        return f"{path} cannot be listed ({e.strerror or e})"
    if other:
        return f"{other} is another filesystem mounted inside it"
    return ""


def remove_tree(path: str) -> str:
    """Removes the folder `path` and everything in it: "" once it is gone,
    else why it was not (removed) whole. Never follows a link (a link inside
    is removed, not what it names), never removes anything of a filesystem
    mounted inside (then nothing is removed). On object stores, the prefix."""
    if not fsutil.is_local(path):
        fsutil.delete_tree(path)
        return ""
    why = why_not_removable(path)
    if why:
        return why
    errors: list = []

    def note(_fn, p, e) -> None:
        e = e[1] if isinstance(e, tuple) else e  # onerror's exc_info, onexc's exception
        errors.append(f"{p}: {getattr(e, 'strerror', None) or e}")
    # fd-based on Linux (shutil._use_fd_functions): a folder swapped for a link mid-removal is not followed
    shutil.rmtree(path, **({"onexc": note} if sys.version_info >= (3, 12) else {"onerror": note}))
    if os.path.lexists(path):
        return f"{path} was not removed whole ({errors[0] if errors else 'it is not empty'})"
    return ""


def link_out(folder: str, names: list, root: str = "") -> str:
    """What of the local `folder` (a previous version, copied from) leads out
    of where it must lie: the folder itself out of `root` (if given), or one of
    `names` under it (its provenance folder, its shards) out of the folder,
    through a symbolic link; "" when nothing does (or in a bucket)."""
    if not fsutil.is_local(folder):
        return ""
    for path, within in ([(folder, root)] if root else []) + [(os.path.join(folder, n), folder) for n in names]:
        if os.path.lexists(path) and not untrusted.inside(path, within):
            return f"{path} is a link to {os.path.realpath(path)}, outside {within}"
    return ""


def is_plain_folder(path: str) -> bool:
    """Whether the local `path` is a folder reached without a symbolic link
    and with no other filesystem mounted at or under it (always, in a bucket)."""
    if not fsutil.is_local(path):
        return True
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and not mount_points_under(path)


def remove_if_empty(path: str) -> None:
    """Removes the local folder `path` if it is empty (a version folder made
    for a run that published nothing); anything else is left as it is."""
    if fsutil.is_local(path):
        try:
            os.rmdir(path)  # only ever an empty folder; a link is refused (ENOTDIR)
        except OSError:
            pass
