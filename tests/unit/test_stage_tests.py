"""Every stage module (transforms/stages/) has a test that applies its
composite on Beam's TestPipeline (tests/stages/), so that a change to a
stage is caught at its own level, not only end to end. Read from the
sources: a test file counts for a stage when it imports TestPipeline and
the stage's PTransform from its module, and calls that PTransform."""
from __future__ import annotations

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAGES = os.path.join(ROOT, "transforms", "stages")
TESTS = os.path.join(ROOT, "tests", "stages")
PACKAGE = "tfrecord_pipelines.transforms.stages"


def _parse(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def stage_transforms() -> dict:
    """{module name: {its PTransform classes}} of every stage module."""
    out = {}
    for name in sorted(os.listdir(STAGES)):
        if not name.endswith(".py") or name == "__init__.py":
            continue
        tree = _parse(os.path.join(STAGES, name))
        out[name[:-3]] = {node.name for node in tree.body if isinstance(node, ast.ClassDef)
                          and any(ast.unparse(b).endswith("PTransform") for b in node.bases)}
    return out


def applied_on_test_pipeline(path: str) -> set:
    """(module, class) of each stage PTransform the file imports and calls,
    if it imports TestPipeline; else nothing."""
    tree = _parse(path)
    imported, has_test_pipeline = {}, False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.asname or a.name: a.name for a in node.names}
            if node.module == "apache_beam.testing.test_pipeline" and "TestPipeline" in names.values():
                has_test_pipeline = True
            if node.module.startswith(PACKAGE + "."):
                module = node.module[len(PACKAGE) + 1:]
                imported.update({local: (module, name) for local, name in names.items()})
    if not has_test_pipeline:
        return set()
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    return {imported[n] for n in called if n in imported}


def test_every_stage_module_has_a_test_pipeline_test():
    stages = stage_transforms()
    assert len(stages) >= 12 and all(stages.values()), stages  # the scan finds the stages and their composites
    covered = set()
    for name in os.listdir(TESTS):
        if name.startswith("test_") and name.endswith(".py"):
            covered |= applied_on_test_pipeline(os.path.join(TESTS, name))
    missing = sorted(f"{module}.{cls}" for module, classes in stages.items() for cls in classes
                     if (module, cls) not in covered)
    assert not missing, (f"stages without a TestPipeline test in tests/stages/: {', '.join(missing)} (apply each "
                         "on apache_beam.testing.test_pipeline.TestPipeline and assert what it emits)")


def test_the_scan_tells_a_test_pipeline_test_from_other_uses(tmp_path):
    """The check itself can fail: an import without a call, or a call
    without TestPipeline, does not count."""
    cases = {
        "applied.py": ("from apache_beam.testing.test_pipeline import TestPipeline\n"
                       f"from {PACKAGE}.split import Split\n"
                       "def test_x():\n    with TestPipeline() as p:\n        p | Split(None, 0)\n"),
        "imported_only.py": ("from apache_beam.testing.test_pipeline import TestPipeline\n"
                             f"from {PACKAGE}.split import Split, assign_split\n"
                             "def test_x():\n    assign_split(None, None, 0)\n"),
        "no_test_pipeline.py": f"from {PACKAGE}.split import Split\ndef test_x():\n    Split(None, 0)\n",
    }
    got = {}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        got[name] = applied_on_test_pipeline(str(tmp_path / name))
    assert got["applied.py"] == {("split", "Split")}
    assert ("split", "Split") not in got["imported_only.py"] and got["no_test_pipeline.py"] == set()
