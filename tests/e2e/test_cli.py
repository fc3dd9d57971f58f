"""The command line: help, the installed `tfrecords` script, runner choice,
and bad options failing at once with a message that says how to fix them."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, check_against_source, convert, make_tree, manifest, write
from tfrecord_pipelines.options import help_parser

BIN = os.path.dirname(sys.executable)


def test_help_documents_every_option_with_its_default():
    text = help_parser("tfrecords convert").format_help()
    for action in help_parser("x")._actions:
        if action.dest in ("help",):
            continue
        assert action.option_strings[0] in text
        assert action.help
    assert "(default: 150MB)" in text and "(default: full)" in text and "--runner" in text


def test_tfrecords_command_converts_on_all_cores(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    labels = make_tree(root, per_class=3)
    p = subprocess.run([os.path.join(BIN, "tfrecords"), "convert", "--input", root, "--output", out,
                        "--num_shards", "2", "--progress", "off"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "listed 9 = written 9 + rejected 0" in p.stdout
    assert manifest(out)["counts"]["written"] == 9
    p = subprocess.run([os.path.join(BIN, "tfrecords"), "verify", out], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "OK: 2 shards" in p.stdout
    check_against_source(out, labels, root)


@pytest.mark.parametrize("small_runs", ["1", "0"], ids=["small input in-process", "workers"])
def test_the_default_local_run_starts_one_worker_per_core(tmp_path, small_runs):
    """Every Python process the command starts records its command line (a
    sitecustomize on PYTHONPATH). With Beam's own worker processes
    (TFRECORDS_SPEEDUPS=0, which gives the same shards as the forked ones),
    the default run starts one SDK worker per core; on an input this small it
    starts none (pipelines/run/small_run.py), unless TFRECORDS_SMALL_RUNS=0."""
    root, out, log = str(tmp_path / "imgs"), str(tmp_path / "out"), tmp_path / "procs"
    labels = make_tree(root, per_class=3)
    site = tmp_path / "site"
    site.mkdir()
    log.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os\nd = os.environ.get('TFRECORDS_TEST_PROC_LOG')\nif d:\n"
        "    with open(os.path.join(d, str(os.getpid())), 'wb') as f:\n"
        "        f.write(open('/proc/self/cmdline', 'rb').read())\n")
    env = dict(os.environ, PYTHONPATH=str(site), TFRECORDS_TEST_PROC_LOG=str(log), TFRECORDS_SPEEDUPS="0",
               TFRECORDS_SMALL_RUNS=small_runs)
    p = subprocess.run([os.path.join(BIN, "tfrecords"), "convert", "--input", root, "--output", out, "--progress", "off"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    commands = [f.read_bytes().replace(b"\0", b" ").decode() for f in log.iterdir()]
    workers = [c for c in commands if "sdk_worker_main" in c]
    cores = os.cpu_count() or 1
    assert len(workers) == (cores if cores > 1 and small_runs == "0" else 0), commands
    assert len(commands) == (1 if small_runs == "1" or cores == 1 else 1 + cores), commands  # the command itself
    check_against_source(out, labels, root)


def test_module_entry_with_direct_runner_flags(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    labels = make_tree(root, per_class=2)
    p = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.convert", "--input", root, "--output", out,
                        "--runner", "DirectRunner", "--direct_num_workers", "2", "--progress", "off"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Prism" not in p.stderr  # DirectRunner means the local FnApiRunner, never a Prism download
    check_against_source(out, labels, root)


@pytest.mark.parametrize("args,message", [
    (["--split", "train=0.8,validation=0.3"], "fractions add up to 1.1; they must add up to 1"),
    (["--split", "train=x"], "is not a number"),
    (["--split", "train-a"], "a split name is 1-64 letters"),
    (["--num_shards", "train=0"], "expected N or SPLIT=N"),
    (["--shard_size", "lots"], "is not a size"),
    (["--output_formats", "gif"], "allowed are jpeg,png"),
    (["--label_regex", "("], "is not a valid regular expression"),
    (["--label_depth", "0"], "--label_depth 0 names no folder"),
    (["--extend_label_map"], "--extend_label_map needs --label_map"),
    (["--direct_running_mode", "multi_threading"], "multi_threading is refused"),
    (["--feature_keys", "image/nope=x"], "'image/nope' is not a feature"),
    (["--feature_keys", "image/encoded=a,image/format=a"], "'image/encoded' and 'image/format' would both be "
                                                            "written as 'a'"),
    (["--feature_keys", "image/filename=image/format"], "add image/format= to leave 'image/format' out"),
    (["--max_reject_fraction", "2"], "must be between 0 and 1"),
])
def test_bad_options_fail_at_once(tmp_path, capsys, args, message):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=1)
    assert convert("--input", root, "--output", str(tmp_path / "out"), *args, in_memory=False) == 2
    assert message in capsys.readouterr().err
    assert not os.path.exists(os.path.join(tmp_path, "out", "manifest.json"))


def test_bad_inputs_fail_at_once(tmp_path, capsys):
    assert convert("--output", str(tmp_path / "o")) == 2
    assert "exactly one of --input" in capsys.readouterr().err
    assert convert("--input", str(tmp_path / "none"), "--output", str(tmp_path / "o")) == 2
    assert "no such folder" in capsys.readouterr().err
    table = write(str(tmp_path / "t.csv"), b"a,b\nx.jpg,1\n")
    assert convert("--label_table", table, "--output", str(tmp_path / "o"), "--path_column", "file") == 2
    assert "path column 'file' is not in the table; columns are ['a', 'b']" in capsys.readouterr().err
    table = write(str(tmp_path / "t2.csv"), b"a,b\nx.jpg,1\n")
    assert convert("--label_table", table, "--output", str(tmp_path / "o")) == 2
    assert "no path column found" in capsys.readouterr().err
    assert convert("--label_table", str(tmp_path / "t.parquet"), "--output", str(tmp_path / "o")) == 2
    assert "cannot tell the format" in capsys.readouterr().err


def test_tfrecords_help():
    p = subprocess.run([os.path.join(BIN, "tfrecords"), "convert", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and "--label_table" in p.stdout and "--num_shards" in p.stdout


def test_progress_line_and_counters(tmp_path, capsys):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=4)
    from tfrecord_pipelines.commands.convert import run
    assert run(["--input", root, "--output", out, "--progress", "on", "--direct_running_mode", "in_memory"]) == 0
    err = capsys.readouterr().err
    final = err.strip().splitlines()[-1]
    assert "validated 12 images (0 rejected)" in final and "written 12 records" in final and "rec/s" in final


def test_tfx_schema_beside_the_manifest(tmp_path):
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=1)
    assert convert("--input", root, "--output", out) == 0
    schema = text_format.Parse(open(os.path.join(out, "schema.pbtxt")).read(), schema_pb2.Schema())
    kinds = {f.name: f.type for f in schema.feature}
    assert kinds["image/encoded"] == schema_pb2.BYTES and kinds["image/class/label"] == schema_pb2.INT
    assert set(kinds) == set(manifest(out)["features"])


def test_launch_script_converts_and_verifies(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    labels = make_tree(root, per_class=2)
    here = ROOT
    p = subprocess.run([os.path.join(here, "launch", "run_local.sh"), "--input", root, "--output", out,
                        "--progress", "off"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert re.search(r"OK: 1 shards?, 6 records", p.stdout), p.stdout
    check_against_source(out, labels, root)
