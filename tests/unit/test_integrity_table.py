"""The faults table (<!-- faults-table -->) tells the truth: every row
names a test that exists, and that test asserts every reason or message the
row quotes. A row added without its test, or a message changed in the code and
its test but not in the docs (or the reverse), fails here.

Row format: | case | what happens | reason or message | checked by |
The third cell's `quoted` fragments (or "none") must each appear in the named
test function's source (or in a helper of its module that it calls); the
fourth cell is `tests/test_x.py::test_name`.
"""
from __future__ import annotations

import ast
import os
import re

from conftest import ROOT
from docs_text import marked_block

HEADER = "| case | what happens | reason or message | checked by |"
REF = re.compile(r"^`(tests/(?:\w+/)?test_\w+\.py)::(test_\w+)`$")


def table_rows() -> list[list[str]]:
    lines = [line for line in marked_block("faults-table").splitlines() if line.strip()]
    assert lines[0] == HEADER and lines[1].startswith("| ---"), lines[:2]
    rows = []
    for line in lines[2:]:
        assert line.startswith("| ") and line.endswith(" |"), line
        cells = [c.strip() for c in line[2:-2].split(" | ")]
        assert len(cells) == 4, f"a row needs 4 cells: {line}"
        rows.append(cells)
    return rows


def function_source(path: str, name: str) -> str:
    """The test function's source, and that of the module's own helpers it
    names (one level: a fuzz test asserts in its helpers)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        source = f.read()
    defs = {node.name: node for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    if name not in defs:
        raise AssertionError(f"{path} has no test {name}")
    used = {n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)}
    return "\n".join(ast.get_source_segment(source, defs[n]) for n in [name, *sorted(used & set(defs) - {name})])


def test_every_row_names_a_test_that_asserts_its_message():
    rows = table_rows()
    assert rows, "the faults table is empty"
    cases = [r[0] for r in rows]
    assert len(cases) == len(set(cases)), "a case appears twice"
    for case, happens, message, ref in rows:
        assert case and happens, case
        m = REF.match(ref)
        assert m, f"{case}: 'checked by' must be `tests/test_x.py::test_name`, not {ref!r}"
        source = function_source(m.group(1), m.group(2))
        quoted = re.findall(r"`([^`]+)`", message)
        assert quoted or message == "none", f"{case}: quote the reason or message, or write none"
        for q in quoted:
            assert q in source, f"{case}: {ref} does not check {q!r}"
