"""An output is untrusted input. Datasets are shared and a manifest
is plain JSON anyone can edit, so every command that reads an output
(inspect, spec, report, verify, and a --versioned conversion reading the
version LATEST names) treats its files as hostile. Each test builds a real
output, tampers with it as an attacker would, and runs the command as a user
does (`python -m tfrecord_pipelines.cli ...`, with a timeout: a hang fails),
then holds it to: one `error:` line or a safe result, no traceback, nothing
read or written outside the output (a canary file outside whose contents
must never appear; a FIFO that must never be opened for reading)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, convert, image_bytes, make_tree, manifest, own_lines, write
from gcs_emulator import gcs  # noqa: F401 (fixture)

CANARY = "CANARY-c4n4ry-SECRET"  # the content of files outside the output: must never appear
SHARD = "train-00000-of-00001.tfrecord"


# ---- helpers -------------------------------------------------------------------------------------------------------


def cli(*args, timeout: float = 90, env: dict = None, cwd: str = None) -> subprocess.CompletedProcess:
    """Runs `tfrecords ...` as a user does; a hang fails the test."""
    e = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    try:
        return subprocess.run([sys.executable, "-m", "tfrecord_pipelines.cli", *map(str, args)], capture_output=True,
                              text=True, timeout=timeout, env=e, cwd=cwd or ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tfrecords {' '.join(map(str, args))} hung (more than {timeout} s)")


def one_error_line(p: subprocess.CompletedProcess, *wanted: str) -> str:
    """The command failed with exactly one `error:` line naming what is wrong."""
    assert p.returncode != 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]
    lines = own_lines(p.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr[-3000:]
    for w in wanted:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def no_traceback(p: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]


def load(out: str) -> dict:
    return manifest(out)


def save(out: str, m, raw: str = None) -> None:
    with open(os.path.join(out, "manifest.json"), "w", encoding="utf-8") as f:
        f.write(raw if raw is not None else json.dumps(m))


def fifo(path: str) -> str:
    """A FIFO at `path`: opening it for reading blocks until a writer comes,
    so a command that opens it hangs (and the test's timeout fails it)."""
    if os.path.lexists(path):
        os.remove(path)
    os.mkfifo(path)
    return path


def listing(folder) -> set:
    return {os.path.join(d, n) for d, _, names in os.walk(folder) for n in names}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A real output with an index per shard, a reject and a duplicate pair."""
    base = tmp_path_factory.mktemp("hostile")
    root = str(base / "images")
    make_tree(root, per_class=3)
    write(os.path.join(root, "dog", "notes.jpg"), b"just text")  # rejected: corrupt
    with open(os.path.join(root, "cat", "1.jpg"), "rb") as f:
        write(os.path.join(root, "dog", "copy.jpg"), f.read())   # a duplicate with another label
    out = str(base / "out")
    assert convert("--input", root, "--output", out, "--num_shards", "1", "--index_files",
                   "--max_reject_fraction", "1") == 0
    assert manifest(out)["counts"]["rejected"] == 1
    return out


@pytest.fixture
def scene(good, tmp_path):
    """A copy of the output to tamper with, beside a canary file and a canary
    image outside it: (output, canary file, canary image)."""
    out = str(tmp_path / "out")
    shutil.copytree(good, out)
    canary = write(str(tmp_path / "secret.txt"), (CANARY + "\nsecond line\n").encode())
    photo = write(str(tmp_path / "private" / "photo.jpg"), image_bytes(40, 30, seed=77))
    return out, canary, photo


def _runs(p: subprocess.CompletedProcess) -> str:
    return p.stdout + p.stderr


# ---- inspect --save_images: a name from the output used as a path --------------------------------------------------


@pytest.mark.parametrize("split", ["../../escaped", "/tmp/abs_split", "train\n"])
def test_inspect_refuses_split_names_that_are_paths(scene, tmp_path, split):
    out, _, _ = scene
    m = load(out)
    m["splits"] = {split: m["splits"].pop("train")}
    save(out, m)
    before = listing(tmp_path)
    p = cli("inspect", out, "--save_images", tmp_path / "saved")
    one_error_line(p, "split name")
    assert listing(tmp_path) == before and not os.path.exists("/tmp/abs_split-0.jpg")


def _rewrite_records(out: str, change) -> None:
    """Rewrites the shard with TensorFlow's writer, each Example changed by `change(example)`."""
    import tensorflow as tf
    path = os.path.join(out, SHARD)
    recs = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset([path])]
    with tf.io.TFRecordWriter(path) as w:
        for ex in recs:
            change(ex)
            w.write(ex.SerializeToString())


