"""How a run runs, decided once at the door, before Beam is imported.

    plan = Plan.decide(values, beam, command_line=True)

`values` are our options (options/table.py's Values), `beam` the few Beam
options the decision needs (runner, direct_num_workers,
direct_running_mode), from the command line (from_argv) or the Python API's
keywords. Everything downstream (the runner's choice, the speed layer, the
lifecycle) receives the plan and asks it; nothing else reads the runner's
name, the TFRECORDS_* switches or the raw command line.

A local run (no --runner, or one of LOCAL_RUNNERS) runs on Beam's
FnApiRunner, multi-process on all cores, unless:
- its input is small (small_run.py: counted cheaply, below a limit) and the
  user chose no worker count or mode: then in this process, where worker
  processes would cost more than they save (the output is the same);
- the user asked for a count or mode (--direct_num_workers,
  --direct_running_mode in_memory).

The speed layer (pipelines/speed/) is only for the command line
(command_line=True), with a supported Beam, unless TFRECORDS_SPEEDUPS=0
(but for Beam's notebook hook, off while any caller's graph is built). The
command line keeps its worker processes' stderr off the terminal either way.
TFRECORDS_SMALL_RUNS=0 keeps small local inputs on worker processes.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Mapping, Optional

from tfrecord_pipelines import speed

from tfrecord_pipelines.run import small_run
from tfrecord_pipelines.options import table

# Runner names that mean Beam's local FnApiRunner (compared in lower case; "" is no --runner).
LOCAL_RUNNERS = ("", "directrunner", "direct", "fnapirunner", "switchingdirectrunner")
IN_PROCESS_THREADS = 8  # at most, for an in-process run's reads, checks and hashes
SMALL_RUNS_ENV = "TFRECORDS_SMALL_RUNS"  # 0: small local inputs run on worker processes too
BEAM_NAMES = ("runner", "direct_num_workers", "direct_running_mode")


@dataclasses.dataclass(frozen=True)
class Plan:
    runner: str = ""               # as named ("" for the default local runner)
    local: bool = True
    workers: int = 1               # local: worker processes (1: in this process)
    running_mode: str = "in_memory"  # local: Beam's direct_running_mode the run gets
    mode_given: str = ""           # local: --direct_running_mode as the user gave it
    small_input: bool = False      # local: in this process because the input is small
    reads_in_flight: int = 1       # local: reads, checks and hashes ahead per worker process
    remote_paths: bool = False     # some option names a path with a scheme (gs://, ...)
    debug: bool = False
    speed: speed.Speedups = speed.OFF

    @property
    def in_process(self) -> bool:
        return self.local and self.running_mode == "in_memory"

    @property
    def checks_launch(self) -> bool:
        """A remote launch first checks credentials, names and buckets
        (pipelines/run/preflight.py); a local run's first request does."""
        return not self.local

    @classmethod
    def decide(cls, values, beam: Mapping, command_line: bool = False,
               environ: Optional[Mapping] = None, other_args: tuple = (), own_process: bool = False) -> "Plan":
        """`other_args`: the command line's arguments that are neither ours nor
        the three above (a --temp_location gs://... makes the run remote-pathed).
        `own_process`: the process is the command's alone (its entry point), so
        Beam may be imported lean: nothing else will ask it for a connector."""
        environ = os.environ if environ is None else environ
        runner = beam.get("runner") or ""
        runner_name = runner if isinstance(runner, str) else type(runner).__name__
        local = isinstance(runner, str) and runner.lower() in LOCAL_RUNNERS
        debug = bool(values.debug)
        remote_paths = any("://" in v for v in (*_texts(values, beam), *map(str, other_args)))
        if not local:
            return cls(runner=runner_name, local=False, workers=0, running_mode="", remote_paths=remote_paths,
                       debug=debug, speed=_speedups(command_line, False, False, debug, remote_paths, environ,
                                                    own_process))
        given_workers = beam.get("direct_num_workers")
        mode = str(beam.get("direct_running_mode") or "")
        workers = _int(given_workers) or os.cpu_count() or 1  # 0 means all cores, as in Beam
        small = (given_workers is None and not mode and environ.get(SMALL_RUNS_ENV, "1") != "0"
                 and small_run.is_small(values))
        if small:
            workers = 1
        running = mode or ("multi_processing" if workers > 1 else "in_memory")
        if running == "multi_processing" and workers == 1:
            running = "in_memory"  # one worker process only adds its start-up time
        if running == "in_memory":
            workers = 1  # in_memory runs one bundle at a time; more "workers" would be threads
        # One process doing all the work reads, checks and hashes ahead on the other cores; with a
        # worker per core, a thread each is enough.
        in_flight = min(os.cpu_count() or 1, IN_PROCESS_THREADS) if workers == 1 else 1
        multi = running == "multi_processing"
        return cls(runner=runner_name, local=True, workers=workers, running_mode=running, mode_given=mode,
                   small_input=small, reads_in_flight=in_flight, remote_paths=remote_paths, debug=debug,
                   speed=_speedups(command_line, True, multi, debug, remote_paths, environ, own_process))

    @classmethod
    def from_argv(cls, argv: list, command_line: bool = True, environ: Optional[Mapping] = None,
                  own_process: bool = False) -> "Plan":
        """The plan of a command line (`tfrecords convert ARGS`), read with our
        options' parser and Beam's three; a bad value leaves the defaults (the
        flags' check words it)."""
        try:
            values, rest = table.parse_known(argv)
        except ValueError:
            values, rest = table.defaults(), list(argv)
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        for name in BEAM_NAMES:
            parser.add_argument("--" + name, default=None)
        beam, others = parser.parse_known_args(rest)
        return cls.decide(values, vars(beam), command_line, environ, tuple(others), own_process)


def _texts(values, beam: Mapping):
    for o in table.OPTIONS:
        v = getattr(values, o.name)
        if isinstance(v, str):
            yield v
    for v in beam.values():
        if isinstance(v, str):
            yield v


def _int(v) -> int:
    try:
        return int(v or 0)
    except (TypeError, ValueError):
        return 0


def _speedups(command_line: bool, local: bool, multi: bool, debug: bool, remote_paths: bool,
              environ: Mapping, own_process: bool) -> speed.Speedups:
    switch = environ.get(speed.SWITCH_ENV, "1") != "0"
    on = command_line and switch
    beam_ok = on and speed.supported()
    return speed.Speedups(lean_import=beam_ok and own_process and local and not remote_paths, shortcuts=beam_ok,
                          zygote=beam_ok and local and multi and speed.can_fork(),
                          # Not Beam's internals: the command line's own worker stderr, whatever the switch.
                          quiet_workers=command_line and local and not debug,
                          no_interactive_labels=switch and speed.supported())
