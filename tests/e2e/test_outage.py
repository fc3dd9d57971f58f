"""`verify` and `inspect` on a bucket that stops answering: one line naming the
object and the --io_timeout bound, after that bound, never a traceback (they
used to print a long one, minutes later)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import convert, make_tree, own_lines
from gcs_emulator import BUCKET, gcs, gcs_proxied, upload_tree  # noqa: F401 (fixtures)

TFRECORDS = os.path.join(os.path.dirname(sys.executable), "tfrecords")


def _command(args: list, proxy_url: str) -> tuple:
    env = dict(os.environ, STORAGE_EMULATOR_HOST=proxy_url)
    started = time.monotonic()
    proc = subprocess.run([TFRECORDS, *args, "--io_timeout", "2"], env=env, capture_output=True, text=True,
                          timeout=300)
    return proc, time.monotonic() - started


def test_verify_and_inspect_of_a_bucket_that_stops_answering(gcs_proxied, tmp_path):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=2)
    out = f"gs://{BUCKET}/outage/out"
    assert convert("--input", root, "--output", out, "--num_shards", "2") == 0
    proc, _ = _command(["verify", out], gcs_proxied.url)
    assert proc.returncode == 0, proc.stderr  # through the proxy, answering

    # Nothing answers: not even the manifest can be read.
    # A shard stops answering after the manifest was read: verify stops in the middle.
    for blackholed, where in ((["/o"], f"{out}/manifest.json"), (["train-00001-of-00002"], f"{out}/train-00001")):
        gcs_proxied.set(blackhole=True, fault_paths=blackholed)
        try:
            for command in (["verify", out], ["inspect", out, "-n", "100"]):
                proc, seconds = _command(command, gcs_proxied.url)
                assert proc.returncode == 1, (command, proc.stdout, proc.stderr)
                lines = own_lines(proc.stderr)
                assert len(lines) == 1 and "Traceback" not in proc.stderr, (command, proc.stderr)
                assert lines[0].startswith("error: reading gs://") and where in lines[0], (command, lines)
                assert "no usable answer from Cloud Storage within --io_timeout 2 s" in lines[0], lines
                assert seconds < 90, (command, seconds)
        finally:
            gcs_proxied.set(blackhole=False, fault_paths=[])
