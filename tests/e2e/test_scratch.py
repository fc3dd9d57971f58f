"""What a run keeps on this machine outside its output (transforms/storage/scratch.py):
a full temp folder is named as such, not as the bucket the run writes to, and
what a killed run left (spill files in the temp folder, a local output's
staging folder) is removed by the next run or by `tfrecords cleanup`."""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, check_against_source, make_tree, own_lines
from gcs_emulator import BUCKET, gcs, list_names  # noqa: F401 (fixture)

TFRECORDS = os.path.join(os.path.dirname(sys.executable), "tfrecords")


def _env(tmpdir: str) -> dict:
    return dict(os.environ, TMPDIR=tmpdir)


def _held_run(args: list, tmpdir: str, gate: str, input_root: str) -> subprocess.Popen:
    """A conversion in its own process group that stops at its first read of an
    image (an audit hook: no product code is patched), after the listing's and
    the shuffle's spill files are written; GATE.reached says it got there."""
    prefix = os.path.join(input_root, "")
    code = ("import os, sys, time\n"
            "def hook(event, a):\n"
            f"    if event == 'open' and isinstance(a[0], str) and a[0].startswith({prefix!r}):\n"
            f"        open({gate + '.reached'!r}, 'w').close()\n"
            "        while True:\n"
            "            time.sleep(1)\n"
            "sys.addaudithook(hook)\n"
            "from tfrecord_pipelines.commands.convert import run\nsys.exit(run(sys.argv[1:]))\n")
    return subprocess.Popen([sys.executable, "-c", code, *args, "--progress", "off", "--direct_running_mode",
                             "in_memory"], cwd=ROOT, env=_env(tmpdir), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_when_held(proc: subprocess.Popen, gate: str) -> None:
    deadline = time.time() + 120
    while not os.path.exists(gate + ".reached"):
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _spill_files(folder: str) -> list:
    return glob.glob(os.path.join(folder, "**", "*.spill"), recursive=True)


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A real 16 KB filesystem (we run as root): the kernel answers ENOSPC."""
    d = str(tmp_path / "tmpfs")
    os.makedirs(d)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", d], check=True, capture_output=True)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", d], check=True)


def test_a_full_temp_folder_is_not_reported_as_the_buckets(gcs, tmp_path, tiny_tmpfs):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=120)  # 360 records: their spill files need more than 16 KB
    out = f"gs://{BUCKET}/full-tmp/out"
    proc = subprocess.run([TFRECORDS, "convert", "--input", root, "--output", out, "--progress", "off",
                           "--direct_running_mode", "in_memory"], env=_env(tiny_tmpfs), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    lines = own_lines(proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    err = lines[0]
    assert err.startswith("error: No space left on device") and "not in --output" in err and "TMPDIR" in err, err
    assert "spill files" in err and tiny_tmpfs in err, err
    assert f"while writing --output {out}" not in err, err
    assert "manifest.json" not in list_names("full-tmp/out")


def test_spill_files_of_a_run_killed_to_a_bucket_are_reclaimed_by_the_next_run(gcs, tmp_path):
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=4)
    tmpdir = str(tmp_path / "tmpdir")
    os.makedirs(tmpdir)
    gate = str(tmp_path / "gate")
    proc = _held_run(["--input", root, "--output", f"gs://{BUCKET}/killed/out"], tmpdir, gate, root)
    _kill_when_held(proc, gate)
    left = glob.glob(os.path.join(tmpdir, "tfrecords-run-*"))
    assert len(left) == 1 and _spill_files(left[0]), os.listdir(tmpdir)  # what the killed run left

    # The next run on this machine (into another output) removes it, and says so.
    out = str(tmp_path / "next")
    proc = subprocess.run([TFRECORDS, "convert", "--input", root, "--output", out, "--progress", "off",
                           "--direct_running_mode", "in_memory"], env=_env(tmpdir), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "removed what a killed run left on this machine: 1 folder" in proc.stderr and left[0] in proc.stderr
    assert not os.path.exists(left[0]) and not glob.glob(os.path.join(tmpdir, "tfrecords-*")), os.listdir(tmpdir)
    check_against_source(out, labels, root)


def test_a_killed_local_run_is_reclaimed_by_a_run_into_another_output_or_by_cleanup(tmp_path):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=4)
    tmpdir = str(tmp_path / "tmpdir")
    os.makedirs(tmpdir)

    def kill_a_run(name: str) -> tuple:
        out, gate = str(tmp_path / name), str(tmp_path / f"gate-{name}")
        _kill_when_held(_held_run(["--input", root, "--output", out], tmpdir, gate, root), gate)
        staging, = glob.glob(os.path.join(out, ".tfrecords-staging-*"))
        assert _spill_files(staging)  # a local output's spill files wait beside it
        scratch, = glob.glob(os.path.join(tmpdir, "tfrecords-run-*"))
        return out, staging, scratch

    # A run into another output removes the killed run's scratch folder and its output's staging folder.
    _, staging, scratch = kill_a_run("killed-a")
    proc = subprocess.run([TFRECORDS, "convert", "--input", root, "--output", str(tmp_path / "other"), "--progress",
                           "off", "--direct_running_mode", "in_memory"], env=_env(tmpdir), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "removed what killed runs left on this machine: 2 folders" in proc.stderr, proc.stderr
    assert not os.path.exists(staging) and not os.path.exists(scratch)

    # `tfrecords cleanup` does the same now, and cleans the outputs named to it under their lock.
    out, staging, scratch = kill_a_run("killed-b")
    proc = subprocess.run([TFRECORDS, "cleanup", out], env=_env(tmpdir), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "removed what killed runs left on this machine: 2 folders" in proc.stdout, proc.stdout
    assert not os.path.exists(staging) and not glob.glob(os.path.join(tmpdir, "tfrecords-*"))
    assert f"{out}: removed 0 staging folders" in proc.stdout
    assert not os.path.exists(os.path.join(out, ".tfrecords.lock"))  # the dead run's lock, taken over and released

    # An output whose killed run left nothing in the temp folder (a reboot emptied it): cleaned when named.
    out, staging, scratch = kill_a_run("killed-c")
    shutil.rmtree(scratch)
    proc = subprocess.run([TFRECORDS, "cleanup", out], env=_env(tmpdir), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "nothing left by killed runs in the temp folder" in proc.stdout
    assert f"{out}: removed 1 staging folder of earlier runs ({staging})" in proc.stdout, proc.stdout
    assert f"{out}: removed 1 resume area of killed runs" in proc.stdout, proc.stdout  # what a rerun resumes from
    assert os.listdir(out) == []
    proc = subprocess.run([TFRECORDS, "cleanup"], env=_env(tmpdir), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "nothing left by killed runs" in proc.stdout


def test_cleanup_leaves_a_running_conversions_output_alone(tmp_path):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=2)
    tmpdir, gate, out = str(tmp_path / "tmpdir"), str(tmp_path / "gate"), str(tmp_path / "out")
    os.makedirs(tmpdir)
    proc = _held_run(["--input", root, "--output", out], tmpdir, gate, root)
    try:
        deadline = time.time() + 120
        while not os.path.exists(gate + ".reached"):
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.05)
        done = subprocess.run([TFRECORDS, "cleanup", out], env=_env(tmpdir), capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 1 and "another conversion is writing --output" in done.stderr, done.stderr
        assert glob.glob(os.path.join(out, ".tfrecords-staging-*")) and glob.glob(os.path.join(tmpdir, "tfrecords-run-*"))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
