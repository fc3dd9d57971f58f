"""What makes a command a process, in one place: its exit statuses, its
one-line errors on stderr, and its fast exit. The commands
(tfrecord_pipelines/commands/) return a status and never end the process;
the dispatcher (cli.py) and the `python -m` entry points end it with exit_now.
Signals: a Ctrl-C during a run reaches the command as KeyboardInterrupt and
ends it with FAILED and one line (commands/convert.py), the run's lock and
staging removed on the way out (lifecycle.py); the local workers' zygote
handles its own SIGTERM (local_worker.py)."""
from __future__ import annotations

import os
import sys
from typing import Callable

OK = 0       # done (verify: the output matches its manifest)
FAILED = 1   # the run failed, the output is not what it should be, or nothing could be read
USAGE = 2    # a usage error: nothing was run


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
