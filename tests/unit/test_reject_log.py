"""The run's rejects counted and written in path order without holding them
all at once (transforms/storage/reject_log.py): the same rejects.jsonl bytes
as sorting them all in memory, from batches or spill references, whether
the rejects fit one in-memory run or need an external merge."""
import json
import random

import pytest

from tfrecord_pipelines.transforms.core.records import Batch, Reject, rejects_jsonl
from tfrecord_pipelines.transforms.storage import spill
from tfrecord_pipelines.transforms.storage.reject_log import RejectLog


def rejects(n: int, seed: int = 1) -> list:
    rng = random.Random(seed)
    reasons = ["missing", "corrupt", "truncated"]
    out = [Reject(f"train/c{rng.randrange(50)}/f{rng.randrange(n)}-é.jpg", rng.choice(reasons),
                  f"detail {rng.randrange(3)}", rng.choice(["", "train", "validation"])) for _ in range(n)]
    out.append(Reject("bad\udcff.jpg", "missing", "gone"))  # a name that is not UTF-8
    return out


@pytest.mark.parametrize("run", [7, 1000, 100_000])
@pytest.mark.parametrize("spilled", [False, True])
def test_same_file_as_sorting_all_in_memory(tmp_path, run, spilled):
    rs = rejects(2500)
    batches = [Batch(rs[i:i + 97]) for i in range(0, len(rs), 97)]
    if spilled:
        batches = [spill.spill(b, str(tmp_path)) for b in batches]
    log = RejectLog(batches, run=run)
    got = b"".join(log.jsonl())
    assert got == rejects_jsonl(rs)
    assert len(log) == len(got.splitlines()) == len(rs)
    assert sum(log.by_reason.values()) == len(rs)
    assert log.by_reason["missing"] == sum(r.reason == "missing" for r in rs)
    rows = [json.loads(line) for line in got.decode("utf-8").splitlines()]
    assert [r["path"] for r in rows] == sorted(r["path"] for r in rows)
    assert [r.rel for r in log.first(10)] == [r.rel for r in sorted(rs, key=lambda r: (r.rel, r.reason,
                                                                                        r.detail, r.split))[:10]]


def test_no_rejects():
    log = RejectLog([])
    assert len(log) == 0 and b"".join(log.jsonl()) == b"" and log.first(5) == []
