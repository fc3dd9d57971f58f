"""The newest and the oldest Beam of setup.py's range write the same bytes.

One fixed input is converted by the command of each virtualenv that `make test`
builds: .venv (constraints.txt, the newest Beam, the speed layer on) and
.venv-beam-oldest (constraints-beam-oldest.txt, the oldest Beam: a version the
speed layer was not tested with, so it is off). Both use this checkout's code;
only the installed Beam and what it requires differ."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import ROOT, image_bytes, write

pytestmark = pytest.mark.beam_range

VENVS = {"newest": os.path.join(ROOT, ".venv"), "oldest": os.path.join(ROOT, ".venv-beam-oldest")}
CONSTRAINTS = {"newest": "constraints.txt", "oldest": "constraints-beam-oldest.txt"}


def pinned_beam(which: str) -> str:
    with open(os.path.join(ROOT, CONSTRAINTS[which])) as f:
        return re.search(r"^apache-beam==([0-9.]+)$", f.read(), re.M).group(1)


def venv_python(which: str) -> str:
    py = os.path.join(VENVS[which], "bin", "python")
    assert os.path.exists(py), (f"{VENVS[which]} is missing: `make test` builds it "
                                f"(`make {os.path.relpath(VENVS[which], ROOT)}/.installed`)")
    return py


def run_in(which: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "TFRECORDS_SPEEDUPS", "STORAGE_EMULATOR_HOST")}
    proc = subprocess.run([venv_python(which), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{which}: {args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def output_bytes(out: str) -> dict:
    """Every file of the dataset but the manifest and the run report (they name
    the run: its time and the versions that made it)."""
    got = {}
    for dirpath, _, files in os.walk(out):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), out)
            if name not in ("manifest.json", "report.html", "report.json"):
                with open(os.path.join(dirpath, name), "rb") as f:
                    got[rel] = f.read()
    return got


def test_the_oldest_and_the_newest_beam_write_the_same_bytes(tmp_path):
    versions = {w: run_in(w, "-c", "import apache_beam; print(apache_beam.__version__)").stdout.strip()
                for w in VENVS}
    assert versions == {w: pinned_beam(w) for w in VENVS}, versions
    assert versions["oldest"] != versions["newest"]
    # The speed layer's own check: on at the newest Beam, off at the oldest.
    gate = "from tfrecord_pipelines import speed; print(speed.supported())"
    assert {w: run_in(w, "-c", gate).stdout.strip() for w in VENVS} == {"newest": "True", "oldest": "False"}

    root = str(tmp_path / "images")
    for c in range(3):
        for k in range(14):
            write(os.path.join(root, f"class_{c}", f"{k:02d}.jpg"), image_bytes(18 + k % 4, 14, seed=c * 40 + k))
    write(os.path.join(root, "class_1", "broken.jpg"), image_bytes()[:90])
    args = ["--input", root, "--split", "train=0.7,validation=0.3", "--num_shards", "train=3,validation=2",
            "--seed", "11", "--max_reject_fraction", "0.1", "--progress", "off"]
    runs = {"in_memory": ["--direct_running_mode", "in_memory"],
            "two workers": ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]}
    outputs = {}
    for which in VENVS:
        for name, mode in runs.items():
            out = str(tmp_path / which / name.replace(" ", "_"))
            proc = run_in(which, "-m", "tfrecord_pipelines.cli", "convert", *args, "--output", out, *mode)
            assert "listed 43 = written 42 + rejected 1" in proc.stdout, proc.stdout
            outputs[which, name] = output_bytes(out)
    first = outputs["newest", "in_memory"]
    assert len([f for f in first if f.endswith(".tfrecord")]) == 5, sorted(first)
    for key, got in outputs.items():
        assert sorted(got) == sorted(first), (key, sorted(set(got) ^ set(first)))
        differ = [f for f in first if got[f] != first[f]]
        assert not differ, f"{key} differs from the newest Beam's in_memory run in {differ}"
