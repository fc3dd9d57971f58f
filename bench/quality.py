"""The cost of the data-quality checks (issue 13): full-mode conversions with
--quality on and off, alternating, on the ImageNet-like bench tree; and, in
process, the perceptual hash's own cost per image and that of the checks'
steps after it.

    .venv/bin/python -m bench.quality                       # 2,500 images, 5 repeats of each (~3 min)
    .venv/bin/python -m bench.quality --size 10000 --repeats 3

Each conversion is its own process tree, measured as bench/run.py does
(bench/procmon.py: wall, CPU of every process), after waiting for a quiet
machine. Printed: median wall, images/s and CPU seconds per setting and the
difference on/off (the target is under 5%), also as the median of each
repeat's on/off ratio (its two runs are back to back, so load from elsewhere
that comes and goes disturbs it less); then, on 500 of the images, the
per-image time of full validation (tfrecord_pipelines.transforms.core.images.probe_image) and
the hash's, one image at a time and in batches of quality.HASH_BATCH as the
stages that decode compute it (the best of 5 passes: the least disturbed by
other load; right after each decode, the hash cost three times as much, ~40
us of its thread's CPU inside a conversion, hence the batches); and, on every
image, the checks' regrouping, checking and assembling (check_quality's
functions, best of 3). The tree is made by bench/dataset.py (random crops of a few CC0 photos), so
it holds many related images: the near-duplicate figures of the last run are
printed too. Results go to bench/results/quality-<date>.json.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench import dataset, procmon
from bench.run import child_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def convert_cmd(train: str, out: str, quality: str, shards: int, near: str = "") -> list:
    cmd = [sys.executable, "-m", "tfrecord_pipelines.convert", "--input", train, "--output", out, "--validate", "full",
           "--progress", "off", "--overwrite", "--num_shards", str(shards), "--quality", quality]
    return cmd + (["--near_duplicates", near] if near and quality == "on" else [])


def hash_cost(train: str, n: int = 500, passes: int = 5) -> dict:
    """us per image: full validation (read from memory), and the perceptual
    hash of the small decode validation leaves, one image at a time and in
    batches (quality.hashes), each the best of `passes` interleaved passes
    (the pass least disturbed by other load)."""
    sys.path.insert(0, ROOT)
    from tfrecord_pipelines.transforms.core.images import ImagePolicy, _decode, _open, probe_image, sniff_format
    from tfrecord_pipelines.transforms.core.quality import HASH_BATCH, hash_input, hashes, perceptual_hash
    files = sorted(glob.glob(os.path.join(train, "*", "*")))[:n]
    datas = [open(f, "rb").read() for f in files]
    decoded = []
    for d in datas:
        im = _open(d, sniff_format(d))
        _decode(im, sniff_format(d))
        decoded.append(im)
    policy = ImagePolicy()
    best = {"validate": float("inf"), "hash": float("inf"), "batched": float("inf")}
    for _ in range(passes):
        t0 = time.perf_counter()
        for d in datas:
            probe_image(d, policy)
        t1 = time.perf_counter()
        for im in decoded:
            perceptual_hash(im)
        t2 = time.perf_counter()
        for i in range(0, len(decoded), HASH_BATCH):
            hashes([hash_input(im) for im in decoded[i:i + HASH_BATCH]])
        t3 = time.perf_counter()
        for k, v in (("validate", t1 - t0), ("hash", t2 - t1), ("batched", t3 - t2)):
            best[k] = min(best[k], v)
    return {k: v / len(datas) * 1e6 for k, v in best.items()}


def checks_cost(train: str, shards: int, passes: int = 3) -> dict:
    """us per image of the checks' own steps after the hash, in process, on
    every image of the tree (hashed as a conversion does): the shard writer's
    regrouping of its rows (Scatter), the checks of the groups (Check), and
    the section made of their parts (Assemble); the best of `passes`. The
    runner's own cost of the two steps (about 20 ms each) is not included."""
    sys.path.insert(0, ROOT)
    import collections
    import hashlib
    import pickle
    from tfrecord_pipelines.transforms.core.images import ImagePolicy, probe_image
    from tfrecord_pipelines.transforms.core.labels import LabelMap
    from tfrecord_pipelines.transforms.core.quality import Row
    from tfrecord_pipelines.transforms.core.specs import LabelType, QualitySpec
    from tfrecord_pipelines.transforms.stages import check_quality
    policy = ImagePolicy(perceptual_hash=True)
    files = sorted(glob.glob(os.path.join(train, "*", "*")))
    classes = sorted({os.path.basename(os.path.dirname(f)) for f in files})
    ids = {c: i for i, c in enumerate(classes)}
    rows = []
    for f in files:
        data = open(f, "rb").read()
        info = probe_image(data, policy)
        label = os.path.basename(os.path.dirname(f))
        rows.append(Row(os.path.relpath(f, train), "train", label, ids[label], hashlib.sha256(data).hexdigest(),
                        info.phash, info.width, info.height))
    label_map = LabelMap(LabelType.CLASS, tuple((c, i) for c, i in ids.items()))
    best = {"scatter": float("inf"), "check": float("inf"), "assemble": float("inf")}
    spill_dir = tempfile.mkdtemp(prefix="bench-quality-spill-")
    try:
        for _ in range(passes):
            t0 = time.perf_counter()
            scatter = check_quality._ScatterFn(True, True, spill_dir)
            groups = collections.defaultdict(list)
            for i in range(shards):  # as the runner hands them on: pickled
                for k, v in scatter.process(rows[i::shards]):
                    groups[k].append(pickle.loads(pickle.dumps(v)))
            t1 = time.perf_counter()
            parts = [pickle.loads(pickle.dumps(p)) for k, v in sorted(groups.items())
                     for p in check_quality.check_group(k, v, QualitySpec().max_distance)]
            t2 = time.perf_counter()
            check_quality.assemble(None, parts, label_map, QualitySpec(), "")
            t3 = time.perf_counter()
            for k, v in (("scatter", t1 - t0), ("check", t2 - t1), ("assemble", t3 - t2)):
                best[k] = min(best[k], v)
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)
    return {k: v / len(rows) * 1e6 for k, v in best.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=2500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--near_duplicates", default="", help="passed to the runs with checks on (default: convert's)")
    ap.add_argument("--tiles", action="store_true",
                    help="the tree with each image's tiles shuffled (bench/dataset.py): few near duplicates, "
                         "as in most real datasets, instead of the crops of a few photos")
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "bench", "data"))
    ap.add_argument("--quiet-cores", type=float, default=0.5, help="wait for the rest of the machine to use less")
    ap.add_argument("--max-wait", type=float, default=30.0)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    info = dataset.ensure_shuffled(a.data_dir, a.size, log) if a.tiles else dataset.ensure_size(a.data_dir, a.size,
                                                                                                   log=log)
    train = info["train"]
    n, nbytes = dataset.warm(train)
    env = child_env()
    tmp = tempfile.mkdtemp(prefix="bench-quality-")
    runs = {"on": [], "off": []}
    last_manifest = None
    try:
        for r in range(a.repeats):
            for setting in (("on", "off") if r % 2 == 0 else ("off", "on")):
                out = os.path.join(tmp, setting)
                procmon.wait_quiet(a.quiet_cores, a.max_wait)
                res = procmon.run_measured(convert_cmd(train, out, setting, a.shards, a.near_duplicates), cwd=ROOT, env=env)
                if res.get("returncode", 0) != 0:
                    raise SystemExit(f"conversion failed: {res}")
                runs[setting].append({"wall": res["wall_s"], "cpu": res["cpu_s"]})
                print(f"repeat {r + 1} quality {setting}: {res['wall_s']:.2f} s wall, {res['cpu_s']:.2f} s CPU",
                      file=sys.stderr)
                if setting == "on":
                    with open(os.path.join(out, "manifest.json")) as f:
                        last_manifest = json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = {}
    for setting, rs in runs.items():
        wall = statistics.median(x["wall"] for x in rs)
        summary[setting] = {"median_wall": wall, "images_per_s": n / wall,
                            "median_cpu": statistics.median(x["cpu"] for x in rs), "runs": rs}
    on, off = summary["on"], summary["off"]
    diff_wall = on["median_wall"] / off["median_wall"] - 1
    diff_cpu = on["median_cpu"] / off["median_cpu"] - 1
    # Each repeat's two runs are back to back: their ratio is less disturbed by load that comes and goes.
    paired_wall = statistics.median(a["wall"] / b["wall"] for a, b in zip(on["runs"], off["runs"])) - 1
    paired_cpu = statistics.median(a["cpu"] / b["cpu"] for a, b in zip(on["runs"], off["runs"])) - 1
    cost = hash_cost(train)
    steps = checks_cost(train, a.shards)
    q = (last_manifest or {}).get("quality") or {}
    print(f"\n{n:,} images ({nbytes / 1e6:.0f} MB), full validation, {a.shards} shards, median of {a.repeats}:")
    print("quality  wall s   img/s   CPU s")
    for setting in ("off", "on"):
        s = summary[setting]
        print(f"{setting:7s} {s['median_wall']:6.2f} {s['images_per_s']:7.0f} {s['median_cpu']:7.2f}")
    print(f"checks on vs off: wall {diff_wall:+.1%}, CPU {diff_cpu:+.1%} (target: under 5%); median of the "
          f"repeats' own ratios: wall {paired_wall:+.1%}, CPU {paired_cpu:+.1%}")
    print(f"per image, in process (best of 5 passes over 500 images): full validation {cost['validate']:.0f} us, "
          f"the perceptual hash of its decode {cost['hash']:.0f} us one at a time, {cost['batched']:.0f} us in "
          f"batches ({cost['batched'] / cost['validate']:.1%})")
    print(f"the checks after the hash, in process, per image: {sum(steps.values()):.0f} us (regrouping rows "
          f"{steps['scatter']:.0f}, checking groups {steps['check']:.0f}, the section {steps['assemble']:.0f})")
    if q:
        d, nd = q["duplicates"], q["near_duplicates"]
        print(f"found: {d['groups']} exact-duplicate groups, {nd.get('pairs')} near-duplicate pairs within "
              f"{nd.get('max_distance')} bits ("
              + ("the tiles of each image shuffled)" if a.tiles else "the tree crops a few source photos)"))
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "images": n, "bytes": nbytes, "shards": a.shards, "repeats": a.repeats,
              "near_duplicates": a.near_duplicates or "default", "tree": "tiles" if a.tiles else "crops",
              "summary": summary,
              "wall_difference": diff_wall, "cpu_difference": diff_cpu,
              "paired_wall_difference": paired_wall, "paired_cpu_difference": paired_cpu, "hash_cost_us": cost,
              "checks_cost_us": steps,
              "quality_counts": {"duplicate_groups": q.get("duplicates", {}).get("groups"),
                                 "near_pairs": q.get("near_duplicates", {}).get("pairs")}}
    path = a.out or os.path.join(ROOT, "bench", "results",
                                 f"quality-{datetime.date.today().isoformat()}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
