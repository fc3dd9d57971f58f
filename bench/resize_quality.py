"""What a resized dataset costs its reader, by re-encode quality (--jpeg_quality).

    python -m bench.resize_quality                         # 100 photos, shorter side 256, qualities 85,90,95
    python -m bench.resize_quality --images 40 --qualities 80,85,90,95 --size 224

On bench/resize.py's phone-like photos (3000-4000 px, 2-5 MB, made once and
reused), each image goes through the converter's own re-encode path
(transforms/core/images.py reencode_image, `--resize_shorter_side SIZE`,
draft decode on, Lanczos) at each quality, and once losslessly (PNG) as the
reference: the resized pixels before JPEG encoding. Per quality, in one
process: mean bytes per image, CPU time to decode each stored image with
tf.io.decode_jpeg and with Pillow (median of --passes passes over all
images), and PSNR of the decoded image against the reference (mean over the
images, and the worst). JSON: bench/results/resize-quality-<date>.json.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def cpu_per_image(fn, items: list, passes: int) -> float:
    times = []
    for _ in range(passes):
        t = time.process_time()
        for x in items:
            fn(x)
        times.append((time.process_time() - t) / len(items))
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.resize_quality", description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--qualities", default="85,90,95")
    ap.add_argument("--size", type=int, default=256, help="--resize_shorter_side")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "bench", "data"))
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from PIL import Image

    from bench.resize import make_photos
    from tfrecord_pipelines.transforms.core import resize
    from tfrecord_pipelines.transforms.core.images import ImagePolicy, configure_pillow, reencode_image

    photos = make_photos(a.data_dir, a.images, a.seed, 3000, 4000)
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(photos["full"]) for f in fs)
    sources = [open(p, "rb").read() for p in files]
    base = ImagePolicy(resize=resize.ResizePolicy(resize.ResizeMode.SHORTER, a.size))
    configure_pillow(base)
    import dataclasses

    def decode_pil(data: bytes) -> np.ndarray:
        with Image.open(io.BytesIO(data)) as im:
            return np.asarray(im.convert("RGB"))

    refs = [decode_pil(reencode_image(d, "png", base)) for d in sources]
    import tensorflow as tf
    results = {}
    for q in [int(x) for x in a.qualities.split(",")]:
        policy = dataclasses.replace(base, jpeg_quality=q)
        stored = [reencode_image(d, "jpeg", policy) for d in sources]
        psnrs = [psnr(decode_pil(s), r) for s, r in zip(stored, refs)]
        tensors = [tf.constant(s) for s in stored]
        tf.io.decode_jpeg(tensors[0], channels=3)  # warm-up
        results[q] = {
            "bytes_mean": round(statistics.mean(map(len, stored))),
            "tf_decode_us": round(cpu_per_image(lambda t: tf.io.decode_jpeg(t, channels=3), tensors, a.passes) * 1e6),
            "pil_decode_us": round(cpu_per_image(lambda s: Image.open(io.BytesIO(s)).load(), stored, a.passes) * 1e6),
            "psnr_mean_db": round(statistics.mean(psnrs), 2),
            "psnr_min_db": round(min(psnrs), 2),
            "pixels_mean": round(statistics.mean(r.shape[0] * r.shape[1] for r in refs)),
        }
        print(f"q{q}: {results[q]}", file=sys.stderr, flush=True)
    print(f"\n{len(sources)} photos of {photos['bytes'] / len(sources) / 1e6:.1f} MB on average, shorter side resized "
          f"to {a.size} (Lanczos, draft decode); one process; decode CPU is the median of {a.passes} passes\n")
    print("| --jpeg_quality | bytes per image | tf.io.decode_jpeg µs | Pillow decode µs | PSNR dB (mean) | PSNR dB (worst) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for q, r in results.items():
        print(f"| {q} | {r['bytes_mean'] / 1e3:,.1f} KB | {r['tf_decode_us']:,} | {r['pil_decode_us']:,} | "
              f"{r['psnr_mean_db']:.2f} | {r['psnr_min_db']:.2f} |")
    path = a.out or os.path.join(ROOT, "bench", "results", f"resize-quality-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"images": len(sources), "size": a.size, "photos": photos, "results": results}, f, indent=1)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