@pytest.mark.parametrize("fmt", [b"/../../../../tmp/x.pth", b"\xff\xfe"])
def test_inspect_saves_images_under_fixed_names_whatever_the_records_say(scene, tmp_path, fmt):
    """The image/format of a record picks an extension from a fixed set; a
    format that is a path (the .pth that ran code at Python's next start)
    gives `.img`, inside the folder asked for."""
    out, _, _ = scene
    _rewrite_records(out, lambda ex: ex.features.feature["image/format"].bytes_list.value.__setitem__(0, fmt))
    saved = tmp_path / "saved"
    before = listing(tmp_path) - listing(out)
    p = cli("inspect", out, "-n", "2", "--save_images", saved)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(saved)) == ["train-0.img", "train-1.img"]
    assert listing(tmp_path) - listing(out) == before | {str(saved / "train-0.img"), str(saved / "train-1.img")}
    assert not os.path.exists("/tmp/x.pth")


def test_inspect_prints_names_without_terminal_escapes(scene):
    """Feature keys (a label table's header) come from the manifest: printed
    with control characters escaped, so an escape sequence cannot reach the
    terminal."""
    out, _, _ = scene
    m = load(out)
    m["features"]["x\x1b]0;pwned\x07\u202e"] = "bytes"
    save(out, m)
    p = cli("inspect", out, "-n", "1")
    no_traceback(p)
    assert p.returncode == 0 and "\x1b" not in p.stdout and "\u202e" not in p.stdout
    assert "x\\x1b]0;pwned\\x07\\u202e: (absent)" in p.stdout


# ---- spec: generated code never runs what the manifest says -------------------------------------------------------


def _run_printed(tmp_path, code: str) -> subprocess.CompletedProcess:
    """Runs the printed tf.data module as a user would (`python read_out.py`)."""
    module = code.split("# ---- PyTorch:")[0]
    path = tmp_path / "read_out.py"
    path.write_text(module, encoding="utf-8")
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


VERSIONS = ["0.1\nopen('PWNED', 'w').write('x')  # ",
            # A `coding:` declaration in the first two lines makes Python decode the file as UTF-7, where +AAo- is
            # a newline.
            "-*- coding: utf-7 -*- +AAo-open(+ACI-PWNED+ACI-, +ACI-w+ACI-)",
            "0.1\rimport os; open('PWNED', 'w')", "0.1\u2028open('PWNED','w')", "0.1\x0copen('PWNED','w')"]


@pytest.mark.parametrize("version", VERSIONS[:2])
def test_spec_code_never_runs_the_tool_version(scene, tmp_path, version):
    out, _, _ = scene
    m = load(out)
    m["tool_version"] = version
    save(out, m)
    p = cli("spec", out)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    head = p.stdout.splitlines()[:2]
    assert "coding" not in "".join(head) and version not in p.stdout
    got = _run_printed(tmp_path, p.stdout)
    assert got.returncode == 0, got.stderr[-2000:]
    assert not (tmp_path / "PWNED").exists()


def test_spec_code_holds_only_its_own_statements_whatever_the_version(good):
    """Every version string (and a newline in any place of the module): the
    printed module's statements are the same as for an honest manifest."""
    import ast

    from tfrecord_pipelines.outputs.reading_code import reading_code

    def statements(code):
        return [type(n).__name__ for n in ast.parse(code.split("# ---- PyTorch:")[0]).body]

    honest = load(good)
    want = statements(reading_code(good, honest))
    for version in VERSIONS:
        m = dict(honest, tool_version=version)
        for output in (good, good + "\nimport os", good + "'\u202e"):
            code = reading_code(output, m)
            assert statements(code) == want, (version, output)
            assert "coding" not in "".join(code.splitlines()[:2])


def test_spec_code_quotes_every_name(scene, tmp_path):
    """Feature keys and the output's own path go into the code through
    repr(): a quote, a newline or a bidirectional override stays a string.
    The printed module runs and reads the records."""
    out, _, _ = scene
    weird = str(tmp_path / "out'\n#\u202e")
    os.rename(out, weird)
    m = load(weird)
    m["features"]["x'] ; open('PWNED','w') ; ['\n"] = "bytes"
    save(weird, m)
    p = cli("spec", weird)
    assert p.returncode == 0, p.stderr
    assert "\u202e" not in p.stdout
    code = p.stdout.split("# ---- PyTorch:")[0] + (
        "\nimport json as _j\nn = sum(1 for _ in tf.data.TFRecordDataset(shard_files('train'), "
        "compression_type=COMPRESSION))\nprint(_j.dumps({'records': n, 'out': OUT, 'keys': sorted(FEATURES)}))\n")
    got = _run_printed(tmp_path, code)
    assert got.returncode == 0, got.stderr[-2000:]
    assert json.loads(got.stdout.splitlines()[-1]) == {"records": m["splits"]["train"]["records"], "out": weird,
                                                       "keys": sorted(m["features"])}
    assert not (tmp_path / "PWNED").exists()


# ---- malformed manifests: one line, never a traceback or a hang ----------------------------------------------------


def _set(path: str, value):
    def change(m):
        *keys, last = path.split(".")
        node = m
        for k in keys:
            node = node[k] if not isinstance(node, list) else node[int(k)]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


