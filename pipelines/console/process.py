"""What makes a command a process, in one place: its exit statuses, its
one-line errors on stderr, and its fast exit. The commands
(tfrecord_pipelines/commands/) return a status and never end the process;
the dispatcher (cli.py) and the `python -m` entry points end it with exit_now.
Signals: a Ctrl-C (SIGINT) during a run reaches the command as
KeyboardInterrupt, and `convert` turns SIGTERM into the same (Terminated,
while the command runs: `interrupts`); either ends it with one line and INTERRUPTED or
TERMINATED (commands/convert.py), the run's lock and staging removed on the
way out (lifecycle.py); the local workers' zygote handles its own SIGTERM
(speed/zygote.py)."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable

OK = 0       # done (verify: the output matches its manifest)
FAILED = 1   # the run failed, the output is not what it should be, or nothing could be read
USAGE = 2    # a usage error: nothing was run
INTERRUPTED = 130  # SIGINT (Ctrl-C): 128 + the signal's number, as a shell reports it
TERMINATED = 143   # SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where SIGINT raises KeyboardInterrupt, so that both
    leave the run the same way (the lock released, staging removed)."""


@contextlib.contextmanager
def interrupts(debug: bool = False):
    """While inside, SIGTERM raises Terminated in the main thread as SIGINT
    raises KeyboardInterrupt (a signal the caller ignores stays ignored), and
    the exceptions Beam's and gRPC's threads raise as its workers go (after
    either, or when a worker dies) are not printed, nor any thread's once a
    signal came (--debug prints them); the caller's handlers back on
    leaving. For a command's process only: the library API never touches
    signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came = _came
    came.clear()

    def on_signal(signum, frame):
        came.append(signum)
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def thread_failed(args):
        if debug or not (came or _runners_thread(args)):
            hook(args)

    handlers = {}
    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) is default:
            handlers[sig] = signal.signal(sig, on_signal)
    hook, threading.excepthook = threading.excepthook, thread_failed
    try:
        yield
    finally:
        threading.excepthook = hook
        for sig, previous in handlers.items():
            signal.signal(sig, previous)
        came.clear()


_came: list = []  # the signals `interrupts` caught, while inside it


def _runners_thread(args) -> bool:
    """An exception raised in one of Beam's (or gRPC's) own threads, as a
    worker process dies: the run's failure reaches the command, which tells
    it in one line; their tracebacks (some 50 lines) only with --debug."""
    tb = args.exc_traceback
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename.replace(os.sep, "/")
        if "/apache_beam/" in name or "/grpc/" in name:
            return True
        tb = tb.tb_next
    return False


def interrupted_by():
    """The status for the signal `interrupts` caught (a run in Beam's
    in-process runner gets its KeyboardInterrupt back as a RuntimeError of
    the step it stopped); None if none came."""
    if not _came:
        return None
    return TERMINATED if _came[0] == signal.SIGTERM else INTERRUPTED


def interrupted_status(e: BaseException) -> int:
    return TERMINATED if isinstance(e, Terminated) else INTERRUPTED


def error(text: str) -> None:
    """The command's one line on stderr for what ended it."""
    print(f"error: {text}", file=sys.stderr)


def exit_now(code: int) -> None:
    """Ends the command without Python's shutdown, which takes ~0.3 s with Beam
    and gRPC loaded and does nothing we need: every file is closed by now."""
    import logging
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def one_line_failure(cmd: str, fn: Callable[[list], int], argv: list) -> int:
    """Runs a command that reads an output (which anyone may have written):
    whatever its files hold, the command ends with one line, never a
    traceback. The commands report what they expect themselves; this is for
    what nobody foresaw."""
    try:
        return fn(argv)
    except Exception as e:  # noqa: BLE001 (any failure: one line, exit 1)
        text = f"{type(e).__name__}: {e}"
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:500])
        error(f"tfrecords {cmd} failed: {text}")
        return FAILED
