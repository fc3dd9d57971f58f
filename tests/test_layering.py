"""The library (transforms/) never imports the application (pipelines/):
the stages and their pure logic can be used, and tested, without the CLI,
the options or the run's lifecycle."""
import ast
import glob
import os

from conftest import ROOT


def _imported_modules(path: str) -> set:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names = set()
    for node in ast.walk(tree):  # every import, at the top or inside a function
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_transforms_never_import_pipelines():
    files = sorted(glob.glob(os.path.join(ROOT, "transforms", "**", "*.py"), recursive=True))
    assert len(files) > 20
    offenders = {os.path.relpath(f, ROOT): sorted(m for m in _imported_modules(f)
                                                  if m == "pipelines" or m.startswith("pipelines."))
                 for f in files}
    assert {f: m for f, m in offenders.items() if m} == {}


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from pipelines.config import ShardSpec\n    return ShardSpec\n")
    assert "pipelines.config" in _imported_modules(str(bad))
