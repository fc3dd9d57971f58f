"""The line of a run stopped by a signal (pipelines/run/lifecycle.py) counts
the shards a rerun keeps: a done-record a signal caught before its pin is not
kept by the rerun, so the line does not count it."""
import os

import pytest

from tfrecord_pipelines.run import lifecycle
from tfrecord_pipelines.transforms.storage import copy_trust, layout


@pytest.fixture
def area(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    where = tmp_path / "out" / (layout.RESUME_PREFIX + "0123456789abcdef")
    where.mkdir(parents=True)
    return str(tmp_path / "out"), str(where)


def done(where, name, pin):
    path = os.path.join(where, name + ".done")
    with open(path, "wb") as f:
        f.write(b"{}")
    if pin:
        copy_trust.pin(path)


def test_only_pinned_done_records_are_counted_as_kept(area):
    parent, where = area
    done(where, "train-00000-of-00008.tfrecord", pin=True)
    done(where, "train-00001-of-00008.tfrecord", pin=False)  # the signal landed between write and pin
    assert lifecycle._completed_shards(parent) == 1


def test_no_pinned_done_record_is_no_shard_kept(area):
    parent, where = area
    done(where, "train-00000-of-00008.tfrecord", pin=False)
    assert lifecycle._completed_shards(parent) == 0
