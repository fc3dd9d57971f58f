"""README's quick start, run as written: each block between `<!-- snippet:NAME -->`
and `<!-- /snippet:NAME -->` is taken from README.md and run, in the README's order,
in a folder holding `images/<class>/<file>.jpg`, as a reader would run it (a shell for
the commands, a Python process for the others). The three ways in give the
same shards, byte for byte, and the reading snippets read the command's output.
(The docs' other blocks: tests/e2e/test_docs_snippets.py.)"""
from __future__ import annotations

import ast
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
    assert {k: v[0] for k, v in snippets().items()} == {"cli": "sh", "python": "python", "beam": "python",
                                                        "read": "python", "spec": "sh"}


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


def test_the_reading_snippets_read_the_commands_output(ran):
    _, labels, out = ran
    for name in ("read", "spec"):
        assert out[name].returncode == 0, out[name].stdout[-2000:] + out[name].stderr[-3000:]
    shapes = [line.split(") ") for line in out["read"].stdout.splitlines()]
    assert len(shapes) == 2 and all(s[0].startswith("(") and int(s[1]) in range(len(set(labels.values())))
                                    for s in shapes), out["read"].stdout
    names = ast.literal_eval(out["spec"].stdout.strip())  # {id: class name}
    assert [names[i] for i in sorted(names)] == sorted(set(labels.values())), out["spec"].stdout


def test_the_dataframe_and_beam_snippets_take_the_demos_jpeg_files(tmp_path):
    """The demo's images are `<class>/<class>_<k>.JPEG` (upper case, as ImageNet's), beside a broken
    `notes.jpg`: the snippets a reader runs on `demo/data/train` convert every image there, not none."""
    from tfrecord_pipelines import sample_data
    info = sample_data.make_imagefolder(str(tmp_path / "data"), 3, 8, seed=0, scale=0.2)
    os.symlink(info["root"], tmp_path / "images")
    with open(os.path.join(info["root"], sample_data.class_names(3, 0)[0], "notes.jpg"), "wb") as f:
        f.write(b"<html>not an image</html>\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = {}
    for name, folder in (("python", "out_py"), ("beam", "out_beam")):
        out[name] = p = subprocess.run([sys.executable, "-c", snippets()[name][1]], cwd=str(tmp_path), env=env,
                                       capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        m = manifest(str(tmp_path / folder))
        assert sum(v["records"] for v in m["splits"].values()) == 24, (name, m["splits"])
        assert len(m["label_map"]["classes"]) == 3, (name, m["label_map"])
    assert "{'listed': 25, 'written': 24, 'rejected': 1, 'not_selected': 0} {'not_an_image': 1}" in \
        out["python"].stdout, out["python"].stdout