BAD_MANIFESTS = {
    # wrong types
    "counts a string": _set("counts.written", "18"),
    "counts a list": _set("counts", [1, 2]),
    "splits a list": _set("splits", ["train"]),
    "split not an object": _set("splits.train", "x"),
    "shards an object": _set("splits.train.shards", {"name": SHARD}),
    "features a list": _set("features", ["image/encoded"]),
    "feature kind unknown": _set("features.image/encoded", "string"),
    "role names no feature": _set("feature_roles.encoded", "image/nothing"),
    "label map kind a number": _set("label_map.kind", 5),
    "label map classes strings": _set("label_map.classes", {"cat": "0"}),
    "label offset a float": _set("label_map.offset", 0.5),
    "tfds a list": _set("tfds", ["dataset_info.json"]),
    "tfds metadata a path": _set("tfds.metadata", ["../../etc/passwd"]),
    "output format unknown": _set("output_format", "parquet"),
    "compression unknown": _set("compression", "brotli"),
    "tf compression unknown": _set("tf_compression_type", "'; import os #"),
    "tool version an object": _set("tool_version", {"a": 1}),
    "options a list": _set("options", []),
    "quality a string": _set("quality", "bad"),
    "fingerprint a list": _set("fingerprint", ["run"]),
    "label counts strings": _set("splits.train.label_counts", {"cat": "3"}),
    "rejects file a path": _set("rejects_file", "../secret.txt"),
    # counts
    "negative count": _set("counts.listed", -1),
    "huge count": _set("counts.listed", 1 << 70),
    "count a bool": _set("splits.train.records", True),
    "NaN count": _set("counts.rejected", float("nan")),
    "Infinity count": _set("splits.train.bytes", float("inf")),
    # names that are paths, URLs or other tricks
    "split name with ..": lambda m: m.__setitem__("splits", {"..": m["splits"]["train"]}),
    "split name with NUL": lambda m: m.__setitem__("splits", {"tr\x00ain": m["splits"]["train"]}),
    "split name with RTL override": lambda m: m.__setitem__("splits", {"train\u202e": m["splits"]["train"]}),
    "split name with a newline": lambda m: m.__setitem__("splits", {"train\n": m["splits"]["train"]}),
    "shard name absolute": _set("splits.train.shards.0.name", "/etc/passwd"),
    "shard name ..": _set("splits.train.shards.0.name", "../out/" + SHARD),
    "shard name gs:// in a local output": _set("splits.train.shards.0.name", "gs://bucket/" + SHARD),
    "shard name of another split": _set("splits.train.shards.0.name", "validation-00000-of-00001.tfrecord"),
    "shard name with a newline": _set("splits.train.shards.0.name", SHARD + "\n"),
    "shard listed twice": lambda m: m["splits"]["train"]["shards"].append(dict(m["splits"]["train"]["shards"][0])),
    "index absolute": _set("splits.train.shards.0.index", "/etc/passwd"),
    "index /dev/zero": _set("splits.train.shards.0.index", "/dev/zero"),
    "index ..": _set("splits.train.shards.0.index", "../secret.txt"),
    "index a URL": _set("splits.train.shards.0.index", "http://127.0.0.1:9/x.idx"),
    "index a number": _set("splits.train.shards.0.index", 3),
}
RAW_MANIFESTS = {
    "duplicate key": lambda text: text.replace('"counts":', '"splits": {}, "counts":', 1),
    "deep nesting": lambda text: "[" * 200_000 + "]" * 200_000,
    "not an object": lambda text: "[1, 2, 3]",
    "empty": lambda text: "",
    "not UTF-8": lambda text: "\udcff",
    "cut short": lambda text: text[: len(text) // 2],
    "NUL bytes": lambda text: "\x00" * 100,
}
COMMANDS = ("verify", "inspect", "spec", "report")


def _damaged(out: str, case: str) -> None:
    if case in BAD_MANIFESTS:
        m = load(out)
        BAD_MANIFESTS[case](m)
        save(out, m)
    else:
        raw = RAW_MANIFESTS[case](open(os.path.join(out, "manifest.json"), encoding="utf-8").read())
        with open(os.path.join(out, "manifest.json"), "wb") as f:
            f.write(raw.encode("utf-8", "surrogateescape"))


CASES = sorted(BAD_MANIFESTS) + sorted(RAW_MANIFESTS)


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_manifest_is_one_error_line_for_every_command(scene, case, capsys):
    """Every command, in this process through the CLI's own entry (fast), and
    for every fourth case one of them (in turn) as a process of its own: one
    `error:` line, exit 1."""
    from tfrecord_pipelines.commands import inspect, report, spec, verify
    from tfrecord_pipelines.console.process import one_line_failure
    out, canary, _ = scene
    _damaged(out, case)
    mains = {"verify": verify.main, "inspect": inspect.main, "spec": spec.main, "report": report.main}
    for cmd in COMMANDS:
        capsys.readouterr()
        code = one_line_failure(cmd, mains[cmd], [out])
        got = capsys.readouterr()
        lines = got.err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), (cmd, got.err[-2000:])
        assert "Traceback" not in got.err and CANARY not in got.out + got.err, cmd
    i = CASES.index(case)
    if i % 4 == 0:
        p = cli(COMMANDS[i // 4 % len(COMMANDS)], out)
        one_error_line(p)
        assert CANARY not in _runs(p)


def test_a_huge_manifest_is_refused_by_its_size_before_any_read(scene):
    out, _, _ = scene
    path = os.path.join(out, "manifest.json")
    with open(path, "r+b") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse
    for cmd in COMMANDS:
        started = time.monotonic()
        one_error_line(cli(cmd, out), "bytes")
        assert time.monotonic() - started < 30


def test_the_manifest_cap_is_settable(good):
    """TFRECORDS_MAX_MANIFEST_BYTES: lowered, an ordinary manifest is refused
    (raised, a legitimately huge one is read)."""
    one_error_line(cli("spec", good, env={"TFRECORDS_MAX_MANIFEST_BYTES": "1000"}), "more than 1,000 bytes")
    assert cli("spec", good).returncode == 0


# ---- FIFOs, devices and links in place of an output's files -------------------------------------------------------


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_fifo_manifest_never_blocks(scene, cmd):
    out, _, _ = scene
    fifo(os.path.join(out, "manifest.json"))
    one_error_line(cli(cmd, out, timeout=60), "FIFO")


@pytest.mark.parametrize("cmd,target", [("verify", "outside"), ("inspect", "/dev/zero"), ("spec", "outside"),
                                        ("report", "/dev/zero")])
def test_a_manifest_linked_to_a_device_or_outside_is_refused(scene, tmp_path, cmd, target):
    out, canary, _ = scene
    path = os.path.join(out, "manifest.json")
    text = open(path, "rb").read()
    os.remove(path)
    if target == "outside":  # a complete, valid manifest outside the output: a link to it is still refused
        os.symlink(write(str(tmp_path / "elsewhere" / "manifest.json"), text), path)
        one_error_line(cli(cmd, out), "outside")
    else:
        os.symlink("/dev/zero", path)
        one_error_line(cli(cmd, out, timeout=60), "character device")


def test_a_link_inside_the_output_is_followed(scene, tmp_path):
    """Links that stay inside the output (or an output reached through a
    link) are fine: only a way out is refused."""
    out, _, _ = scene
    os.rename(os.path.join(out, "manifest.json"), os.path.join(out, "real-manifest.json"))
    os.symlink("real-manifest.json", os.path.join(out, "manifest.json"))
    link = tmp_path / "link-to-out"
    os.symlink(out, link)
    p = cli("verify", link, "--quiet")
    assert p.returncode == 0 and "OK: 1 shard" in p.stdout, p.stderr


@pytest.mark.parametrize("index", ["secret", "../secret.txt", "/dev/zero"])
def test_verify_never_follows_an_index_path_the_manifest_names(scene, index):
    """The manifest's `index` of a shard once led verify to any file: it
    printed the first line of /etc/passwd, read /dev/zero until out of
    memory. Now it must be index/ + the shard's own name + .idx."""
    out, canary, _ = scene
    m = load(out)
    m["splits"]["train"]["shards"][0]["index"] = canary if index == "secret" else index
    save(out, m)
    p = cli("verify", out, timeout=60)
    one_error_line(p, "its index must be")
    assert CANARY not in _runs(p) and "second line" not in _runs(p)


@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "canary", "sparse", "dir"])
def test_verify_reads_a_shard_index_only_as_a_small_file_inside_the_output(scene, target):
    """The index verify reads is index/ + the shard's name + .idx (the manifest's
    `index` field is checked against it): in its place a FIFO, /dev/zero, a
    link to a file outside, a 1 TiB sparse file or a folder is an error for
    that index, and verify goes on; the outside file's lines never show."""
    out, canary, _ = scene
    idx = os.path.join(out, "index", SHARD + ".idx")
    os.remove(idx)
    if target == "fifo":
        fifo(idx)
    elif target == "/dev/zero":
        os.symlink("/dev/zero", idx)
    elif target == "canary":
        os.symlink(canary, idx)
    elif target == "sparse":
        with open(idx, "wb") as f:
            f.truncate(1 << 40)
    else:
        os.mkdir(idx)
    p = cli("verify", out, "--quiet", timeout=60)
    no_traceback(p)
    assert p.returncode == 1 and CANARY not in _runs(p) and "second line" not in _runs(p)
    assert f"ERROR index/{SHARD}.idx:" in p.stderr and "FAILED:" in p.stderr, p.stderr
    assert {line.split(":")[0] for line in p.stderr.splitlines()} == {f"ERROR index/{SHARD}.idx", "FAILED"}, p.stderr
    assert "cannot be read as an index" in p.stderr


