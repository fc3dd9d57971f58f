"""A run's rejects, however many there are: counted by reason and written
as rejects.jsonl in path order without holding them all in one process.

The publish step (and `tfrecords check`) runs on one worker. A dataset that
is mostly bad (a wrong --image_root, a bucket of HTML error pages) rejects
nearly every record, and ~300 bytes of Python objects each would make that
step's memory grow with the dataset. Here the reject batches (on a local run,
references to spill files) are read one at a time: counted, then sorted in
runs of at most RUN rejects, each run written to a scratch file as JSON
lines, and the runs merged (heapq.merge) into the output file, line by line.
Fewer rejects than RUN are simply sorted in memory. Either way the file holds
the same bytes, in records.rejects_jsonl's order.
"""
from __future__ import annotations

import collections
import heapq
import itertools
import os
import pickle
from typing import Iterable, Iterator

from tfrecord_pipelines.transforms.core.publishable import RejectFacts
from tfrecord_pipelines.transforms.core.records import Reject, reject_line, reject_order
from tfrecord_pipelines.transforms.storage import scratch, spill

RUN = 100_000  # rejects sorted in memory at once (~30 MB)
_CHUNK = 1_000  # lines per pickled piece of a run file


class RejectLog:
    """The rejects of `batches` (lists of Reject, or their spill references)."""

    def __init__(self, batches: Iterable, run: int = RUN):
        self._batches = list(batches)
        self._run = run
        self.count = 0
        self.by_reason: collections.Counter = collections.Counter()
        self.facts = RejectFacts()  # by split, and the fixes their details name (transforms/core/publishable.py)
        for b in self._batches:
            for r in spill.load(b):
                self.count += 1
                self.by_reason[r.reason] += 1
                self.facts.add(r.rel, r.reason, r.detail, r.split)

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Reject]:
        """The rejects in no particular order, a batch at a time."""
        for b in self._batches:
            yield from spill.load(b)

    def first(self, n: int) -> list:
        """The first `n` rejects in path order."""
        return list(itertools.islice(self._sorted(), n))

    def jsonl(self) -> Iterator[bytes]:
        """rejects.jsonl, a piece at a time: one JSON object per reject, in path order."""
        buf = []
        for r in self._sorted():
            buf.append(reject_line(r))
            if len(buf) >= _CHUNK:
                yield b"".join(buf)
                buf = []
        if buf:
            yield b"".join(buf)

    def _sorted(self) -> Iterator[Reject]:
        if self.count <= self._run:
            yield from sorted(self, key=reject_order)
            return
        with scratch.folder("rejects") as runs_dir:  # reclaimed by a later run if this one is killed
            runs = []
            batch_iter = iter(self)
            while True:
                chunk = sorted(itertools.islice(batch_iter, self._run), key=reject_order)
                if not chunk:
                    break
                runs.append(_write_run(runs_dir, len(runs), chunk))
            yield from heapq.merge(*(_read_run(p) for p in runs), key=reject_order)


def _write_run(folder: str, i: int, rejects: list) -> str:
    path = os.path.join(folder, f"run-{i:05d}")
    with open(path, "wb") as f:
        for k in range(0, len(rejects), _CHUNK):
            pickle.dump([tuple(r) for r in rejects[k:k + _CHUNK]], f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _read_run(path: str) -> Iterator[Reject]:
    with open(path, "rb") as f:
        while True:
            try:
                piece = pickle.load(f)
            except EOFError:
                return
            yield from (Reject(*t) for t in piece)
