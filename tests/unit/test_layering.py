"""The import direction, enforced: the application (pipelines/) uses the
library (transforms/), never the reverse; inside the library, the stages
(transforms/stages/) use the I/O helpers (transforms/storage/), which use the
pure logic (transforms/core/), which imports neither, nor Beam. So the pure
logic is tested without Beam, and a stage never reaches into another.

Inside the application: the dispatcher (cli.py) routes to the commands
(pipelines/commands/, one module each), which call the application's modules
(api.py and what it calls), which call the library. Nothing below the
commands imports them, and the product code's import graph (imports inside
functions included) has no cycle."""
import ast
import glob
import os

from conftest import ROOT


def _imported_modules(path: str) -> set:
    """Every module a file imports, at the top or inside a function, in every
    form: `import a.b`, `from a import b` (a, and a.b, which may be a module),
    `from a.b import c`."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names if a.name != "*")
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
    bad.write_text("def f():\n    from tfrecord_pipelines.options.config import ShardSpec\n    return ShardSpec\n")
    assert "tfrecord_pipelines.options.config" in _imported_modules(str(bad))


def test_the_check_sees_a_stage_imported_in_any_form(tmp_path):
    """`from package import module` names the module (a stage importing another
    that way once passed this check)."""
    forms = ["from tfrecord_pipelines.transforms.stages import split\n",
             "import tfrecord_pipelines.transforms.stages.split\n",
             "from tfrecord_pipelines.transforms.stages.split import Split\n",
             "def f():\n    from tfrecord_pipelines.transforms.stages import split as s\n    return s\n"]
    for i, text in enumerate(forms):
        f = tmp_path / f"form{i}.py"
        f.write_text(text)
        assert LIB + ".stages.split" in _imported_modules(str(f)), text


def test_what_runs_before_the_zygote_starts_does_not_import_beam():
    """The workers' zygote imports Beam while the main process does; anything
    the command imports before starting it must not import Beam itself, or
    every local run starts half a second later (it did, once)."""
    import subprocess
    import sys
    code = ("import sys; import tfrecord_pipelines.speed.zygote, tfrecord_pipelines.run.stderr_filter; "
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


# ---- the application's rooms, and no cycle anywhere ------------------------------------------------------------------

CMDS = PKG + ".commands"
DISPATCHER = PKG + ".cli"
# `python -m tfrecord_pipelines.convert` / `.demo`: the commands as modules to run, which no code imports.
RUN_AS_MODULE = (PKG + ".convert", PKG + ".demo")
# Ends a process: only the dispatcher, the modules run with -m, console/process.py, and the local
# workers' own entry point (speed/zygote.py: a worker process exits when its work is done).
MAY_EXIT = (DISPATCHER, PKG + ".console.process", PKG + ".speed.zygote") + RUN_AS_MODULE


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    parts = [PKG] + (rel[1:] if rel[0] == "pipelines" else rel)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _product_files() -> dict:
    files = (glob.glob(os.path.join(ROOT, "pipelines", "**", "*.py"), recursive=True)
             + glob.glob(os.path.join(ROOT, "transforms", "**", "*.py"), recursive=True))
    return {_module_name(f): f for f in sorted(files)}


def _edges(path: str, modules, me: str = "") -> set:
    """The product modules `path` imports, anywhere in it. `from P import x`
    is an import of P.x when that is a module, else of P. A package's
    __init__, which Python runs first, is not counted as the importer's
    dependency: its code is not what the importer calls."""
    me = me or _module_name(path)
    package = me if path.endswith("__init__.py") else me.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of this module
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m in modules and m != me}


def _import_graph() -> dict:
    modules = _product_files()
    return {m: _edges(f, modules) for m, f in modules.items()}


def _cycles(graph: dict) -> list:
    """Every strongly connected component of more than one module (Tarjan's)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_product_code_has_no_import_cycle():
    graph = _import_graph()
    assert len(graph) > 80 and PKG + ".commands.convert" in graph
    assert _cycles(graph) == []


def test_the_cycle_check_sees_a_cycle_through_a_function_import(tmp_path):
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("from tfrecord_pipelines import b\n")
    b.write_text("def f():\n    from tfrecord_pipelines.a import g\n    return g\n")
    c.write_text("from tfrecord_pipelines import __version__, a\n")
    modules = {PKG, PKG + ".a", PKG + ".b", PKG + ".c"}
    graph = {PKG + "." + p.stem: _edges(str(p), modules, PKG + "." + p.stem) for p in (a, b, c)}
    assert graph == {PKG + ".a": {PKG + ".b"}, PKG + ".b": {PKG + ".a"}, PKG + ".c": {PKG, PKG + ".a"}}
    assert _cycles(graph | {PKG: set()}) == [[PKG + ".a", PKG + ".b"]]
    assert _cycles({"x": {"y"}, "y": set()}) == []


def test_only_the_dispatcher_imports_the_commands():
    """Nothing under the commands imports one (the API, the graph, the run's
    lifecycle do not print or exit); the commands import neither the
    dispatcher nor each other, but for check, which is convert's path."""
    allowed = {DISPATCHER, *RUN_AS_MODULE}
    offenders = {m: sorted(d for d in deps if d.startswith(CMDS + "."))
                 for m, deps in _import_graph().items() if m not in allowed and not m.startswith(CMDS)}
    assert {m: d for m, d in offenders.items() if d} == {}
    among = {m: sorted(d for d in deps if d == DISPATCHER or d in RUN_AS_MODULE
                       or (d.startswith(CMDS + ".") and (m, d) not in _COMMANDS_SHARING))
             for m, deps in _import_graph().items() if m.startswith(CMDS + ".")}
    assert {m: d for m, d in among.items() if d} == {}


_COMMANDS_SHARING = {(CMDS + ".check", CMDS + ".convert"),   # check is convert's path with check_only
                     (CMDS + ".inspect", CMDS + ".verify"),  # --io_timeout of the commands that read an output
                     (CMDS + ".demo", CMDS + ".convert")}    # the demo runs the command a person would type


def test_nothing_imports_the_dispatcher_or_the_modules_run_with_python_m():
    importers = {m: sorted(d for d in deps if d == DISPATCHER or d in RUN_AS_MODULE)
                 for m, deps in _import_graph().items()}
    assert {m: d for m, d in importers.items() if d} == {}


def test_the_application_below_the_commands_leaves_the_process_alone():
    """Exit statuses, one-line errors and the fast exit are process.py's,
    used by the commands and the dispatcher; the API and what it calls
    return and raise."""
    graph = _import_graph()
    users = sorted(m for m, deps in graph.items() if PKG + ".console.process" in deps)
    assert users and all(m in (DISPATCHER, *RUN_AS_MODULE) or m.startswith(CMDS + ".") for m in users), users
    exits = {}
    for m, f in _product_files().items():
        if m in MAY_EXIT:
            continue
        for node in ast.walk(ast.parse(open(f, encoding="utf-8").read(), f)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    (ast.unparse(node.func) in ("sys.exit", "os._exit", "process.exit_now")):
                exits.setdefault(m, []).append(node.lineno)
    assert exits == {}


def test_every_command_has_its_module_and_the_dispatcher_routes_to_it():
    from tfrecord_pipelines.cli import USAGE
    listed = sorted(line.split()[0] for line in USAGE.split("commands:")[1].strip().splitlines())
    modules = sorted(os.path.basename(f)[:-3] for f in glob.glob(os.path.join(ROOT, "pipelines", "commands", "*.py"))
                     if not f.endswith("__init__.py"))
    assert listed == modules
    assert _import_graph()[DISPATCHER] >= {f"{CMDS}.{c}" for c in modules}


# The application's rooms (docs/development.md draws them): each module of pipelines/ lives in one, and a room
# imports only the rooms listed for it (and the library, transforms/).
APP_ROOMS = {
    "api": {"options", "run", "outputs", "console"},   # the Python API: convert(), load(), the PTransforms
    "options": {"outputs", "run"},                     # the table of options, parsing them into the config
    "run": {"options", "outputs", "console", "speed"},  # the plan, the lifecycle, the graph, the runner
    "speed": set(),                                    # the speed layer: only itself
    "console": {"options", "outputs", "run"},          # what a person sees
    "outputs": {"options", "console"},                 # reading finished outputs
    "commands": {"api", "options", "run", "outputs", "console", "speed", "commands", "sample_data"},
}
TOP = {"__init__", "_version", "cli", "convert", "demo", "sample_data"}  # the package's face and entry points


def _room_of(module: str) -> str:
    rest = module[len(PKG) + 1:] if module.startswith(PKG + ".") else ""
    return rest.split(".")[0] if rest else "__init__"


def test_every_application_module_is_in_a_room():
    loose = sorted(m for m in _product_files() if _is_application(m) and _room_of(m) not in APP_ROOMS
                   and _room_of(m) not in TOP)
    assert loose == []


def test_each_room_imports_only_the_rooms_it_may():
    found = {}
    for m, deps in _import_graph().items():
        room = _room_of(m)
        if not _is_application(m) or room not in APP_ROOMS:
            continue
        bad = sorted(d for d in deps if _is_application(d) and _room_of(d) != room
                     and _room_of(d) not in APP_ROOMS[room] and _room_of(d) not in ("__init__", "_version"))
        if bad:
            found[m] = bad
    assert found == {}


def test_only_the_command_line_applies_the_speed_layer():
    """The speed layer is entered by the commands (speed.applied) and asked by
    the run's plan, runner and lifecycle; the API never imports it."""
    users = sorted(m for m, deps in _import_graph().items()
                   if any(d == PKG + ".speed" or d.startswith(PKG + ".speed.") for d in deps)
                   and _room_of(m) != "speed")
    assert all(_room_of(m) in ("commands", "run") for m in users), users
