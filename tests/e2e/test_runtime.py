"""Where a local run runs (pipelines/run/runtime.py): a run asked for two workers
uses two worker processes, whether they are forked from our zygote or started
by Beam itself (the fallback on a Beam version the zygote was not tested with,
or with TFRECORDS_SPEEDUPS=0), and both give the same shards."""
from __future__ import annotations

import logging
import os
import re

import pytest

from conftest import image_bytes, shard_files, write


@pytest.fixture
def many_images(tmp_path):
    root = str(tmp_path / "images")
    for c in range(4):
        for k in range(12):
            write(os.path.join(root, f"c{c}", f"{k}.jpg"), image_bytes(seed=c * 12 + k))
    return root


def _run_two_workers(root: str, out: str, caplog) -> set:
    from tfrecord_pipelines.commands.convert import run
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tfrecords.run"):
        # --progress on: each worker process reports its work to a file named by its pid
        assert run(["--input", root, "--output", out, "--num_shards", "8", "--direct_num_workers", "2",
                    "--progress", "on"]) == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "tfrecords.run"]
    found = [int(m.group(1)) for m in (re.search(r"(\d+) worker processes", s) for s in lines) if m]
    assert found, lines
    return found[0]


@pytest.mark.parametrize("how", ["forked", "beam_own_workers", "untested_beam_version"])
@pytest.mark.beam_range
def test_two_workers_are_two_processes(many_images, tmp_path, monkeypatch, caplog, how):
    from tfrecord_pipelines import speed
    if how == "beam_own_workers":
        monkeypatch.setenv("TFRECORDS_SPEEDUPS", "0")
    if how == "untested_beam_version":
        monkeypatch.setattr(speed, "SUPPORTED_BEAM", ("0.0.0",))
        assert not speed.supported()
    out = str(tmp_path / how)
    assert _run_two_workers(many_images, out, caplog) == 2
    ref = str(tmp_path / "in_memory")
    from conftest import convert
    assert convert("--input", many_images, "--output", ref, "--num_shards", "8") == 0
    assert [open(f, "rb").read() for f in shard_files(out)] == [open(f, "rb").read() for f in shard_files(ref)]


def test_the_speed_layer_is_only_used_with_a_supported_beam_version(monkeypatch):
    from tfrecord_pipelines import speed
    from tfrecord_pipelines.run.plan import Plan
    monkeypatch.delenv("TFRECORDS_SPEEDUPS", raising=False)
    argv = ["--input", "/nowhere", "--output", "/out", "--direct_num_workers", "2"]
    if speed.supported():  # the installed Beam is a supported one: the command line gets every part
        assert Plan.from_argv(argv, own_process=True).speed == speed.Speedups(True, True, speed.can_fork(), True, True)
    monkeypatch.setattr(speed, "SUPPORTED_BEAM", ())
    assert not speed.supported()
    assert Plan.from_argv(argv, own_process=True).speed == speed.Speedups(quiet_workers=True)  # nothing that reaches into Beam
