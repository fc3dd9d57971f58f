"""What Dataflow's workers install: the sdist that --setup_file stages, built
the way Beam's stager builds it, installed into a new, clean virtualenv (with
the project's constraints; packages from PyPI or pip's cache), then used from a
folder outside the checkout, so every import and data file comes from the
installed package. A module or data file that setup.py leaves out fails here,
not on a worker."""
from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import tarfile
import time

import pytest

from conftest import ROOT, check_against_source

PACKAGES = ("pipelines", "transforms")  # the repository's folders, installed as tfrecord_pipelines


def package_files() -> set:
    """Every file of the packages in the checkout (what the workers need)."""
    out = set()
    for pkg in PACKAGES:
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, pkg)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in files:
                if not name.endswith((".pyc", ".pyo")):
                    out.add(os.path.relpath(os.path.join(dirpath, name), ROOT).replace(os.sep, "/"))
    return out


VERSION = re.search(r'__version__ = "([^"]+)"', open(os.path.join(ROOT, "pipelines", "_version.py")).read()).group(1)


def clean_env(**extra) -> dict:
    """This machine's environment (pip's settings included) without anything
    pointing Python at the checkout or at another environment."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "STORAGE_EMULATOR_HOST")}
    env.update(PYTHONNOUSERSITE="1", **extra)
    return env


def run(cmd, cwd, timeout=600, **env):
    proc = subprocess.run([str(c) for c in cmd], cwd=str(cwd), env=clean_env(**env), capture_output=True,
                          text=True, timeout=timeout)
    noise = re.compile(r"^WARNING: Location .* is ignored", re.M)
    err = "\n".join(line for line in proc.stderr.splitlines() if not noise.match(line))
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{err[-5000:]}"
    return proc


def beam_pin() -> str:
    """The Beam that constraints.txt pins (the install below uses it)."""
    with open(os.path.join(ROOT, "constraints.txt")) as f:
        return re.search(r"^apache-beam==([0-9.]+)$", f.read(), re.M).group(1)


def test_the_staged_sdist_installs_and_converts_in_a_clean_virtualenv(tmp_path):
    # 1. The sdist, built by Beam's own stager code for --setup_file.
    from apache_beam.runners.portability.stager import Stager
    dist = tmp_path / "dist"
    dist.mkdir()
    sdist = Stager._build_setup_package(os.path.join(ROOT, "setup.py"), str(dist))  # pylint: disable=protected-access
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    missing = package_files() - names
    assert not missing, f"setup.py leaves these out of the package the workers install: {sorted(missing)}"
    photos = {n for n in names if n.startswith("pipelines/sample_photos/")}
    assert len([n for n in photos if n.endswith((".png", ".jpg"))]) >= 5 and "pipelines/sample_photos/LICENSES.md" in photos
    assert not any(n.startswith(("tests/", "bench/", ".venv/", "demo/", "launch/")) for n in names)
    size = os.path.getsize(sdist)
    assert size < 5 * 2**20, size

    # 2. A clean virtualenv holding only that sdist and its dependencies.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], tmp_path)
    py, bin_dir = venv / "bin" / "python", venv / "bin"
    started = time.time()
    run([py, "-m", "pip", "install", "--no-input", "--quiet", "-c", os.path.join(ROOT, "constraints.txt"), sdist],
        tmp_path, timeout=900)
    install_seconds = time.time() - started
    run([py, "-m", "pip", "check"], tmp_path)

    # 3. Used from a folder outside the checkout.
    work = tmp_path / "work"
    work.mkdir()
    assert os.path.commonpath([str(work), ROOT]) != ROOT
    where = run([py, "-c", "import importlib.util, apache_beam, tfrecord_pipelines, tfrecord_pipelines.transforms as t; "
                 "print(tfrecord_pipelines.__file__); print(t.__file__); print(apache_beam.__version__); "
                 "print([n for n in ('pipelines', 'transforms') if importlib.util.find_spec(n)])"], work)
    package_file, transforms_file, beam_version, generic = where.stdout.split()
    for f in (package_file, transforms_file):
        assert f.startswith(str(venv)) and "site-packages" in f, f
    assert beam_version == beam_pin()
    assert generic == "[]", "the install put a generic top-level module on sys.path: " + generic
    # What the distribution installs: one top-level package (and the console script).
    shown = run([py, "-m", "pip", "show", "-f", "tfrecord-pipelines"], work).stdout
    files = [line.strip() for line in shown.split("Files:", 1)[1].splitlines() if line.strip()]
    tops = {f.split("/")[0] for f in files if not f.startswith("../")}
    assert tops == {"tfrecord_pipelines", "tfrecord_pipelines-%s.dist-info" % VERSION}, tops

    # The shipped photos are data files of the package: the sample generator reads them.
    run([py, "-m", "tfrecord_pipelines.sample_data", "--out", "data", "--classes", "2", "--per_class", "3"], work)
    images = sorted(os.path.relpath(os.path.join(d, f), work / "data" / "train")
                    for d, _, fs in os.walk(work / "data" / "train") for f in fs)
    assert len(images) == 6, images

    # The installed command converts (multi-process local runner: worker processes import the
    # installed package too) and verifies, from a folder tree and from a label table.
    convert = run([bin_dir / "tfrecords", "convert", "--input", "data/train", "--output", "out", "--num_shards", "2",
                   "--split", "train=0.5,validation=0.5", "--progress", "off"], work)
    assert "listed 6 = written 6 + rejected 0" in convert.stdout, convert.stdout
    verify = run([bin_dir / "tfrecords", "verify", "out"], work)
    assert any(line.startswith("OK") for line in verify.stdout.splitlines()), verify.stdout
    with open(work / "out" / "manifest.json") as f:
        manifest = json.load(f)
    assert sum(s["records"] for s in manifest["splits"].values()) == 6
    run([bin_dir / "tfrecords", "convert", "--label_table", "data/labels.csv", "--image_root", "data/train",
         "--output", "out_table", "--progress", "off", "--direct_running_mode", "in_memory"], work)
    run([bin_dir / "tfrecords", "verify", "out_table", "--quiet"], work)
    # Both outputs, read back with TensorFlow: every image's bytes and label, as in the source.
    train = str(work / "data" / "train")
    check_against_source(str(work / "out"), {rel: rel.split("/")[0] for rel in images}, train)
    with open(work / "data" / "labels.csv", newline="") as f:
        table = {row["filename"]: row["label"] for row in csv.DictReader(f)}
    assert sorted(table) == images
    check_against_source(str(work / "out_table"), table, train)

    print(f"\nsdist {os.path.basename(sdist)}: {size / 1024:.0f} KB, {len(names)} entries; "
          f"clean install {install_seconds:.0f} s")


@pytest.mark.beam_range
def test_pip_install_beside_the_installed_beam_keeps_it(tmp_path):
    """A user's virtualenv that already holds a Beam of the range (on the oldest
    Beam's run of the suite: the oldest) keeps it: pip's own resolver, offline
    (--no-index: only what is installed can satisfy a requirement), decides to
    install this checkout and nothing else."""
    py = sys.executable
    installed = run([py, "-c", "import apache_beam; print(apache_beam.__version__)"], tmp_path).stdout.strip()
    report = tmp_path / "report.json"
    run([py, "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation", "--no-input", "--quiet",
         "--report", report, ROOT], tmp_path)
    with open(report) as f:
        chosen = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.load(f)["install"]}
    assert chosen == {"tfrecord-pipelines": VERSION}, chosen
    run([py, "-m", "pip", "check"], tmp_path)
    shown = run([py, "-m", "pip", "show", "apache-beam"], tmp_path).stdout
    assert re.search(r"^Version: (.+)$", shown, re.M).group(1) == installed
    lo, hi = re.search(r'"apache-beam\[gcp\]>=([0-9.]+),<([0-9.]+)"',
                       open(os.path.join(ROOT, "setup.py")).read()).groups()
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    assert as_tuple(lo) <= as_tuple(installed) < as_tuple(hi), (installed, lo, hi)
