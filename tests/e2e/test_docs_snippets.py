"""Every command and code block the documentation shows (README.md, docs/*.md) is run,
as written, or says why it cannot be, on the line before it:

- ```text blocks are output or listings, shown, not run;
- blocks between `<!-- snippet:NAME -->` markers are README's quick start, run and
  compared by tests/e2e/test_readme_snippets.py;
- `<!-- not-run: REASON -->` marks a block that cannot run here (Google Cloud, a real
  bucket, a benchmark of minutes or hours, a public dataset); the reason names the test
  that runs its equivalent (against the GCS emulator, a stand-in gcloud, at small scale)
  where there is one. `pytest -s` prints the list;
- `<!-- run: on the GCS emulator -->` marks a block about a bucket, `gs://NAME/...`: it runs
  with its page's other blocks, against the GCS emulator the tests use (bucket NAME, holding
  the page's `out/` as `out/`), its commands pointed there by STORAGE_EMULATOR_HOST;
- every other block runs here: each page's blocks in order, in a folder of the page's own
  holding `images/<class>/<file>.jpg`, `photos/<class>/` with `labels.csv`, and (for the pages that
  read an output) `out/`, converted from `images/`. ```sh blocks run in bash
  (`-euo pipefail`) with the venv's commands first on PATH, ```python blocks in a Python
  process; each must exit 0.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from typing import NamedTuple

import pytest

from conftest import ROOT, image_bytes, make_tree
from docs_text import doc_files, read

BIN = os.path.dirname(sys.executable)
# The pages whose blocks read an existing output, `out/`.
READS_OUT = {"docs/output.md", "docs/quality.md", "docs/reading.md"}
EMULATED = "<!-- run: on the GCS emulator -->"


class Block(NamedTuple):
    file: str
    line: int
    lang: str
    code: str
    before: str  # the line before the opening fence


def blocks() -> list[Block]:
    found = []
    for rel in doc_files():
        text = read(rel)
        for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M):
            head = text[:m.start()]
            before = head.rstrip("\n").rsplit("\n", 1)[-1]
            found.append(Block(rel, head.count("\n") + 1, m.group(1), m.group(2), before))
    return found


def kind(b: Block) -> str:
    if b.lang == "text":
        return "shown"
    if b.before.startswith("<!-- snippet:"):
        return "snippet"
    if b.before.startswith("<!-- not-run:"):
        return "not-run"
    if b.before == EMULATED:
        return "emulated"
    return "run"


def reason(b: Block) -> str:
    return b.before[len("<!-- not-run:"):-len("-->")].strip()


def test_every_block_is_run_or_says_why_not(capsys):
    found = blocks()
    assert len(found) >= 40, len(found)  # the pattern still finds the blocks
    for b in found:
        where = f"{b.file}:{b.line}"
        assert b.lang in ("sh", "python", "text"), f"{where}: give the block a language (sh, python or text)"
        if kind(b) == "not-run":
            assert b.before.endswith("-->") and reason(b), f"{where}: say why the block cannot run"
            for named in re.findall(r"tests/[\w/]+\.py", reason(b)):
                assert os.path.exists(os.path.join(ROOT, named)), f"{where}: {named} does not exist"
    # README's snippets are the ones test_readme_snippets.py runs
    assert {b.before for b in found if kind(b) == "snippet"} == {
        f"<!-- snippet:{n} -->" for n in ("cli", "python", "beam", "read", "spec")}
    assert all(b.file == "README.md" for b in found if kind(b) == "snippet")
    with capsys.disabled():
        print("\nblocks not run here, and why:")
        for b in found:
            if kind(b) == "not-run":
                print(f"  {b.file}:{b.line}: {reason(b)}")


def test_the_markers_are_not_mistaken_for_a_block():
    b = Block("x.md", 1, "sh", "make\n", "<!-- not-run: no cloud here -->")
    assert kind(b) == "not-run" and reason(b) == "no cloud here"
    assert kind(b._replace(before="")) == "run" and kind(b._replace(lang="text", before="")) == "shown"
    assert kind(b._replace(before=EMULATED)) == "emulated"


def pages_to_run() -> list[str]:
    return sorted({b.file for b in blocks() if kind(b) in ("run", "emulated")})


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """images/ (a class tree), photos/ with labels.csv, and out/ converted from images/."""
    work = tmp_path_factory.mktemp("docs-template")
    make_tree(str(work / "images"))
    rows = ["filename,label"]
    for i in range(6):
        label = "cat" if i % 2 else "dog"
        os.makedirs(work / "photos" / label, exist_ok=True)
        with open(work / "photos" / label / f"p{i}.jpg", "wb") as f:
            f.write(image_bytes(seed=100 + i))
        rows.append(f"{label}/p{i}.jpg,{label}")
    (work / "labels.csv").write_text("\n".join(rows) + "\n")
    out = str(work / "prebuilt_out")
    p = subprocess.run([os.path.join(BIN, "tfrecords"), "convert", "--input", str(work / "images"), "--output", out,
                        # --index_files: every reading snippet runs beside the shards' indexes
                        "--num_shards", "2", "--split", "train=0.8,validation=0.2", "--index_files"],
                       capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return work


@pytest.mark.parametrize("page", pages_to_run())
def test_each_pages_blocks_run_as_written(template, tmp_path, page):
    work = tmp_path / "work"
    shutil.copytree(template, work, symlinks=True, ignore=shutil.ignore_patterns("prebuilt_out"))
    if page in READS_OUT:
        shutil.copytree(template / "prebuilt_out", work / "out")
    # launch/run_local.sh runs the checkout's .venv: this one
    os.symlink(os.path.join(ROOT, "launch"), work / "launch")
    os.symlink(os.path.dirname(BIN), work / ".venv")
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=str(work))
    ran = 0
    for b in blocks():
        if b.file != page or kind(b) not in ("run", "emulated"):
            continue
        cmd = ["bash", "-euo", "pipefail", "-c", b.code] if b.lang == "sh" else [sys.executable, "-c", b.code]
        with emulated(b, work) as extra:
            p = subprocess.run(cmd, cwd=str(work), env=dict(env, **extra), capture_output=True, text=True,
                               timeout=900)
        assert p.returncode == 0, f"{b.file}:{b.line}\n{b.code}\n{p.stdout[-2000:]}{p.stderr[-3000:]}"
        ran += 1
    assert ran


@contextlib.contextmanager
def emulated(b: Block, work):
    """For a block on the GCS emulator: an emulator serving the bucket the block names,
    holding the workspace's out/ as out/; yields the environment that points clients at it."""
    if kind(b) != "emulated":
        yield {}
        return
    buckets = set(re.findall(r"gs://([a-z0-9_.-]+)/", b.code))
    assert len(buckets) == 1, f"{b.file}:{b.line}: a block on the emulator names one bucket, not {buckets}"
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from gcs_emulator import start_emulator
    name = buckets.pop()
    proc, url = start_emulator(name)
    try:
        client = storage.Client(project="test-project", credentials=AnonymousCredentials(),
                                client_options={"api_endpoint": url})
        bucket = client.bucket(name)
        for dirpath, _, files in os.walk(work / "out"):
            for name in files:
                path = os.path.join(dirpath, name)
                bucket.blob("out/" + os.path.relpath(path, work / "out")).upload_from_filename(path)
        yield {"STORAGE_EMULATOR_HOST": url, "GOOGLE_CLOUD_PROJECT": "test-project"}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
