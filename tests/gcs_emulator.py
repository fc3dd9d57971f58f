"""A GCS-protocol server on 127.0.0.1 (gcp-storage-emulator), started by the
tests themselves, and helpers to move files in and out of it."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

BUCKET = "tfrecords-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def gcs():
    """Starts the emulator and points every client (ours, Beam's, the workers')
    at it with STORAGE_EMULATOR_HOST. Yields the test bucket's name."""
    port = _free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "gcp-storage-emulator")
    proc = subprocess.Popen([exe, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory",
                             "--default-bucket", BUCKET, "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"the GCS emulator did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.1)
    old = {k: os.environ.get(k) for k in ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT")}
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    os.environ["GOOGLE_CLOUD_PROJECT"] = "test-project"
    from transforms import fsutil
    fsutil._anonymous_gcs_for_emulator()  # this process imported fsutil before the variable was set
    fsutil._GCS_CLIENT = None
    try:
        yield BUCKET
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        fsutil._GCS_CLIENT = None


def bucket():
    from transforms import fsutil
    return fsutil.gcs_client().bucket(BUCKET)


def upload_tree(local_root: str, prefix: str) -> None:
    b = bucket()
    for dirpath, _, files in os.walk(local_root):
        for name in files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, local_root).replace(os.sep, "/")
            b.blob(f"{prefix}/{rel}").upload_from_filename(path)


def download_prefix(prefix: str, local_root: str) -> list[str]:
    names = []
    for blob in bucket().list_blobs(prefix=prefix + "/"):
        rel = blob.name[len(prefix) + 1:]
        path = os.path.join(local_root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        blob.download_to_filename(path)
        names.append(rel)
    return sorted(names)


def list_names(prefix: str) -> list[str]:
    return sorted(b.name[len(prefix) + 1:] for b in bucket().list_blobs(prefix=prefix + "/"))
