"""A remote job that fails is told in one line, naming our own error by its
type, with no worker traceback (--debug shows it); and a failure of a remote
job whose input or output is a local path says the workers may not see it."""
from __future__ import annotations

import os
import subprocess

import pytest

from conftest import image_bytes, make_tree, write
from isolated_services import VENV_BIN
from test_portable import portable_args
from test_remote_lock import services  # noqa: F401 (fixture)


def test_a_failing_portable_job_is_one_line_naming_our_error(services, tmp_path):  # noqa: F811
    """The command as a user runs it: what Beam logs of the job's failure is not shown either."""
    jobs, pool, _ = services
    root, out = str(tmp_path / "imgs"), str(tmp_path / "out")
    make_tree(root, per_class=3)
    write(os.path.join(root, "cat", "broken.jpg"), b"not an image")
    write(os.path.join(root, "dog", "cut.jpg"), image_bytes(seed=7)[:-40])
    args = [os.path.join(VENV_BIN, "tfrecords"), "convert", "--input", root, "--output", out,
            "--max_reject_fraction", "0.01", "--progress", "off", *portable_args(jobs, pool)]
    got = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert got.returncode == 1, got.stderr
    lines = [ln for ln in got.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in got.stderr and len(lines) == 2, got.stderr  # the line, and the counts by reason
    assert lines[0].startswith("error: the job failed: TooManyRejects: 2 of 11 listed records (18.2%) were "
                               "rejected, above --max_reject_fraction 0.01; nothing was published"), got.stderr
    # Here the workers share this machine's disk; on a cluster they may not: the line says so.
    assert (f"; --input {root}, --output {out} are paths on this machine, which the remote runner's workers may "
            "not see: give gs:// paths") in lines[0], got.stderr
    assert lines[0].endswith("(rerun with --debug for the worker's traceback)"), got.stderr
    assert lines[1] == "rejected by reason: not_an_image 1, truncated 1", got.stderr
    # The job ended its run: no lock, no staging folder left in the output (the resume area stays, for a rerun).
    left = os.listdir(out)
    assert ".tfrecords.lock" not in left and not [n for n in left if n.startswith(".tfrecords-staging")], left

    # --debug (here in this process): the error raised holds the worker's traceback, ending in ours.
    from tfrecord_pipelines.commands.convert import run
    from tfrecord_pipelines.transforms.core.errors import RunError
    with pytest.raises(RunError, match="^the job failed: TooManyRejects: ") as raised:
        run(args[2:] + ["--debug"])
    worker = str(raised.value.__cause__)
    assert "Traceback (most recent call last)" in worker and "publish.TooManyRejects: 2 of 11" in worker
