"""Rows from Python on a remote runner: their table is written where the
workers read it (temp_location, here a shared local path that does not exist
yet), kept while a detached job needs it, and removed by the job when it
ends; the shards are the DirectRunner's, byte for byte."""
from __future__ import annotations

import os
import time

import pytest

from conftest import make_tree, manifest, read_examples, shard_files
from test_portable import portable_args
from test_remote_lock import services  # noqa: F401 (fixture)


def _rows(root: str) -> list:
    return [(os.path.join(root, rel), label) for rel, label in sorted(make_tree(root, per_class=4).items())]


def test_rows_on_a_detached_portable_job_are_read_and_removed_by_the_job(services, tmp_path):  # noqa: F811
    import tfrecord_pipelines as tfp
    jobs, pool, _ = services
    root = str(tmp_path / "imgs")
    rows = _rows(root)
    direct = tfp.convert(label_table=rows, output=str(tmp_path / "direct"), num_shards=2, progress=False)
    assert direct.outcome == "published"
    temp = str(tmp_path / "shared" / "temp")  # shared with the workers; made by the launch
    out = str(tmp_path / "out")
    flags = portable_args(jobs, pool)[1::2]
    beam = dict(zip(("runner", "job_endpoint", "environment_type", "environment_config"), flags))
    got = tfp.convert(label_table=rows, output=out, num_shards=2, progress=False, temp_location=temp, detach=True,
                      **beam)
    assert got.outcome == "submitted"
    deadline = time.time() + 120
    while os.path.exists(os.path.join(out, ".tfrecords.lock")) or not os.path.exists(os.path.join(out, "manifest.json")):
        assert time.time() < deadline, sorted(os.listdir(out)) + sorted(os.listdir(temp))
        time.sleep(0.2)
    # The job has read the table and removed it: nothing of the run is left in temp_location.
    assert os.listdir(temp) == []
    assert sorted(os.listdir(out)) == sorted(os.listdir(str(tmp_path / "direct")))
    for a, b in zip(shard_files(str(tmp_path / "direct")), shard_files(out), strict=True):
        assert open(a, "rb").read() == open(b, "rb").read(), a
    # `check` too: its job writes check.json and removes the table.
    checked = str(tmp_path / "checked")
    assert tfp.check(label_table=rows, output=checked, progress=False, temp_location=temp, detach=True,
                     **beam).figures is None  # submitted: the job writes the figures
    deadline = time.time() + 120
    while os.path.exists(os.path.join(checked, ".tfrecords.lock")) or \
            not os.path.exists(os.path.join(checked, "check.json")):
        assert time.time() < deadline, sorted(os.listdir(checked)) + sorted(os.listdir(temp))
        time.sleep(0.2)
    assert os.listdir(temp) == []
    labels = sorted(e["image/class/text"][0] for split in manifest(out)["splits"] for e in read_examples(out, split))
    assert labels == sorted(label.encode() for _, label in rows)


def test_rows_need_a_temp_location_the_workers_read(tmp_path):
    """Refused before anything is submitted: no job service is needed."""
    import tfrecord_pipelines as tfp
    from tfrecord_pipelines.transforms.core.errors import UsageError
    rows = _rows(str(tmp_path / "imgs"))
    flags = portable_args("localhost:1", "localhost:1")[1::2]
    beam = dict(zip(("runner", "job_endpoint", "environment_type", "environment_config"), flags))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(UsageError, match=r"temp_location .*a-file/temp.*cannot make the folder"):
        tfp.convert(label_table=rows, output=str(tmp_path / "out"), temp_location=str(blocker / "temp"), detach=True,
                    **beam)
    with pytest.raises(UsageError, match="need temp_location="):
        tfp.convert(label_table=rows, output=str(tmp_path / "out"), **beam)
    assert not os.path.exists(str(tmp_path / "out"))
