"""Whether a local run is small enough to run in this process.

Worker processes cost a fixed amount of time and CPU before they help: a
zygote that imports Beam, the workers' start, and for every stage of the
graph a round trip through the runner's data plane to each worker. On a
small input they never earn that back, so a local run whose input is known
to be small, and whose worker count the user did not choose
(--direct_num_workers, --direct_running_mode), runs in this process
(Beam's in_memory mode). The output is the same either way (the shards,
rejects and manifest do not depend on the runner or the worker count:
tests/e2e/test_small_run.py holds that).

The decision is made before any worker starts (the zygote is started as
the command begins), so it rests on what is cheap to know then: the number
of files in the --input tree, counted by a walk that stops past the limit,
or the number of lines of an uncompressed local --label_table. A remote
input, or one that cannot be counted cheaply, keeps the workers.

The limit is where the in-process run stops being faster: see MAX_IMAGES.
"""
from __future__ import annotations

import functools
import os
from typing import Optional

from tfrecord_pipelines import argv_flags

# Images up to which a local run stays in this process. In-process, the
# per-image work (read, checks, decode, hash, write) runs on every core
# anyway (read-ahead threads: transforms/storage/reads.py), so workers only
# add their fixed cost (the zygote, a round trip per stage: ~1.5-2 CPU s)
# until what stays on one thread in-process (listing, labels, splits, the
# shuffle's sort, encoding and writing, the quality checks) outweighs it.
# Measured on 2 vCPUs, warm cache, with Beam's shortcuts (beam_shortcuts.py)
# and bytecode (bench/fixed_cost.py --images N --extra "--validate MODE
# --num_shards 8" --variants in_process,workers, medians of 3, wall s
# in-process vs workers, 2026-11-27 night): header 2,500 2.85 vs 3.01, 3,500
# 3.35 vs 3.31, 5,000 3.91 vs 3.64, 10,000 5.78 vs 5.00; full 1,000 3.78 vs
# 3.78, 1,500 4.67 vs 4.91, 2,500 5.95 vs 5.39. In-process always used less
# CPU (15-30%) and a third of the memory, so a tie stays in-process; the
# limits are where the workers' wall starts to win. (Before the shortcuts,
# which shortened every bundle's end in-process more than the workers', the
# same measurement put them at 5,000 and 2,500.)
MAX_IMAGES = 3_500        # --validate header: the per-image work is light, in-process keeps up longer
MAX_IMAGES_FULL = 2_000   # full validation (the default): decoding wants both cores
_GIVEN = ("--direct_num_workers", "--direct_running_mode")
OFF_ENV = "TFRECORDS_SMALL_RUNS"


def limit_for(argv: list) -> int:
    """The in-process limit for the run these arguments describe."""
    header = (argv_flags.value(argv, "--validate") or "").lower() == "header"
    return MAX_IMAGES if header else MAX_IMAGES_FULL


def count_files(root: str, limit: int) -> int:
    """Files under `root`, counting stops past `limit` (returns limit + 1)."""
    n = 0
    todo = [root]
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                for e in it:
                    try:
                        if e.is_dir():
                            todo.append(e.path)
                            continue
                    except OSError:
                        pass
                    n += 1
                    if n > limit:
                        return n
        except OSError:
            continue
    return n


def count_lines(path: str, limit: int) -> int:
    """Lines of a file (an upper bound of a table's rows), stopping past `limit`."""
    n = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                return n
            n += block.count(b"\n")
            if n > limit:
                return n


def input_count(argv: list, limit: int) -> Optional[int]:
    """The input's size in files (or table lines), up to limit + 1; None when
    it is remote or not cheap to count."""
    tree, table = argv_flags.value(argv, "--input"), argv_flags.value(argv, "--label_table")
    try:
        if tree and "://" not in tree and os.path.isdir(tree):
            return count_files(tree, limit)
        if table and "://" not in table and os.path.isfile(table) and not table.lower().endswith(".gz"):
            return count_lines(table, limit)
    except OSError:
        return None
    return None


@functools.lru_cache(maxsize=8)
def _decide(argv: tuple) -> bool:
    args = list(argv)
    if any(argv_flags.given(args, f) for f in _GIVEN):
        return False
    if not argv_flags.local_runner(args):
        return False
    limit = limit_for(args)
    n = input_count(args, limit)
    return n is not None and n <= limit


def in_process(argv: list) -> bool:
    """True when this local run should not start worker processes (the same
    answer for the same arguments until forget(): the zygote's start and the
    runner's choice must agree). TFRECORDS_SMALL_RUNS=0 turns it off."""
    if os.environ.get(OFF_ENV, "1") == "0":
        return False
    return _decide(tuple(str(a) for a in argv))


def forget() -> None:
    """At the end of a command: the next run counts its input again."""
    _decide.cache_clear()
