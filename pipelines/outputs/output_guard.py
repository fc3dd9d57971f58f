"""Checks of the output folder before a conversion starts (its lock: transforms/storage/run_lock.py)."""
from __future__ import annotations

import json
import os
import socket
from typing import Optional

from tfrecord_pipelines.transforms.core.errors import UsageError
from tfrecord_pipelines.transforms.storage import fsutil, layout, run_lock, untrusted


def check_apart(output: str, inputs_root: str) -> None:
    """--output and the input folder must not overlap, either way: shards
    written inside the input would be listed as inputs by the next run (and
    written into a tree the user may not want touched), and an input inside
    the output would lie in the folder that --overwrite cleans and versions
    fill. Checked before the lock is taken (taking it writes a file there).

    Local paths are compared as given and as real paths (symbolic links
    resolved, for the parts that exist), so a link into the input is caught;
    gs:// paths are compared as written (a bucket has no links; `gs://b/x/`
    and `gs://b/x` are one prefix). A local path and a bucket are never
    compared: a bucket mounted locally (gcsfuse) is not recognised."""
    if not inputs_root or fsutil.is_local(output) != fsutil.is_local(inputs_root):
        return
    pairs = [(output.rstrip("/"), inputs_root.rstrip("/"))]
    if fsutil.is_local(output):
        pairs = [(os.path.abspath(output), os.path.abspath(inputs_root)),
                 (os.path.realpath(output), os.path.realpath(inputs_root))]
    for out, inp in pairs:
        how = "" if (out, inp) == pairs[0] else f" (through symbolic links: {out!r} is the real path)"
        if _inside(out, inp):
            raise UsageError(f"--output {output!r} is inside the input folder {inputs_root!r}{how}; its shards "
                             "would be written into the input and listed as inputs. Choose a folder outside it")
        if _inside(inp, out):
            raise UsageError(f"the input folder {inputs_root!r} is inside --output {output!r}{how}; the output "
                             "folder is cleaned and rewritten by conversions. Choose an output folder outside the "
                             "input")


def _inside(path: str, folder: str) -> bool:
    """`path` is `folder` or below it."""
    if "://" in folder:
        return path == folder or path.startswith(folder + "/")
    return os.path.commonpath([path, folder]) == folder


def check_output(output: str, inputs_root: str, overwrite: bool) -> None:
    """`inputs_root`: the folder the run lists, "" for none (a pipeline's rows)."""
    check_apart(output, inputs_root)
    if fsutil.is_local(output) and os.path.exists(output) and not os.path.isdir(output):
        raise UsageError(f"--output {output!r} is a file, not a folder")
    held = live_lock_of_another(output, "")
    if held is not None and "pid" in held and not (held.get("pid") == os.getpid()
                                                   and held.get("host") == socket.gethostname()):
        # a --versioned run's version folder (its lock is the root's) that a plain conversion is writing
        raise UsageError(f"another conversion is writing {output!r} (run {held.get('run_id', '?')}, pid "
                         f"{held.get('pid', '?')} on host {held.get('host', '?')}), under its own lock: nothing is "
                         "written into it. Choose another --version, or wait for that run to end")
    names = [n for n in fsutil.list_dir(output) if layout.is_dataset_file(n)]
    if names and not overwrite:
        shards = sum(1 for n in names if layout.SHARD_RE.match(n))
        what = _dataset_state(output, names)
        raise UsageError(f"--output {output!r} already holds {what}: {shards} shard(s), "
                         f"{', '.join(n for n in names if not layout.SHARD_RE.match(n)) or 'no other files'}. "
                         "Pass --overwrite to replace it, or choose another folder")


def _dataset_state(output: str, names: list) -> str:
    """A folder is a complete dataset only if its manifest reads as one: a
    0-byte or damaged manifest.json (disk full under an older version) is not."""
    if layout.MANIFEST not in names:
        return "an incomplete dataset (no manifest.json)"
    try:
        layout.read_manifest(output)
    except Exception as e:  # unreadable for any reason: not a success marker
        return f"an incomplete dataset ({layout.MANIFEST} cannot be read: {str(e)[:200]})"
    return "a complete dataset"


def live_lock_of_another(folder: str, run_id: str) -> Optional[dict]:
    """The lock another run holds on `folder` and has not left (not expired,
    its process alive), or None: a plain conversion writing ROOT/NAME holds
    only its own lock there, not the root's."""
    try:
        held = json.loads(untrusted.read(fsutil.join(folder, layout.LOCK), untrusted.MAX_LOCK_BYTES, within=folder))
    except FileNotFoundError:
        return None
    except Exception:  # a lock file that cannot be read (a FIFO, damaged): not ours to judge, so kept
        return {"run_id": "?"}
    if not isinstance(held, dict):
        return {"run_id": "?"}
    if held.get("run_id") == run_id or run_lock.stale_reason(held):
        return None
    return held


def remove_leftover_staging(output: str, run_id: str) -> list:
    """Staging folders and temp files (`name.tmp-*`) of earlier runs that died
    or failed mid-write (we hold the lock, so no other run is using them),
    the staging folders removed; none when another live run holds the
    folder's own lock (a conversion writing ROOT/NAME, while this run holds
    ROOT's): its staging is in use."""
    if live_lock_of_another(output, run_id) is not None:
        return []
    mine = layout.STAGING_PREFIX + run_id
    removed = []
    for d in fsutil.list_subdirs(output):
        if d.startswith(layout.STAGING_PREFIX) and d != mine:
            fsutil.delete_tree(fsutil.join(output, d))
            removed.append(fsutil.join(output, d))
    fsutil.delete(layout.leftover_temp_files(output))
    return removed
