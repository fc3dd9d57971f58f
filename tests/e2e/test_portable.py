"""Beam's portable runner, as Dataflow Runner v2, Flink and Spark run Python:
the pipeline as protos to a job service, SDK workers in processes of their
own that share nothing with the launcher. Here Beam's own Python job service
(local_job_service_main) and a worker pool (worker_pool_main) run as separate
processes, each in a mount namespace of its own (tests/isolated_services.py:
a private /tmp, HOME, TMPDIR and working folder; only the input and output
are the launcher's) and listening on 127.0.0.1 only, the pool's workers
importing the installed package only, and the output is held byte for byte to
the DirectRunner's: shards, rejects, label map, and the manifest but for its
run id and times. Beam's Python job service runs a job on one SDK worker."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import convert, image_bytes, make_tree, shard_files, write
from gcs_emulator import BUCKET, download_prefix, gcs, upload_tree  # noqa: F401 (fixture)
from isolated_services import PRIVATE_CWD, PRIVATE_HOME, VENV_BIN, free_port, serve, stop


@pytest.fixture
def portable(gcs, tmp_path):
    """(job endpoint, worker pool, their processes) on this machine, each
    service in a mount namespace of its own (private /tmp, HOME, TMPDIR and
    working folder) where only tmp_path/shared is the launcher's; the pool's
    workers start with the virtualenv's python (first on PATH) and see the GCS
    emulator; every port on 127.0.0.1."""
    folder = str(tmp_path / "services")  # their logs; not the checkout: workers import the installed package
    os.makedirs(folder)
    jobs, pool = free_port(), free_port()
    path = VENV_BIN + os.pathsep + os.environ.get("PATH", "")
    shared = [str(tmp_path / "shared")]
    procs = [serve(["apache_beam.runners.portability.local_job_service_main", "--port", str(jobs)], jobs, path,
                   folder, "job_service", shared),
             serve(["apache_beam.runners.worker.worker_pool_main", f"--service_port={pool}"], pool, path, folder,
                   "worker_pool", shared)]
    try:
        yield f"localhost:{jobs}", f"localhost:{pool}", procs
    finally:
        stop(procs)


def portable_args(job_endpoint: str, pool: str) -> list:
    return ["--runner", "PortableRunner", "--job_endpoint", job_endpoint, "--environment_type", "EXTERNAL",
            "--environment_config", pool]


ARGS = ["--num_shards", "2", "--split", "train=0.7,validation=0.3", "--max_reject_fraction", "1"]


def messy_tree(root: str) -> None:
    make_tree(root, per_class=5)
    write(os.path.join(root, "cat", "broken.jpg"), b"not an image")
    write(os.path.join(root, "dog", "cut.jpg"), image_bytes(seed=7)[:-40])


def _comparable_manifest(data: bytes, output: str) -> dict:
    m = json.loads(data)
    for key in ("run_id", "created"):
        assert m.pop(key)
    assert m["report"].pop("seconds") >= 0 and m["report"]["file"] == "report.html"
    assert all(v >= 0 for v in m["report"].pop("spent", {}).values())  # times, like "seconds"
    assert m["options"]["output"].pop("output") == output
    return m


def _outputs_match(direct: str, portable: str, files: dict) -> None:
    """`files`: {name: (direct bytes, portable bytes)} of both outputs."""
    names = {n for n in files if n.endswith(".tfrecord")}
    assert len(names) == 4, sorted(files)
    for name in sorted(names) + ["rejects.jsonl", "label_map.json"]:
        assert files[name][0] == files[name][1], name
    assert b'"reason": "not_an_image"' in files["rejects.jsonl"][0]
    m = [_comparable_manifest(files["manifest.json"][i], out) for i, out in enumerate((direct, portable))]
    assert m[0] == m[1]
    assert m[0]["counts"]["listed"] == 17 and m[0]["counts"]["rejected"] == 2


def _namespace_view(pid: int, path: str) -> bool:
    """Whether `path` exists as process `pid` sees it (its mount namespace)."""
    return os.path.exists(f"/proc/{pid}/root{path}")


def _isolated(pid: int, shared: str, hidden: str) -> None:
    """Process `pid` runs in a mount namespace of its own: a private /tmp (a
    tmpfs of its own) and HOME, TMPDIR and working folder, where `shared` is
    the launcher's folder and `hidden` (beside it) does not exist."""
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    mounts = {line.split()[4]: tuple(line.split(" - ")[1].split()[:2]) for line in open(f"/proc/{pid}/mountinfo")}
    assert mounts["/tmp"] == ("tmpfs", "private-tmp") and shared in mounts, mounts
    assert os.readlink(f"/proc/{pid}/cwd") == PRIVATE_CWD
    env = dict(v.split("=", 1) for v in open(f"/proc/{pid}/environ").read().split("\0") if "=" in v)
    assert env["HOME"] == PRIVATE_HOME and env["TMPDIR"] == "/tmp"
    assert _namespace_view(pid, shared) and os.path.isdir(hidden) and not _namespace_view(pid, hidden)


