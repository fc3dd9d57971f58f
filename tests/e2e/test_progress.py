"""The progress bar (pipelines/console/progress_line.py, tqdm): where a person watches (a
terminal; a notebook is told apart the way tqdm.auto does), the images listed,
then the images done out of their total with the rate and the time left; off
elsewhere unless asked for. Runs in a real pseudo-terminal."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from conftest import make_tree

SLOW = ("import os, sys, time\n"
        "def hook(event, a):\n"  # each image read takes 20 ms: the bar is drawn mid-run
        "    if event == 'open' and isinstance(a[0], str) and a[0].startswith(sys.argv[1]):\n"
        "        time.sleep(0.02)\n"
        "sys.addaudithook(hook)\n"
        "from tfrecord_pipelines.commands.convert import run\nsys.exit(run(sys.argv[2:]))\n")


def _run(args: list, root: str, tty: bool, size=None) -> tuple:
    """(exit code, what the run wrote to stderr)."""
    cmd = [sys.executable, "-c", SLOW, os.path.join(root, ""), *args, "--direct_running_mode", "in_memory"]
    if not tty:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        return p.returncode, p.stderr
    master, slave = pty.openpty()
    if size:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    p = subprocess.Popen(cmd, stderr=slave, stdout=subprocess.DEVNULL)
    os.close(slave)
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        data += chunk
    os.close(master)
    return p.wait(timeout=300), data.decode("utf-8", "replace")


FRAME = re.compile(r"(listing|validating|writing):\s+(\d+)%\|[^|]*\|\s*(\d+)/(\d+) \[(\d\d:\d\d)<(\d\d:\d\d), "
                   r"\s*([\d.]+) img/s")
# Any frame of a phase, its first (no rate yet) too: a phase that reads ahead
# on every core may pass in less than one redraw.
PHASE = re.compile(r"(listing|validating|writing):\s+(\d+)%\|[^|]*\|\s*(\d+)/(\d+) \[")


@pytest.mark.parametrize("size", [None, (120, 40)])  # a pty that reports no size (as on CI), and a sized one
def test_a_terminal_shows_a_bar_with_total_rate_and_time_left(tmp_path, size):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=60)
    code, err = _run(["--input", root, "--output", str(tmp_path / "out")], root, tty=True, size=size)
    assert code == 0, err
    frames = [m.groups() for m in FRAME.finditer(err)]
    writing = [f for f in frames if f[0] == "writing"]
    assert writing and all(f[3] == "180" for f in writing), err[-2000:]  # the total: every planned record
    assert any(0 < int(f[2]) < 180 for f in writing), err[-2000:]  # drawn mid-run, with the time left
    assert writing[-1][1:4] == ("100", "180", "180"), writing[-1]
    last = err.strip().splitlines()[-1]
    assert "validated 180 images (0 rejected)" in last and "written 180 records" in last, last


def test_two_reads_show_validation_then_writing(tmp_path):
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=20)
    table = tmp_path / "labels.csv"
    table.write_text("filename,label\n" + "".join(f"{rel},{lab}\n" for rel, lab in sorted(labels.items())))
    code, err = _run(["--label_table", str(table), "--image_root", root, "--output", str(tmp_path / "out")], root,
                     tty=True)
    assert code == 0, err
    phases = [m.groups() for m in PHASE.finditer(err)]
    names = [f[0] for f in phases]
    assert "validating" in names and "writing" in names, err[-2000:]
    assert names.index("validating") < names.index("writing"), err[-2000:]  # validation is read first
    assert all(f[3] == "60" for f in phases if f[0] in ("validating", "writing")), err[-2000:]
    assert [f[1:4] for f in phases if f[0] == "writing"][-1] == ("100", "60", "60"), err[-2000:]


def test_no_bar_where_nobody_watches_unless_asked(tmp_path):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=5)
    code, err = _run(["--input", root, "--output", str(tmp_path / "a")], root, tty=False)  # auto, a pipe
    assert code == 0 and not FRAME.search(err) and "\r" not in err and "img/s" not in err, err
    code, err = _run(["--input", root, "--output", str(tmp_path / "b"), "--progress", "off"], root, tty=True)
    assert code == 0 and not FRAME.search(err) and "img/s" not in err, err
    code, err = _run(["--input", root, "--output", str(tmp_path / "c"), "--progress", "on"], root, tty=False)
    assert code == 0 and FRAME.search(err), err


def test_where_nobody_watches_a_stall_is_still_one_line(tmp_path, capsys):
    from tfrecord_pipelines.console.progress_line import ProgressLine
    from tfrecord_pipelines.transforms.storage.progress import Progress, expect
    folder = str(tmp_path / "progress")
    os.makedirs(folder)
    line = ProgressLine(folder, "auto", "gs://bucket/images", 120.0)  # stderr is captured: not a terminal
    listed = Progress(folder, "list")
    listed.add(10)
    listed.flush(force=True)
    assert line.state() == ("listing", 10, None, "")  # a count, no total yet
    expect(folder, "write", 10)
    p = Progress(folder, "write")
    p.add(3, 100)
    p.flush(force=True)
    line._update()
    line._changed -= ProgressLine.STALL_SECONDS + 5  # as if that long had passed with nothing new
    line._update()
    line._update()  # the same stall: said once
    err = capsys.readouterr().err
    assert err.count("nothing new for") == 1 and "reading gs://bucket/images" in err, err
    assert "--io_timeout 120 s" in err and "img/s" not in err
    assert line.state() == ("writing", 3, 10, "0 rejected, 100 B written")


def test_a_phase_that_ended_between_two_polls_is_drawn_complete(tmp_path, capsys):
    """A short run's writing can start and end between two polls of the bar:
    when the publish step begins, the bar shows that phase complete (N/N),
    not the listing it last drew."""
    from tfrecord_pipelines.console.progress_line import ProgressLine
    from tfrecord_pipelines.transforms.storage.progress import Progress, expect
    folder = str(tmp_path / "progress")
    os.makedirs(folder)
    line = ProgressLine(folder, "on", str(tmp_path), 120.0)
    listed = Progress(folder, "list")
    listed.add(15)
    listed.flush(force=True)
    line._update()
    expect(folder, "write", 15)
    written = Progress(folder, "write")
    written.add(15, 18_000)
    written.flush(force=True)
    Progress(folder, "report").flush(force=True)  # what progress.mark_stage("report") leaves
    line._update()
    line._bar.close()
    err = capsys.readouterr().err
    # Each frame to the end of its redraw: the stage's note follows the rate.
    frames = [re.split(r"[\r\n]", err[m.start():], maxsplit=1)[0] for m in FRAME.finditer(err)]
    assert frames and frames[-1].startswith("writing: 100%") and "15/15" in frames[-1], err
    assert "building report.html" in frames[-1], err
