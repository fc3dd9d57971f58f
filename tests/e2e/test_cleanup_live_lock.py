"""`tfrecords cleanup ROOT`, or a --versioned run into ROOT, never deletes
the staging folder of a live plain conversion writing ROOT/NAME (which holds
only its own lock, not ROOT's): cleanup leaves that folder alone, the
versioned run refuses that version name; a dead run's staging folder there
is still reclaimed."""
from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys

from conftest import make_tree

TFRECORDS = os.path.join(os.path.dirname(sys.executable), "tfrecords")


def _plain_run_writing(folder: str, pid: int, run_id: str) -> str:
    """folder as a plain conversion leaves it while it writes: its lock (held by `pid`) and its staging folder."""
    os.makedirs(folder, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    with open(os.path.join(folder, ".tfrecords.lock"), "w") as f:
        json.dump({"run_id": run_id, "host": socket.gethostname(), "pid": pid,
                   "started": now.isoformat(timespec="seconds"),
                   "expires": (now + datetime.timedelta(hours=48)).isoformat(timespec="seconds")}, f)
    staging = os.path.join(folder, f".tfrecords-staging-{run_id}")
    os.makedirs(staging)
    with open(os.path.join(staging, "train-00000-of-00001.tfrecord"), "wb") as f:
        f.write(b"half a shard")
    return staging


def test_cleanup_and_a_versioned_run_leave_a_live_runs_staging_alone(tmp_path):
    root = str(tmp_path / "root")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        staging = _plain_run_writing(os.path.join(root, "v2"), live.pid, "20261202-000000-000000-live0001")
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, timeout=60)
        dead_staging = _plain_run_writing(os.path.join(root, "v3"), int(dead.stdout), "20261202-000000-000000-dead0001")
        got = subprocess.run([TFRECORDS, "cleanup", root], capture_output=True, text=True, timeout=300)
        assert got.returncode == 0, got.stderr[-2000:]
        assert os.path.isdir(staging), "the live run's staging folder was deleted"
        assert os.path.exists(os.path.join(staging, "train-00000-of-00001.tfrecord"))
        assert not os.path.exists(dead_staging)  # a killed run's is reclaimed
        assert "removed 1 staging folder of earlier runs" in got.stdout
        # a --versioned run asked to write the live run's folder as its version
        src = str(tmp_path / "images")
        make_tree(src, classes=("cat", "dog"), per_class=2)
        got = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.convert", "--input", src, "--output", root,
                              "--versioned", "--version", "v2", "--progress", "off", "--direct_running_mode",
                              "in_memory", "--num_shards", "1"], capture_output=True, text=True, timeout=300)
        assert got.returncode == 2, got.stderr[-2000:]
        err = [line for line in got.stderr.splitlines() if line.startswith("error:")]
        assert len(err) == 1 and "another conversion is writing" in err[0] and "--version" in err[0], got.stderr
        assert os.path.isdir(staging), ("the live run's staging folder was deleted", got.stderr[-2000:])
        assert not os.path.exists(os.path.join(root, "LATEST"))
        assert os.path.exists(os.path.join(staging, "train-00000-of-00001.tfrecord"))
        assert live.poll() is None
    finally:
        live.kill()
        live.wait(timeout=30)
