"""The command line: mistyped flags, one-line messages instead of
tracebacks, and the smaller items (shard counts, case, help text, --version)."""
import os
import resource
import signal
import subprocess
import sys

import pytest

from conftest import convert, image_bytes, make_tree, manifest, read_examples, write
from tfrecord_pipelines.options import help_parser

BIN = os.path.dirname(sys.executable)
TFRECORDS = os.path.join(BIN, "tfrecords")


@pytest.mark.parametrize("flag,value,suggested", [
    ("--num_shard", "4", "--num_shards"),
    ("--num-shards", "4", "--num_shards"),
    ("--compresion", "gzip", "--compression"),
    ("--feature_key", "image/encoded=x", "--feature_keys"),
    ("--label-depth", "2", "--label_depth"),
    ("--overwrit", None, "--overwrite"),
])
def test_mistyped_flags_fail_with_a_suggestion(tmp_path, capsys, flag, value, suggested):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=1)
    args = [flag] + ([value] if value is not None else [])
    assert convert("--input", root, "--output", out, *args) == 2
    err = capsys.readouterr().err
    assert f"unknown flag {flag}: did you mean {suggested}?" in err
    assert not os.path.exists(out)


def test_unknown_flag_without_a_near_name_and_stray_values(tmp_path, capsys):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=1)
    assert convert("--input", root, "--output", out, "--zzqq", "1") == 2
    assert "unknown flag --zzqq" in capsys.readouterr().err
    assert convert("--input", root, "--output", out, "stray") == 2
    assert "unexpected argument 'stray'" in capsys.readouterr().err


def test_beams_own_flags_still_pass(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=2)
    assert convert("--input", root, "--output", out, "--runner", "DirectRunner", "--direct_num_workers", "1",
                   "--direct_runner_bundle_repeat", "2", "--temp_location", str(tmp_path / "tmp"),
                   "--project", "p", "--region", "europe-west1", "--experiments", "x",
                   "--setup_file", os.path.join(os.path.dirname(BIN), "..", "setup.py")) == 0
    assert len(read_examples(out, "train")) == 6


def test_compression_in_any_case(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=1)
    assert convert("--input", root, "--output", out, "--compression", "GZIP", "--validate", "HEADER") == 0
    m = manifest(out)
    assert m["tf_compression_type"] == "GZIP" and m["splits"]["train"]["shards"][0]["name"].endswith(".gz")
    assert len(read_examples(out, "train")) == 3


def test_num_shards_zero_is_an_error_and_auto_is_explicit(tmp_path, capsys):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=1)
    assert convert("--input", root, "--output", out, "--num_shards", "0") == 2
    assert "--num_shards 0: expected N >= 1, or auto" in capsys.readouterr().err
    assert convert("--input", root, "--output", out, "--num_shards", "auto") == 0
    assert manifest(out)["splits"]["train"]["num_shards"] == 1


