"""README's quick start, run as written: each block between `<!-- snippet:NAME -->`
and `<!-- /snippet:NAME -->` is taken from README.md and run in a folder
holding `images/<class>/<file>.jpg`, as a reader would run it (a shell for
the command, a Python process for the others). The three ways in give the
same shards, byte for byte."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, check_against_source, make_tree, manifest

BIN = os.path.dirname(sys.executable)


def snippets() -> dict:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"<!-- snippet:(\w+) -->\n```(\w+)\n(.*?)```\n<!-- /snippet:\1 -->", text, re.S)
    return {name: (lang, code) for name, lang, code in found}


def test_the_readme_has_the_three_ways_in():
    assert {k: v[0] for k, v in snippets().items()} == {"cli": "sh", "python": "python", "beam": "python"}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    work = tmp_path_factory.mktemp("readme")
    labels = make_tree(str(work / "images"))
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), TF_CPP_MIN_LOG_LEVEL="3")
    out = {}
    for name, (lang, code) in snippets().items():
        cmd = ["bash", "-euo", "pipefail", "-c", code] if lang == "sh" else [sys.executable, "-c", code]
        out[name] = subprocess.run(cmd, cwd=str(work), env=env, capture_output=True, text=True, timeout=600)
    return work, labels, out


@pytest.mark.parametrize("name, folder", [("cli", "out_cli"), ("python", "out_py"), ("beam", "out_beam")])
def test_each_snippet_runs_and_converts_every_image(ran, name, folder):
    work, labels, out = ran
    p = out[name]
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    check_against_source(str(work / folder), labels, str(work / "images"))
    if name == "cli":
        assert "OK: 4 shards, 18 records" in p.stdout
    if name == "python":
        assert "{'listed': 18, 'written': 18, 'rejected': 0, 'not_selected': 0} {}" in p.stdout


def test_the_three_ways_give_the_same_shards(ran):
    work, _, out = ran
    assert all(p.returncode == 0 for p in out.values())
    outputs = [str(work / f) for f in ("out_cli", "out_py", "out_beam")]
    names = [[e["name"] for s in manifest(o)["splits"].values() for e in s["shards"]] for o in outputs]
    assert names[0] == names[1] == names[2] and len(names[0]) == 4
    for name in names[0] + ["label_map.json"]:
        data = set()
        for o in outputs:
            with open(os.path.join(o, name), "rb") as f:
                data.add(f.read())
        assert len(data) == 1, name
