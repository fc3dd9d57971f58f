"""Where the documentation's text lives: README.md and the site's pages, docs/*.md.

The tables generated from code (features, reasons, faults, corpus), the claims about the
tests and the snippets are checked wherever they sit: a test asks for a marked block, not
for a file, so moving a section between pages needs no change to the test."""
from __future__ import annotations

import glob
import os
import re

from conftest import ROOT


def doc_files() -> list[str]:
    """README.md, then every page of the site, as paths relative to the repository."""
    pages = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return ["README.md", *pages]


def read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def marked_block(marker: str) -> str:
    """The text between `<!-- marker -->` and `<!-- /marker -->`, which exactly one
    documentation file must hold."""
    found = []
    for rel in doc_files():
        block = re.search(rf"<!-- {re.escape(marker)} -->\n(.*?)<!-- /{re.escape(marker)} -->", read(rel), re.S)
        if block:
            found.append((rel, block.group(1)))
    assert found, f"no documentation file holds the <!-- {marker} --> block"
    assert len(found) == 1, f"<!-- {marker} --> is in several files: {[f for f, _ in found]}"
    return found[0][1]
