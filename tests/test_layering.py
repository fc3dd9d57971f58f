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


def test_what_runs_before_the_zygote_starts_does_not_import_beam():
    """The workers' zygote imports Beam while the main process does; anything
    the command imports before starting it must not import Beam itself, or
    every local run starts half a second later (it did, once)."""
    import subprocess
    import sys
    code = ("import sys; import pipelines.local_worker, pipelines.stderr; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('apache_beam', 'tensorflow')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
