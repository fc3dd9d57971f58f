"""The lock of a remote job is the job's: a detached PortableRunner launch
returns at once, and the same command run again while that job runs is
refused with a line naming the job, never told that the lock's process is
gone; the first job then publishes and releases the lock."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from conftest import make_tree
from isolated_services import VENV_BIN, free_port
from isolated_services import serve as _serve
from isolated_services import stop as _stop
from test_portable import portable_args


@pytest.fixture
def services(tmp_path):
    """(job endpoint, worker pool endpoint, worker pool process)."""
    folder = str(tmp_path / "services")
    os.makedirs(folder)
    jobs, pool = free_port(), free_port()
    path = VENV_BIN + os.pathsep + os.environ.get("PATH", "")
    procs = [_serve(["apache_beam.runners.portability.local_job_service_main", "--port", str(jobs)], jobs, path,
                    folder, "job_service"),
             _serve(["apache_beam.runners.worker.worker_pool_main", f"--service_port={pool}"], pool, path, folder,
                    "worker_pool")]
    try:
        yield f"localhost:{jobs}", f"localhost:{pool}", procs[1]
    finally:
        _stop(procs)


def _live_children(pid: int) -> list:
    """The processes (not zombies) whose parent is `pid`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(name))
    return found


def _wait(what, seconds: float = 120):
    deadline = time.time() + seconds
    while True:
        got = what()
        if got:
            return got
        assert time.time() < deadline
        time.sleep(0.05)


def test_a_detached_jobs_lock_refuses_the_same_command_until_the_job_publishes(services, tmp_path, capsys):
    from tfrecord_pipelines.commands.convert import run
    jobs, pool, pool_proc = services
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=10)
    argv = ["--input", root, "--output", out, "--num_shards", "2", "--progress", "off", *portable_args(jobs, pool)]
    assert run([*argv, "--detach"]) == 0
    assert "job submitted (PortableRunner)" in capsys.readouterr().out
    lock = os.path.join(out, ".tfrecords.lock")
    held = json.load(open(lock))
    assert held["runner"] == "PortableRunner" and held["job_id"] and held["pid"] == os.getpid()
    # The job is held still (its SDK worker stopped) while the same command runs again: the
    # launcher's pid is alive here, so stop the worker to make sure the job cannot end first.
    worker = _wait(lambda: _live_children(pool_proc.pid))
    for pid in worker:
        os.kill(pid, signal.SIGSTOP)
    try:
        assert not os.path.exists(os.path.join(out, "manifest.json"))
        # Even with the launcher's process gone (a detached launch that exited): the job's.
        with open(lock, "w") as f:
            json.dump({**held, "pid": 2 ** 22 + 1}, f)
        assert run(argv) == 2
        err = capsys.readouterr().err
        line = [ln for ln in err.splitlines() if ln.strip()]
        assert len(line) == 1, err
        assert f"job {held['job_id']} on PortableRunner" in line[0] and f"run {held['run_id']}" in line[0], err
        assert "pass --break_lock" in line[0] and "taking over" not in err and "Traceback" not in err
    finally:
        for pid in worker:
            os.kill(pid, signal.SIGCONT)
    # The first job goes on, publishes and releases its lock.
    manifest = os.path.join(out, "manifest.json")
    _wait(lambda: os.path.exists(manifest) and not os.path.exists(lock))
    m = json.load(open(manifest))
    assert m["run_id"] == held["run_id"] and m["counts"]["listed"] == 30 and m["counts"]["written"] == 30
    assert not [n for n in os.listdir(out) if n.startswith(".")], os.listdir(out)
