"""A GCS-protocol server on 127.0.0.1 (gcp-storage-emulator), started by the
tests themselves, and helpers to move files in and out of it."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from gcs_server import TOKEN_PATH

BUCKET = "tfrecords-test"


def start_emulator(bucket: str = BUCKET):
    """The threaded emulator (tests/gcs_server.py) in its own process: (process, url)."""
    # Its log (a line per object not found, among others) goes to a file: a pipe nobody reads would
    # fill up and stop the emulator in the middle of a request.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gcs_server.py"),
                             "--bucket", bucket], stdout=subprocess.PIPE, stderr=log)
    line = proc.stdout.readline().decode()
    if not line.startswith("port "):
        proc.kill()
        log.seek(0)
        raise RuntimeError(f"the GCS emulator did not start: {line!r} {log.read().decode()[-2000:]}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def point_clients_at(url: str, token_url: str = "") -> None:
    """Every client (ours, Beam's, the workers' started after this) talks to
    `url`. Beam's clients look for Google credentials first, and retry for
    ~30 s when there are none: they find a service account's key file (a key
    made here) whose token endpoint is the emulator's (tests/gcs_server.py),
    so they get a token at once, as with a user's own credentials."""
    os.environ["STORAGE_EMULATOR_HOST"] = url
    os.environ["GOOGLE_CLOUD_PROJECT"] = "test-project"
    if token_url:
        os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = _credentials_file(token_url)
    from tfrecord_pipelines.transforms.storage import fsutil
    fsutil.reset_clients()


def _credentials_file(token_url: str) -> str:
    import json

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    folder = tempfile.mkdtemp(prefix="tfrecords-test-credentials-")
    path = os.path.join(folder, "credentials.json")
    with open(path, "w") as f:
        json.dump({"type": "service_account", "project_id": "test-project", "private_key_id": "tests",
                   "private_key": pem, "client_email": "tests@test-project.iam.gserviceaccount.com",
                   "client_id": "1", "token_uri": token_url}, f)
    return path


@pytest.fixture(scope="session")
def gcs():
    """Starts the emulator and points every client (ours, Beam's, the workers')
    at it with STORAGE_EMULATOR_HOST. Yields the test bucket's name."""
    proc, url = start_emulator()
    old = {k: os.environ.get(k) for k in ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT",
                                          "GOOGLE_APPLICATION_CREDENTIALS")}
    point_clients_at(url, url + TOKEN_PATH)
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
        from tfrecord_pipelines.transforms.storage import fsutil
        fsutil.reset_clients()


@pytest.fixture
def gcs_proxied(gcs):
    """The emulator behind tests/gcs_proxy.py (GCS's precondition and
    generation rules enforced; latency and faults settable with
    `proxy.set(...)`). Yields the proxy; the bucket is BUCKET."""
    from gcs_proxy import GcsProxy
    direct = os.environ["STORAGE_EMULATOR_HOST"]
    with GcsProxy(direct) as proxy:
        point_clients_at(proxy.url)
        try:
            yield proxy
        finally:
            point_clients_at(direct)


def bucket():
    from tfrecord_pipelines.transforms.storage import fsutil
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
