"""Phase timing for bench/fixed_cost.py, loaded into every Python process of
a measured run (the bench puts this folder first on PYTHONPATH, so Python
imports it at start-up as `sitecustomize`). It does nothing unless
TFRECORDS_BENCH_PHASES names a folder.

Each process appends events to <folder>/<pid>.jsonl: the wall clock, its own
CPU seconds (user + sys) and, in the launcher, the CPU seconds of its whole
tree so far (itself + live descendants from /proc + reaped ones). Events:
start (the kernel's process start), site (this file loaded), imported <m>
(the first import of a few heavy modules finished), the converter's phases
(configure, lock, build, run, every runner bundle with its stage name,
publish, report, summary) and exit (with the heavy modules it holds).
Functions are wrapped when their module is first imported (a meta path
finder), so nothing is imported early because of the bench.
"""
from __future__ import annotations

import os

_FOLDER = os.environ.get("TFRECORDS_BENCH_PHASES", "")

if _FOLDER:
    import atexit
    import functools
    import importlib.abc
    import json
    import sys
    import time

    _CLK = os.sysconf("SC_CLK_TCK")
    HEAVY = ("apache_beam", "tensorflow", "matplotlib", "pandas", "pyarrow", "pymongo", "numpy", "PIL.Image",
             "tfx_bsl", "grpc", "google.cloud.storage", "google.cloud.bigquery", "google.cloud.dataflow",
             "apitools", "httplib2", "beartype", "tensorflow_metadata", "google_crc32c")
    _state = {"pid": 0, "file": None}

    _PARENT = os.environ.get("TFRECORDS_BENCH_PARENT", "")

    def _role() -> str:
        """main (the bench's child), zygote, worker (forked from the zygote),
        worker client (the command Beam starts), worker (Beam's own)."""
        if _state.get("forked"):
            return "worker"
        if _PARENT and str(os.getppid()) == _PARENT:
            return "main"
        argv = " ".join(sys.argv)
        if "--zygote" in argv:
            return "zygote"
        if "speed.zygote" in argv:
            return "worker client"
        if "sdk_worker_main" in argv:
            return "worker (beam)"
        return argv[:60] or "python"

    def _self_cpu() -> float:
        t = os.times()
        return t.user + t.system

    def _descendants_cpu() -> float:
        """CPU seconds of the live descendants (with what they reaped)."""
        total = 0.0
        todo = [os.getpid()]
        seen = set()
        while todo:
            pid = todo.pop()
            try:
                kids = []
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/children") as f:
                        kids += [int(k) for k in f.read().split()]
            except OSError:
                continue
            for k in kids:
                if k in seen:
                    continue
                seen.add(k)
                try:
                    with open(f"/proc/{k}/stat", "rb") as f:
                        rest = f.read().rsplit(b")", 1)[1].split()
                    total += sum(int(x) for x in rest[11:15]) / _CLK
                except (OSError, IndexError, ValueError):
                    pass
                todo.append(k)
        return total

    def event(name: str, **extra) -> None:
        pid = os.getpid()
        if _state["pid"] != pid:
            _state["pid"] = pid
            _state["file"] = open(os.path.join(_FOLDER, f"{pid}.jsonl"), "a", buffering=1)
        rec = {"t": time.time(), "cpu": round(_self_cpu(), 4), "event": name, "pid": pid, "ppid": os.getppid(),
               "role": _role()}
        if _role() == "main":
            t = os.times()
            tree = _self_cpu() + t.children_user + t.children_system + _descendants_cpu()
            # The true figure never falls, but a sample can read low: a worker reaped
            # by the zygote between reading the zygote's /proc stat and listing its
            # children, or one orphaned to init as the tree exits, drops out of the
            # sum. A phase ending on such a sample came out negative (CI, stop 31),
            # so the tree's CPU is the running maximum of the samples.
            _state["tree_cpu"] = max(_state.get("tree_cpu", 0.0), tree)
            rec["tree_cpu"] = round(_state["tree_cpu"], 4)
        rec.update(extra)
        _state["file"].write(json.dumps(rec) + "\n")

    def _start_time() -> float:
        # The start is on the boot clock; /proc/uptime is too, read now. /proc/stat's
        # btime is whole seconds and drifts from time.time() on a VM whose clock
        # was stepped, which could put the start after this file's first event.
        with open("/proc/self/stat", "rb") as f:
            start = int(f.read().rsplit(b")", 1)[1].split()[19]) / _CLK
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return time.time() - max(0.0, uptime - start)

    def _threads() -> dict:
        """CPU seconds of each thread of this process ({name: seconds}, summed by name)."""
        import threading
        names = {t.native_id: t.name for t in threading.enumerate()}
        out: dict = {}
        try:
            for tid in os.listdir("/proc/self/task"):
                with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                    rest = f.read().rsplit(b")", 1)[1].split()
                name = "main" if int(tid) == os.getpid() else names.get(int(tid), "other")
                name = name.split("_")[0] if name.startswith(("tfrecords-read", "thumbnail")) else name
                out[name] = round(out.get(name, 0.0) + (int(rest[11]) + int(rest[12])) / _CLK, 3)
        except OSError:
            pass
        return out

    def _exit_event() -> None:
        event("exit", modules=[m for m in HEAVY if m in sys.modules], threads=_threads())

    def _after_fork() -> None:
        _state["forked"] = True
        event("fork")

    os.register_at_fork(after_in_child=_after_fork)
    atexit.register(_exit_event)
    _real_exit = os._exit

    def _exit(code):
        try:
            _exit_event()
        finally:
            _real_exit(code)

    os._exit = _exit

    def _wrap(owner, attr: str, label, gen: bool = False) -> None:
        fn = getattr(owner, attr, None)
        if fn is None or getattr(fn, "_bench_wrapped", False):
            return

        @functools.wraps(fn)
        def wrapper(*a, **kw):
            name = label(*a, **kw) if callable(label) else label
            event(name + " start")
            try:
                return fn(*a, **kw)
            finally:
                event(name + " end")
        wrapper._bench_wrapped = True
        setattr(owner, attr, wrapper)

    def _stage_name(self, ctx, bundle_manager, *a, **kw) -> str:
        return "bundle " + bundle_manager.stage.name

    def _patch(name: str, module) -> None:
        if name in HEAVY:
            event(f"imported {name}")
        if name == "tfrecord_pipelines.run.runtime":
            _wrap(module, "quiet_beam_logs", "configure")  # the first thing convert._run does
            _wrap(module, "choose_runner", "choose runner")
        elif name == "tfrecord_pipelines.run.lifecycle":
            _wrap(module, "locked", "lock")
            _wrap(module.Run, "execute", "execute")
        elif name == "tfrecord_pipelines.run.pipeline":
            _wrap(module, "build_pipeline", "build pipeline")
        elif name == "apache_beam.pipeline":
            _wrap(module.Pipeline, "run", "pipeline run")
        elif name == "apache_beam.runners.portability.fn_api_runner.fn_runner":
            _wrap(module.FnApiRunner, "run_stages", "run stages")
            _wrap(module.FnApiRunner, "_execute_bundle", _stage_name)
        elif name == "tfrecord_pipelines.transforms.stages.publish":
            _wrap(module, "publish", "publish")
        elif name == "tfrecord_pipelines.transforms.storage.report_data":
            _wrap(module, "write_report_safely", "report")
        elif name == "tfrecord_pipelines.console.summary":
            _wrap(module, "print_summary", "summary")
        elif name == "tfrecord_pipelines.speed.zygote":
            _wrap(module, "preload", "zygote preload")

    WATCH = set(HEAVY) | {"tfrecord_pipelines.run.runtime", "tfrecord_pipelines.run.lifecycle", "tfrecord_pipelines.run.pipeline",
                          "apache_beam.pipeline", "apache_beam.runners.portability.fn_api_runner.fn_runner",
                          "tfrecord_pipelines.transforms.stages.publish",
                          "tfrecord_pipelines.transforms.storage.report_data", "tfrecord_pipelines.console.summary",
                          "tfrecord_pipelines.speed.zygote"}

    class _Finder(importlib.abc.MetaPathFinder):
        """Wraps the loader of a watched module so _patch runs once it is executed."""

        def find_spec(self, fullname, path, target=None):
            if fullname not in WATCH:
                return None
            for finder in sys.meta_path:
                if finder is self:
                    continue
                spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
                if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    loader = spec.loader
                    real_exec = loader.exec_module

                    def exec_module(module, _real=real_exec, _name=fullname):
                        _real(module)
                        _patch(_name, module)
                    loader.exec_module = exec_module
                    return spec
            return None

    sys.meta_path.insert(0, _Finder())
    _site_t = time.time()
    event("site")
    try:  # the kernel's process start (10 ms resolution, so held to before this file ran)
        _state["file"].write(json.dumps({"t": min(_start_time(), _site_t), "cpu": 0.0, "event": "process start",
                                         "pid": os.getpid(), "ppid": os.getppid(), "role": _role()}) + "\n")
    except Exception:
        pass
