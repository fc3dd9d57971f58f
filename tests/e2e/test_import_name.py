"""One import name that cannot clash: everything lives under
`tfrecord_pipelines`, so a user's own `transforms.py` or `pipelines/` (names
many Beam projects use) neither hides our modules nor is hidden by them, in
the launching process and in the worker processes that start in the user's
folder."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, check_against_source, make_tree, users_project

BIN = os.path.dirname(sys.executable)


def _run(cmd, cwd, installed: str = ""):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if installed:
        env["PYTHONPATH"] = installed
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("where", ["editable", "installed"])
def test_a_users_transforms_and_pipelines_modules_do_not_clash(tmp_path, where, installed_package):
    installed = installed_package if where == "installed" else ""
    project = users_project(tmp_path / "project")
    expected = make_tree(os.path.join(project, "images"))
    # The user's modules are first on sys.path here (they raise when imported)...
    p = _run([sys.executable, "-c", "import transforms"], project, installed)
    assert "the user's own transforms.py was imported" in p.stderr, p.stderr[-2000:]
    # ...and ours import regardless.
    code = "import tfrecord_pipelines.commands.convert, tfrecord_pipelines.transforms.stages.write_shards; print('ok')"
    p = _run([sys.executable, "-c", code], project, installed)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]
    p = _run([sys.executable, "-c", "import tfrecord_pipelines as t; print(t.__file__)"], project, installed)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith(installed or os.path.join(ROOT, "pipelines")), p.stdout
    # A multi-process local run from the user's folder: worker processes start there too.
    p = _run([sys.executable, "-m", "tfrecord_pipelines.convert", "--input", "images", "--output", "out",
              "--num_shards", "2", "--direct_num_workers", "2", "--progress", "off"], project, installed)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "listed 18 = written 18 + rejected 0" in p.stdout, p.stdout
    check_against_source(os.path.join(project, "out"), expected, os.path.join(project, "images"))
