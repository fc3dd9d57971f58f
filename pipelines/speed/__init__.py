"""The speed layer: everything that reaches into Beam's internals or starts
processes of its own to make a command-line run fast, in one room.

- lean_import: `import apache_beam` without the connectors a local run on
  local files never uses (about half of Beam's import: ~0.7 s of CPU and
  ~110 MB in every process that imports it);
- shortcuts: Beam's per-transform DoFn introspection and option views
  remembered, IPython not imported to learn that we are not inside it, and
  the wait at each bundle's end capped (a fifth of a small run's time);
- zygote: local worker processes forked from a warm process instead of
  started cold (each would import Beam again: ~1 s before any work);
- quiet_stderr: the worker processes' stderr (Beam prints every failed
  bundle's traceback there) kept off the terminal;
- without_interactive_labels: inside IPython, Beam hands every top-level
  transform to its interactive environment, whose start injects jQuery and
  DataTables from CDNs into the notebook page; while our graph is built that
  hook is off. This one applies to library calls too (a notebook is where
  they happen), only while the graph is built, and is put back at once.

One version check (SUPPORTED_BEAM: with any other Beam the layer is off and
the output bytes are the same), one switch (TFRECORDS_SPEEDUPS=0, read by
the run's plan, pipelines/run/plan.py), and one way in: `applied(speedups)`, a
context the command line enters around a run, which undoes on leaving what
it did. A library call (convert(), check(), the PTransforms) never enters it.
Importing this package imports neither Beam nor any module of the layer.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys

SUPPORTED_BEAM = ("2.77.0",)
SWITCH_ENV = "TFRECORDS_SPEEDUPS"  # 0: the layer is off (read by pipelines/run/plan.py only)
ZYGOTE_ENV = "TFRECORDS_WORKER_ZYGOTE"  # the zygote's socket, for the worker commands of a run
LEAN_WORKERS_ENV = "TFRECORDS_LEAN_WORKERS"  # 1: a run's worker processes import Beam lean


def beam_version() -> str:
    """The installed Beam's version, without importing Beam."""
    from importlib import metadata
    try:
        return metadata.version("apache-beam")
    except metadata.PackageNotFoundError:
        return ""


def supported() -> bool:
    return beam_version() in SUPPORTED_BEAM


def can_fork() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork")


@dataclasses.dataclass(frozen=True)
class Speedups:
    """Which parts of the layer a run uses (decided once, by the plan)."""
    lean_import: bool = False   # a local run naming no remote path
    shortcuts: bool = False
    zygote: bool = False        # a local multi-process run on Linux
    quiet_workers: bool = False  # worker processes' stderr off the terminal (not with --debug)
    no_interactive_labels: bool = False  # Beam's notebook hook off while our graph is built

    @property
    def any(self) -> bool:
        return self.lean_import or self.shortcuts or self.zygote or self.quiet_workers


OFF = Speedups()


@contextlib.contextmanager
def applied(speedups: Speedups):
    """The command line's run with the layer on: the zygote started first (it
    imports while this process imports Beam), Beam imported (lean where the
    plan allows), the shortcuts installed. On leaving: the zygote stopped,
    the shortcuts removed, the environment as it was."""
    env_before = {k: os.environ.get(k) for k in (ZYGOTE_ENV, LEAN_WORKERS_ENV)}
    undo = []
    lean = speedups.lean_import and "apache_beam" not in sys.modules
    try:
        if lean:
            # Before the zygote starts: it imports what its workers need at once, and lean only if told.
            os.environ[LEAN_WORKERS_ENV] = "1"  # Beam's own worker processes of this run import lean too
        if speedups.zygote:
            from tfrecord_pipelines.speed import zygote
            with quiet_stderr(speedups.quiet_workers):  # the zygote and its forks inherit this fd 2
                zygote.start()
            undo.append(zygote.stop)
        if lean:
            from tfrecord_pipelines.speed import lean_import
            lean_import.import_lean()
        import apache_beam  # noqa: F401
        if speedups.any:
            import gc
            # The command's process lives for one run: what it imported need not be walked by every full
            # collection of the cycle collector again (as the zygote does for its workers).
            gc.freeze()
            undo.append(gc.unfreeze)
        if speedups.shortcuts:
            from tfrecord_pipelines.speed import shortcuts
            undo.append(shortcuts.install())
        yield
    finally:
        for step in reversed(undo):
            step()
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def worker_environment(speedups: Speedups):
    """The SDK environment of a local multi-process run's workers when they
    are forked from the zygote, else None (Beam starts its own)."""
    if not speedups.zygote:
        return None
    from tfrecord_pipelines.speed import zygote
    return zygote.environment()


@contextlib.contextmanager
def quiet_stderr(enabled: bool):
    """Processes started inside write their stderr to /dev/null (see worker_stderr.py)."""
    if not enabled:
        yield
        return
    from tfrecord_pipelines.speed.worker_stderr import workers_stderr_off
    with workers_stderr_off():
        yield



@contextlib.contextmanager
def without_interactive_labels(speedups: Speedups):
    """Beam's labelling of top-level transforms for its interactive runner
    off while inside (a no-op outside IPython)."""
    if not speedups.no_interactive_labels or "IPython" not in sys.modules:
        yield
        return
    from apache_beam import pipeline
    hook = pipeline.alter_label_if_ipython
    pipeline.alter_label_if_ipython = lambda transform, pvalueish: None
    try:
        yield
    finally:
        pipeline.alter_label_if_ipython = hook