@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "canary"])
def test_a_shard_that_is_no_file_of_the_output_is_an_error_not_a_hang(scene, target):
    """verify names the shard; inspect and report (for a FIFO) go on without it."""
    out, canary, _ = scene
    shard = os.path.join(out, SHARD)
    os.remove(shard)
    if target == "fifo":
        fifo(shard)
    elif target == "/dev/zero":
        os.symlink("/dev/zero", shard)
    else:
        os.symlink(canary, shard)
    p = cli("verify", out, "--quiet", timeout=60)
    no_traceback(p)
    assert p.returncode == 1 and f"ERROR {SHARD}: cannot be read" in p.stderr and CANARY not in _runs(p)
    if target != "fifo":
        return
    one_error_line(cli("inspect", out, timeout=60), "cannot be read")
    p = cli("report", out, "--to", os.path.join(os.path.dirname(out), "r.html"), timeout=120)
    no_traceback(p)
    assert p.returncode == 0 and "the shards could not be sampled" in open(
        os.path.join(os.path.dirname(out), "r.html"), encoding="utf-8").read()


def test_a_fifo_rejects_file_never_blocks(scene, tmp_path):
    out, _, _ = scene
    fifo(os.path.join(out, "rejects.jsonl"))
    p = cli("verify", out, "--quiet", timeout=60)
    no_traceback(p)
    assert p.returncode == 1 and "ERROR rejects.jsonl: cannot be read" in p.stderr and "FIFO" in p.stderr
    p = cli("report", out, "--to", tmp_path / "r.html", timeout=120)
    assert p.returncode == 0, p.stderr
    for cmd in ("inspect", "spec"):
        assert cli(cmd, out, timeout=60).returncode == 0


