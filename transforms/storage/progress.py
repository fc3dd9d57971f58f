"""Progress of a local run: each DoFn instance counts its work and, at most
twice a second, writes its running totals to its own small file in a local
folder; the launcher sums those files into a progress line. Beam's counters
carry the same figures (they are what Dataflow shows), but the local runner
reports counters only when the pipeline ends."""
from __future__ import annotations

import json
import os
import time
import uuid

_INTERVAL = 0.5


class Progress:
    def __init__(self, folder: str, stage: str):
        self._path = os.path.join(folder, f"{stage}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json") if folder else ""
        self.records = 0
        self.bytes = 0
        self.rejected = 0
        self._last = 0.0

    def add(self, records: int, nbytes: int = 0, rejected: int = 0) -> None:
        self.records += records
        self.bytes += nbytes
        self.rejected += rejected
        if self._path and time.monotonic() - self._last > _INTERVAL:
            self.flush(force=True)

    def flush(self, force: bool = False) -> None:
        if not self._path or not (force or time.monotonic() - self._last > _INTERVAL):
            return
        self._last = time.monotonic()
        tmp = self._path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump({"records": self.records, "bytes": self.bytes, "rejected": self.rejected}, f)
            os.replace(tmp, self._path)
        except OSError:
            pass  # progress is best-effort; the folder may be gone at teardown


def mark_stage(stage: str) -> None:
    """Notes in a local run's folder (where its errors are noted too,
    transforms/core/errors.py) that the run has reached `stage` (e.g.
    "report": the publish step builds report.html), so that the progress line
    says what the time goes to. Nothing outside a local run."""
    from tfrecord_pipelines.transforms.core.errors import NOTES_ENV
    folder = os.environ.get(NOTES_ENV)
    if folder and os.path.isdir(folder):
        Progress(folder, stage).flush(force=True)


def reporting_pids(folder: str) -> set:
    """The process ids that wrote progress files: which worker processes did work."""
    try:
        names = os.listdir(folder)
    except OSError:
        return set()
    return {int(n.split("-")[1]) for n in names if n.endswith(".json") and n.count("-") >= 2
            and n.split("-")[1].isdigit()}


def read_totals(folder: str) -> dict:
    """{stage: {"records": n, "bytes": n, "rejected": n}} summed over the files."""
    totals: dict = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return totals
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                d = json.load(f)
        except (OSError, ValueError):
            continue
        t = totals.setdefault(name.split("-", 1)[0], {"records": 0, "bytes": 0, "rejected": 0})
        for k in t:
            t[k] += d.get(k, 0)
    return totals


TOTAL = "total_"  # the prefix of a stage's expected record count ("total_write")


def expect(folder: str, stage: str, records: int) -> None:
    """Says how many records `stage` will process, once a step knows it (the
    shard plans know what WriteShards will write): the progress bar's total."""
    if not folder:
        return
    p = Progress(folder, TOTAL + stage)
    p.add(records)
    p.flush(force=True)
