"""Faults: replayed and retried bundles, runs killed while writing and while
publishing, and two conversions aimed at one output. Each ends in an output
byte-identical to a clean run, or in a clear refusal; never in a partial
output that looks complete."""
import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import apache_beam as beam
from apache_beam.internal import pickler

from conftest import ROOT, convert, image_bytes, manifest, shard_files, write
from tfrecord_pipelines.outputs.verification import verify_output


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


class InjectedWorkerLoss(BaseException):
    """A fault injected into an attempt (a BaseException, so that no handler in the
    product mistakes it for a bad image)."""


class _Faults:
    """Faults injected at the operating-system boundary through Python's audit hooks
    (no product function is patched): the first open() of each image in `first`
    fails, wherever the pipeline reads it (validation or writing); once a shard file
    is being written (an open for writing of a `*-of-*.tfrecord*` file under the
    output), the next `while_writing` opens of other images fail; and the second
    rename of a shard to its final name fails. Each fault happens once. Inactive
    outside the test that arms it."""
    active = False
    root = out = ""
    first: set = set()
    while_writing = 0
    writing = False
    opened: set = set()
    renames = 0
    injected: list = []

    @classmethod
    def hook(cls, event, args):
        if not cls.active:
            return
        if event == "open" and isinstance(args[0], str):
            path = args[0]
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            writes = bool(flags & (os.O_WRONLY | os.O_RDWR)) or (isinstance(args[1], str) and "w" in args[1])
            if path.startswith(cls.out) and writes and "-of-" in os.path.basename(path) \
                    and ".tfrecord" in os.path.basename(path):
                cls.writing = True
            elif path.startswith(cls.root):
                seen = path in cls.opened
                cls.opened.add(path)
                if not seen and path in cls.first:
                    cls.injected.append(("first read", path))
                    raise InjectedWorkerLoss(f"injected: worker lost while reading {path}")
                if cls.writing and cls.while_writing and path not in cls.first:
                    cls.while_writing -= 1
                    cls.injected.append(("while writing a shard", path))
                    raise InjectedWorkerLoss(f"injected: worker lost while writing a shard, reading {path}")
        elif event in ("os.rename", "os.replace") and isinstance(args[1], str) \
                and os.path.dirname(os.path.abspath(args[1])) == cls.out:
            cls.renames += 1
            if cls.renames == 2:
                cls.injected.append(("publish", args[1]))
                raise InjectedWorkerLoss(f"injected: worker lost while publishing {args[1]}")


_hook_installed = []


class RetriedDoFn(beam.DoFn):
    """What a runner does with a failed bundle: it drops the failed attempt's outputs
    and retries on a fresh DoFn (deserialized again, setup() and start_bundle()
    called), up to four times as Dataflow does."""
    def __init__(self, fn, log: str):
        self.log = log  # a file: this class may be pickled by value, so retries are recorded outside it
        self.serialized = pickler.dumps(fn)
        self.name = type(fn).__name__ if not hasattr(fn, "_fn") else getattr(fn._fn, "__qualname__", repr(fn._fn))
        self.fn = None

    def default_label(self):
        return pickler.loads(self.serialized).default_label()

    def _fresh(self):
        fn = pickler.loads(self.serialized)
        fn.setup()
        fn.start_bundle()
        return fn

    def setup(self):
        self.fn = None

    def start_bundle(self):
        self.fn = self._fresh()

    def process(self, element, *args, **kwargs):
        for attempt in range(5):
            try:
                return list(self.fn.process(element, *args, **kwargs) or ())
            except BaseException as e:  # by name: a by-value copy of this class sees another class object
                if type(e).__name__ != "InjectedWorkerLoss" or attempt == 4:
                    raise
                with open(self.log, "a") as f:
                    f.write(self.name + "\n")
                self.fn.teardown()
                self.fn = self._fresh()

    def finish_bundle(self):
        out = self.fn.finish_bundle()
        return list(out or ())

    def teardown(self):
        if self.fn is not None:
            self.fn.teardown()


def _ours(fn) -> bool:
    """A DoFn of this project, or a Map/FlatMap of a function of this project (Map wraps
    the function in a closure of Beam's own)."""
    target = getattr(fn, "_fn", fn)
    modules = [getattr(target, "__module__", None) or type(target).__module__]
    for cell in getattr(target, "__closure__", None) or ():
        try:
            modules.append(getattr(cell.cell_contents, "__module__", None) or "")
        except ValueError:  # an empty cell
            pass
    return any(m.split(".")[0] == "tfrecord_pipelines" for m in modules)


