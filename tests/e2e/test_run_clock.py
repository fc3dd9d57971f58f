"""One clock for run ids and version names (UTC): a --versioned run made
under TZ=Asia/Tokyo and the next one under UTC publish in turn, LATEST
moving to the newer; neither looks hours ahead of the other."""
from __future__ import annotations

import datetime
import os
import subprocess
import sys

from conftest import ROOT, make_tree


def _in_tz(tz: str, *args, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, TZ=tz, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout)


def test_run_ids_and_version_names_share_the_utc_clock_whatever_tz():
    code = ("from tfrecord_pipelines.transforms.storage import layout; from tfrecord_pipelines.outputs import versions; "
            "print(layout.new_run_id()[:15], versions.new_version_name()[1:])")
    for tz in ("Asia/Tokyo", "America/Los_Angeles", "UTC"):
        before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        got = _in_tz(tz, "-c", code, timeout=120)
        after = datetime.datetime.now(datetime.timezone.utc)
        assert got.returncode == 0, got.stderr[-2000:]
        run, version = got.stdout.split()
        for stamp in (run, version):
            t = datetime.datetime.strptime(stamp, "%Y%m%d-%H%M%S").replace(tzinfo=datetime.timezone.utc)
            assert before <= t <= after, (tz, stamp, before, after)


def test_a_run_under_another_tz_then_a_utc_run_publish_in_turn(tmp_path):
    src = str(tmp_path / "images")
    make_tree(src, classes=("cat", "dog"), per_class=2)
    root = str(tmp_path / "root")
    convert = ["-m", "tfrecord_pipelines.convert", "--input", src, "--output", root, "--versioned",
               "--progress", "off", "--direct_running_mode", "in_memory", "--num_shards", "1"]
    first = _in_tz("Asia/Tokyo", *convert, "--version", "v1")
    assert first.returncode == 0, first.stderr[-2000:]
    make_tree(os.path.join(src, "bird"), classes=("x",), per_class=1)
    second = _in_tz("UTC", *convert, "--version", "v2", "--extend_label_map")
    assert second.returncode == 0, second.stderr[-2000:]
    assert "published by another run" not in second.stderr
    with open(os.path.join(root, "LATEST")) as f:
        assert f.read().strip() == "v2"