def _listening(pid: int) -> set:
    """(address, port) of the TCP sockets process `pid` listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in open(f"/proc/{pid}/net/{table}").readlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
                addr, port = f[1].split(":")
                found.add((socket.inet_ntop(socket.AF_INET if table == "tcp" else socket.AF_INET6,
                                            bytes.fromhex(addr)[::-1] if table == "tcp" else
                                            b"".join(bytes.fromhex(addr[i:i + 8])[::-1] for i in range(0, 32, 8))),
                           int(port, 16)))
    return found


def _service_pid(proc) -> int:
    """The Beam service's process: the python that `unshare` and `sh` exec'd into."""
    assert "isolated_services.py" in open(f"/proc/{proc.pid}/cmdline").read()
    return proc.pid


def test_portable_runner_gives_the_direct_runners_output(portable, tmp_path, capsys):
    """The job service and the worker pool share only the input and the output
    with the launcher: their /tmp, HOME, TMPDIR and working folder are their own
    (the DirectRunner's output beside the shared folder is not there for them)."""
    from tfrecord_pipelines.commands.convert import run
    shared = str(tmp_path / "shared")
    root = os.path.join(shared, "imgs")
    messy_tree(root)
    direct, port = str(tmp_path / "direct"), os.path.join(shared, "portable")
    assert convert("--input", root, "--output", direct, *ARGS) == 0
    for proc in portable[2]:
        _isolated(_service_pid(proc), shared, direct)
        listening = _listening(_service_pid(proc))
        # gRPC listens on IPv6 sockets: 127.0.0.1 shows as the IPv4-mapped ::ffff:127.0.0.1
        assert listening and {a.removeprefix("::ffff:") for a, _ in listening} == {"127.0.0.1"}, listening
    assert run(["--input", root, "--output", port, *ARGS, *portable_args(*portable[:2])]) == 0
    printed = capsys.readouterr()
    assert "job done (PortableRunner)" in printed.out, printed
    files = {n: tuple(open(os.path.join(o, n), "rb").read() for o in (direct, port))
             for n in [os.path.basename(p) for p in shard_files(direct)] + ["rejects.jsonl", "label_map.json",
                                                                          "manifest.json"]}
    _outputs_match(direct, port, files)
    # The job's last step ended the run: no lock, no staging folder; every file is the direct run's.
    assert sorted(os.listdir(port)) == sorted(os.listdir(direct))


def test_portable_runner_from_and_to_a_bucket(portable, tmp_path):
    from tfrecord_pipelines.commands.convert import run
    root = str(tmp_path / "imgs")
    messy_tree(root)
    upload_tree(root, "portable/in")
    outs = {"direct": f"gs://{BUCKET}/portable/direct", "portable": f"gs://{BUCKET}/portable/port"}
    assert convert("--input", f"gs://{BUCKET}/portable/in", "--output", outs["direct"], *ARGS) == 0
    assert run(["--input", f"gs://{BUCKET}/portable/in", "--output", outs["portable"], *ARGS,
                *portable_args(*portable[:2])]) == 0
    local = {k: str(tmp_path / k) for k in outs}
    names = {k: download_prefix(f"portable/{v.rsplit('/', 1)[1]}", local[k]) for k, v in outs.items()}
    assert names["direct"] == names["portable"] and ".tfrecords.lock" not in names["portable"]
    files = {n: tuple(open(os.path.join(local[k], n), "rb").read() for k in ("direct", "portable"))
             for n in names["direct"] if n != "report.html"}
    _outputs_match(outs["direct"], outs["portable"], files)


def test_a_worker_pool_whose_python_lacks_beam_is_diagnosed(gcs, tmp_path, capsys):
    """The pool starts workers with the `python` first on its PATH. One without
    Beam (here a fresh virtualenv's) dies at once; the job used to wait for its
    300 s timeout in silence. The launcher asks the pool for a worker first."""
    from tfrecord_pipelines.commands.convert import run
    bare = str(tmp_path / "bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", bare], check=True, timeout=120)
    assert subprocess.run([os.path.join(bare, "bin", "python"), "-c", "import apache_beam"],
                          capture_output=True).returncode != 0
    folder = str(tmp_path / "services")
    os.makedirs(folder)
    pool = free_port()
    proc = serve(["apache_beam.runners.worker.worker_pool_main", f"--service_port={pool}"], pool,
                  os.path.join(bare, "bin") + os.pathsep + os.environ.get("PATH", ""), folder, "worker_pool")
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=1)
    try:
        started = time.monotonic()
        code = run(["--input", root, "--output", str(tmp_path / "out"),
                    *portable_args(f"localhost:{free_port()}", f"localhost:{pool}")])
        seconds = time.monotonic() - started
    finally:
        stop([proc])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"the worker pool at localhost:{pool} started no SDK worker that connected within 30 s" in err, err
    assert f"PATH={VENV_BIN}:$PATH" in err and "Traceback" not in err
    assert seconds < 120
    assert not os.path.exists(str(tmp_path / "out"))  # refused before the output was locked

    # Nothing listening where the pool should be: said at once.
    assert run(["--input", root, "--output", str(tmp_path / "out"),
                *portable_args(f"localhost:{free_port()}", f"localhost:{free_port()}")]) == 2
    assert "no worker pool answers there" in capsys.readouterr().err
