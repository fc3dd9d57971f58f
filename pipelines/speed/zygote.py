"""Fast-starting worker processes for local multi-process runs (Linux).

Beam's local runner starts each worker as a new Python process once the
pipeline is built; each imports Beam (~1.1 s, the two in parallel on two
cores), and at the end the runner waits for each to finish Python's shutdown
(~0.4 s). Instead, a zygote process is started as the command begins: it
imports the worker code while the main process imports Beam and builds the
pipeline. Each worker is then a fork of the zygote, ready at once, that leaves
with os._exit when its work is done.

The worker command Beam runs, `python -m tfrecord_pipelines.speed.zygote`, is a small
client: it hands its environment (the runner's addresses, the pipeline options)
to the zygote and waits for its worker's exit status. With no zygote it runs
the worker itself, as Beam's own command would. Forking is safe here because
the zygote has imported modules only: no thread, channel or server exists
before the fork (tests/e2e/test_zygote.py checks that).

Part of the speed layer (pipelines/speed/__init__.py). It relies on
behaviour of the FnApiRunner that Beam calls experimental (a given SDK
environment is honoured in `in_memory` mode while direct_num_workers still
sets how many workers start), hence the layer's version check.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Optional

from tfrecord_pipelines.speed.env import ZYGOTE_ENV as ENV

_CONNECT_SECONDS = 60.0
_zygote: Optional[subprocess.Popen] = None
_zygote_dir = ""


def _send(sock: socket.socket, obj) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv(sock: socket.socket):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">I", head)
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


def worker_command() -> str:
    return f"{sys.executable} -m tfrecord_pipelines.speed.zygote"


def environment():
    """The SDK environment whose workers are the zygote's forks."""
    from apache_beam.transforms import environments
    return environments.SubprocessSDKEnvironment.from_command_string(worker_command())


def start() -> None:
    """Starts the zygote (once) and points worker commands at it."""
    global _zygote, _zygote_dir
    if _zygote is not None:
        return
    from tfrecord_pipelines.transforms.storage import scratch  # no Beam: the zygote starts before it is imported
    _zygote_dir = scratch.make("workers")
    path = os.path.join(_zygote_dir, "zygote.sock")
    _zygote = subprocess.Popen([sys.executable, "-m", "tfrecord_pipelines.speed.zygote", "--zygote", path,
                                str(os.getpid())], stdin=subprocess.DEVNULL)
    os.environ[ENV] = path


def stop() -> None:
    global _zygote, _zygote_dir
    os.environ.pop(ENV, None)
    if _zygote is not None:
        _zygote.kill()  # it holds no state; a polite exit would spend ~0.4 s in Python's shutdown
        _zygote.wait()
        _zygote = None
    if _zygote_dir:
        import shutil
        shutil.rmtree(_zygote_dir, ignore_errors=True)
        _zygote_dir = ""


def run_worker() -> None:
    """Runs Beam's SDK worker in this process, then leaves without Python's
    shutdown (the runner has everything it needs once the worker returns)."""
    code = 0
    try:
        from tfrecord_pipelines.speed import lean_import, shortcuts
        lean_import.worker_import()
        shortcuts.install()  # a worker process is ours for its life: nothing to undo
        from apache_beam.runners.worker import sdk_worker_main
        sdk_worker_main.main(sys.argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    except BaseException:  # pylint: disable=broad-except
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def client_main() -> None:
    path = os.environ.get(ENV)
    if path:
        deadline = time.monotonic() + _CONNECT_SECONDS
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                break
            except OSError:
                sock.close()
                if time.monotonic() > deadline:
                    sock = None
                    break
                time.sleep(0.02)  # the zygote is still importing
        if sock is not None:
            _send(sock, {"env": dict(os.environ), "cwd": os.getcwd()})
            reply = _recv(sock)
            sys.exit(1 if reply is None else reply["exit"])
    run_worker()


def _child(conn: socket.socket, request: dict) -> None:
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(ENV, None)
    try:
        os.chdir(request["cwd"])
    except OSError:
        pass
    conn.close()
    sys.argv = ["sdk_worker_main"]
    run_worker()


def preload() -> None:
    """Everything a worker needs, imported once, before any fork."""
    import importlib
    import pkgutil

    from tfrecord_pipelines.speed import lean_import, shortcuts
    lean_import.worker_import()
    import apache_beam.runners.worker.sdk_worker_main  # noqa: F401
    shortcuts.install()
    import tfrecord_pipelines.transforms.stages
    for m in pkgutil.iter_modules(tfrecord_pipelines.transforms.stages.__path__):  # every stage, and the library under them
        importlib.import_module(f"tfrecord_pipelines.transforms.stages.{m.name}")
    import gc
    # What was imported lives as long as the workers: Python's cycle collector need not walk it again at each of
    # their full collections (~400,000 objects; ~5% of an incremental run's CPU).
    gc.freeze()


def zygote_main(path: str, parent: int) -> None:
    preload()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    # A worker's exit wakes the loop at once (its client, and so the runner, waits for the status), not at the
    # next 0.2 s timeout.
    woken, wake = os.pipe()
    os.set_blocking(woken, False)
    os.set_blocking(wake, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake)
    children: dict = {}  # pid -> client connection
    try:
        while os.getppid() == parent:
            ready, _, _ = select.select([server, woken, *children.values()], [], [], 0.2)
            for sock in ready:
                if sock == woken:
                    try:
                        os.read(woken, 4096)
                    except BlockingIOError:
                        pass
                elif sock is server:
                    conn, _ = server.accept()
                    request = _recv(conn)
                    if request is None:
                        conn.close()
                        continue
                    pid = os.fork()
                    if pid == 0:
                        signal.set_wakeup_fd(-1)  # the worker is no zygote: no wake-ups, default SIGCHLD
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        server.close()
                        os.close(woken)
                        os.close(wake)
                        for other in children.values():
                            other.close()
                        _child(conn, request)
                    children[pid] = conn
                else:  # a client went away (killed): its worker goes too
                    for pid, conn in list(children.items()):
                        if conn is sock:
                            _kill(pid)
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                conn = children.pop(pid, None)
                if conn is not None:
                    try:
                        _send(conn, {"exit": os.waitstatus_to_exitcode(status)})
                    except OSError:
                        pass
                    conn.close()
    finally:
        for pid in children:
            _kill(pid)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--zygote":
        zygote_main(sys.argv[2], int(sys.argv[3]))
    else:
        client_main()
