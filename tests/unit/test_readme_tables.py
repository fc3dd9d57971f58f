"""The documentation's two vocabularies match the code's: the table of what each
Example holds is the feature table (transforms/core/features.py), row for row,
and the tables of bad records list every reject reason (Reason) and box reason
(BoxReason), in order.
A feature or reason added to the code and not to the docs (or the reverse)
fails here, wherever the table sits (README.md or docs/*.md)."""
from __future__ import annotations

from docs_text import marked_block
from tfrecord_pipelines.transforms.core.features import FEATURES
from tfrecord_pipelines.transforms.core.annotations import BoxReason
from tfrecord_pipelines.transforms.core.records import Reason

EXTRA_ROW = ["extra table columns", "int64, float or bytes", "inferred from all values"]


def _table(marker: str) -> list[list[str]]:
    lines = [line for line in marked_block(marker).splitlines() if line.strip()]
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
