"""Whether a local input is small enough to run in the launcher's process.

Worker processes cost a fixed amount of time and CPU before they help: a
zygote that imports Beam, the workers' start, and for every stage of the
graph a round trip through the runner's data plane to each worker. On a
small input they never earn that back, so the run's plan (pipelines/run/plan.py)
keeps a local run whose input is known to be small, and whose worker count
the user did not choose, in the launcher's process (Beam's in_memory mode).
The output is the same either way (tests/e2e/test_small_run.py holds that).

The decision is made at the door, before any worker starts, so it rests on
what is cheap to know then: the number of files in the --input tree,
counted by a walk that stops past the limit, or the number of lines of an
uncompressed local --label_table. A remote input, or one that cannot be
counted cheaply, keeps the workers.
"""
from __future__ import annotations

import os
from typing import Optional

# Images up to which a local run stays in the launcher's process. In-process, the per-image work (read,
# checks, decode, hash, write) runs on every core anyway (read-ahead threads: transforms/storage/reads.py),
# so workers only add their fixed cost (the zygote, a round trip per stage: ~1.5-2 CPU s) until what stays on
# one thread in-process (listing, labels, splits, the shuffle's sort, encoding and writing, the quality
# checks) outweighs it. In-process always uses less CPU and a third of the memory, so a tie stays in-process;
# the limits are where the workers' wall time starts to win on 2 cores (bench/fixed_cost.py --variants
# in_process,workers measures it).
MAX_IMAGES = 3_500        # --validate header: the per-image work is light, in-process keeps up longer
MAX_IMAGES_FULL = 2_000   # full validation (the default): decoding wants both cores


def limit_for(values) -> int:
    """The in-process limit for the run these options describe."""
    return MAX_IMAGES if (values.validate or "").lower() == "header" else MAX_IMAGES_FULL


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


def input_count(values, limit: int) -> Optional[int]:
    """The input's size in files (or table lines), up to limit + 1; None when
    it is remote or not cheap to count."""
    tree, table = values.input, values.label_table
    try:
        if tree and "://" not in tree and os.path.isdir(tree):
            return count_files(tree, limit)
        if table and "://" not in table and os.path.isfile(table) and not table.lower().endswith(".gz"):
            return count_lines(table, limit)
    except OSError:
        return None
    return None


def is_small(values) -> bool:
    """The local input is known to hold at most limit_for(values) images."""
    limit = limit_for(values)
    n = input_count(values, limit)
    return n is not None and n <= limit
