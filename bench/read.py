"""Reading speed: tf.data over our shards against tf.data over the original
JPEG files, on the same images, as a training input pipeline reads them.

    .venv/bin/python -m bench.read                   # 2,500 images, 30 ms per request, 3 repeats (~5 min)
    .venv/bin/python -m bench.read --repeats 5       # the table of docs/performance.md (~7 min)
    .venv/bin/python -m bench.read --images 10000 --latency_ms 50 --repeats 5

Both pipelines end in the same work per image: parse the Example (shards
only), tf.io.decode_image(channels=3), tf.image.resize to 224x224, batches of
64; maps use num_parallel_calls=AUTOTUNE, interleaves cycle_length shards at
once with AUTOTUNE parallel calls, nothing is deterministic. "read only" rows
stop after the bytes (shards: parsed; files: read), to show the I/O ceiling.

Storage:
- warm: local files in the page cache (read once before measuring).
- remote: the same local files, each request held for --latency_ms by a
  tf.py_function that sleeps (a thread waits, as on an object store; no CPU).
  A file costs one request; a shard one request per 8 MiB it holds, all paid
  when it is opened (a pessimistic model for shards: a real reader streams
  the first block while fetching the next). TensorFlow's GCS filesystem has
  its endpoint compiled in, so it cannot be pointed at our emulator and
  latency proxy (tests/gcs_proxy.py); this is the simplest honest stand-in.
  Bandwidth is not limited. A file's blocking read holds one thread of
  tf.data's thread pool (one per core by default), so the "64 reads in
  flight" row also gives the pipeline a private pool of 64 threads; a
  shard's read holds one of the interleave's own threads, and its simulated
  wait (a py_function, which needs a pool thread) gets a 64-thread pool too.

Measured per run: images/s over --max_seconds of reading, repeating the
dataset (each epoch reopens its files), from the first batch on (pipeline
start-up excluded), and CPU time (user + sys of this process, every
TensorFlow thread included) per image. Each configuration runs --repeats
times, alternating configurations, and the table gives medians. The dataset
is the benchmark's generated ImageNet-like set (bench/dataset.py, cached in
bench/data/), converted by our converter once per shard layout.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT]

from bench.dataset import ensure_size, warm  # noqa: E402

BLOCK = 8 << 20  # bytes one request fetches from a shard in the remote model
BATCH = 64


def convert(train: str, out: str, num_shards: int, compression: str = "none") -> dict:
    """Our converter's output for this layout (reused when its manifest says so)."""
    path = os.path.join(out, "manifest.json")
    if os.path.exists(path):
        with open(path) as f:
            m = json.load(f)
        if m.get("compression") == compression and sum(s["num_shards"] for s in m["splits"].values()) == num_shards:
            return m
    cmd = [sys.executable, "-m", "tfrecord_pipelines.convert", "--input", train, "--output", out, "--overwrite",
           "--num_shards", str(num_shards), "--compression", compression, "--validate", "header", "--progress", "off"]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    with open(path) as f:
        return json.load(f)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def build(tf, kind: str, paths: list, latency: float, decode: bool, cycle: int = 16,
          compression: str = "", parallel_reads=None):
    """The tf.data pipeline of one configuration."""
    autotune = tf.data.AUTOTUNE
    feature = {"image/encoded": tf.io.FixedLenFeature([], tf.string)}

    def wait(path, requests):
        def sleep(p, n):
            time.sleep(latency * int(n))
            return p
        return tf.py_function(sleep, [path, requests], tf.string)

    def finish(image_bytes):
        if not decode:
            return tf.strings.length(image_bytes)
        image = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
        return tf.image.resize(image, [224, 224])

    if kind == "shards":
        sizes = [os.path.getsize(p) for p in paths]
        ds = tf.data.Dataset.from_tensor_slices((paths, [max(1, math.ceil(s / BLOCK)) for s in sizes]))

        def open_shard(path, requests):
            if not latency:
                return tf.data.TFRecordDataset(path, compression_type=compression)
            # The wait is a step of the shard's own dataset, so it runs when the
            # interleave's worker thread first reads from it (in parallel, as a real
            # reader waits for its first bytes), not when the interleave creates it
            # (one shard after another).
            return (tf.data.Dataset.from_tensors((path, requests)).map(wait)
                    .flat_map(lambda p: tf.data.TFRecordDataset(p, compression_type=compression)))
        ds = ds.interleave(open_shard, cycle_length=cycle, num_parallel_calls=autotune, deterministic=False)
        ds = ds.map(lambda r: finish(tf.io.parse_single_example(r, feature)["image/encoded"]),
                    num_parallel_calls=autotune, deterministic=False)
        if latency:
            # A real shard read blocks one of the interleave's own worker threads
            # (cycle_length of them). The simulated wait is a py_function, which runs on
            # tf.data's pool (one thread per core): a 64-thread pool keeps that from
            # being the limit.
            options = tf.data.Options()
            options.threading.private_threadpool_size = 64
            ds = ds.with_options(options)
    else:
        ds = tf.data.Dataset.from_tensor_slices(paths)
        if latency:
            ds = ds.map(lambda p: tf.io.read_file(wait(p, 1)), num_parallel_calls=parallel_reads or autotune,
                        deterministic=False)
            ds = ds.map(finish, num_parallel_calls=autotune, deterministic=False)
            if parallel_reads:
                # A blocking read holds a thread of tf.data's pool, which is one thread per
                # core by default: without a larger pool, 64 calls still run 2 at a time here.
                options = tf.data.Options()
                options.threading.private_threadpool_size = parallel_reads
                ds = ds.with_options(options)
        else:
            ds = ds.map(lambda p: finish(tf.io.read_file(p)), num_parallel_calls=autotune, deterministic=False)
    # Epoch after epoch (files reopened, requests paid again), so every row runs for
    # max_seconds: fast rows would otherwise end in a fraction of a second.
    return ds.repeat().batch(BATCH).prefetch(autotune)