def test_huge_rejects_files_cost_only_their_caps(scene, tmp_path):
    """One endless line (a 1 TiB sparse file of NULs): verify counts its
    lines in pieces and says they do not match; the report reads 32 MiB of it."""
    out, _, _ = scene
    with open(os.path.join(out, "rejects.jsonl"), "wb") as f:
        f.truncate(1 << 34)  # 16 GiB: read at memory speed in pieces by verify
    p = cli("report", out, "--to", tmp_path / "r.html", timeout=120)
    assert p.returncode == 0, p.stderr
    with open(os.path.join(out, "rejects.jsonl"), "wb") as f:
        f.write(b'{"path": "x.jpg", "reason": "corrupt", "detail": "' + b"A" * (1 << 22) + b'"}\n')
    p = cli("verify", out, "--quiet", "--fast", timeout=120)
    no_traceback(p)
    assert p.returncode == 0, p.stderr  # still one line, one reject


def test_a_record_claiming_a_huge_length_is_damage_not_an_allocation(scene):
    """A record header with a valid CRC over a length of 2^40 bytes."""
    import struct

    import google_crc32c

    from tfrecord_pipelines.transforms.core.tfrecord_io import mask
    out, _, _ = scene
    length = struct.pack("<Q", 1 << 40)
    with open(os.path.join(out, SHARD), "r+b") as f:
        f.write(length + struct.pack("<I", mask(google_crc32c.value(length))))
    p = cli("verify", out, "--quiet", timeout=60)
    no_traceback(p)
    assert p.returncode == 1 and "more than a tf.train.Example can hold" in p.stderr, p.stderr
    one_error_line(cli("inspect", out, timeout=60), "more than a tf.train.Example can hold")


# ---- report: reads nothing outside the output the manifest names; escapes every value -------------------------------


def _point_at(m: dict, photo: str) -> None:
    """The manifest's input root and its duplicate and near-duplicate paths
    name a private image of the reader's, outside the output."""
    folder, name = os.path.split(photo)
    m["options"]["inputs"]["root"] = folder
    d = m["quality"]["duplicates"]
    d["examples"] = [{"sha256": "0" * 64, "count": 2, "files": [{"path": name, "split": "train", "label": "cat"},
                                                                 {"path": photo, "split": "train", "label": "cat"}]}]
    d["groups"] = 1
    m["quality"]["near_duplicates"]["examples"] = [
        {"distance": 1, "a": {"path": name, "split": "train"}, "b": {"path": "../private/" + name, "split": "train"}}]


