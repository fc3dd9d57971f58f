"""The cost of the data-quality checks (issue 13): full-mode conversions with
--quality on and off, alternating, on the ImageNet-like bench tree; and the
perceptual hash's own cost per image, in process.

    .venv/bin/python -m bench.quality                       # 2,500 images, 5 repeats of each (~3 min)
    .venv/bin/python -m bench.quality --size 10000 --repeats 3

Each conversion is its own process tree, measured as bench/run.py does
(bench/procmon.py: wall, CPU of every process), after waiting for a quiet
machine. Printed: median wall, images/s and CPU seconds per setting and the
difference on/off (the target is under 5%); then, on 500 of the images, the
per-image time of full validation (transforms.core.images.probe_image) with
and without the hash (the best of 5 passes: the least disturbed by other load).
The tree is made by bench/dataset.py (random crops of a few CC0 photos), so
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
    cmd = [sys.executable, "-m", "pipelines.convert", "--input", train, "--output", out, "--validate", "full",
           "--progress", "off", "--overwrite", "--num_shards", str(shards), "--quality", quality]
    return cmd + (["--near_duplicates", near] if near and quality == "on" else [])


def hash_cost(train: str, n: int = 500, passes: int = 5) -> dict:
    """us per image: full validation (read from memory), and the perceptual
    hash of the small decode validation leaves, each the best of `passes`
    interleaved passes (the pass least disturbed by other load)."""
    sys.path.insert(0, ROOT)
    from transforms.core.images import ImagePolicy, _decode, _open, probe_image, sniff_format
    from transforms.core.quality import perceptual_hash
    files = sorted(glob.glob(os.path.join(train, "*", "*")))[:n]
    datas = [open(f, "rb").read() for f in files]
    decoded = []
    for d in datas:
        im = _open(d, sniff_format(d))
        _decode(im, sniff_format(d))
        decoded.append(im)
    policy = ImagePolicy()
    best = {"validate": float("inf"), "hash": float("inf")}
    for _ in range(passes):
        t0 = time.perf_counter()
        for d in datas:
            probe_image(d, policy)
        t1 = time.perf_counter()
        for im in decoded:
            perceptual_hash(im)
        t2 = time.perf_counter()
        best["validate"] = min(best["validate"], t1 - t0)
        best["hash"] = min(best["hash"], t2 - t1)
    return {k: v / len(datas) * 1e6 for k, v in best.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=2500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--near_duplicates", default="", help="passed to the runs with checks on (default: convert's)")
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "bench", "data"))
    ap.add_argument("--quiet-cores", type=float, default=0.5, help="wait for the rest of the machine to use less")
    ap.add_argument("--max-wait", type=float, default=30.0)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    info = dataset.ensure_size(a.data_dir, a.size, log=lambda m: print(m, file=sys.stderr))
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
    cost = hash_cost(train)
    q = (last_manifest or {}).get("quality") or {}
    print(f"\n{n:,} images ({nbytes / 1e6:.0f} MB), full validation, {a.shards} shards, median of {a.repeats}:")
    print("quality  wall s   img/s   CPU s")
    for setting in ("off", "on"):
        s = summary[setting]
        print(f"{setting:7s} {s['median_wall']:6.2f} {s['images_per_s']:7.0f} {s['median_cpu']:7.2f}")
    print(f"checks on vs off: wall {diff_wall:+.1%}, CPU {diff_cpu:+.1%} (target: under 5%)")
    print(f"per image, in process (best of 5 passes over 500 images): full validation {cost['validate']:.0f} us, "
          f"the perceptual hash of its decode {cost['hash']:.0f} us ({cost['hash'] / cost['validate']:.1%})")
    if q:
        d, nd = q["duplicates"], q["near_duplicates"]
        print(f"found: {d['groups']} exact-duplicate groups, {nd.get('pairs')} near-duplicate pairs within "
              f"{nd.get('max_distance')} bits (the tree crops a few source photos)")
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "images": n, "bytes": nbytes, "shards": a.shards, "repeats": a.repeats,
              "near_duplicates": a.near_duplicates or "default", "summary": summary,
              "wall_difference": diff_wall, "cpu_difference": diff_cpu, "hash_cost_us": cost,
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
