"""The import direction, enforced: the application (pipelines/) uses the
library (transforms/), never the reverse; inside the library, the stages
(transforms/stages/) use the I/O helpers (transforms/storage/), which use the
pure logic (transforms/core/), which imports neither, nor Beam. So the pure
logic is tested without Beam, and a stage never reaches into another."""
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


PKG = "tfrecord_pipelines"
LIB = PKG + ".transforms"


def _is_application(m: str) -> bool:
    """A module of the application (pipelines/, installed as tfrecord_pipelines), not of the library."""
    return (m == PKG or m.startswith(PKG + ".")) and not (m == LIB or m.startswith(LIB + "."))


def test_transforms_never_import_pipelines():
    files = sorted(glob.glob(os.path.join(ROOT, "transforms", "**", "*.py"), recursive=True))
    assert len(files) > 20
    offenders = {os.path.relpath(f, ROOT): sorted(m for m in _imported_modules(f) if _is_application(m))
                 for f in files}
    assert {f: m for f, m in offenders.items() if m} == {}


def test_product_code_imports_only_through_the_one_package_name():
    """The repository's folders are installed as tfrecord_pipelines (setup.py's
    package_dir): an import of the folder names themselves would work in the
    checkout and break for a user who has a `transforms.py` of their own."""
    files = sorted(glob.glob(os.path.join(ROOT, "transforms", "**", "*.py"), recursive=True)
                   + glob.glob(os.path.join(ROOT, "pipelines", "**", "*.py"), recursive=True))
    bare = {os.path.relpath(f, ROOT): sorted(m for m in _imported_modules(f)
                                             if m.split(".")[0] in ("pipelines", "transforms"))
            for f in files}
    assert {f: m for f, m in bare.items() if m} == {}


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from tfrecord_pipelines.config import ShardSpec\n    return ShardSpec\n")
    assert "tfrecord_pipelines.config" in _imported_modules(str(bad))


def test_what_runs_before_the_zygote_starts_does_not_import_beam():
    """The workers' zygote imports Beam while the main process does; anything
    the command imports before starting it must not import Beam itself, or
    every local run starts half a second later (it did, once)."""
    import subprocess
    import sys
    code = ("import sys; import tfrecord_pipelines.local_worker, tfrecord_pipelines.stderr; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('apache_beam', 'tensorflow')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _modules_of(folder: str) -> dict:
    files = sorted(glob.glob(os.path.join(ROOT, "transforms", folder, "*.py")))
    assert files, folder
    return {os.path.relpath(f, ROOT): _imported_modules(f) for f in files}


def _offenders(folder: str, banned) -> dict:
    found = {f: sorted(m for m in mods if banned(m)) for f, mods in _modules_of(folder).items()}
    return {f: m for f, m in found.items() if m}


def _under(*prefixes: str):
    return lambda m: any(m == p or m.startswith(p + ".") for p in prefixes)


def test_core_imports_no_beam_no_io_and_no_stage():
    assert _offenders("core", lambda m: _under("apache_beam", LIB + ".storage", LIB + ".stages")(m)
                      or _is_application(m)) == {}


def test_storage_imports_no_stage():
    assert _offenders("storage", lambda m: _under(LIB + ".stages")(m) or _is_application(m)) == {}


def test_a_stage_never_imports_another_stage():
    for f, mods in _modules_of("stages").items():
        me = LIB + ".stages." + os.path.basename(f)[:-3]
        assert [m for m in mods if m.startswith(LIB + ".stages.") and m != me] == [], f


def test_transforms_has_no_module_outside_the_three_rooms():
    loose = [os.path.basename(f) for f in glob.glob(os.path.join(ROOT, "transforms", "*.py"))]
    assert loose == ["__init__.py"]


def test_the_pure_logic_loads_without_beam():
    import subprocess
    import sys
    mods = sorted(LIB + ".core." + os.path.basename(f)[:-3]
                  for f in glob.glob(os.path.join(ROOT, "transforms", "core", "*.py")))
    code = ("import importlib, sys\n"
            f"for m in {mods!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'apache_beam'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
