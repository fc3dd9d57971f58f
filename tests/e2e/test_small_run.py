"""A small local input runs in the command's own process (pipelines/run/small_run.py)
and Beam is imported without the connectors a local run never uses
(pipelines/speed/lean_import.py): both give the bytes worker processes and a whole
Beam import give, and a run imports neither TensorFlow nor a chart library."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, convert, image_bytes, make_tree, shard_files, write

# What a run on local files must never import (TensorFlow, the old chart library,
# tfx-bsl, and the connectors the lean import keeps out).
NEVER = ("tensorflow", "matplotlib", "tfx_bsl", "pandas", "pymongo", "google.cloud.bigquery",
         "google.cloud.dataflow", "apache_beam.io.gcp.gcsfilesystem", "httplib2", "pyparsing", "yaml", "beartype")
VOLATILE = ("run_id", "created", "report")


@pytest.fixture
def small(tmp_path):
    root = str(tmp_path / "images")
    make_tree(root, per_class=5)
    write(os.path.join(root, "cat", "cut.jpg"), image_bytes(40, 30, seed=3)[:200])   # truncated
    write(os.path.join(root, "dog", "notes.jpg"), b"not an image")
    with open(os.path.join(root, "cat", "1.jpg"), "rb") as f:
        write(os.path.join(root, "bird", "same_as_cat.jpg"), f.read())  # a duplicate across labels
    return root


ARGS = ["--split", "train=0.6,validation=0.4", "--max_reject_fraction", "1", "--num_shards", "2"]


def outputs(out: str) -> dict:
    """Every published file's bytes, the manifest without its run-specific fields."""
    got = {}
    for name in sorted(os.listdir(out)):
        if name == "report.html":
            continue
        with open(os.path.join(out, name), "rb") as f:
            data = f.read()
        if name == "manifest.json":
            m = json.loads(data)
            for k in VOLATILE:
                m.pop(k, None)
            m["options"]["output"].pop("output")  # each run writes its own folder
            data = m
        got[name] = data
    return got


