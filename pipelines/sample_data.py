"""A realistic ImageNet-like image tree, generated from the photos shipped in
pipelines/sample_photos (public domain / CC0, see LICENSES.md there).

    python -m tfrecord_pipelines.sample_data --out DIR --classes 100 --per_class 100

writes DIR/train/<class>/<class>_<k>.JPEG (class names like WordNet ids) and
DIR/labels.csv ("filename,label", paths relative to DIR/train). Each image is
a random crop of a photo at ImageNet-like sizes (mostly 500x375 / 375x500, a
tail up to 1024x768), colour jitter, sensor-like noise and a random flip,
saved as JPEG at quality 75-95: with the defaults they average ~110 KB, like
ImageNet's. Every image depends only on (seed, class, k), so runs are
reproducible for a given Pillow build and any number of worker processes.
"""
from __future__ import annotations

import argparse
import csv
import io
import multiprocessing as mp
import os
import pathlib
import random
import time

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

PHOTOS = pathlib.Path(__file__).parent / "sample_photos"
SIZES = [((500, 375), 0.42), ((500, 333), 0.22), ((375, 500), 0.14), ((333, 500), 0.07),
         ((640, 480), 0.06), ((800, 600), 0.05), ((1024, 768), 0.04)]
_SOURCES: list = []


def _sources() -> list:
    if not _SOURCES:
        for p in sorted(PHOTOS.glob("*")):
            if p.suffix.lower() in (".png", ".jpg", ".jpeg"):
                _SOURCES.append(Image.open(p).convert("RGB"))
    return _SOURCES


def class_names(n: int, seed: int) -> list[str]:
    rng = random.Random(f"classes-{seed}")
    names: set = set()
    while len(names) < n:
        names.add(f"n{rng.randrange(10**7, 10**8):08d}")
    return sorted(names)


def make_image(cls: int, k: int, seed: int, scale: float = 1.0) -> bytes:
    """JPEG bytes of image k of class `cls`."""
    rng = random.Random(f"{seed}-{cls}-{k}")
    srcs = _sources()
    src = srcs[(cls + (k % 3 == 0)) % len(srcs)]
    (w, h), = rng.choices([s for s, _ in SIZES], weights=[p for _, p in SIZES])
    w, h = max(8, int(w * scale)), max(8, int(h * scale))
    sw, sh = src.size
    area = rng.uniform(0.15, 1.0) * sw * sh
    aspect = (w / h) * rng.uniform(0.8, 1.25)
    cw = int(min(sw, (area * aspect) ** 0.5))
    ch = int(min(sh, cw / aspect))
    x, y = rng.randrange(0, sw - cw + 1), rng.randrange(0, sh - ch + 1)
    im = src.crop((x, y, x + cw, y + ch)).resize((w, h), Image.BICUBIC)
    if rng.random() < 0.5:
        im = ImageOps.mirror(im)
    im = ImageEnhance.Color(im).enhance(rng.uniform(0.6, 1.4))
    im = ImageEnhance.Brightness(im).enhance(rng.uniform(0.8, 1.2))
    arr = np.asarray(im, dtype=np.float32)
    gain = np.array([rng.uniform(0.85, 1.15) for _ in range(3)], dtype=np.float32)
    noise = np.random.default_rng(rng.getrandbits(32)).normal(0, rng.uniform(10, 18), arr.shape)
    arr = np.clip(arr * gain + noise, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=rng.choice([75, 85, 88, 90, 92, 93, 95]),
                              subsampling=rng.choice([2, 2, 2, 1]))
    return buf.getvalue()


def _write(task) -> int:
    root, name, cls, k, seed, scale = task
    path = os.path.join(root, name, f"{name}_{k}.JPEG")
    data = make_image(cls, k, seed, scale)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def make_imagefolder(out: str, classes: int = 10, per_class: int = 20, seed: int = 0, scale: float = 1.0,
                     workers: int = 0) -> dict:
    """Writes the tree and labels.csv; returns counts. Existing files are replaced."""
    root = os.path.join(out, "train")
    names = class_names(classes, seed)
    for n in names:
        os.makedirs(os.path.join(root, n), exist_ok=True)
    tasks = [(root, n, c, k, seed, scale) for c, n in enumerate(names) for k in range(per_class)]
    workers = workers or os.cpu_count() or 1
    if workers > 1 and len(tasks) > 50:
        with mp.get_context("fork").Pool(workers) as pool:
            sizes = pool.map(_write, tasks, chunksize=16)
    else:
        sizes = [_write(t) for t in tasks]
    with open(os.path.join(out, "labels.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["filename", "label"])
        for root_, n, c, k, _, _ in tasks:
            w.writerow([f"{n}/{n}_{k}.JPEG", n])
    return {"root": root, "labels": os.path.join(out, "labels.csv"), "images": len(tasks),
            "bytes": sum(sizes), "classes": classes}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder; images go to OUT/train, the table to OUT/labels.csv")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--per_class", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply image sides by this (0.25: thumbnails)")
    ap.add_argument("--workers", type=int, default=0, help="processes (default: all cores)")
    a = ap.parse_args(argv)
    t = time.time()
    info = make_imagefolder(a.out, a.classes, a.per_class, a.seed, a.scale, a.workers)
    print(f"{info['images']:,} images, {info['bytes'] / 1e6:.1f} MB (mean {info['bytes'] / info['images'] / 1e3:.0f} KB)"
          f" in {info['root']}, table {info['labels']}, {time.time() - t:.1f} s")


if __name__ == "__main__":
    main()