def test_more_shards_than_records_warns_and_singular_shard(tmp_path, capsys):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=1)
    assert convert("--input", root, "--output", out, "--num_shards", "5") == 0
    captured = capsys.readouterr()
    assert "warning: split train: 5 shards for 3 records; 2 shards are empty" in captured.err
    assert manifest(out)["splits"]["train"]["num_shards"] == 5  # the count asked for is kept
    assert len(read_examples(out, "train")) == 3
    out1 = str(tmp_path / "out1")
    assert convert("--input", root, "--output", out1, "--num_shards", "1") == 0
    assert "warning" not in capsys.readouterr().err
    p = subprocess.run([TFRECORDS, "verify", out1], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "OK: 1 shard, 3 records" in p.stdout


def test_help_shows_each_default_once():
    text = help_parser("tfrecords convert").format_help()
    assert "(default: )" not in text
    flat = " ".join(text.split())
    assert "(default: the table's folder) (default" not in flat
    assert "(default: 150MB)" in flat and "(default: full)" in flat and "(default: auto)" in flat


def test_version_flag():
    from tfrecord_pipelines import __version__
    p = subprocess.run([TFRECORDS, "--version"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == f"tfrecords {__version__}"


def test_output_is_a_file_or_through_a_file(tmp_path, capsys):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=1)
    f = write(str(tmp_path / "afile"), b"x")
    assert convert("--input", root, "--output", f) == 2
    err = capsys.readouterr().err
    assert f"--output {f!r} is a file, not a folder" in err and "Traceback" not in err
    through = os.path.join(f, "sub", "out")
    assert convert("--input", root, "--output", through) == 2
    err = capsys.readouterr().err
    assert f"{f!r} is a file, so no folder can be made inside it" in err and "Traceback" not in err
    assert open(f, "rb").read() == b"x"


def test_output_not_writable(tmp_path, capsys):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=1)
    out = "/proc/sys/tfrecords-out"  # not writable, even for root
    assert convert("--input", root, "--output", out) == 2
    err = capsys.readouterr().err
    assert "no permission to write in '/proc/sys'" in err and "Traceback" not in err


def _limit_file_size():
    # Files stop growing at 64 KB, as on a full disk (EFBIG instead of ENOSPC).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_disk_full_while_writing_is_one_line(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    for k in range(4):
        write(os.path.join(root, "a", f"{k}.jpg"), image_bytes(300, 300, seed=k, quality=95))
    p = subprocess.run([TFRECORDS, "convert", "--input", root, "--output", out, "--progress", "off"],
                       capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size)
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: File too large") and f"while writing --output {out}" in lines[0]
    assert "free space" in lines[0]
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def test_every_record_rejected_prints_reasons_and_counts_only(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    write(os.path.join(root, "a", "x.jpg"), b"hello")
    write(os.path.join(root, "a", "y.jpg"), b"")
    for mode in ("multi_processing", "in_memory"):
        p = subprocess.run([TFRECORDS, "convert", "--input", root, "--output", out, "--progress", "off",
                            "--direct_running_mode", mode, "--direct_num_workers", "2"],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 1
        lines = p.stderr.strip().splitlines()
        assert p.stdout == "" and len(lines) == 2, p.stderr
        assert lines[0].startswith("error: 2 of 2 listed records (100.0%) were rejected")
        assert lines[1] == "rejected by reason: empty 1, not_an_image 1" or \
            lines[1] == "rejected by reason: not_an_image 1, empty 1"


def test_debug_shows_the_traceback(tmp_path):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    write(os.path.join(root, "a", "x.jpg"), b"hello")
    p = subprocess.run([TFRECORDS, "convert", "--input", root, "--output", out, "--progress", "off",
                        "--direct_running_mode", "in_memory", "--debug"], capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "Traceback" in p.stderr and "TooManyRejects" in p.stderr


@pytest.mark.parametrize("args,message", [
    (["--label_depth", "1_0"], "--label_depth '1_0' is not an integer"),
    (["--max_reject_fraction=nan"], "--max_reject_fraction 'nan' is not a number"),
    (["--seed", "\u0663"], "--seed '\u0663' is not an integer"),
])
def test_number_flags_use_the_strict_grammar(tmp_path, capsys, args, message):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=1)
    assert convert("--input", root, "--output", str(tmp_path / "out"), *args) == 2
    assert message in capsys.readouterr().err


def test_version_alone_prints_the_tool_version_in_convert(capsys):
    from tfrecord_pipelines import __version__
    from tfrecord_pipelines.commands.convert import run
    assert run(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tfrecords {__version__}"


@pytest.mark.parametrize("typed,meant", [("conver", "convert"), ("verfy", "verify"), ("chek", "check"),
                                         ("cleanp", "cleanup")])
def test_a_mistyped_command_gets_a_suggestion(typed, meant):
    p = subprocess.run([TFRECORDS, typed], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    first = p.stderr.splitlines()[0]
    assert first == f"tfrecords: unknown command {typed!r}: did you mean {meant}? (tfrecords {meant} --help)", p.stderr
    p = subprocess.run([TFRECORDS, "zzqq"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.splitlines()[0] == "tfrecords: unknown command 'zzqq'", p.stderr


def test_help_lists_dry_run_the_resize_choices_and_what_progress_does_when_piped():
    from tfrecord_pipelines.console.progress_line import ProgressLine
    from tfrecord_pipelines.transforms.core.resize import FILTERS
    p = subprocess.run([TFRECORDS, "convert", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    flat = " ".join(p.stdout.split())
    assert "--dry_run (Beam's flag): on a local run, say what the run would list" in flat
    assert "exit 1 if it says the run would be refused" in flat
    assert f"--resize_filter {{{','.join(FILTERS)}}}" in flat
    for flag, choices in (("resize_png", "keep,jpeg"), ("resize_smart", "on,off"), ("resize_draft", "on,off")):
        assert f"--{flag} {{{choices}}}" in flat, flag
    assert "--resize_longest_side N" in flat  # a number keeps its placeholder
    # What a piped run shows (tests/e2e/test_progress.py::test_no_bar_where_nobody_watches_unless_asked and
    # ::test_where_nobody_watches_a_stall_is_still_one_line): no bar, one line on a stall.
    assert "every 10 s" not in flat
    assert (f"piped or in a log, no bar: only a line when nothing has moved for {ProgressLine.STALL_SECONDS:g} s"
            in flat)


def test_resize_choices_keep_their_defaults_when_not_given(tmp_path):
    # Choices in --help, yet an unset --resize_* flag still means its default (lanczos, keep, on, on).
    from tfrecord_pipelines.options import table
    values = table.parse_known(["--resize_longest_side", "64"])[0]
    assert (values.resize_filter, values.resize_png, values.resize_smart, values.resize_draft) == (None,) * 4


def test_a_dry_run_that_would_be_refused_exits_1(tmp_path, capsys):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=1)
    assert convert("--input", root, "--output", out) == 0
    before = sorted((d, sorted(f)) for d, _, f in os.walk(out))
    capsys.readouterr()
    assert convert("--input", root, "--output", out, "--dry_run") == 1
    text = capsys.readouterr().out
    assert f"would be refused: {out} already holds a dataset (1 shard); pass --overwrite" in text, text
    assert sorted((d, sorted(f)) for d, _, f in os.walk(out)) == before
    assert convert("--input", root, "--output", out, "--dry_run", "--overwrite") == 0
    assert f"would replace the dataset in {out}: its manifest and 1 shard would be removed" in capsys.readouterr().out


class _ReadOnly:
    """A folder on a read-only filesystem: a real read-only tmpfs where this
    process may mount one (root with CAP_SYS_ADMIN); elsewhere the kernel's
    two answers for it injected (access() refuses, statvfs() says ST_RDONLY)."""

    def __init__(self, path: str, monkeypatch):
        os.makedirs(path)
        self.path = path
        self.mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", path],
                                      capture_output=True).returncode == 0
        if not self.mounted:
            real_access, real_statvfs = os.access, os.statvfs

            def access(p, mode, *a, **k):
                return False if str(p).startswith(path) and mode & os.W_OK else real_access(p, mode, *a, **k)

            def statvfs(p):
                got = real_statvfs(p)
                if not str(p).startswith(path):
                    return got
                return os.statvfs_result((*got[:8], got.f_flag | os.ST_RDONLY, got.f_namemax))
            monkeypatch.setattr(os, "access", access)
            monkeypatch.setattr(os, "statvfs", statvfs)

    def close(self):
        if self.mounted:
            subprocess.run(["umount", "-l", self.path], check=True)


def test_a_read_only_output_filesystem_is_named_as_such(tmp_path, monkeypatch, capsys):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=1)
    ro = _ReadOnly(str(tmp_path / "ro"), monkeypatch)
    try:
        for out in (ro.path, os.path.join(ro.path, "sub", "out")):
            assert convert("--input", root, "--output", out) == 2
            err = capsys.readouterr().err
            assert err.strip() == (f"error: --output {out!r}: {ro.path!r} is on a read-only filesystem; remount it "
                                   "read-write or choose an --output on a writable disk"), err
    finally:
        ro.close()


def _fail_writes(monkeypatch, function: str, name: str, code: int) -> None:
    """fsutil.<function> fails with `code` (an OSError, as the kernel's) when it writes a file called `name`."""
    import errno  # noqa: F401 (codes named by the callers)

    from tfrecord_pipelines.transforms.storage import fsutil
    real = getattr(fsutil, function)

    def writing(path, data):
        if os.path.basename(path) == name:
            raise OSError(code, os.strerror(code), path)
        return real(path, data)
    monkeypatch.setattr(fsutil, function, writing)


def test_a_failed_publish_says_how_to_rerun_without_overwrite(tmp_path, monkeypatch, capsys):
    """A read-only filesystem while the label map is written: the plain run
    says the same command resumes; a versioned one names the version LATEST
    still names; neither asks for --overwrite, and the same command succeeds."""
    import errno
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=2)
    cases = {"plain": (str(tmp_path / "out"), []), "versioned": (str(tmp_path / "root"), ["--versioned"])}
    for name, (out, extra) in cases.items():
        if name == "versioned":
            assert convert("--input", root, "--output", out, *extra) == 0
            first = open(os.path.join(out, "LATEST")).read().strip()
            write(os.path.join(root, "cat", "new.jpg"), image_bytes(30, 20, seed=7))
            capsys.readouterr()
        _fail_writes(monkeypatch, "write_chunks", "label_map.json", errno.EROFS)
        assert convert("--input", root, "--output", out, *extra) == 1
        monkeypatch.undo()
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "Read-only file system; nothing was published (" in lines[0], lines
        assert "--overwrite" not in lines[0], lines
        if name == "plain":
            assert lines[0].endswith(f"{out} has no manifest.json; once this is fixed, the same command resumes from "
                                     "the completed shards)"), lines
        else:
            assert lines[0].endswith(f"LATEST still names {first}; once this is fixed, the same command publishes a "
                                     "new version)"), lines
            assert open(os.path.join(out, "LATEST")).read().strip() == first
        assert convert("--input", root, "--output", out, *extra) == 0
        if name == "versioned":
            assert open(os.path.join(out, "LATEST")).read().strip() != first


def test_a_failed_latest_write_names_the_complete_version_and_how_to_publish_it(tmp_path, monkeypatch, capsys):
    import errno

    import tfrecord_pipelines as tfp
    root, out = str(tmp_path / "imgs"), str(tmp_path / "root")
    labels = make_tree(root, per_class=2)
    _fail_writes(monkeypatch, "write_bytes", "LATEST", errno.ENOSPC)
    assert convert("--input", root, "--output", out, "--versioned") == 1
    monkeypatch.undo()
    lines = capsys.readouterr().err.strip().splitlines()
    version, = [d for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "manifest.json"))]
    latest = os.path.join(out, "LATEST")
    command = f"printf '%s\\n' {version} > {latest}"
    assert lines == [f"error: version {version} is complete in {os.path.join(out, version)}, but {latest} could not "
                     "be written (No space left on device): training jobs that read LATEST do not see it yet. Once "
                     f"this is fixed, publish it with: {command}"], lines
    assert "nothing was published" not in lines[0] and not os.path.exists(latest)
    # The command it gives publishes that version: a reader of LATEST gets every record.
    subprocess.run(["sh", "-c", command], check=True)
    assert open(latest).read() == version + "\n"
    assert len(read_examples(os.path.join(out, version), "train")) == len(labels)
    assert sum(1 for _ in tfp.load(out, split="train")) == len(labels)


def test_a_dead_worker_is_named_with_its_likely_cause(tmp_path):
    """A worker process killed (SIGKILL, as the kernel's OOM killer does) as
    it opens its first image: one line saying a worker died, why that
    usually happens and what to do, not Beam's "Channel closed prematurely"."""
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=4)
    hook = tmp_path / "hook"
    hook.mkdir()
    # Every Python process of the run loads it: the first (the command) notes its pid; a worker (forked,
    # or a process of its own) kills itself when it opens an image under the input.
    (hook / "sitecustomize.py").write_text(
        "import os, signal, sys\n"
        "os.environ.setdefault('KILL_TEST_MAIN', str(os.getpid()))\n"
        "def hook(event, args):\n"
        f"    if event == 'open' and isinstance(args[0], str) and args[0].startswith({root!r} + '/') \\\n"
        "            and os.getpid() != int(os.environ['KILL_TEST_MAIN']):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "sys.addaudithook(hook)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.pop("KILL_TEST_MAIN", None)
    p = subprocess.run([TFRECORDS, "convert", "--input", root, "--output", out, "--progress", "off",
                        "--direct_num_workers", "2", "--direct_running_mode", "multi_processing"],
                       capture_output=True, text=True, timeout=300, env=env)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr[-3000:]
    assert lines[0] == ("error: a worker process of the run died (Channel closed prematurely): most likely it ran out "
                        "of memory (the kernel's OOM killer; `dmesg` says so) or something killed it; nothing was "
                        "published. Rerun with fewer worker processes (--direct_num_workers) or with more memory "
                        "free"), lines
    assert not os.path.exists(os.path.join(out, "manifest.json"))