def test_report_never_embeds_files_the_manifest_points_at(scene, tmp_path):
    """The manifest's `options.inputs.root` and duplicate paths name the
    reader's own photo; rejects.jsonl names it too. The page shows them as
    names without a thumbnail. Only with --sources (the reader's own word)
    are files under that folder read."""
    from test_report_html import elements
    out, _, photo = scene
    m = load(out)
    _point_at(m, photo)
    save(out, m)
    with open(os.path.join(out, "rejects.jsonl"), "w") as f:
        f.write(json.dumps({"path": "photo.jpg", "reason": "unsupported_format", "detail": "x", "split": "train"})
                + "\n")
    page_path = tmp_path / "r.html"
    p = cli("report", out, "--to", page_path)
    assert p.returncode == 0, p.stderr
    page = page_path.read_text(encoding="utf-8")
    thumbs = {dict(a).get("alt") for t, a in elements(page) if t == "img" and dict(a).get("class") == "thumb"}
    assert not {"photo.jpg", photo, "../private/photo.jpg"} & thumbs
    assert 'title="photo.jpg">no preview' in page and "--sources DIR" in page
    # With the reader's own --sources, files under it are read (the relative names only).
    p = cli("report", out, "--to", page_path, "--sources", os.path.dirname(photo))
    assert p.returncode == 0, p.stderr
    page = page_path.read_text(encoding="utf-8")
    thumbs = [dict(a).get("alt") for t, a in elements(page) if t == "img" and dict(a).get("class") == "thumb"]
    assert "photo.jpg" in thumbs and photo not in thumbs and "../private/photo.jpg" not in thumbs
    # The Python API takes the same word, and holds to the same rule without it.
    import tfrecord_pipelines as tfp
    for sources, shown in (("", False), (os.path.dirname(photo), True)):
        tfp.report(out, to=str(page_path), sources=sources)
        page = page_path.read_text(encoding="utf-8")
        thumbs = [dict(a).get("alt") for t, a in elements(page) if t == "img" and dict(a).get("class") == "thumb"]
        assert ("photo.jpg" in thumbs) is shown and photo not in thumbs and "../private/photo.jpg" not in thumbs


MARKUP = '<meta http-equiv="refresh" content="0;url=http://127.0.0.1:9/stolen"><form action="http://127.0.0.1:9/f">'


def _hostile_report_manifest(m: dict) -> None:
    """Markup in every value of the manifest a page shows, including the
    three figures that once reached the HTML unescaped, and wrong types."""
    q = m["quality"]
    q["near_duplicates"].update(max_distance=MARKUP, bits=MARKUP, hash=MARKUP, pairs=MARKUP)
    q["near_duplicates"]["examples"] = [{"distance": MARKUP, "a": {"path": MARKUP, "split": MARKUP},
                                         "b": "not an object"}]
    q["balance"]["min_count"] = MARKUP
    q["balance"]["below_min"] = {"train": [MARKUP, "tr\u202eain"], MARKUP: MARKUP}
    q["balance"]["missing_from_train"] = {MARKUP: {"not": "a list"}}
    q["balance"]["per_split"]["train"]["$$"] = 2          # matplotlib's math syntax as a class name
    q["balance"]["per_split"]["train"]["$100_$200"] = "3"  # and a count that is not one
    q["duplicates"].update(groups=MARKUP, policy=MARKUP, across_splits=MARKUP,
                           examples=[{"files": [{"path": MARKUP, "label": MARKUP}], "count": MARKUP}, "x"])
    q["sizes"]["width"]["counts"] = [MARKUP] * 11
    m["rejects_by_reason"] = {MARKUP: 1, **{f"r{i}": 1 for i in range(500)}}
    m["counts"]["rejected"] = 501
    m["counts"]["listed"] = m["counts"]["written"] + 501
    m["tool_version"] = MARKUP
    m["created"] = MARKUP + "\x00"
    m["options"]["inputs"]["root"] = MARKUP
    m["counts"]["excluded"] = {MARKUP: 1}
    m["label_map"]["classes"][MARKUP] = 99


def test_report_escapes_every_value_and_its_page_cannot_navigate(scene, tmp_path):
    """Every manifest value holding markup becomes text: no <meta refresh>,
    <form> or foreign element in the page, and headless Chromium stays on it
    and loads nothing."""
    from test_report_html import elements, render
    out, _, _ = scene
    m = load(out)
    _hostile_report_manifest(m)
    save(out, m)
    with open(os.path.join(out, "rejects.jsonl"), "w") as f:
        f.write(json.dumps({"path": MARKUP, "reason": MARKUP, "detail": MARKUP, "split": MARKUP}) + "\n")
    page_path = tmp_path / "r.html"
    p = cli("report", out, "--to", page_path)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    page = page_path.read_text(encoding="utf-8")
    tags = elements(page)
    assert [t for t, _ in tags if t == "meta"] == ["meta"] * 3 and not [t for t, _ in tags if t in ("form", "a")]
    assert MARKUP not in page and html_escaped(MARKUP) in page
    assert "\u202e" not in page and "tr\\u202eain" in page and "\x00" not in page
    url = "file://" + str(page_path)
    got = render(str(page_path))
    time.sleep(0.1)
    assert [u for u in got["requests"] if u != url and not u.startswith("data:")] == []
    assert "<meta http-equiv" in got["text"]  # shown as text


def html_escaped(text: str) -> str:
    import html
    return html.escape(text, quote=True)