def measure(ds, max_seconds: float) -> dict:
    """Images/s and CPU per image from the first batch on, for max_seconds."""
    it = iter(ds)
    first = next(it)
    n0 = int(first.shape[0])
    t0, c0 = time.perf_counter(), _cpu()
    n = 0
    for batch in it:
        n += int(batch.shape[0])
        if time.perf_counter() - t0 > max_seconds:
            break
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    return {"images": n, "first_batch": n0, "wall_s": wall, "images_per_s": n / wall if wall else 0.0,
            "cpu_ms_per_image": 1000 * cpu / n if n else 0.0}


def configurations(shards: dict, files: list, latency: float) -> list:
    """(section, name, kwargs for build) of every row."""
    base = shards["16"]
    rows = []
    for section, decode in (("main", True), ("read only", False)):
        for storage, lat in (("warm", 0.0), (f"remote {latency * 1000:g} ms", latency)):
            rows += [
                (section, f"shards (16), {storage}", dict(kind="shards", paths=base, latency=lat, decode=decode)),
                (section, f"JPEG files, {storage}", dict(kind="files", paths=files, latency=lat, decode=decode)),
            ]
        rows.append((section, f"JPEG files, remote {latency * 1000:g} ms, 64 reads in flight",
                     dict(kind="files", paths=files, latency=latency, decode=decode, parallel_reads=64)))
    remote = f"remote {latency * 1000:g} ms"
    # Each knob decoded (what 2 cores see: decode bound) and read only (the I/O
    # ceiling, what a host with cores enough for decoding sees).
    for section, decode in (("knobs", True), ("knobs, read only", False)):
        for count in ("4", "64"):
            rows.append((section, f"{count} shards, cycle 16, {remote}",
                         dict(kind="shards", paths=shards[count], latency=latency, decode=decode)))
        for cycle in (1, 4):
            rows.append((section, f"16 shards, cycle {cycle}, {remote}",
                         dict(kind="shards", paths=base, latency=latency, decode=decode, cycle=cycle)))
        for storage, lat in (("warm", 0.0), (remote, latency)):
            rows.append((section, f"16 shards GZIP, {storage}",
                         dict(kind="shards", paths=shards["16gz"], latency=lat, decode=decode, compression="GZIP")))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench.read", description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=2500, help="images in the dataset")
    ap.add_argument("--latency_ms", type=float, default=30.0, help="per-request latency of the remote model")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max_seconds", type=float, default=3.0, help="seconds each run reads for")
    ap.add_argument("--data_dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--only", default="", help="run only rows whose name contains this text")
    ap.add_argument("--out", default="", help="JSON results file (default: bench/results/read-<time>.json)")
    args = ap.parse_args(argv)

    data = ensure_size(args.data_dir, args.images)
    train = data["train"]
    files = sorted(os.path.join(d, n) for d, _, ns in os.walk(train) for n in ns)
    shards = {}
    for key, count, comp in (("4", 4, "none"), ("16", 16, "none"), ("64", 64, "none"), ("16gz", 16, "gzip")):
        out = os.path.join(args.data_dir, f"read-{args.images}-{key}")
        m = convert(train, out, count, comp)
        shards[key] = [os.path.join(out, e["name"]) for s in m["splits"].values() for e in s["shards"]]
        warm(out)
    warm(train)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    rows = [r for r in configurations(shards, files, args.latency_ms / 1000) if args.only in r[1]]
    results: dict = {f"{section}: {name}": [] for section, name, _ in rows}
    for section, name, kw in rows:  # once each first: TensorFlow's kernels and thread pools warm up
        measure(build(tf, **kw), 1.0)
    for rep in range(args.repeats):
        for section, name, kw in rows:
            r = measure(build(tf, **kw), args.max_seconds)
            results[f"{section}: {name}"].append(r)
            print(f"[{rep + 1}/{args.repeats}] {section}: {name}: {r['images_per_s']:,.0f} images/s, "
                  f"{r['cpu_ms_per_image']:.2f} ms CPU/image ({r['images']} images)", flush=True)

    mean_kb = data["bytes"] / data["images"] / 1000
    print(f"\n{args.images:,} JPEGs (mean {mean_kb:.0f} KB), {os.cpu_count()} cores, tensorflow {tf.__version__}, "
          f"medians of {args.repeats}; remote = {args.latency_ms:g} ms per request")
    print("\n| section | configuration | images/s | CPU ms/image |\n| --- | --- | ---: | ---: |")
    summary = []
    for section, name, _ in rows:
        rate = statistics.median(r["images_per_s"] for r in results[f"{section}: {name}"])
        cpu = statistics.median(r["cpu_ms_per_image"] for r in results[f"{section}: {name}"])
        summary.append({"section": section, "name": name, "images_per_s": rate, "cpu_ms_per_image": cpu})
        print(f"| {section} | {name} | {rate:,.0f} | {cpu:.2f} |")
    out = args.out or os.path.join(HERE, "results", f"read-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"args": vars(args), "machine": {"nproc": os.cpu_count(), "python": platform.python_version(),
                                                   "tensorflow": tf.__version__},
                   "dataset": {k: v for k, v in data.items() if k not in ("root", "train")},
                   "summary": summary, "runs": results}, f, indent=1)
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
