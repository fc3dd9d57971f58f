"""The output's lock, whole: taken before a run starts, checked before each
step that changes the output (fencing), released when the run ends.

One owner releases it: the launcher for a local run (pipelines/run/lifecycle.py,
in one try/finally), or, for a job the launcher does not wait for (Dataflow,
templates), the job's Publish step, its last. A lock names its run, host, pid
and expiry; a lock whose run is gone (its process on this machine is dead, or
it expired) may be taken over.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys

from tfrecord_pipelines.transforms.core.errors import ConversionError
from tfrecord_pipelines.transforms.storage import fsutil, layout, untrusted


# Runs whose lock this process took and handed to a pipeline it does not run
# to its end (a Beam user's own pipeline: its publish step releases the lock).
# Such a lock, still here when this process takes the lock again, was left by
# a pipeline that failed or never ran (a notebook's earlier cell), not by a
# run going on elsewhere: it is taken over, and fencing stops that pipeline
# should it publish after all.
_HANDED_OFF: set = set()


class LockHeld(ConversionError):
    """Another run holds the lock, or it cannot be taken."""


class LockLost(ConversionError):
    """This run no longer holds its lock: it must not change the output."""


def _body(run_id: str, ttl_hours: float) -> bytes:
    now = datetime.datetime.now(datetime.timezone.utc)
    expires = now + datetime.timedelta(hours=ttl_hours)
    return json.dumps({"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
                       "started": now.isoformat(timespec="seconds"),
                       "expires": expires.isoformat(timespec="seconds")}).encode()


def _held(folder: str):
    try:
        # A small regular file: a FIFO put in its place must not block us, nor a huge file fill memory.
        held = json.loads(untrusted.read(fsutil.join(folder, layout.LOCK), untrusted.MAX_LOCK_BYTES, within=folder))
    except Exception:  # missing or unreadable: treated as absent
        return None
    return held if isinstance(held, dict) else None


def _not_a_lock(lock: str) -> str:
    """Why the lock file is no lock ("" if it may be one): a FIFO, a folder,
    a device in its place is never taken over without --break_lock."""
    if not fsutil.is_local(lock):
        return ""
    try:
        fsutil.open_read(lock).close()
    except fsutil.NotRegularFile as e:
        return str(e)
    except OSError:
        return ""
    return ""


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
    if held.get("pid") == os.getpid() and held.get("run_id") in _HANDED_OFF:
        return "a pipeline built earlier by this process took it and did not publish"
    try:
        os.kill(int(held.get("pid", -1)), 0)
    except ProcessLookupError:
        return f"its process {held.get('pid')} on this machine is gone"
    except (PermissionError, ValueError, TypeError):
        return ""
    return ""


def acquire(folder: str, run_id: str, ttl_hours: float = 48.0, break_lock: bool = False,
            handed_off: bool = False) -> None:
    """Takes the lock for `run_id`; `handed_off`: the run's own pipeline
    releases it (see _HANDED_OFF)."""
    lock = fsutil.join(folder, layout.LOCK)
    for _ in range(2):
        try:
            fsutil.create_only(lock, _body(run_id, ttl_hours))
            if handed_off:
                _HANDED_OFF.add(run_id)
            return
        except fsutil.AlreadyExists:
            held = _held(folder) or {}
            odd = "" if break_lock else _not_a_lock(lock)
            if odd:
                raise LockHeld(f"--output {folder!r}: {odd}, where the lock file of a conversion belongs; remove "
                               "it (or pass --break_lock)") from None
            why = "--break_lock was given" if break_lock else stale_reason(held)
            if why:
                print(f"taking over the lock of run {held.get('run_id', '?')} (host {held.get('host', '?')}): {why}",
                      file=sys.stderr)
                fsutil.delete([lock])
                continue
            raise LockHeld(
                f"another conversion is writing --output {folder!r} (run {held.get('run_id', '?')} on host "
                f"{held.get('host', '?')}, pid {held.get('pid', '?')}, started {held.get('started', '?')}, lock "
                f"expires {held.get('expires', '?')}). If that run is gone, pass --break_lock (or delete {lock})"
            ) from None
        except OSError as e:  # e.g. read-only file system, no space left, permission denied
            where = f": {e.filename}" if getattr(e, "filename", None) else ""
            raise LockHeld(f"--output {folder!r}: cannot create the lock file ({e.strerror or e}{where})") from None
    raise LockHeld(f"could not take the lock {lock}")


def held_by(folder: str) -> str:
    """The run id the lock of `folder` names ("" when there is none)."""
    return str((_held(folder) or {}).get("run_id") or "")


def check(folder: str, run_id: str) -> None:
    """Fencing: go on only while the lock still names this run. A run whose
    lock was taken over (--break_lock, or it expired) must not write over the
    output of the run that took it."""
    held = _held(folder)
    if held is not None and held.get("run_id") == run_id:
        return
    if held is not None:
        who = (f"it now names run {held.get('run_id', '?')} on host {held.get('host', '?')}, started "
               f"{held.get('started', '?')}")
    else:
        who = "it is gone"
    raise LockLost(f"run {run_id} no longer holds the lock {fsutil.join(folder, layout.LOCK)} ({who}): it was "
                   "taken over (--break_lock, or it expired after --lock_ttl_hours); nothing was published by "
                   "this run")


def release(folder: str, run_id: str) -> None:
    """Removes the lock if it still names this run (a replay, or a second
    release, finds it gone or another's and leaves it)."""
    held = _held(folder)
    if held is not None and held.get("run_id") == run_id:
        fsutil.delete([fsutil.join(folder, layout.LOCK)])
