"""The output's lock, whole: taken before a run starts, checked before each
step that changes the output (fencing), released when the run ends.

One owner releases it: the launcher for a local run (pipelines/run/lifecycle.py,
in one try/finally), or, for a job the launcher does not wait for (Dataflow,
templates), the job's Publish step, its last. A lock names its run, host, pid
and expiry; a lock whose run is gone (its process on this machine is dead, or
it expired) may be taken over.

A lock taken for a remote job names its runner (and, once the job is
submitted, the job's id): the launcher's process is no sign of that job's
life (a detached launch returns at once, an interrupted one leaves the job
running), so such a lock is held until the job ends it, it expires
(--lock_ttl_hours) or --break_lock takes it.
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


def _body(run_id: str, ttl_hours: float, runner: str = "") -> bytes:
    now = datetime.datetime.now(datetime.timezone.utc)
    expires = now + datetime.timedelta(hours=ttl_hours)
    body = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
            "started": now.isoformat(timespec="seconds"), "expires": expires.isoformat(timespec="seconds")}
    if runner:
        body["runner"] = runner
    return json.dumps(body).encode()


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
    if held.get("runner"):  # a remote job's: alive until it ends, expires or --break_lock
        return ""
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
            handed_off: bool = False, runner: str = "") -> None:
    """Takes the lock for `run_id`; `handed_off`: the run's own pipeline
    releases it (see _HANDED_OFF); `runner`: the remote runner whose job will
    hold it (see the module's docstring)."""
    lock = fsutil.join(folder, layout.LOCK)
    for _ in range(2):
        try:
            fsutil.create_only(lock, _body(run_id, ttl_hours, runner))
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
            raise LockHeld(_held_line(folder, lock, held)) from None
        except OSError as e:  # e.g. read-only file system, no space left, permission denied
            where = f": {e.filename}" if getattr(e, "filename", None) else ""
            raise LockHeld(f"--output {folder!r}: cannot create the lock file ({e.strerror or e}{where})") from None
    raise LockHeld(f"could not take the lock {lock}")


def held_by(folder: str) -> str:
    """The run id the lock of `folder` names ("" when there is none)."""
    return str((_held(folder) or {}).get("run_id") or "")


def _held_line(folder: str, lock: str, held: dict) -> str:
    if held.get("runner"):
        job = f"job {held['job_id']}" if held.get("job_id") else "a job"
        return (f"another conversion is writing --output {folder!r}: run {held.get('run_id', '?')}, {job} on "
                f"{held['runner']} launched from host {held.get('host', '?')} at {held.get('started', '?')}; it "
                f"holds the lock until it ends, or until {held.get('expires', '?')} (--lock_ttl_hours). If that "
                f"job is no longer running, pass --break_lock (or delete {lock})")
    return (f"another conversion is writing --output {folder!r} (run {held.get('run_id', '?')} on host "
            f"{held.get('host', '?')}, pid {held.get('pid', '?')}, started {held.get('started', '?')}, lock "
            f"expires {held.get('expires', '?')}). If that run is gone, pass --break_lock (or delete {lock})")


def name_job(folder: str, run_id: str, job_id: str) -> None:
    """Records the submitted job's id in the lock, if it still names this run.
    Never recreates a lock the job has already released: the local file is
    rewritten in place through an open handle (a lock removed meanwhile takes
    the write with it), the object only at the generation read."""
    if not job_id:
        return
    lock = fsutil.join(folder, layout.LOCK)
    try:
        if fsutil.is_local(lock):
            with open(lock, "r+b") as f:  # O_NOFOLLOW aside, the lock was made by create_only
                held = json.loads(f.read(untrusted.MAX_LOCK_BYTES))
                if not isinstance(held, dict) or held.get("run_id") != run_id:
                    return
                f.seek(0)
                f.write(json.dumps({**held, "job_id": job_id}).encode())
                f.truncate()
            return
        if lock.startswith("gs://"):
            from tfrecord_pipelines.transforms.storage import gcs
            data, generation = gcs.read(lock, 0, timeout=gcs.timeout(), max_bytes=untrusted.MAX_LOCK_BYTES)
            held = json.loads(data)
            if isinstance(held, dict) and held.get("run_id") == run_id:
                bucket, name = gcs.split_path(lock)
                gcs.client().bucket(bucket).blob(name).upload_from_string(
                    json.dumps({**held, "job_id": job_id}).encode(), if_generation_match=generation)
    except Exception:  # gone (the job ended), or replaced: the lock stands as it was
        return


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


def held_by_live_run(folder: str, run_id: str = "") -> bool:
    """Whether a run other than `run_id` holds the lock of `folder` and has not
    left it (not expired, its process alive). A lock file that cannot be read
    counts as held: it is not ours to judge."""
    lock = fsutil.join(folder, layout.LOCK)
    held = _held(folder)
    if held is None:
        return fsutil.exists(lock)
    return held.get("run_id") != run_id and not stale_reason(held)
