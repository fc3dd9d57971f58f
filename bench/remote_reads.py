"""Reads in flight on a remote runner's worker, for a local (shared) path:
one PortableRunner job (Beam's Python job service: one SDK worker, from a
worker pool) converts an image folder with a resize, with --reads_in_flight
at each value given, alternating rounds; the DirectRunner's time beside.

    python -m bench.remote_reads --input DIR [--values 1,32] [--rounds 3] [--extra "--resize_shorter_side 64"]

Prints one line per run and the median wall seconds per setting."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BIN = os.path.dirname(sys.executable)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(args: list, port: int, folder: str, name: str) -> subprocess.Popen:
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    log = open(os.path.join(folder, f"{name}.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", *args], env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.2)
    raise SystemExit(f"{name} did not start")


def _convert(args: list, out: str) -> float:
    shutil.rmtree(out, ignore_errors=True)
    started = time.monotonic()
    subprocess.run([os.path.join(BIN, "tfrecords"), "convert", *args, "--output", out, "--progress", "off"],
                   check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--values", default="1,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--extra", default="--resize_shorter_side 64")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-remote-reads-")
    jobs, pool = _port(), _port()
    procs = [_serve(["apache_beam.runners.portability.local_job_service_main", "--port", str(jobs)], jobs, work, "jobs"),
             _serve(["apache_beam.runners.worker.worker_pool_main", f"--service_port={pool}"], pool, work, "pool")]
    portable = ["--runner", "PortableRunner", "--job_endpoint", f"localhost:{jobs}", "--environment_type", "EXTERNAL",
                "--environment_config", f"localhost:{pool}"]
    base = ["--input", a.input, *a.extra.split()]
    times: dict = {}
    try:
        for r in range(a.rounds):
            for v in a.values.split(","):
                t = _convert([*base, *portable, "--reads_in_flight", v], os.path.join(work, "out"))
                times.setdefault(f"portable reads_in_flight={v}", []).append(t)
                print(f"round {r}: portable, --reads_in_flight {v}: {t:.1f} s", flush=True)
            t = _convert(base, os.path.join(work, "out"))
            times.setdefault("DirectRunner (auto)", []).append(t)
            print(f"round {r}: DirectRunner: {t:.1f} s", flush=True)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    for k, v in times.items():
        print(f"{k}: median {statistics.median(v):.1f} s ({', '.join(f'{x:.1f}' for x in v)})")


if __name__ == "__main__":
    main()
