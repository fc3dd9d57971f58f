"""Faults: replayed and retried bundles, runs killed while writing and while
publishing, and two conversions aimed at one output. Each ends in an output
byte-identical to a clean run, or in a clear refusal; never in a partial
output that looks complete."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, convert, image_bytes, manifest, shard_files, write
from pipelines.verify import verify_output
from transforms.records import unpack


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A tree and the shards of a clean run over it."""
    base = tmp_path_factory.mktemp("faults")
    root = str(base / "images")
    for c in range(3):
        for k in range(40):
            write(os.path.join(root, f"class{c}", f"{k:03d}.jpg"), image_bytes(40 + k % 9, 30, seed=c * 100 + k))
    write(os.path.join(root, "class0", "broken.jpg"), b"<html>")
    clean = str(base / "clean")
    assert convert("--input", root, "--output", clean, *ARGS) == 0
    return root, clean, shard_bytes(clean)


ARGS = ["--num_shards", "4", "--split", "train=0.75,validation=0.25", "--max_reject_fraction", "0.1"]


def shard_bytes(out):
    return {os.path.basename(f): open(f, "rb").read() for f in shard_files(out)}


def assert_like_clean(out, clean_shards, clean_out):
    assert shard_bytes(out) == clean_shards
    m, c = manifest(out), manifest(clean_out)
    assert m["counts"] == c["counts"] and m["splits"] == c["splits"]
    assert sorted(os.listdir(out)) == sorted(os.listdir(clean_out))  # no staging folder, lock or temp file left
    report = verify_output(out)
    assert report.ok, report.errors


def test_replayed_bundles_give_the_same_output(dataset, tmp_path):
    root, clean, clean_shards = dataset
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, *ARGS, "--direct_runner_bundle_repeat", "2") == 0
    assert_like_clean(out, clean_shards, clean)


def test_first_attempts_failing_midway_then_retried(dataset, tmp_path, monkeypatch):
    """Every other shard's first write attempt dies mid-shard, every other
    validation batch's first attempt dies midway, and publishing dies after one
    rename; each is then retried, as Dataflow retries a failed bundle. (The
    local runner does not retry, so the retry is played here.)"""
    from transforms import fsutil, publish as publish_mod, validate_images, write_shards
    root, clean, clean_shards = dataset
    failed = set()

    def retried(original, should_fail, inject):
        def process(self, element, *side):
            if isinstance(element, tuple):  # a shard: (key, packed batches), materialised for the retry
                element = (element[0], list(element[1]))
                key = repr(element[0])
            else:  # a packed validation batch
                key = repr([r.rel for r in unpack(element)][:1])
            if should_fail(element) and key not in failed:
                failed.add(key)
                with inject():
                    with pytest.raises(ConnectionResetError):
                        list(original(self, element, *side))  # the runner drops a failed attempt's outputs
            yield from original(self, element, *side)
        return process

    class injected:
        def __init__(self, module, name, after):
            self.module, self.name, self.after, self.calls = module, name, after, 0

        def __enter__(self):
            self.original = getattr(self.module, self.name)

            def failing(*a, **k):
                self.calls += 1
                if self.calls > self.after:
                    raise ConnectionResetError("injected: worker lost mid-bundle")
                return self.original(*a, **k)
            setattr(self.module, self.name, failing)

        def __exit__(self, *exc):
            setattr(self.module, self.name, self.original)

    monkeypatch.setattr(write_shards._WriteShardFn, "process", retried(
        write_shards._WriteShardFn.process, lambda e: e[0][1] % 2 == 0,
        lambda: injected(write_shards, "read_checked", 3)))
    monkeypatch.setattr(validate_images._ValidateFn, "process", retried(
        validate_images._ValidateFn.process, lambda b: len(unpack(b)) > 2,
        lambda: injected(validate_images, "validate_record", 2)))
    original_publish = publish_mod.publish

    def publish_retried(**kw):
        with injected(fsutil, "rename", 1):
            with pytest.raises(ConnectionResetError):
                original_publish(**kw)
        return original_publish(**kw)
    monkeypatch.setattr(publish_mod, "publish", publish_retried)

    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, *ARGS) == 0
    assert len(failed) >= 3
    assert_like_clean(out, clean_shards, clean)


def _start(args, slow: str = "", seconds: float = 0.0):
    """A conversion in its own process (group), optionally slowed down at one
    function so the test can kill it at a chosen moment."""
    code = "import sys, time\n"
    if slow:
        module, name = slow.rsplit(".", 1)
        code += (f"import {module} as m\no = m.{name}\n"
                 f"def slow(*a, **k):\n    time.sleep({seconds})\n    return o(*a, **k)\n"
                 f"m.{name} = slow\n")
    code += "from pipelines.convert import run\nsys.exit(run(sys.argv[1:]))\n"
    return subprocess.Popen([sys.executable, "-c", code, *args, "--progress", "off",
                             "--direct_running_mode", "in_memory"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, proc, timeout=120):
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)


