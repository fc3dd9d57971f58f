"""`tfrecords convert` stopped by SIGINT (Ctrl-C: the whole process group)
or SIGTERM (the launcher alone), in a multi-process run and in-process: one line on stderr
saying what was kept and that the same command resumes, exit 130 or 143, no
traceback, no lock or staging left; the same command then resumes and
publishes shards byte-identical to an uninterrupted run's."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, files_of, image_bytes, write

OPTS = ["--num_shards", "8", "--split", "train=0.75,validation=0.25", "--progress", "off"]
MULTI = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]
N = 240

# Every Python process of the run (the launcher and Beam's workers inherit
# PYTHONPATH) sleeps on each open of an image, so the test can signal it
# while it writes; no product code is patched.
SLOW = """import os, sys, time
_root = os.environ.get("TEST_SLOW_UNDER")
def _slow(event, a):
    if _root and event == "open" and isinstance(a[0], str) and a[0].startswith(_root):
        time.sleep(0.05)
sys.addaudithook(_slow)
"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp("interrupt")
    images = str(base / "images")
    for c in range(3):
        for k in range(N // 3):
            write(os.path.join(images, f"c{c}", f"{k:03d}.jpg"), image_bytes(40 + k % 9, 30, seed=c * 1000 + k))
    write(str(base / "hook" / "sitecustomize.py"), SLOW.encode())
    clean = str(base / "clean")
    cli(images, clean, "", str(base / "hook"), check=True)
    return images, clean, str(base / "hook")


def cli(images, out, slow_under, hook, check=False, mode=tuple(MULTI), **kw):
    env = dict(os.environ, PYTHONPATH=hook + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TEST_SLOW_UNDER=os.path.join(slow_under, "") if slow_under else "")
    cmd = [sys.executable, "-m", "tfrecord_pipelines.cli", "convert", "--input", images, "--output", out, *OPTS, *mode]
    if kw.pop("popen", False):
        # As a terminal starts it: SIGINT at its default even when this test runs under nohup or `&`,
        # whose inherited SIG_IGN the run rightly keeps.
        return subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    got = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert not check or got.returncode == 0, got.stderr
    return got


def left_in_group(pgid, wait=15.0):
    """The processes of the run's process group still there after `wait` s."""
    deadline = time.time() + wait
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return ""
        if time.time() > deadline:
            return subprocess.run(["ps", "-o", "pid,stat,args", "-g", str(pgid)], capture_output=True,
                                  text=True).stdout
        time.sleep(0.1)


def done_records(out):
    areas = [d for d in os.listdir(out) if d.startswith(".tfrecords-resume-")] if os.path.isdir(out) else []
    try:
        return sum(n.endswith(".done") for a in areas for n in os.listdir(os.path.join(out, a)))
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("sig,code,group,mode", [
    (signal.SIGINT, 130, True, MULTI), (signal.SIGTERM, 143, False, MULTI),
    (signal.SIGINT, 130, True, ["--direct_running_mode", "in_memory"])],
    ids=["SIGINT", "SIGTERM", "SIGINT-in-process"])
def test_a_signal_ends_the_run_with_one_line_and_the_same_command_resumes(tree, tmp_path, sig, code, group, mode):
    images, clean, hook = tree
    out = str(tmp_path / "out")
    proc = cli(images, out, images, hook, popen=True, mode=mode)
    deadline = time.time() + 300
    while done_records(out) < 1:  # writing: a shard is complete
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)
    time.sleep(0.2)  # past the done-record's pin (microseconds after it); the line counts only pinned shards
    if group:  # Ctrl-C in a terminal signals the whole foreground process group
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, (stdout, stderr)
    assert left_in_group(proc.pid) == "", "processes of the run are left"
    assert "Traceback" not in stderr and "Traceback" not in stdout, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    m = re.fullmatch(r"error: interrupted: nothing was published; the (\d+) completed shards? (?:is|are) kept and "
                     r"the same command resumes from (?:it|them)", lines[0])
    assert m and 1 <= int(m.group(1)) <= done_records(out), (lines[0], done_records(out))
    kept = int(m.group(1))  # what the line says is kept is what the rerun resumes
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert not [n for n in os.listdir(out) if n == ".tfrecords.lock" or n.startswith(".tfrecords-staging")], \
        os.listdir(out)
    again = cli(images, out, "", hook, check=True, mode=mode)
    assert f"resumed: {kept} shard" in again.stdout, again.stdout
    assert files_of(out) == files_of(clean)
    assert not [n for n in os.listdir(out) if n.startswith(".tfrecords")]
