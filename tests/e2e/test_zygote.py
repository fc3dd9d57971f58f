"""Local workers forked from a warm zygote (pipelines/speed/zygote.py): the
same shards as Beam's own worker processes, safe to fork, and no process left
behind when the command dies."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, convert, image_bytes, shard_files, write


@pytest.mark.parametrize("lean", ["0", "1"], ids=["beam whole", "beam lean"])
def test_nothing_started_before_the_fork(lean):
    code = ("import threading; from tfrecord_pipelines.speed import zygote as w; w.preload(); "
            "print(threading.active_count())")
    env = dict(os.environ, TFRECORDS_LEAN_WORKERS=lean)  # pipelines/speed/lean_import.py: what a local run's zygote does
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.strip() == "1", out.stderr  # only the main thread: forking is safe


def test_local_runner_uses_forked_workers(monkeypatch):
    monkeypatch.setenv("TFRECORDS_SPEEDUPS", "1")  # also in make test's second pass, which turns it off
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_pipelines import speed
    from tfrecord_pipelines.run import runtime
    from tfrecord_pipelines.run.plan import Plan
    from tfrecord_pipelines.speed import zygote
    argv = ["--direct_num_workers", "2"]
    plan = Plan.from_argv(argv)
    assert plan.speed.zygote
    with speed.applied(plan.speed):
        r = runtime.choose_runner(PipelineOptions(argv), plan)
        assert zygote.worker_command() in r._default_environment.command_string
        assert os.environ[zygote.ENV]  # the zygote's socket, inherited by the worker commands
    assert zygote.ENV not in os.environ and zygote._zygote is None


def test_same_shards_as_beams_own_workers(tmp_path, monkeypatch):
    root = str(tmp_path / "images")
    for c in range(3):
        for k in range(10):
            write(os.path.join(root, f"c{c}", f"{k}.jpg"), image_bytes(seed=c * 10 + k))
    results = {}
    for name, fork in (("forked", "1"), ("beam", "0")):
        monkeypatch.setenv("TFRECORDS_SPEEDUPS", fork)
        out = str(tmp_path / name)
        assert convert("--input", root, "--output", out, "--num_shards", "3", "--direct_num_workers", "2",
                       in_memory=False) == 0
        results[name] = [open(f, "rb").read() for f in shard_files(out)]
    assert results["forked"] == results["beam"] and len(results["beam"]) == 3


def test_the_zygote_goes_when_the_command_dies():
    code = ("import os, time; from tfrecord_pipelines.speed import zygote as w; w.start(); "
            "print(w._zygote.pid, os.environ[w.ENV], flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, TFRECORDS_SPEEDUPS="1"))
    zygote, sock = parent.stdout.readline().split()
    zygote = int(zygote)
    # Wait until it serves (its socket exists): an observable condition, not a fixed sleep.
    # The deadlines here are only there so a broken zygote fails the test instead of hanging it.
    deadline = time.time() + 300
    while not os.path.exists(sock):
        assert time.time() < deadline, "the zygote never started serving"
        time.sleep(0.05)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            os.kill(zygote, 0)
        except ProcessLookupError:
            return
        try:  # reap it if it became our zombie
            os.waitpid(zygote, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    raise AssertionError("the zygote outlived its command")


def test_each_client_gets_its_workers_exit_status():
    """The zygote hands each client its own worker's exit status, one worker
    after another (its loop is woken by each worker's exit): here workers
    that fail at once, started without the runner's addresses."""
    code = ("import os, time; from tfrecord_pipelines.speed import zygote as w; w.start(); "
            "print(os.environ[w.ENV], flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        sock = parent.stdout.readline().strip()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTROL_API", "LOGGING_API", "PIPELINE_OPTIONS"))}
        env["TFRECORDS_WORKER_ZYGOTE"] = sock
        for _ in range(3):
            client = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.speed.zygote"], cwd=ROOT, env=env,
                                    capture_output=True, text=True, timeout=300)
            assert client.returncode == 1, client.stderr  # the worker's own status, passed on by the zygote
            assert client.stderr == ""  # the client did not run the worker itself
    finally:
        parent.kill()
        _, err = parent.communicate()
    assert err.count("KeyError: 'CONTROL_API_SERVICE_DESCRIPTOR'") == 3  # each worker ran in a fork of the zygote


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "whole"])
def test_the_zygote_imports_beam_as_the_command_does(lean):
    """A local run's lean import reaches its forked workers: the zygote is told before it starts
    importing (a zygote importing Beam whole costs every worker ~130 MB and the run ~2 s)."""
    code = ("import os, sys, time\n"
            "from tfrecord_pipelines import speed\n"
            "from tfrecord_pipelines.speed import zygote\n"
            f"with speed.applied(speed.Speedups(lean_import={lean}, zygote=True)):\n"
            "    path = os.environ[zygote.ENV]\n"
            "    deadline = time.monotonic() + 120\n"
            "    while not os.path.exists(path) and time.monotonic() < deadline:\n"
            "        time.sleep(0.05)  # the zygote binds its socket once it has imported everything\n"
            "    maps = open(f'/proc/{zygote._zygote.pid}/maps').read()\n"
            "    print('/pandas/' in maps)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFRECORDS_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == str(not lean)  # Beam whole brings pandas' libraries