def test_the_page_policy_forbids_forms_and_base_urls_in_chromium(tmp_path):
    """Beyond the escaping: were markup to get in, the page's Content-Security-
    Policy stops a form from submitting anywhere and a <base> from moving
    its URLs (no CSP directive stops a <meta refresh>: check_markup refuses
    to return a page holding one)."""
    from test_report_html import Browser

    from tfrecord_pipelines.transforms.core import report_html
    page = report_html.build_html({"counts": {"listed": 0, "written": 0, "rejected": 0, "not_selected": 0}})
    injected = page.replace("<body>", '<body><base href="http://127.0.0.1:9/"><form id="f" '
                                      'action="http://127.0.0.1:9/submit" method="get"><input name="q" value="x">'
                                      "</form>")
    path = tmp_path / "injected.html"
    path.write_text(injected, encoding="utf-8")
    b = Browser()
    try:
        b.send("Page.navigate", session=True, url="file://" + str(path))
        b.wait_for("Page.loadEventFired")
        base = b.send("Runtime.evaluate", session=True, expression="document.baseURI", returnByValue=True)
        b.send("Runtime.evaluate", session=True, expression="document.getElementById('f').submit()")
        time.sleep(1.0)
        b.send("Runtime.evaluate", session=True, expression="1", returnByValue=True)  # drain events
        where = b.send("Runtime.evaluate", session=True, expression="location.href", returnByValue=True)
        events = list(b.events)
    finally:
        b.close()
    assert base["result"]["value"].startswith("file://")
    assert where["result"]["value"] == "file://" + str(path)
    sent = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    assert not [u for u in sent if "127.0.0.1" in u], sent
    for bad in ('<meta http-equiv="refresh" content="0;url=http://127.0.0.1:9/">', '<form action="x">',
                '<base href="http://x/">', '<a href="http://x/">x</a>', '<img src="http://x/y.png">',
                '<div onclick="x">', "<script>x</script>", "<!-- x -->", '<iframe src="data:text/html,x">'):
        with pytest.raises(report_html.MarkupError):
            report_html.check_markup(page.replace("<body>", "<body>" + bad))


def test_an_svg_chart_holds_only_what_the_chart_writer_writes():
    """Charts are SVG images in data: URIs: check_markup holds what is inside
    them to svg_charts' shapes and text too (a script, a link, an external
    load or an event handler inside a chart is refused); real charts pass."""
    import base64

    from tfrecord_pipelines.transforms.core import report_html, svg_charts
    page = report_html.build_html({"counts": {"listed": 0, "written": 0, "rejected": 0, "not_selected": 0}})
    chart = report_html.bars_chart("reasons <&>", ["a\u202eb", "<script>"], [3, 1])
    report_html.check_markup(page.replace("<body>", "<body>" + report_html._chart(chart, "x")))

    def svg(body: str) -> str:
        doc = svg_charts.Svg(10, 10)
        doc.parts.append(body)
        return "data:image/svg+xml;base64," + base64.b64encode(doc.document().encode()).decode()
    for bad in ("<script>alert(1)</script>", '<a href="http://x/"><text x="1" y="1">x</text></a>',
                '<image href="http://127.0.0.1:9/y.png"/>', '<rect x="1" onload="x"/>', "<!-- x -->",
                '<foreignObject><div>x</div></foreignObject>'):
        with pytest.raises(report_html.MarkupError, match="SVG chart"):
            report_html.check_markup(page.replace("<body>", "<body>" + report_html._chart(svg(bad), "x")))
    with pytest.raises(report_html.MarkupError, match="not base64"):
        report_html.check_markup(page.replace("<body>", '<body><img class="chart" src="data:image/svg+xml;base64,%%" '
                                                        'alt="x">'))


def test_report_of_a_manifest_with_wrong_section_types_still_builds(scene, tmp_path):
    out, _, _ = scene
    m = load(out)
    m["quality"] = {"duplicates": [1, 2], "near_duplicates": "x", "balance": {"per_split": ["train"]},
                    "sizes": {"width": {"edges": [0, "a"], "counts": [float("nan")]}}}
    m["options"] = {"inputs": ["root"]}
    save(out, m)
    p = cli("report", out, "--to", tmp_path / "r.html")
    no_traceback(p)
    assert p.returncode == 0 and "<h2>Summary</h2>" in (tmp_path / "r.html").read_text(encoding="utf-8")


# ---- convert reading a previous version: LATEST, its manifest, the lock ------------------------------------------


@pytest.fixture
def versioned(tmp_path):
    images, root = str(tmp_path / "images"), str(tmp_path / "dataset")
    make_tree(images, per_class=1)
    assert convert("--input", images, "--output", root, "--versioned", "--version", "v1") == 0
    return images, root


def _convert(images, root, *extra):
    return cli("convert", "--input", images, "--output", root, "--versioned", "--progress", "off",
               "--direct_running_mode", "in_memory", *extra, timeout=300)


