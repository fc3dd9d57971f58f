"""Beam's services (a job service, a worker pool) as a remote cluster runs
them: each in its own process group and, with `shared`, in a Linux mount
namespace of its own (`unshare -m`; CI runs as root) with a private /tmp, HOME,
TMPDIR and working folder, where only the folders in `shared` (the input and
the output) are the launcher's. Every gRPC port they open is bound to
127.0.0.1: Beam's worker_pool_main binds [::]:PORT and the job service's
runner binds [::]:0 for its control, data, state and logging servers (every
interface).

Run as a script, this module is that launcher: `python -I isolated_services.py
MODULE ARGS...` runs the Beam module MODULE as `python -m` would, its gRPC
servers on the loopback only."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

VENV_BIN = os.path.dirname(sys.executable)
PRIVATE_HOME, PRIVATE_CWD = "/mnt/home", "/mnt/work"  # in the namespace's own tmpfs

# In the namespace: a tmpfs on /mnt holds the private HOME and working folder and a handle on
# each shared folder; a fresh tmpfs on /tmp hides the launcher's; each shared folder (under /tmp
# for pytest's tmp_path) is mounted back at its own path. $ISOLATED_SHARED: those folders, ':'-separated.
_ENTER = r"""
set -eu
mount -t tmpfs private /mnt
mkdir /mnt/home /mnt/work /mnt/shared
IFS=:
i=0
for d in $ISOLATED_SHARED; do mkdir "/mnt/shared/$i"; mount --rbind "$d" "/mnt/shared/$i"; i=$((i + 1)); done
mount -t tmpfs private-tmp /tmp
i=0
for d in $ISOLATED_SHARED; do mkdir -p "$d"; mount --rbind "/mnt/shared/$i" "$d"; i=$((i + 1)); done
unset IFS ISOLATED_SHARED
cd /mnt/work
exec env HOME=/mnt/home TMPDIR=/tmp "$@"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(args: list, isolated: bool) -> list:
    launch = [sys.executable, "-I", os.path.abspath(__file__), *args]
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", _ENTER, "enter", *launch] if isolated else launch


def serve(args: list, port: int, path: str, folder: str, name: str, shared: list = None) -> subprocess.Popen:
    """Beam's `python -m ARGS` in its own process group (its gRPC servers on
    127.0.0.1), its `python` the first on `path`, its log in `folder`; with
    `shared` (folders, made if missing), in a mount namespace of its own
    where only those folders are the launcher's."""
    env = dict(os.environ, PATH=path)
    if shared is not None:
        # The virtualenv and this launcher too, where they lie under /tmp (a checkout there).
        shared = [os.path.abspath(d) for d in shared] + [d for d in (sys.prefix, os.path.dirname(os.path.abspath(
            __file__))) if d.startswith("/tmp/")]
        for d in shared:
            os.makedirs(d, exist_ok=True)
        env["ISOLATED_SHARED"] = ":".join(shared)
    log = open(os.path.join(folder, f"{name}.log"), "w")
    proc = subprocess.Popen(_command(args, shared is not None), env=env, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 120
    while True:
        assert proc.poll() is None, open(log.name).read()[-3000:]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        assert time.time() < deadline, f"{name} did not start"
        time.sleep(0.2)


def stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)  # the group: the service and the workers it started
        p.wait()


def _loopback_only() -> None:
    """This process's gRPC servers bind 127.0.0.1 whatever address Beam asks for."""
    from grpc import _server

    plain = _server._Server.add_insecure_port

    def add_insecure_port(self, address):
        host, _, port = address.rpartition(":")
        if host in ("[::]", "0.0.0.0", "", "localhost"):
            address = f"127.0.0.1:{port}"
        return plain(self, address)

    _server._Server.add_insecure_port = add_insecure_port


if __name__ == "__main__":
    import runpy
    _loopback_only()
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
