"""Which scratch folders a later run may remove (transforms/storage/scratch.py):
only ours, only those whose owner process is gone (a reused pid is not the
owner), and only the staging folder of an output besides them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tfrecord_pipelines.transforms.storage import scratch


def _folder(tmp_path, name: str, owner=None, staging: str = "") -> str:
    path = tmp_path / name
    path.mkdir()
    (path / "data.spill").write_bytes(b"x" * 1000)
    if owner is not None:
        (path / scratch.OWNER).write_text(json.dumps(dict(owner, staging=staging)))
    return str(path)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_only_folders_of_dead_owners_are_reclaimed(tmp_path):
    me = scratch._owner()
    staging = tmp_path / "out" / ".tfrecords-staging-20260101-000000-abc"
    staging.mkdir(parents=True)
    (staging / "x.tfrecord.tmp").write_bytes(b"y" * 500)
    keep = tmp_path / "keep"
    keep.mkdir()
    live = _folder(tmp_path, "tfrecords-run-live", me)
    dead = _folder(tmp_path, "tfrecords-run-dead", dict(me, pid=_dead_pid()), staging=str(staging))
    reused = _folder(tmp_path, "tfrecords-run-reused", dict(me, start=(me["start"] or 0) + 1))  # pid reused
    young_orphan = _folder(tmp_path, "tfrecords-shard-young")
    old_orphan = _folder(tmp_path, "tfrecords-rejects-old")
    os.utime(old_orphan, (time.time() - scratch.ORPHAN_SECONDS - 60,) * 2)
    other_host = _folder(tmp_path, "tfrecords-run-elsewhere", dict(me, host="another-host", pid=_dead_pid()))
    not_ours = _folder(tmp_path, "beam-temp-x", dict(me, pid=_dead_pid()))
    hostile = _folder(tmp_path, "tfrecords-run-hostile", dict(me, pid=_dead_pid()), staging=str(keep))

    removed = {r.path: r.bytes for r in scratch.reclaim(str(tmp_path))}
    assert set(removed) == {dead, str(staging), reused, old_orphan, hostile}, removed
    assert removed[str(staging)] == 500 and removed[dead] >= 1000
    for path in (live, young_orphan, other_host, not_ours, str(keep)):
        assert os.path.isdir(path), path
    assert scratch.reclaim(str(tmp_path)) == []


def test_a_folder_is_removed_when_its_block_ends(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    with scratch.folder("run") as path:
        assert os.path.basename(path).startswith("tfrecords-run-") and os.path.dirname(path) == str(tmp_path)
        owner = json.load(open(os.path.join(path, scratch.OWNER)))
        assert owner["pid"] == os.getpid() and scratch.alive(owner)
    assert not os.path.exists(path)
