"""The documentation site builds in MkDocs' strict mode: a broken link or anchor between
pages, a page missing from the nav, a README section a page includes that is gone, or an
API reference (mkdocstrings) naming an object that no longer exists fails here, as it
fails CI. `make docs` serves the same site."""
from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_the_site_builds_in_strict_mode(tmp_path):
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                       env=dict(os.environ, NO_MKDOCS_2_WARNING="1"), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    assert "WARNING" not in p.stderr, p.stderr[-5000:]
    # the API reference holds the public API, rendered from its docstrings
    with open(site / "reference" / "index.html", encoding="utf-8") as f:
        reference = f.read()
    for name in ("convert", "check", "verify", "report", "spec", "load", "ToRecords", "WriteDataset",
                 "beam_config", "ConversionResult", "VerificationError"):
        assert f'id="tfrecord_pipelines.' in reference and f">{name}<" in reference, name
    # README's install and three ways in are on the site too, included rather than copied
    with open(site / "getting-started" / "index.html", encoding="utf-8") as f:
        started = re.sub(r"<[^>]+>", "", f.read())  # the code's text, without the highlighter's spans
    assert "tfp.ToRecords(cfg)" in started and "tfrecords convert --input images" in started
    assert "make demo" in started and "--8&lt;--" not in started and "--8<--" not in started


def test_readmes_links_reach_every_page():
    """README.md is outside the site, so the strict build does not see its links: they are
    relative (they work on GitHub), each names a page that exists, and every page is
    reachable from README."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", f.read())
    assert links and all(not re.match(r"\w+://|/", link) for link in links), links
    missing = [link for link in links if not os.path.exists(os.path.join(ROOT, link))]
    assert not missing, missing
    pages = {os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs")) if n.endswith(".md")}
    assert pages - set(links) == set(), "pages README does not link to"


def test_the_readme_stays_a_way_in():
    """README is the way in (at most ~200 lines); what grows goes to docs/."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move sections to docs/ (the site)"
    headings = [line for line in lines if line.startswith("## ")]
    for needed in ("Install", "Three ways in", "Reading the output back", "Documentation"):
        assert any(needed in h for h in headings), (needed, headings)
