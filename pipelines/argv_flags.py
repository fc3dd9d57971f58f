"""A flag's value read from the raw command line, before Beam parses it: what
the launcher decides ahead of importing Beam (the workers' zygote, a lean
import, an in-process run) is read here, once, the same way."""
from __future__ import annotations

from typing import Optional

LOCAL_RUNNERS = ("", "directrunner", "direct", "fnapirunner")


def value(argv: list, flag: str) -> Optional[str]:
    """The value of `--flag VALUE` or `--flag=VALUE` (the first), else None."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def given(argv: list, flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def local_runner(argv: list) -> bool:
    """The arguments name no runner, or a local one."""
    return (value(argv, "--runner") or "").lower() in LOCAL_RUNNERS