@pytest.mark.beam_range
def test_a_small_input_runs_in_process_and_writes_what_workers_write(small, tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.transforms import environments

    from tfrecord_pipelines.commands.convert import run
    from tfrecord_pipelines.run import runtime
    from tfrecord_pipelines.run.plan import Plan
    argv = ["--input", small, "--output", str(tmp_path / "here"), *ARGS]
    plan = Plan.from_argv(argv)
    assert plan.small_input and plan.in_process and not plan.speed.zygote
    runner = runtime.choose_runner(PipelineOptions(argv), plan)
    assert not isinstance(runner._default_environment, environments.SubprocessSDKEnvironment)
    assert run(argv + ["--progress", "off"]) == 0
    workers = str(tmp_path / "workers")
    assert convert("--input", small, "--output", workers, *ARGS, in_memory=False) == 0  # multi_processing, 2 cores
    here, there = outputs(str(tmp_path / "here")), outputs(workers)
    assert here == there
    assert len(shard_files(workers)) == 4 and here["rejects.jsonl"].count(b"\n") == 2


def test_what_decides_in_process(small, tmp_path, monkeypatch):
    from tfrecord_pipelines.run import small_run
    from tfrecord_pipelines.run.plan import Plan

    def in_process(argv: list) -> bool:
        plan = Plan.from_argv(argv)
        assert plan.small_input == plan.in_process or not plan.small_input
        return plan.small_input

    base = ["--input", small, "--output", str(tmp_path / "o")]
    n = 18
    assert small_run.count_files(small, 1000) == n
    assert small_run.count_files(small, 5) == 6  # stops past the limit
    monkeypatch.setattr(small_run, "MAX_IMAGES", n)
    assert in_process(base + ["--validate", "header"])
    monkeypatch.setattr(small_run, "MAX_IMAGES", n - 1)
    assert not in_process(base + ["--validate", "header"])           # one file too many
    monkeypatch.setattr(small_run, "MAX_IMAGES", n)
    assert not in_process(base + ["--validate", "header", "--direct_num_workers", "2"])  # the user's
    assert not in_process(base + ["--validate=header", "--direct_running_mode=multi_processing"])
    assert not in_process(["--input", "gs://bucket/images", "--validate", "header"])  # not counted
    monkeypatch.setenv("TFRECORDS_SMALL_RUNS", "0")
    assert not in_process(base + ["--validate", "header"])
    monkeypatch.delenv("TFRECORDS_SMALL_RUNS")
    # Full validation (the default) decodes every image: the workers win sooner.
    monkeypatch.setattr(small_run, "MAX_IMAGES_FULL", n - 1)
    assert in_process(base + ["--validate", "header"])
    assert not in_process(base) and not in_process(base + ["--validate", "full"])
    monkeypatch.setattr(small_run, "MAX_IMAGES_FULL", n)
    table = tmp_path / "labels.csv"
    table.write_text("filename,label\n" + "".join(f"cat/{k}.jpg,cat\n" for k in range(5)))
    assert in_process(["--label_table", str(table), "--image_root", small, "--validate", "header"])


def _cli_run(argv: list, env: dict) -> tuple:
    """The command line's start (convert.run: the plan, then the run with the
    speed layer applied) in a fresh process: (exit status, the heavy modules it
    imported, whether Beam's shortcuts were installed during the run:
    pipelines/speed/shortcuts.py)."""
    code = ("import sys, os, json\n"
            f"argv = {argv!r}\n"
            "from tfrecord_pipelines.speed import shortcuts\n"
            "seen = []\n"
            "install = shortcuts.install\n"
            "shortcuts.install = lambda: seen.append(1) or install()\n"
            "from tfrecord_pipelines.commands.convert import run\n"
            "rc = run(argv, own_process=True)\n"
            f"print(json.dumps([rc, [m for m in {NEVER!r} if m in sys.modules], bool(seen)]))\n")
    # A user's local run: without the GCS emulator's variables, which the session's `gcs` fixture sets.
    base = {k: v for k, v in os.environ.items()
            if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_CLOUD_PROJECT") and not k.startswith("TFRECORDS_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env=dict(base, **env))
    assert out.returncode == 0, out.stderr[-3000:]
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("workers", [[], ["--direct_num_workers", "2"]], ids=["in-process", "two workers"])
def test_the_command_imports_beam_lean_and_writes_the_same_bytes(small, tmp_path, workers):
    """Lean, with Beam's shortcuts, and Beam as it is (imported whole, no shortcuts): the same bytes."""
    runs = {}
    for name, env in (("lean", {}), ("whole", {"TFRECORDS_SPEEDUPS": "0"})):
        out = str(tmp_path / name)
        rc, heavy, shortcuts = _cli_run(["--input", small, "--output", out, "--progress", "off", *ARGS, *workers],
                                        env)
        assert rc == 0 and shortcuts == (name == "lean")
        runs[name] = (outputs(out), heavy)
    assert runs["lean"][0] == runs["whole"][0]
    assert runs["lean"][1] == []                       # no TensorFlow, no matplotlib, no unused connectors
    # what a whole import of Beam brings
    assert "pandas" in runs["whole"][1] and "httplib2" in runs["whole"][1] and "beartype" in runs["whole"][1]
    assert "tensorflow" not in runs["whole"][1] and "matplotlib" not in runs["whole"][1]
    report = open(os.path.join(tmp_path, "lean", "report.html"), encoding="utf-8").read()
    assert report.count('class="chart"') == 3 and "data:image/svg+xml;base64," in report


def test_lean_import_leaves_every_module_importable_afterwards():
    code = ("import sys\n"
            "from tfrecord_pipelines.speed import lean_import\n"
            "lean_import.import_lean()\n"
            "import apache_beam\n"
            f"assert not [m for m in {lean_beam_unused()!r} if sys.modules.get(m) is not None]\n"
            "assert not [m for m in ('httplib2', 'pyparsing', 'yaml', 'beartype') if m in sys.modules]\n"
            # beartype's names in Beam's typehints: the real ones from the first call on, its exception caught
            "from apache_beam.typehints import typehints\n"
            "assert typehints.is_consistent_with(bool, int) and not typehints.is_consistent_with(int, str)\n"
            "assert not typehints.is_consistent_with(int, 3)\n"  # beartype raises BeartypeDoorException: caught
            "import beartype.door, beartype.roar\n"
            "assert typehints.is_subhint is beartype.door.is_subhint\n"
            "assert typehints.BeartypeDoorException is beartype.roar.BeartypeDoorException\n"
            "import pandas, pyarrow\n"                               # importable again: e.g. for tfx-bsl
            "from apache_beam.io.filesystems import FileSystems\n"
            # Beam's modules that imported a stand-in for httplib2 or yaml get the real module on first use
            "from apache_beam.internal import http_client\n"
            "from apache_beam.transforms import external\n"
            "import yaml\n"
            "print('ok', type(FileSystems.get_filesystem('/tmp')).__name__, type(http_client.get_new_http()).__name__,\n"
            "      external.yaml.safe_load(external.yaml.dump({'a': [1]})) == {'a': [1]}, type(yaml).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["ok", "LocalFileSystem", "Http", "True", "module"], \
        out.stderr[-3000:]
    assert "bson" not in out.stderr  # mongodbio's import-time warning is kept quiet


def lean_beam_unused() -> tuple:
    from tfrecord_pipelines.speed import lean_import as lean_beam
    return lean_beam.UNUSED_LOCALLY


def test_only_local_runs_on_local_files_import_lean():
    from tfrecord_pipelines.run.plan import Plan
    lean = lambda argv: Plan.from_argv(argv, own_process=True).speed.lean_import  # noqa: E731
    assert lean(["--input", "/data", "--output", "/out"])
    assert not lean(["--input", "gs://b/data", "--output", "/out"])
    assert not lean(["--input", "/data", "--temp_location=gs://b/tmp"])
    assert not lean(["--input", "/data", "--runner", "DataflowRunner"])
    assert not lean(["--input", "/data", "--runner=PortableRunner"])
    assert not Plan.from_argv(["--input", "/data"], command_line=False).speed.any  # a library call: never
    assert not Plan.from_argv(["--input", "/data"]).speed.lean_import  # a process that is not the command's own
