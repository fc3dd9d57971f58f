"""Resizing at conversion (--resize_*): what it costs to convert large photos,
what it saves in shard bytes, and what it gains when training reads them.

    python -m bench.resize                      # 200 photos of 3000-4000 px, 3 repeats (~20-30 min on 2 cores)
    python -m bench.resize --images 100 --repeats 1
    python -m bench.resize --reuse              # only the draft and read figures, on the last run's outputs

1. Photos. `--images` large JPEGs (longer side 3000-4000 px, 4:3, 3:2 or
   16:9, a third of them portrait, quality 85-95, ~2-5 MB like a phone's)
   are made from the CC0 photos shipped in pipelines/sample_photos: a random
   crop upscaled (bicubic), colour jitter, and sensor-like grain at full
   resolution (without it an upscaled photo compresses to a fraction of a
   real one). They go to bench/data/resize-<images>-s<seed>/ and are reused
   while the parameters and the Pillow version match. A second tree of hard
   links holds the first half of them.
2. Conversions. Each variant is `python -m tfrecord_pipelines.convert` on the half and
   the whole set, alternating variants, `--repeats` times, each run measured
   as a whole process tree (bench/procmon.py). Reported: images/s (wall, the
   whole set), and images/s per core as the marginal rate from the CPU
   seconds of the whole tree: (N - N/2) / (CPU(N) - CPU(N/2)), which leaves
   start-up out; the output's bytes. Medians over the repeats.
3. Draft. The outputs of a variant with and without `--resize_draft` are
   decoded and compared image by image: mean absolute difference (levels of
   255), PSNR, and the 99th percentile and maximum difference.
4. Reading. For each variant's shards, the read benchmark's pipeline
   (bench/read.py: tf.data, parse -> decode_image -> resize to 224x224 ->
   batches of 64, AUTOTUNE, warm page cache): images/s and CPU ms per image,
   medians of `--read-repeats` passes after a warm-up pass, each reading
   for `--read-seconds` (bench/read.py repeats the data to fill the time).

Everything goes to bench/results/resize-<date>.json.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import time

import numpy as np

from bench import procmon

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASPECTS = (4 / 3, 3 / 2, 16 / 9)
GRAIN = 9  # +-levels of luminance grain per pixel: 2-5 MB photos, as a phone's
VARIANTS = {
    "original": [],
    "shorter_256": ["--resize_shorter_side", "256"],
    "shorter_256_nodraft": ["--resize_shorter_side", "256", "--resize_draft", "off"],
    "shorter_256_q90": ["--resize_shorter_side", "256", "--jpeg_quality", "90"],
    "longest_512": ["--resize_longest_side", "512"],
}
DRAFT_PAIRS = (("shorter_256", "shorter_256_nodraft"),)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_photo(k: int, seed: int, lo: int, hi: int) -> bytes:
    """A large JPEG, depending only on (k, seed) for a given Pillow build."""
    from PIL import Image, ImageEnhance

    from tfrecord_pipelines import sample_data
    rng = random.Random(f"resize-{seed}-{k}")
    srcs = sample_data._sources()
    src = srcs[k % len(srcs)]
    long = rng.randrange(lo, hi + 1)
    aspect = rng.choice(ASPECTS)
    w, h = long, round(long / aspect)
    if rng.random() < 1 / 3:
        w, h = h, w
    sw, sh = src.size
    # The largest crop of the photo's aspect, then 60-100% of it.
    cw, ch = (round(sh * w / h), sh) if sw * h > sh * w else (sw, round(sw * h / w))
    f = rng.uniform(0.6, 1.0)
    cw, ch = max(1, int(cw * f)), max(1, int(ch * f))
    x, y = rng.randrange(0, sw - cw + 1), rng.randrange(0, sh - ch + 1)
    im = src.crop((x, y, x + cw, y + ch)).resize((w, h), Image.BICUBIC)
    im = ImageEnhance.Color(im).enhance(rng.uniform(0.7, 1.3))
    arr = np.asarray(im, dtype=np.int16)
    grain = np.random.default_rng(rng.getrandbits(32)).integers(-GRAIN, GRAIN + 1, size=(h, w, 1), dtype=np.int16)
    arr = np.clip(arr + grain, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=rng.choice([85, 90, 92, 95]))
    return buf.getvalue()


def _write(task) -> int:
    path, k, seed, lo, hi = task
    data = make_photo(k, seed, lo, hi)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def make_photos(data_dir: str, n: int, seed: int, lo: int, hi: int, classes: int = 10) -> dict:
    """(or reuse) the full and the half tree; returns their roots and sizes."""
    import PIL
    stamp = {"images": n, "seed": seed, "sides": [lo, hi], "classes": classes, "grain": GRAIN,
             "pillow": PIL.__version__}
    base = os.path.join(data_dir, f"resize-{n}-s{seed}-{lo}-{hi}")
    full, half = os.path.join(base, "full"), os.path.join(base, "half")
    stamp_path = os.path.join(base, "stamp.json")
    if os.path.exists(stamp_path) and json.load(open(stamp_path)) == stamp:
        log(f"reusing {base}")
    else:
        shutil.rmtree(base, ignore_errors=True)
        tasks = []
        for k in range(n):
            d = os.path.join(full, f"c{k % classes}")
            os.makedirs(d, exist_ok=True)
            tasks.append((os.path.join(d, f"{k:05d}.jpg"), k, seed, lo, hi))
        t = time.time()
        with mp.get_context("fork").Pool(os.cpu_count() or 1) as pool:
            pool.map(_write, tasks, chunksize=4)
        for path, k, *_ in tasks[: n // 2]:
            link = os.path.join(half, os.path.relpath(path, full))
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.link(path, link)
        with open(stamp_path, "w") as f:
            json.dump(stamp, f)
        log(f"made {n} photos in {time.time() - t:.0f} s")
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(full) for f in fs)
    return {"full": full, "half": half, "images": len(files), "half_images": len(files) // 2,
            "bytes": sum(os.path.getsize(f) for f in files), "stamp": stamp}


def warm(paths: list) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 20):
                pass


def convert(src: str, out: str, extra: list, num_shards: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cmd = [sys.executable, "-m", "tfrecord_pipelines.convert", "--input", src, "--output", out, "--progress", "off",
           "--num_shards", str(num_shards), *extra]
    from bench.run import child_env  # with bytecode, as an installed package runs
    env = child_env()
    r = procmon.run_measured(cmd, cwd=ROOT, env=env, stderr_path=out + ".stderr")
    if r["returncode"] != 0:
        raise SystemExit(f"{' '.join(cmd)} failed; see {out}.stderr")
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    r["bytes_out"] = sum(s["bytes"] for s in m["splits"].values())
    r["written"] = m["counts"]["written"]
    return {k: r[k] for k in ("wall_s", "cpu_s", "peak_rss_mb", "bytes_out", "written", "foreign_cores")}


def shard_paths(out: str) -> list:
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    return [os.path.join(out, s["name"]) for sp in m["splits"].values() for s in sp["shards"]]


def stored_images(out: str) -> dict:
    """{filename: encoded bytes} of an output."""
    import tensorflow as tf
    got = {}
    spec = {"image/filename": tf.io.FixedLenFeature([], tf.string),
            "image/encoded": tf.io.FixedLenFeature([], tf.string)}
    for rec in tf.data.TFRecordDataset(shard_paths(out)):
        ex = tf.io.parse_single_example(rec, spec)
        got[ex["image/filename"].numpy().decode()] = ex["image/encoded"].numpy()
    return got


def _psnr(mse: float):
    return round(10 * math.log10(255 ** 2 / mse), 1) if mse > 0 else None  # None: identical


def draft_difference(with_draft: str, without: str) -> dict:
    from PIL import Image
    a, b = stored_images(with_draft), stored_images(without)
    mean_abs, sq, p99, worst = [], [], [], 0.0
    for name in sorted(a):
        x = np.asarray(Image.open(io.BytesIO(a[name])).convert("RGB"), dtype=np.float64)
        y = np.asarray(Image.open(io.BytesIO(b[name])).convert("RGB"), dtype=np.float64)
        d = np.abs(x - y)
        mean_abs.append(d.mean())
        sq.append((d ** 2).mean())
        p99.append(np.percentile(d, 99))
        worst = max(worst, d.max())
    return {"images": len(a), "mean_abs": round(statistics.mean(mean_abs), 3),
            "mean_abs_worst_image": round(max(mean_abs), 3),
            "psnr_db": _psnr(statistics.mean(sq)), "psnr_db_worst_image": _psnr(max(sq)),
            "p99_abs": round(statistics.median(p99), 1), "max_abs": round(worst, 1)}


def read_rate(files: list, passes: int, max_seconds: float) -> dict:
    """The read benchmark's figure (bench/read.py, warm local shards): tf.data
    parse + decode_image + 224x224 resize, batches of 64; images/s and CPU ms
    per image from the first batch on, medians of `passes` after a warm-up."""
    import tensorflow as tf

    from bench import read as read_bench
    warm(files)
    read_bench.measure(read_bench.build(tf, "shards", files, 0.0, True), max_seconds)
    runs = [read_bench.measure(read_bench.build(tf, "shards", files, 0.0, True), max_seconds)
            for _ in range(passes)]
    return {"images_read": runs[0]["images"] + runs[0]["first_batch"],  # read.build repeats the data
            "images_per_s": round(statistics.median(r["images_per_s"] for r in runs), 1),
            "cpu_ms_per_image": round(statistics.median(r["cpu_ms_per_image"] for r in runs), 2),
            "runs": runs}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--min-side", type=int, default=3000, help="longer side of the photos, at least")
    ap.add_argument("--max-side", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--read-repeats", type=int, default=3)
    ap.add_argument("--read-seconds", type=float, default=30.0,
                    help="stop each read pass after this long (images/s over what was read)")
    ap.add_argument("--reuse", action="store_true",
                    help="no conversions: draft and read figures of the outputs a previous run left")
    ap.add_argument("--num-shards", type=int, default=8)
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma list of: " + ", ".join(f"{k} ({' '.join(v) or 'no resize'})"
                                                       for k, v in VARIANTS.items()))
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "bench", "data"))
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")

    data = make_photos(a.data_dir, a.images, a.seed, a.min_side, a.max_side)
    log(f"{data['images']} photos, {data['bytes'] / 1e6:.0f} MB (mean {data['bytes'] / data['images'] / 1e6:.2f} MB)")
    warm([os.path.join(dp, f) for dp, _, fs in os.walk(data["full"]) for f in fs])
    work = os.path.join(a.data_dir, "resize-out")
    runs = []
    for rep in range(0 if a.reuse else a.repeats):
        for v in variants:
            for part in ("half", "full"):
                r = convert(data[part], os.path.join(work, f"{v}-{part}"), VARIANTS[v], a.num_shards)
                r.update(variant=v, part=part, repeat=rep)
                runs.append(r)
                log(f"{v:22s} {part:4s} wall {r['wall_s']:6.2f} s  cpu {r['cpu_s']:6.2f} s  "
                    f"out {r['bytes_out'] / 1e6:7.1f} MB")
    n, n_half = data["images"], data["half_images"]
    results = {}
    for v in (() if a.reuse else variants):
        med = {part: {k: statistics.median(r[k] for r in runs if r["variant"] == v and r["part"] == part)
                      for k in ("wall_s", "cpu_s", "bytes_out")} for part in ("half", "full")}
        d_cpu = med["full"]["cpu_s"] - med["half"]["cpu_s"]
        results[v] = {
            "flags": " ".join(VARIANTS[v]),
            "wall_s": med["full"]["wall_s"], "cpu_s": med["full"]["cpu_s"],
            "images_per_s": round(n / med["full"]["wall_s"], 1),
            "images_per_s_per_core": round((n - n_half) / d_cpu, 1) if d_cpu > 0 else None,
            "cpu_ms_per_image": round(1000 * d_cpu / (n - n_half), 1),
            "bytes_out": med["full"]["bytes_out"], "kb_per_image": round(med["full"]["bytes_out"] / n / 1e3, 1),
        }
    for v in variants:
        results.setdefault(v, {"flags": " ".join(VARIANTS[v])})
    drafts = {f"{x} vs {y}": draft_difference(os.path.join(work, f"{x}-full"), os.path.join(work, f"{y}-full"))
              for x, y in DRAFT_PAIRS if x in variants and y in variants}
    for v in variants:
        results[v]["read"] = read_rate(shard_paths(os.path.join(work, f"{v}-full")), a.read_repeats,
                                       a.read_seconds)
        log(f"read {v}: {results[v]['read']['images_per_s']} images/s")

    print(f"\n{n} photos, {data['bytes'] / 1e6:.0f} MB, longer side {a.min_side}-{a.max_side} px; "
          f"{os.cpu_count()} cores; medians of {a.repeats}")
    print(f"{'variant':22s} {'img/s':>7s} {'img/s/core':>10s} {'CPU ms/img':>10s} {'KB/img':>8s} "
          f"{'shards MB':>9s} {'read img/s':>10s} {'read CPU ms':>11s}")
    for v, r in results.items():
        def f(key, width, digits=1, scale=1.0):
            x = r.get(key)
            return f"{x * scale:{width}.{digits}f}" if x is not None else " " * (width - 1) + "-"
        print(f"{v:22s} {f('images_per_s', 7)} {f('images_per_s_per_core', 10)} {f('cpu_ms_per_image', 10)} "
              f"{f('kb_per_image', 8)} {f('bytes_out', 9, 1, 1e-6)} {r['read']['images_per_s']:10.1f} "
              f"{r['read']['cpu_ms_per_image']:11.2f}")
    for k, d in drafts.items():
        print(f"draft ({k}): mean |diff| {d['mean_abs']} (worst image {d['mean_abs_worst_image']}), "
              f"PSNR {d['psnr_db']} dB (worst image {d['psnr_db_worst_image']}), p99 {d['p99_abs']}, "
              f"max {d['max_abs']} levels")
    from tfrecord_pipelines.transforms.core.resize import library_versions
    doc = {"created": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": vars(a), "dataset": data,
           "nproc": os.cpu_count(), "image_library": library_versions(), "results": results, "draft": drafts,
           "runs": runs, "complete": not a.reuse}
    out = a.out or os.path.join(ROOT, "bench", "results", f"resize-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"results in {out}")


if __name__ == "__main__":
    main()
