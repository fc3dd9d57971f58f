"""Benchmark datasets, built with the project's own generator
(`tfrecord_pipelines.sample_data.make_imagefolder`) and cached.

One generated *pool* holds `classes` x `per_class` images, enough for the
largest size. Each size N is a tree of hard links to the first N images of the
pool in k-major order (image k of every class before image k+1 of any), so a
smaller size is always a subset of a larger one, the classes stay balanced,
and the files share one copy on disk and in the page cache. With 100 classes,
2,500 images are exactly classes x 25 and 10,000 are classes x 100.

Every image depends only on (seed, class, k) and the Pillow build, so a pool
is reused when its parameters (and Pillow version) match, and a pool with more
images per class serves a request for fewer.

Layout under the data folder:
    pool-c100-s0-x1/            train/<class>/<class>_<k>.JPEG, labels.csv, bench-dataset.json
    size-10000-c100-s0-x1/      train/... (hard links), labels.csv, bench-dataset.json
"""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
import time
from importlib import metadata

INFO = "bench-dataset.json"
FORMAT = 1


def _tag(classes: int, seed: int, scale: float) -> str:
    return f"c{classes}-s{seed}-x{scale:g}"


def _read_info(folder: str) -> dict:
    try:
        with open(os.path.join(folder, INFO)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _write_info(folder: str, info: dict) -> None:
    tmp = os.path.join(folder, INFO + ".tmp")
    with open(tmp, "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(folder, INFO))


def _pillow() -> str:
    try:
        return metadata.version("pillow")
    except metadata.PackageNotFoundError:
        return "?"


def ensure_pool(data_dir: str, classes: int, per_class: int, seed: int, scale: float,
                log=print) -> dict:
    """A generated pool with at least per_class images of each class."""
    folder = os.path.join(data_dir, "pool-" + _tag(classes, seed, scale))
    want = {"format": FORMAT, "classes": classes, "seed": seed, "scale": scale, "pillow": _pillow()}
    info = _read_info(folder)
    if info and all(info.get(k) == v for k, v in want.items()) and info.get("per_class", 0) >= per_class:
        return dict(info, root=folder)
    from tfrecord_pipelines.sample_data import make_imagefolder  # numpy and Pillow: only when generating
    log(f"generating {classes} x {per_class} images (scale {scale:g}, seed {seed}) into {folder} ...")
    t = time.time()
    if os.path.exists(folder):
        shutil.rmtree(folder)
    tmp = folder + ".partial"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    made = make_imagefolder(tmp, classes=classes, per_class=per_class, seed=seed, scale=scale)
    info = dict(want, per_class=per_class, images=made["images"], bytes=made["bytes"],
                generator="tfrecord_pipelines.sample_data.make_imagefolder",
                generate_seconds=round(time.time() - t, 1))
    _write_info(tmp, info)
    os.replace(tmp, folder)
    log(f"  {made['images']:,} images, {made['bytes'] / 1e6:.1f} MB in {time.time() - t:.1f} s")
    return dict(info, root=folder)


def _pool_order(pool: dict) -> list[tuple[str, int]]:
    """(class name, k) of the pool's images in k-major order."""
    from tfrecord_pipelines.sample_data import class_names  # pure Python, but imports numpy and Pillow
    names = class_names(pool["classes"], pool["seed"])
    return [(n, k) for k in range(pool["per_class"]) for n in names]


def ensure_size(data_dir: str, n: int, classes: int = 100, seed: int = 0, scale: float = 1.0,
                max_n: int = 0, log=print) -> dict:
    """The tree for n images (hard links into the pool). max_n sizes the pool
    when it has to be generated, so one pool serves every size of a run."""
    classes = max(1, min(classes, max(n, max_n)))
    folder = os.path.join(data_dir, f"size-{n}-" + _tag(classes, seed, scale))
    info = _read_info(folder)
    want = {"format": FORMAT, "classes": classes, "seed": seed, "scale": scale, "pillow": _pillow(), "images": n}
    if info and all(info.get(k) == v for k, v in want.items()) and os.path.isdir(os.path.join(folder, "train")):
        return dict(info, root=folder, train=os.path.join(folder, "train"))
    per_class = math.ceil(max(n, max_n) / classes)
    pool = ensure_pool(data_dir, classes, per_class, seed, scale, log)
    if os.path.exists(folder):
        shutil.rmtree(folder)
    tmp = folder + ".partial"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    train = os.path.join(tmp, "train")
    total = 0
    rows = []
    for name, k in _pool_order(pool)[:n]:
        rel = f"{name}/{name}_{k}.JPEG"
        src = os.path.join(pool["root"], "train", rel)
        dst = os.path.join(train, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
        total += os.path.getsize(dst)
        rows.append((rel, name))
    with open(os.path.join(tmp, "labels.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["filename", "label"])
        w.writerows(sorted(rows))
    info = dict(want, bytes=total, mean_bytes=round(total / n), classes_used=len({r[1] for r in rows}),
                pool=os.path.basename(pool["root"]), generator="tfrecord_pipelines.sample_data.make_imagefolder")
    _write_info(tmp, info)
    os.replace(tmp, folder)
    return dict(info, root=folder, train=os.path.join(folder, "train"))


TILES = 3  # tiles a side of the shuffled variant


def _shuffle_tiles(task) -> int:
    """One image of the shuffled variant: its TILES x TILES tiles in an order
    and with flips drawn from its path, re-encoded as a JPEG of quality 90."""
    import io
    import random

    from PIL import Image, ImageOps
    src, dst, rel = task
    im = Image.open(src).convert("RGB")
    tw, th = im.width // TILES, im.height // TILES
    rng = random.Random(f"tiles-{rel}")
    cells = [(x * tw, y * th) for y in range(TILES) for x in range(TILES)]
    order = rng.sample(cells, len(cells))
    out = Image.new("RGB", (tw * TILES, th * TILES))
    for (x, y), (sx, sy) in zip(cells, order):
        tile = im.crop((sx, sy, sx + tw, sy + th))
        if rng.random() < 0.5:
            tile = ImageOps.mirror(tile)
        if rng.random() < 0.5:
            tile = ImageOps.flip(tile)
        out.paste(tile, (x, y))
    buf = io.BytesIO()
    out.save(buf, "JPEG", quality=90)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "wb") as f:
        f.write(buf.getvalue())
    return len(buf.getvalue())


def ensure_shuffled(data_dir: str, n: int, log=print) -> dict:
    """The n-image tree with each image's tiles shuffled (TILES x TILES, with
    flips): the same photo-like content, sizes and decode cost, but no longer
    crops of a few photos, so near duplicates are rare, as in most real
    datasets (the plain tree is a worst case for the near-duplicate check)."""
    base = ensure_size(data_dir, n, log=log)
    folder = base["root"] + "-tiles"
    info = _read_info(folder)
    want = {"format": FORMAT, "images": n, "tiles": TILES, "pillow": _pillow(), "from": os.path.basename(base["root"])}
    if info and all(info.get(k) == v for k, v in want.items()) and os.path.isdir(os.path.join(folder, "train")):
        return dict(info, root=folder, train=os.path.join(folder, "train"))
    import multiprocessing as mp
    log(f"shuffling the tiles of {n:,} images into {folder} ...")
    t = time.time()
    tmp = folder + ".partial"
    for d in (folder, tmp):
        if os.path.exists(d):
            shutil.rmtree(d)
    rels = sorted(os.path.relpath(os.path.join(d, f), base["train"]) for d, _, fs in os.walk(base["train"]) for f in fs)
    tasks = [(os.path.join(base["train"], r), os.path.join(tmp, "train", r), r) for r in rels]
    with mp.get_context("fork").Pool(os.cpu_count() or 1) as pool:
        sizes = pool.map(_shuffle_tiles, tasks, chunksize=32)
    shutil.copyfile(os.path.join(base["root"], "labels.csv"), os.path.join(tmp, "labels.csv"))
    info = dict(want, bytes=sum(sizes), mean_bytes=round(sum(sizes) / n), generate_seconds=round(time.time() - t, 1))
    _write_info(tmp, info)
    os.replace(tmp, folder)
    log(f"  {n:,} images, {sum(sizes) / 1e6:.1f} MB in {time.time() - t:.1f} s")
    return dict(info, root=folder, train=os.path.join(folder, "train"))


def warm(train: str) -> tuple[int, int]:
    """Reads every file once so every variant starts from a warm page cache."""
    n = b = 0
    for dirpath, _, files in os.walk(train):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                b += len(f.read())
            n += 1
    return n, b