def test_attempts_failing_midway_then_retried_on_a_fresh_dofn(dataset, tmp_path, monkeypatch):
    """Reads of images fail midway through validation and shard writes (whichever
    step reads them), and publishing fails after one rename; each failed attempt is retried on a fresh DoFn
    (as Dataflow retries a failed bundle on a new or reset worker). The local runner
    does not retry, so every DoFn of ours is wrapped in RetriedDoFn (a Beam-level
    wrapper; no product function is patched)."""
    root, clean, clean_shards = dataset
    out = str(tmp_path / "out")
    if not _hook_installed:
        sys.addaudithook(_Faults.hook)
        _hook_installed.append(True)
    images = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
    _Faults.root, _Faults.out = os.path.join(root, ""), out
    _Faults.renames, _Faults.injected, _Faults.writing, _Faults.opened = 0, [], False, set()
    _Faults.first = set(images[::40])  # a few images of each class folder
    _Faults.while_writing = 3
    planned = {"first read": len(_Faults.first), "while writing a shard": 3, "publish": 1}
    log = str(tmp_path / "retries.log")
    open(log, "w").close()
    original_init = beam.ParDo.__init__

    def init(self, fn, *args, **kwargs):
        original_init(self, RetriedDoFn(fn, log) if _ours(fn) else fn, *args, **kwargs)
    monkeypatch.setattr(beam.ParDo, "__init__", init)
    _Faults.active = True
    try:
        assert convert("--input", root, "--output", out, *ARGS) == 0
    finally:
        _Faults.active = False
    injected = collections.Counter(k for k, _ in _Faults.injected)
    assert injected == planned, _Faults.injected
    with open(log) as f:
        retries = f.read().split()
    # (reads run ahead in threads, so one failed attempt may have met more than one fault)
    assert 2 <= len(retries) <= len(_Faults.injected) and len(set(retries)) >= 2, (retries, _Faults.injected)
    assert_like_clean(out, clean_shards, clean)


def _start(args, seconds: float = 0.0, gate: str = "", slow_reads_under: str = "", hold_renames_into: str = ""):
    """A conversion in its own process (group), optionally held so the test can act
    at a chosen moment, through Python's audit events (no product function is
    patched). `slow_reads_under` (a folder): each open() of a file under it first
    sleeps `seconds`; with `gate` (a path), the first such open writes GATE.reached
    and then waits until the test creates GATE, so the run stays at that point for
    as long as the test needs. `hold_renames_into` (a folder): the first rename into
    it goes through, and the second writes GATE.reached and blocks until the test
    kills the process."""
    code = "import os, sys, time\n"
    wait = (f"    if not os.path.exists({gate + '.reached'!r}):\n"
            f"        open({gate + '.reached'!r}, 'w').close()\n"
            f"    while not os.path.exists({gate!r}):\n        time.sleep(0.02)\n") if gate else ""
    if slow_reads_under:
        prefix = os.path.join(slow_reads_under, "")
        code += ("def hook(event, a):\n"
                 f"    if event != 'open' or not isinstance(a[0], str) or not a[0].startswith({prefix!r}):\n"
                 "        return\n"
                 f"{wait}    time.sleep({seconds})\n"
                 "sys.addaudithook(hook)\n")
    if hold_renames_into:
        code += ("renames = []\n"
                 "def hold(event, a):\n"
                 "    if event not in ('os.rename', 'os.replace') or not isinstance(a[1], str):\n"
                 "        return\n"
                 f"    if os.path.dirname(os.path.abspath(a[1])) != {hold_renames_into!r}:\n"
                 "        return\n"
                 "    renames.append(a[1])\n"
                 "    if len(renames) >= 2:\n"
                 f"        open({gate + '.reached'!r}, 'w').close()\n"
                 "        while True:\n"
                 "            time.sleep(1)\n"
                 "sys.addaudithook(hold)\n")
    code += "from tfrecord_pipelines.commands.convert import run\nsys.exit(run(sys.argv[1:]))\n"
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
    proc = _start(["--input", root, "--output", out, *ARGS], seconds=0.02, slow_reads_under=root)

    def writing():  # a shard is being written in the resume area
        areas = [d for d in os.listdir(out) if d.startswith(".tfrecords-resume-")] if os.path.isdir(out) else []
        try:
            return any(os.path.getsize(os.path.join(out, a, f)) > 0 for a in areas
                       for f in os.listdir(os.path.join(out, a)))
        except FileNotFoundError:  # listed, then renamed by the run before its size was read
            return False
    _wait_for(writing, proc)
    _kill(proc)
    assert not _final_shards(out) and not os.path.exists(os.path.join(out, "manifest.json"))
    assert not verify_output(out).ok
    # The same command again: the dead run's lock is taken over, its staging folder removed, its
    # complete shards (if any) kept; the resume area goes with a successful publish.
    assert convert("--input", root, "--output", out, *ARGS) == 0
    assert_like_clean(out, clean_shards, clean)