@pytest.mark.parametrize("latest", ["fifo", "../outside", "sparse", "link-out"])
def test_convert_refuses_a_latest_pointer_that_is_no_version_name(versioned, tmp_path, latest):
    images, root = versioned
    path = os.path.join(root, "LATEST")
    os.remove(path)
    if latest == "fifo":
        fifo(path)
    elif latest == "sparse":
        with open(path, "wb") as f:
            f.truncate(1 << 40)
    elif latest == "link-out":
        write(str(tmp_path / "elsewhere" / "LATEST"), b"v1\n")
        os.symlink(tmp_path / "elsewhere" / "LATEST", path)
    else:
        write(path, latest.encode())
    before = listing(root)
    p = _convert(images, root, "--version", "v2")
    one_error_line(p, "LATEST")
    assert listing(root) == before and not os.path.exists(os.path.join(root, "v2"))
    if latest == "fifo":  # verify follows LATEST through the same bounded reader: no hang
        one_error_line(cli("verify", root), "LATEST", "is a FIFO")


def test_a_latest_pointer_holds_a_version_name_only():
    from tfrecord_pipelines.transforms.storage import layout
    for name in ("v1", "2026-11-25.a_b"):
        assert layout.VERSION_NAME.fullmatch(name)
    for name in ("../x", "/etc", "v1\n", "v1\nv2", ".hidden", "a/b", "gs://b/v1", "v\u202e1", "v\x001", ""):
        assert not layout.VERSION_NAME.match(name), name


@pytest.mark.parametrize("damage", ["fingerprint a list", "fifo"])
def test_convert_refuses_a_previous_version_with_a_malformed_manifest(versioned, damage):
    images, root = versioned
    v1 = os.path.join(root, "v1")
    if damage == "fifo":
        fifo(os.path.join(v1, "manifest.json"))
    else:
        _damaged(v1, damage)
    one_error_line(_convert(images, root, "--version", "v2"), "LATEST points at 'v1', whose manifest cannot be read")
    assert not os.path.exists(os.path.join(root, "v2"))


@pytest.mark.parametrize("what", ["fifo", "dir"])
def test_a_lock_that_is_no_file_is_named_not_waited_on(tree, tmp_path, what):
    root, _ = tree
    out = str(tmp_path / "out")
    os.makedirs(out)
    lock = os.path.join(out, ".tfrecords.lock")
    fifo(lock) if what == "fifo" else os.mkdir(lock)
    p = cli("convert", "--input", root, "--output", out, "--progress", "off", "--direct_running_mode", "in_memory",
            timeout=300)
    one_error_line(p, ".tfrecords.lock")
    assert not [n for n in os.listdir(out) if n.endswith(".tfrecord")]


# ---- gs:// outputs: the same rules, and the size bound ------------------------------------------------------------


def test_a_bucket_output_is_read_as_untrusted_too(gcs, good):  # noqa: F811 (the fixture)
    from gcs_emulator import bucket, upload_tree
    prefix = "hostile-out"
    upload_tree(good, prefix)
    out = f"gs://{gcs}/{prefix}"
    assert cli("verify", out, "--quiet").returncode == 0
    # The manifest's size is bounded on a bucket as locally (a ranged read one byte past the cap).
    one_error_line(cli("inspect", out, env={"TFRECORDS_MAX_MANIFEST_BYTES": "1000"}), "more than 1,000 bytes")
    # Local paths and other buckets' objects in a bucket's manifest are refused.
    for name in ("/etc/passwd", f"gs://{gcs}/other/{SHARD}", "../" + SHARD):
        m = load(good)
        m["splits"]["train"]["shards"][0]["name"] = name
        bucket().blob(f"{prefix}/manifest.json").upload_from_string(json.dumps(m))
        for cmd in ("verify", "spec"):
            one_error_line(cli(cmd, out), "shard")


# ---- the reading primitives, in this process ----------------------------------------------------------------------


def test_lines_are_read_within_their_caps_and_counted_in_pieces(tmp_path):
    from tfrecord_pipelines.transforms.storage import untrusted
    path = str(tmp_path / "f")
    for data in (b"", b"a", b"a\n", b"a\nb", b"\n\n", b"a\r\nb\n", b"x" * (3 << 20) + b"\ny"):
        write(path, data)
        assert untrusted.count_lines(path) == len(data.splitlines()), data[:20]
    write(path, b"short\n" + b"L" * 1000 + b"\nafter\n" + b"tail-without-newline")
    assert list(untrusted.read_lines(path, max_bytes=10_000, max_line=100)) == [
        b"short", b"L" * 100, b"after", b"tail-without-newline"]
    assert list(untrusted.read_lines(path, max_bytes=20, max_line=100)) == [b"short", b"L" * 14]
    with pytest.raises(untrusted.TooLarge):
        untrusted.read(path, 100)
    os.symlink(path, str(tmp_path / "inside"))
    assert untrusted.read(str(tmp_path / "inside"), 1 << 20, within=str(tmp_path)).startswith(b"short")
    with pytest.raises(untrusted.Refused):
        untrusted.read(str(tmp_path / "inside"), 1 << 20, within=str(tmp_path / "sub"))
