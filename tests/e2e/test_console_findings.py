"""After a conversion the console names report.html and prints its "Look
at these" findings with their counts, and the Python API's result carries
the same findings as data: here for a tree with an exact copy of a training
image and a resized one in validation (a leak across splits)."""
from __future__ import annotations

import os
import shutil

import pytest

import tfrecord_pipelines as tfp
from conftest import convert, manifest, read_all, write
from photos import jpeg, photo


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("leaky") / "images")
    for split, base in (("train", 0), ("validation", 20)):
        for c, name in enumerate(("cat", "dog")):
            for k in range(3):
                write(os.path.join(root, f"{split}/{name}/p{k}.jpg"), jpeg(photo(base + 10 * c + k)))
    shutil.copyfile(os.path.join(root, "train/dog/p1.jpg"), os.path.join(root, "validation/dog/leak.jpg"))
    p = photo(2)
    write(os.path.join(root, "validation/cat/small.jpg"), jpeg(p.resize((p.size[0] // 2, p.size[1] // 2))))
    return root


def test_console_names_the_report_and_the_leaks_across_splits(leaky, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert convert("--input", leaky, "--output", out, "--split", "folders") == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    report = os.path.join(out, "report.html")
    assert f"report: {report}" in lines, text
    assert os.path.isfile(report)
    assert "  1 group of identical images spans splits: the same image is in training and evaluation data" in lines
    near = [ln for ln in lines if "near-duplicate pair" in ln]
    assert len(near) == 1 and near[0].startswith("  1 near-duplicate pair spans splits"), text  # the resize
    # printed after the split table, before the reconciliation line
    assert lines.index("look at these:") > next(i for i, ln in enumerate(lines) if ln.startswith("validation"))
    assert lines.index("look at these:") < next(i for i, ln in enumerate(lines) if ln.startswith("listed "))
    # the page's box holds the same findings
    page = open(report, encoding="utf-8").read()
    assert "<li>1 group of identical images spans splits" in page and "<li>1 near-duplicate pair spans splits" in page
    rows, splits = read_all(out)  # keep_all: both copies are written, one in each split
    assert (splits["train/dog/p1.jpg"], splits["validation/dog/leak.jpg"]) == ("train", "validation")
    assert rows["validation/dog/leak.jpg"]["image/encoded"] == [open(
        os.path.join(leaky, "train/dog/p1.jpg"), "rb").read()]


def test_api_result_carries_the_findings(leaky, tmp_path, capfd):
    out = str(tmp_path / "out")
    r = tfp.convert(input=leaky, output=out, split="folders", direct_running_mode="in_memory")
    assert capfd.readouterr() == ("", "")
    got = {(f.kind, f.count) for f in r.findings}
    assert {("duplicates_across_splits", 1), ("near_duplicates_across_splits", 1)} <= got, r.findings
    q = manifest(out)["quality"]
    assert (q["duplicates"]["across_splits"], q["near_duplicates"]["across_splits"]) == (1, 1)
    assert all(f.text.startswith(f"{f.count:,} ") for f in r.findings if f.kind.endswith("_splits"))
    assert r.report == os.path.join(out, "report.html")