def test_killed_while_publishing(dataset, tmp_path, capsys):
    root, clean, clean_shards = dataset
    out = str(tmp_path / "out")
    gate = str(tmp_path / "gate")
    # Held (through the "os.rename"/"os.replace" audit events) at its second rename of a
    # shard to its final name, then killed: exactly one shard is under its final name.
    proc = _start(["--input", root, "--output", out, *ARGS], gate=gate, hold_renames_into=out)
    _wait_for(lambda: os.path.exists(gate + ".reached"), proc)
    _kill(proc)
    assert len(_final_shards(out)) == 1 and not os.path.exists(os.path.join(out, "manifest.json"))
    report = verify_output(out)
    assert not report.ok and "not a complete output" in report.errors[0]
    # The same command again: the killed publish is undone (its shard moved back to the resume
    # area), and every shard the killed run completed is kept, none written again.
    capsys.readouterr()
    assert convert("--input", root, "--output", out, *ARGS) == 0
    captured = capsys.readouterr()
    assert "a run killed while publishing into" in captured.err and "1 of its files moved back" in captured.err
    assert "resumed: 8 shards (120 records) kept from a killed run" in captured.out
    assert manifest(out)["made"]["shards_resumed"] == 8
    assert_like_clean(out, clean_shards, clean)


def test_killed_while_publishing_then_other_options(dataset, tmp_path):
    root, clean, clean_shards = dataset
    out = str(tmp_path / "out")
    gate = str(tmp_path / "gate")
    proc = _start(["--input", root, "--output", out, *ARGS], gate=gate, hold_renames_into=out)
    _wait_for(lambda: os.path.exists(gate + ".reached"), proc)
    _kill(proc)
    # Rerun with another shard count: none of the killed run's shards may remain, and its resume
    # area (of other options) is never used, and removed once this run publishes.
    assert convert("--input", root, "--output", out, "--num_shards", "2",
                   "--split", "train=0.75,validation=0.25", "--max_reject_fraction", "0.1") == 0
    assert sorted(_final_shards(out)) == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord",
                                          "validation-00000-of-00002.tfrecord", "validation-00001-of-00002.tfrecord"]
    assert manifest(out)["made"]["shards_resumed"] == 0
    assert not [d for d in os.listdir(out) if d.startswith(".")]
    assert convert("--input", root, "--output", out, *ARGS, "--overwrite") == 0
    assert_like_clean(out, clean_shards, clean)


def test_two_conversions_into_one_output(dataset, tmp_path):
    root, clean, clean_shards = dataset
    out = str(tmp_path / "out")
    gate = str(tmp_path / "gate")
    # The first run holds its lock and waits, at its first read of an image, until the
    # second run has finished: no race between the second run's start-up and the first
    # run's end.
    first = _start(["--input", root, "--output", out, *ARGS], gate=gate, slow_reads_under=root)
    _wait_for(lambda: os.path.exists(gate + ".reached"), first)
    assert os.path.exists(os.path.join(out, ".tfrecords.lock"))
    second = _start(["--input", root, "--output", out, *ARGS])
    _, err = second.communicate(timeout=300)
    assert second.returncode == 2, err
    assert "another conversion is writing --output" in err and f"pid {first.pid}" in err
    assert first.poll() is None  # still waiting at the gate
    open(gate, "w").close()
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
    from tfrecord_pipelines.transforms.storage import layout
    root = str(tmp_path / "ds")
    for version, run_id in (("v1", "20261121-010000-aaaa"), ("v2", "20261121-030000-bbbb")):
        write(os.path.join(root, version, "manifest.json"), json.dumps({"run_id": run_id}).encode())
    assert layout.publish_latest(root, "v2", "20261121-030000-bbbb")
    # v1's run started earlier but finished later (say its lock expired while it ran): LATEST stays.
    assert not layout.publish_latest(root, "v1", "20261121-010000-aaaa")
    assert open(os.path.join(root, "LATEST")).read() == "v2\n"
