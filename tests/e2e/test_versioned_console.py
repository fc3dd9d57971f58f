"""What a --versioned run and the commands that read a dataset root tell a
person: why unchanged files were read again (modified too close to the
previous listing), why --full on unchanged inputs published nothing, and
which version verify, spec, inspect and report read when given the root
(the version LATEST names, through the bounded reader load() uses)."""
import os
import subprocess
import sys

from conftest import ROOT, convert, make_tree, manifest, settle, within
from test_incremental import opens  # noqa: F401 (a fixture: the files under a folder this process opened)


class TouchAtListing:
    """Changes every file's ctime (its bytes and mtime kept) when the run first
    lists `folder`: files modified just after the listing started, as a copy
    still landing while a scheduled run starts (an audit hook: nothing patched)."""
    folder = ""
    installed = False

    @classmethod
    def hook(cls, event, args):
        if cls.folder and event == "os.scandir" and str(args[0]).startswith(cls.folder):
            folder, cls.folder = cls.folder, ""
            for base, _, names in os.walk(folder):
                for name in names:
                    st = os.stat(os.path.join(base, name))
                    os.utime(os.path.join(base, name), ns=(st.st_atime_ns, st.st_mtime_ns))

    @classmethod
    def arm(cls, folder: str) -> None:
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True
        cls.folder = folder


def test_files_modified_too_close_to_the_listing_are_re_read_and_the_summary_says_why(
        tmp_path, capsys, opens):  # noqa: F811 (the imported fixture)
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    make_tree(images, per_class=4)
    settle()
    base = ["--input", images, "--output", root, "--versioned"]
    TouchAtListing.arm(images)
    assert convert(*base, "--version", "v1") == 0
    assert not TouchAtListing.folder  # the files were touched as v1 listed them
    settle()
    capsys.readouterr()
    assert convert(*base, "--version", "v2") == 0
    out = capsys.readouterr().out
    assert ("incremental from version v1: 0 records copied, 12 images read (0 new, 12 changed), 0 removed; 12 of "
            "the changed were re-read only because their files were modified within 2 s of v1's listing, too close "
            "to trust their times: the next run does not read them again unless they change") in out, out
    assert manifest(os.path.join(root, "v2"))["made"]["changed_racy"] == 12
    # The next run, as promised: nothing read, nothing published (unchanged since v2).
    opens.watch(images)
    assert convert(*base, "--version", "v3") == 0
    assert opens.taken() == set()
    out = capsys.readouterr().out
    assert "unchanged: inputs and options are the same as version v2" in out and "re-read" not in out, out
    # A file really changed (another mtime) is changed, and not counted as racy.
    st = os.stat(os.path.join(images, "cat", "0.jpg"))
    os.utime(os.path.join(images, "cat", "0.jpg"), ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    settle()
    assert convert(*base, "--version", "v4") == 0
    out = capsys.readouterr().out
    assert "incremental from version v2: 11 records copied, 1 images read (0 new, 1 changed), 0 removed\n" in out, out


def test_full_on_unchanged_inputs_says_that_publishing_needs_republish_unchanged(
        tmp_path, capsys, opens):  # noqa: F811 (the imported fixture)
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    make_tree(images, per_class=2)
    settle()
    base = ["--input", images, "--output", root, "--versioned"]
    assert convert(*base, "--version", "v1") == 0
    capsys.readouterr()
    assert convert(*base, "--version", "v2", "--full", "--dry_run") == 0
    assert ("would publish nothing: inputs and options are the same as version v1\n--full converts everything "
            "only when something changed") in capsys.readouterr().out
    opens.watch(images)
    assert convert(*base, "--version", "v2", "--full") == 0
    assert opens.taken() == set()  # as the line says: no image was read
    out = capsys.readouterr().out
    assert "unchanged: inputs and options are the same as version v1; nothing published" in out, out
    assert ("--full converts everything only when something changed: the inputs and options are those of v1, so "
            "no image was read; pass --republish_unchanged as well to publish a new version anyway") in out, out
    assert not os.path.exists(os.path.join(root, "v2")) and open(os.path.join(root, "LATEST")).read() == "v1\n"
    assert convert(*base, "--version", "v2", "--full", "--republish_unchanged") == 0
    out = capsys.readouterr().out
    assert "--republish_unchanged as well" not in out and "published version v2" in out, out
    # Without --full, the unchanged line stands alone.
    assert convert(*base, "--version", "v3") == 0
    out = capsys.readouterr().out
    assert "nothing published" in out and "--republish_unchanged" not in out, out


TFRECORDS = os.path.join(os.path.dirname(sys.executable), "tfrecords")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([TFRECORDS, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_verify_spec_inspect_and_report_read_the_version_latest_names(tmp_path):
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    make_tree(images, per_class=2)
    settle()
    base = ["--input", images, "--output", root, "--versioned"]
    assert convert(*base, "--version", "v1") == 0
    os.remove(os.path.join(images, "cat", "0.jpg"))
    settle()
    assert convert(*base, "--version", "v2") == 0
    v2 = os.path.join(root, "v2")
    said = f"{root}: LATEST names version v2; reading {v2}"
    got = _cli("verify", root)
    assert got.returncode == 0 and got.stdout.startswith(said + "\n") and "OK: " in got.stdout, got
    assert "5 records" in got.stdout, got.stdout  # v2's, not v1's 6
    got = _cli("inspect", root, "-n", "1")
    assert got.returncode == 0 and got.stdout.startswith(said + "\n") and "== train: " in got.stdout, got
    got = _cli("spec", root)
    assert got.returncode == 0 and said in got.stderr and repr(v2) in got.stdout, got
    assert _cli("spec", v2).stdout == got.stdout  # the same code as for the version itself
    os.remove(os.path.join(v2, "report.html"))
    got = _cli("report", root)
    assert got.returncode == 0 and got.stdout.startswith(said + "\n"), got
    assert os.path.exists(os.path.join(v2, "report.html")) and not os.path.exists(os.path.join(root, "report.html"))
    # LATEST is untrusted: a FIFO there is one line, never a hang; a name that leads out of the root is refused.
    os.remove(os.path.join(root, "LATEST"))
    os.mkfifo(os.path.join(root, "LATEST"))
    for command in ("verify", "inspect", "spec", "report"):
        got = within(60, lambda: _cli(command, root))
        assert got.returncode == 1 and "FIFO" in got.stderr and "Traceback" not in got.stderr, (command, got)
    os.remove(os.path.join(root, "LATEST"))
    with open(os.path.join(root, "LATEST"), "w") as f:
        f.write("../elsewhere\n")
    got = _cli("verify", root)
    assert got.returncode == 1 and "not a version folder name" in got.stderr, got
