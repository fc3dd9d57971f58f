"""transforms/storage/retention.py, leftovers: which folders of a --versioned
root a killed run left (nothing but a run's own files, no manifest, no live
lock), on real folders; never LATEST's, never one holding another file (a
refused run's kept rejects among them)."""
import json
import os
import socket

from tfrecord_pipelines.transforms.storage import retention


def _put(root, rel: str, data: bytes = b"") -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _lock(root, rel: str, pid: int) -> None:
    _put(root, rel, json.dumps({"run_id": "20990101-000000-000000-feedbeef", "host": socket.gethostname(),
                                "pid": pid, "expires": "2099-01-02T00:00:00+00:00"}).encode())


def test_only_folders_holding_nothing_but_a_runs_files_are_leftovers(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "empty"))
    _put(root, "staged/.tfrecords-staging-20260101-000000-000000-0123abcd/spill/x.spill")
    _put(root, "partial/train-00000-of-00002.tfrecord")
    _put(root, "partial/index/train-00000-of-00002.tfrecord.idx")
    _put(root, "partial/provenance/train-00000-of-00002.tfrecord.jsonl")
    _put(root, "partial/label_map.json.tmp-12-ab12")
    _put(root, "refused/failed-20260101-000000-000000-0123abcd.rejects.jsonl")
    _put(root, "complete/manifest.json", b"{}")
    _put(root, "users/notes.txt")
    _put(root, "users-temp/notes.txt.tmp-12-ab12")
    _put(root, "deeper/index/more/x.idx")
    _lock(root, "writing/.tfrecords.lock", os.getpid())  # a live run writes it
    _lock(root, "dead/.tfrecords.lock", 2 ** 22 + 1)  # a pid no process has (above pid_max's default)
    _put(root, "odd-lock/.tfrecords.lock", b"\xff not json")
    os.makedirs(os.path.join(root, "current"))
    _put(root, "LATEST", b"current\n")
    found = retention.leftovers(root, {"mine"})
    os.makedirs(os.path.join(root, "mine"))
    assert found == [("dead", 0), ("empty", 0), ("partial", 4), ("staged", 0)]
    assert retention.leftovers(root, {"mine"}) == found  # "mine" is the run's own: protected
    assert retention.describe_leftovers(found[1:3]) == "empty (no files), partial (4 files)"
    assert retention.remove_leftovers(root, ["empty", "users", "current", "writing"]) == ["empty"]
    assert sorted(os.listdir(root)) == ["LATEST", "complete", "current", "dead", "deeper", "mine", "odd-lock",
                                        "partial", "refused", "staged", "users", "users-temp", "writing"]
