"""On GCS the lock and the manifest are created with ifGenerationMatch=0. The
emulator ignores preconditions, so these tests go through tests/gcs_proxy.py,
which answers 412 as GCS does: a create-only write that loses a race after its
existence check, and two conversions racing into one bucket."""
import os
import subprocess
import sys
import threading

import pytest

from conftest import ROOT, check_against_source, make_tree
from gcs_emulator import BUCKET, bucket, download_prefix, gcs, gcs_proxied, list_names  # noqa: F401 (fixtures)


def test_create_only_loses_a_race_after_its_existence_check(gcs_proxied, monkeypatch):
    """Two writers both find no object, then both upload: the second upload must
    be refused by its ifGenerationMatch=0 precondition (answered 412 by the proxy,
    as by GCS), not by any check made before it. The interleaving is forced:
    both existence checks (real requests) complete, then A uploads, then B."""
    from google.cloud.storage import Blob

    from tfrecord_pipelines.transforms.storage import fsutil
    name = "race/manifest.json"
    path = f"gs://{BUCKET}/{name}"
    both_checked = threading.Barrier(2, timeout=120)
    a_uploaded = threading.Event()
    real_exists, real_upload = Blob.exists, Blob.upload_from_string

    def exists(self, *a, **k):  # the real request, then wait for the other writer's
        found = real_exists(self, *a, **k)
        if self.name == name and threading.current_thread().name in ("A", "B"):
            both_checked.wait()
        return found

    def upload(self, *a, **k):  # the real upload, B's after A's
        if self.name == name and threading.current_thread().name == "B":
            assert a_uploaded.wait(120)
        try:
            return real_upload(self, *a, **k)
        finally:
            if self.name == name and threading.current_thread().name == "A":
                a_uploaded.set()
    monkeypatch.setattr(Blob, "exists", exists)
    monkeypatch.setattr(Blob, "upload_from_string", upload)
    outcome = {}

    def writer(data):
        try:
            fsutil.create_only(path, data)
            outcome[data] = "created"
        except fsutil.AlreadyExists:
            outcome[data] = "refused"
        except BaseException as e:  # reported below
            outcome[data] = repr(e)
    gcs_proxied.reset_stats()
    threads = [threading.Thread(target=writer, args=(data,), name=data.decode()) for data in (b"A", b"B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert outcome == {b"A": "created", b"B": "refused"}, outcome
    assert bucket().blob(name).download_as_bytes() == b"A"
    assert gcs_proxied.stats()["faults"].get("412") == 1  # refused by the precondition itself


def _convert_process(args):
    return subprocess.Popen([sys.executable, "-m", "tfrecord_pipelines.convert", *args, "--progress", "off",
                             "--direct_running_mode", "in_memory"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_conversions_racing_into_one_bucket(gcs_proxied, tmp_path):
    local = str(tmp_path / "imgs")
    labels = make_tree(local, per_class=4)
    out = f"gs://{BUCKET}/racing"
    args = ["--input", local, "--output", out, "--num_shards", "2"]
    procs = [_convert_process(args) for _ in range(2)]
    results = [(p.wait(timeout=600), p.communicate()[1]) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = [err for code, err in results if code == 2][0]
    assert "another conversion is writing" in loser or "already holds a complete dataset" in loser, loser
    names = list_names("racing")
    assert ".tfrecords.lock" not in names and not [n for n in names if "staging" in n], names
    download_prefix("racing", str(tmp_path / "dl"))
    check_against_source(str(tmp_path / "dl"), labels, local)
    from tfrecord_pipelines.outputs.verification import verify_output
    report = verify_output(out)
    assert report.ok, report.errors
    assert report.records == len(labels)


@pytest.mark.parametrize("target", ["manifest.json", ".tfrecords.lock"])
def test_create_only_objects_are_never_replaced(gcs_proxied, target):
    from tfrecord_pipelines.transforms.storage import fsutil
    path = f"gs://{BUCKET}/existing/{target}"
    bucket().blob(f"existing/{target}").upload_from_string(b"first")
    with pytest.raises(fsutil.AlreadyExists):
        fsutil.create_only(path, b"second")
    assert bucket().blob(f"existing/{target}").download_as_bytes() == b"first"
