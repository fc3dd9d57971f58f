"""A remote job's lock: alive while it names a runner, whatever became of
the launcher's process; taken over only once it expired. A local run's lock
of a dead process is taken over at once, as before."""
import datetime
import socket

from tfrecord_pipelines.transforms.storage import run_lock

NOW = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.timezone.utc)
DEAD_PID = 2 ** 22 + 1  # above Linux's pid_max: no such process


def _lock(**extra) -> dict:
    return {"run_id": "r1", "host": socket.gethostname(), "pid": DEAD_PID, "started": "2026-12-01T11:00:00+00:00",
            "expires": "2026-12-03T11:00:00+00:00", **extra}


def test_a_remote_jobs_lock_outlives_its_launcher():
    assert run_lock.stale_reason(_lock(runner="PortableRunner", job_id="j1"), NOW) == ""
    assert run_lock.stale_reason(_lock(runner="DataflowRunner"), NOW) == ""  # submitted, id not yet recorded
    assert run_lock.stale_reason(_lock(), NOW) == f"its process {DEAD_PID} on this machine is gone"


def test_a_remote_jobs_lock_expires():
    later = NOW + datetime.timedelta(days=3)
    assert run_lock.stale_reason(_lock(runner="PortableRunner", job_id="j1"), later).startswith("it expired at")


def test_the_job_id_is_recorded_only_in_this_runs_lock(tmp_path):
    out = str(tmp_path)
    run_lock.acquire(out, "r1", runner="PortableRunner")
    run_lock.name_job(out, "r2", "other")  # not this run's lock: left as it is
    run_lock.name_job(out, "r1", "job-7")
    held = run_lock._held(out)
    assert held["run_id"] == "r1" and held["runner"] == "PortableRunner" and held["job_id"] == "job-7"
    run_lock.release(out, "r1")
    run_lock.name_job(out, "r1", "job-7")  # the job ended the run first: no lock is made again
    assert not (tmp_path / ".tfrecords.lock").exists()
