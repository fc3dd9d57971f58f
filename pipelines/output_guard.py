"""Checks and the lock on the output folder, before a conversion starts."""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys

from pipelines.parse import UsageError
from transforms import fsutil, layout


def check_output(output: str, inputs_root: str, overwrite: bool) -> None:
    if fsutil.is_local(output) and fsutil.is_local(inputs_root):
        if os.path.commonpath([output, inputs_root]) == inputs_root:
            raise UsageError(f"--output {output!r} is inside the input folder {inputs_root!r}; its shards would "
                             "be listed as inputs. Choose a folder outside it")
    if fsutil.is_local(output) and os.path.exists(output) and not os.path.isdir(output):
        raise UsageError(f"--output {output!r} is a file, not a folder")
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


def _lock_body(run_id: str, ttl_hours: float) -> bytes:
    now = datetime.datetime.now(datetime.timezone.utc)
    expires = now + datetime.timedelta(hours=ttl_hours)
    return json.dumps({"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
                       "started": now.isoformat(timespec="seconds"),
                       "expires": expires.isoformat(timespec="seconds")}).encode()


def stale_reason(held: dict, now: datetime.datetime = None) -> str:
    """Why a lock may be taken over ("" if it may not): it expired (a run that
    died elsewhere, e.g. a failed Dataflow job), or its process on this machine
    is dead (e.g. a killed local run)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    try:
        if datetime.datetime.fromisoformat(held["expires"]) < now:
            return f"it expired at {held['expires']}"
    except (KeyError, ValueError, TypeError):
        pass
    if held.get("host") != socket.gethostname():
        return ""
    try:
        os.kill(int(held.get("pid", -1)), 0)
    except ProcessLookupError:
        return f"its process {held.get('pid')} on this machine is gone"
    except (PermissionError, ValueError, TypeError):
        return ""
    return ""


def acquire_lock(output: str, run_id: str, ttl_hours: float = 48.0, break_lock: bool = False) -> None:
    lock = fsutil.join(output, layout.LOCK)
    for _ in range(2):
        try:
            fsutil.create_only(lock, _lock_body(run_id, ttl_hours))
            return
        except fsutil.AlreadyExists:
            try:
                held = json.loads(fsutil.read_bytes(lock))
            except Exception:
                held = {}
            why = "--break_lock was given" if break_lock else stale_reason(held)
            if why:
                print(f"taking over the lock of run {held.get('run_id', '?')} (host {held.get('host', '?')}): {why}",
                      file=sys.stderr)
                fsutil.delete([lock])
                continue
            raise UsageError(
                f"another conversion is writing --output {output!r} (run {held.get('run_id', '?')} on host "
                f"{held.get('host', '?')}, pid {held.get('pid', '?')}, started {held.get('started', '?')}, lock "
                f"expires {held.get('expires', '?')}). If that run is gone, pass --break_lock (or delete {lock})") from None
    raise UsageError(f"could not take the lock {lock}")


def remove_leftover_staging(output: str, run_id: str) -> None:
    """Staging folders and temp files (`name.tmp-*`) of earlier runs that died
    or failed mid-write (we hold the lock, so no other run is using them)."""
    mine = layout.STAGING_PREFIX + run_id
    for d in fsutil.list_subdirs(output):
        if d.startswith(layout.STAGING_PREFIX) and d != mine:
            fsutil.delete_tree(fsutil.join(output, d))
    fsutil.delete(layout.leftover_temp_files(output))
