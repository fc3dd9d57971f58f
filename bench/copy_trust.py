"""What the copy's trust costs (transforms/storage/copy_trust.py): an
incremental --versioned run after 1% of a tree was added, three ways, each
from the same v1 (default options, full validation):

- pinned: v1 was published by a run on this machine; its files' pins are
  checked (a stat per shard and provenance file, an fstat per copied run) and
  the run's own files pinned;
- unchecked: the same run with the pins switched off in the child processes
  (a finder on PYTHONPATH replaces copy_trust.with_pins and copy_trust.pin):
  what the copy cost before it checked anything;
- unpinned: no pins (an empty state folder: v1 copied from elsewhere, a first
  run after upgrading): every record is read from its source.

pinned and unchecked alternate, --rounds times each (medians); unpinned runs
--unpinned_rounds times. Each run's v2 is removed and LATEST put back to v1
before the next; its shards' digests are compared across the three.

    .venv/bin/python -m bench.copy_trust --source DIR --images 10000

--source: a folder of class folders of images (e.g. bench/data/pool-*/train,
made by bench/run.py or the shared generator); its first --images files (by
class, then name) are copied (never linked: a link changes the source's
change time) into --data-dir.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT]

from bench.incremental import MARGIN, convert_cmd, digests, log, manifest, median  # noqa: E402
from bench import incremental  # noqa: E402

# Switches the pins off in every process of a run: copy_trust is patched as it is first imported
# (importing it here would import Beam into every process, which the command avoids).
UNCHECKED = '''
import importlib.abc, importlib.machinery, sys
NAME = "tfrecord_pipelines.transforms.storage.copy_trust"
class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != NAME:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            module.with_pins = lambda prev, *a, **k: prev
            module.pin = lambda *a, **k: False
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, _Finder())
'''


def build(source: str, work: str, images: int, held_back: float) -> tuple:
    """Copies the first `images` files of `source` into `work`, all but the
    last `held_back` of each class; returns (the tree, the held-back files)."""
    classes = sorted(d for d in os.listdir(source) if os.path.isdir(os.path.join(source, d)))
    per = max(1, images // len(classes))
    later = []
    shutil.rmtree(work, ignore_errors=True)
    for c in classes:
        names = sorted(os.listdir(os.path.join(source, c)))[:per]
        os.makedirs(os.path.join(work, c))
        keep = len(names) - max(1, round(len(names) * held_back))
        for k, n in enumerate(names):
            if k < keep:
                shutil.copyfile(os.path.join(source, c, n), os.path.join(work, c, n))
            else:
                later.append((os.path.join(source, c, n), os.path.join(work, c, n)))
    return work, later


def run(cmd: list, state: str, unchecked: str = "") -> dict:
    env = incremental.env()
    env["XDG_STATE_HOME"] = state
    if unchecked:
        env["PYTHONPATH"] = unchecked + os.pathsep + env.get("PYTHONPATH", "")
    old = incremental.env
    incremental.env = lambda: env
    try:
        return incremental.timed(cmd, " ".join(cmd[-4:]))
    finally:
        incremental.env = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", required=True)
    ap.add_argument("--images", type=int, default=10_000)
    ap.add_argument("--added", type=float, default=0.01, help="fraction of each class added after v1")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--unpinned_rounds", type=int, default=2)
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="copytrust-", dir=a.data_dir if os.path.isdir(a.data_dir) else None)
    work, later = build(a.source, os.path.join(tmp, "images"), a.images, a.added)
    time.sleep(MARGIN)
    state = os.path.join(tmp, "state")
    unchecked = os.path.join(tmp, "unchecked")
    os.makedirs(unchecked)
    with open(os.path.join(unchecked, "sitecustomize.py"), "w") as f:
        f.write(UNCHECKED)
    root = os.path.join(tmp, "ds")
    first = run(convert_cmd("--input", work, "--output", root, "--versioned", "--version", "v1"), state)
    v1 = manifest(os.path.join(root, "v1"))
    log(f"{v1['counts']['written']:,} records in v1: {first['wall_s']:.1f} s")
    for src, dst in later:
        shutil.copyfile(src, dst)
    time.sleep(MARGIN)
    latest = open(os.path.join(root, "LATEST"), "rb").read()
    walls = {"pinned": [], "unchecked": [], "unpinned": []}
    cpus = {k: [] for k in walls}
    sums, made = {}, {}
    plan = []
    for r in range(a.rounds):
        plan += ["pinned", "unchecked"] if r % 2 == 0 else ["unchecked", "pinned"]
    plan += ["unpinned"] * a.unpinned_rounds
    for what in plan:
        where = state if what != "unpinned" else tempfile.mkdtemp(prefix="empty-state-", dir=tmp)
        got = run(convert_cmd("--input", work, "--output", root, "--versioned", "--version", "v2"), where,
                  unchecked if what == "unchecked" else "")
        v2 = os.path.join(root, "v2")
        sums.setdefault(what, digests(v2))
        assert digests(v2) == sums[what]
        made[what] = manifest(v2)["made"]
        walls[what].append(got["wall_s"])
        cpus[what].append(got["cpu_s"])
        log(f"  {what}: {got['wall_s']:.2f} s wall, {got['cpu_s']:.2f} s CPU; copied {made[what]['records_copied']:,}"
            f", read {made[what]['images_read']:,}")
        shutil.rmtree(v2)
        with open(os.path.join(root, "LATEST"), "wb") as f:  # back to v1 for the next run
            f.write(latest)
        if what == "unpinned":
            shutil.rmtree(where, ignore_errors=True)
    identical = len({json.dumps(s, sort_keys=True) for s in sums.values()}) == 1
    result = {"images": v1["counts"]["written"], "added": len(later), "first_full_wall_s": first["wall_s"],
              **{f"{k}_wall_s": median(v) for k, v in walls.items()},
              **{f"{k}_cpu_s": median(v) for k, v in cpus.items()},
              "walls": walls, "cpus": cpus, "made": made, "shards_identical": identical}
    log(f"medians: pinned {result['pinned_wall_s']:.2f} s, unchecked {result['unchecked_wall_s']:.2f} s, "
        f"unpinned {result['unpinned_wall_s']:.2f} s (full v1 {first['wall_s']:.1f} s); shards identical: "
        f"{identical}")
    print(json.dumps(result, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