def _kill(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _final_shards(out):
    return [n for n in os.listdir(out) if n.endswith(".tfrecord")]


def test_killed_while_writing_shards(dataset, tmp_path):
    root, clean, clean_shards = dataset
    out = str(tmp_path / "out")
    proc = _start(["--input", root, "--output", out, *ARGS], "transforms.write_shards.read_checked", 0.02)

    def writing():
        staging = [d for d in os.listdir(out) if d.startswith(".tfrecords-staging-")] if os.path.isdir(out) else []
        return any(os.path.getsize(os.path.join(out, s, f)) > 0 for s in staging
                   for f in os.listdir(os.path.join(out, s)))
    _wait_for(writing, proc)
    _kill(proc)
    assert not _final_shards(out) and not os.path.exists(os.path.join(out, "manifest.json"))
    assert not verify_output(out).ok
    # The same command again: the dead run's lock is taken over, its staging folder removed.
    assert convert("--input", root, "--output", out, *ARGS) == 0
    assert_like_clean(out, clean_shards, clean)


def test_killed_while_publishing(dataset, tmp_path, capsys):
    root, clean, clean_shards = dataset
    out = str(tmp_path / "out")
    proc = _start(["--input", root, "--output", out, *ARGS], "transforms.fsutil.rename", 0.5)
    _wait_for(lambda: os.path.isdir(out) and _final_shards(out), proc)
    _kill(proc)
    assert 0 < len(_final_shards(out)) < 6 and not os.path.exists(os.path.join(out, "manifest.json"))
    report = verify_output(out)
    assert not report.ok and "not a complete output" in report.errors[0]
    assert convert("--input", root, "--output", out, *ARGS) == 2
    assert "already holds an incomplete dataset (no manifest.json)" in capsys.readouterr().err
    # Rerun with another shard count: none of the killed run's shards may remain.
    assert convert("--input", root, "--output", out, "--overwrite", "--num_shards", "2",
                   "--split", "train=0.75,validation=0.25", "--max_reject_fraction", "0.1") == 0
    assert sorted(_final_shards(out)) == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord",
                                          "validation-00000-of-00002.tfrecord", "validation-00001-of-00002.tfrecord"]
    assert convert("--input", root, "--output", out, *ARGS, "--overwrite") == 0
    assert_like_clean(out, clean_shards, clean)


def test_two_conversions_into_one_output(dataset, tmp_path):
    root, clean, clean_shards = dataset
    out = str(tmp_path / "out")
    first = _start(["--input", root, "--output", out, *ARGS], "transforms.write_shards.read_checked", 0.005)
    _wait_for(lambda: os.path.exists(os.path.join(out, ".tfrecords.lock")), first)
    second = _start(["--input", root, "--output", out, *ARGS])
    _, err = second.communicate(timeout=120)
    assert second.returncode == 2
    assert "another conversion is writing --output" in err and f"pid {first.pid}" in err
    assert first.wait(timeout=300) == 0
    assert_like_clean(out, clean_shards, clean)


def test_two_conversions_started_at_once(dataset, tmp_path):
    root, clean, clean_shards = dataset
    out = str(tmp_path / "out")
    procs = [_start(["--input", root, "--output", out, *ARGS]) for _ in range(2)]
    results = [(p.wait(timeout=300), p.communicate()[1]) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = [err for code, err in results if code == 2][0]
    assert "another conversion is writing" in loser or "already holds a complete dataset" in loser
    assert_like_clean(out, clean_shards, clean)
    with open(os.path.join(out, "manifest.json")) as f:
        assert json.load(f)["counts"]["written"] == 120


def _plant_lock(out, **fields):
    os.makedirs(out, exist_ok=True)
    body = {"run_id": "20260101-000000-dead", "host": "another-host", "pid": 1, "started": "2026-01-01T00:00:00+00:00",
            "expires": "2999-01-01T00:00:00+00:00"}
    body.update(fields)
    with open(os.path.join(out, ".tfrecords.lock"), "w") as f:
        json.dump(body, f)


def test_locks_of_runs_gone_elsewhere(tmp_path, capsys):
    from conftest import make_tree
    images, out = str(tmp_path / "images"), str(tmp_path / "out")
    make_tree(images, per_class=1)
    _plant_lock(out)  # e.g. a Dataflow job that failed without releasing its lock
    assert convert("--input", images, "--output", out) == 2
    err = capsys.readouterr().err
    assert "another conversion is writing" in err and "another-host" in err and "--break_lock" in err
    assert convert("--input", images, "--output", out, "--break_lock") == 0
    assert "taking over the lock of run 20260101-000000-dead" in capsys.readouterr().err
    out2 = str(tmp_path / "out2")
    _plant_lock(out2, expires="2026-01-02T00:00:00+00:00")
    assert convert("--input", images, "--output", out2) == 0
    assert "it expired at 2026-01-02" in capsys.readouterr().err


def test_latest_never_moves_back_to_an_older_run(tmp_path):
    from transforms import layout
    root = str(tmp_path / "ds")
    for version, run_id in (("v1", "20261121-010000-aaaa"), ("v2", "20261121-030000-bbbb")):
        write(os.path.join(root, version, "manifest.json"), json.dumps({"run_id": run_id}).encode())
    assert layout.publish_latest(root, "v2", "20261121-030000-bbbb")
    # v1's run started earlier but finished later (say its lock expired while it ran): LATEST stays.
    assert not layout.publish_latest(root, "v1", "20261121-010000-aaaa")
    assert open(os.path.join(root, "LATEST")).read() == "v2\n"
