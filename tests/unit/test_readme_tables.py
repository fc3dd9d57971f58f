"""The README's two vocabularies match the code's: the table of what each
Example holds is the feature table (transforms/core/features.py), row for row,
and the tables of bad records list every reject reason (Reason) and box reason
(BoxReason), in order.
A feature or reason added to the code and not to the README (or the reverse)
fails here."""
from __future__ import annotations

import os
import re

from conftest import ROOT
from tfrecord_pipelines.transforms.core.features import FEATURES
from tfrecord_pipelines.transforms.core.annotations import BoxReason
from tfrecord_pipelines.transforms.core.records import Reason

EXTRA_ROW = ["extra table columns", "int64, float or bytes", "inferred from all values"]


def _table(marker: str) -> list[list[str]]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    block = re.search(rf"<!-- {marker} -->\n(.*?)<!-- /{marker} -->", text, re.S)
    assert block, f"README.md lacks the <!-- {marker} --> table"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert lines[1].startswith("| ---"), lines[:2]
    return [[c.strip() for c in line.strip()[2:-2].split(" | ")] for line in lines[2:]]


def test_readme_feature_table_is_the_feature_table():
    want = [[f"`{f.key}`", f.kind, f.doc] for f in FEATURES] + [EXTRA_ROW]
    assert _table("features-table") == want


def test_readme_reasons_table_lists_every_reason_in_order():
    got = [row[0] for row in _table("reasons-table")]
    assert got == [f"`{r.value}`" for r in Reason]
    assert all(row[1] for row in _table("reasons-table")), "every reason needs its meaning"


def test_readme_box_reasons_table_lists_every_box_reason_in_order():
    rows = _table("box-reasons-table")
    assert [row[0] for row in rows] == [f"`{r.value}`" for r in BoxReason]
    assert all(row[1] for row in rows)


def test_the_table_check_sees_a_missing_row(monkeypatch):
    import tfrecord_pipelines.transforms.core.features as features
    extra = features.Feature("x", "image/x", "int64", lambda s: [0], "a feature nobody documented")
    want = [[f"`{f.key}`", f.kind, f.doc] for f in FEATURES + (extra,)] + [EXTRA_ROW]
    assert _table("features-table") != want
