"""Local runs at scale: wall, CPU and whole-tree peak memory against the
number of images.

    .venv/bin/python -m bench.scale --sizes 50000,500000          # ~3 min
    .venv/bin/python -m bench.scale --sizes 50000,500000,2560000  # ~15 min, ~5 GB of inodes' worth of links

For each size N it builds (once, kept under --data-dir) a tree of 1,000 class
folders holding N hard links to 50 tiny JPEGs, so a million files take no
space beyond their directory entries, and converts it with
`--validate header --num_shards 256` on the local runner (2 workers), as
issue 11 measured. The process tree's RSS is summed every --interval seconds
(bench/procmon.py), so a stage's peak is caught. Output goes to a scratch
folder that is removed after each run.
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

CLASSES = 1000
SOURCES = 50


def _sources(folder: str, n: int, bad: bool = False) -> list[str]:
    """SOURCES distinct tiny JPEGs, as files enough that no inode passes
    ext4's 65,000 links (copy k holds the bytes of source k % SOURCES);
    `bad`: text files named .jpg instead, each rejected (not_an_image)."""
    import numpy as np
    from PIL import Image
    os.makedirs(folder, exist_ok=True)
    paths = []
    for k in range(max(SOURCES, -(-n // 50_000) * SOURCES)):
        path = os.path.join(folder, f"src{k}.jpg")
        if bad and not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(b"<html>403 Forbidden</html>\n")
        elif not os.path.exists(path):
            arr = (np.random.RandomState(k % SOURCES).rand(24, 32, 3) * 255).astype("uint8")
            buf = io.BytesIO()
            Image.fromarray(arr).save(buf, "JPEG", quality=90)
            with open(path, "wb") as f:
                f.write(buf.getvalue())
        paths.append(path)
    return paths


def ensure_tree(data_dir: str, n: int, bad: bool = False) -> str:
    """data_dir/links-N/train/cXXX/iYYYYYY.jpg: N hard links, round-robin over classes
    (links-bad-N: to files that are not images)."""
    root = os.path.join(data_dir, f"links-{'bad-' if bad else ''}{n}")
    done = os.path.join(root, ".complete")
    train = os.path.join(root, "train")
    if os.path.exists(done):
        return train
    shutil.rmtree(root, ignore_errors=True)
    srcs = _sources(os.path.join(root, "sources"), n, bad)
    t = time.time()
    for c in range(CLASSES):
        os.makedirs(os.path.join(train, f"c{c:03d}"))
    for i in range(n):
        os.link(srcs[i % len(srcs)], os.path.join(train, f"c{i % CLASSES:03d}", f"i{i:07d}.jpg"))
    open(done, "w").close()
    print(f"built {n:,} hard links in {time.time() - t:.0f} s", flush=True)
    return train


def main(argv=None) -> int:
    from bench import procmon
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="50000,500000")
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--interval", type=float, default=0.1, help="seconds between RSS samples")
    ap.add_argument("--extra", default="--validate header --num_shards 256",
                    help="converter flags, space-separated")
    ap.add_argument("--bad", action="store_true",
                    help="every file is a text file named .jpg: every record is rejected (with "
                         "--max_reject_fraction 1), to measure the rejects' path")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",")]
    rows = []
    for n in sizes:
        train = ensure_tree(a.data_dir, n, a.bad)
        out = tempfile.mkdtemp(prefix="bench-scale-", dir=a.data_dir)
        try:
            cmd = [sys.executable, "-m", "tfrecord_pipelines.convert", "--input", train, "--output", out,
                   "--progress", "off", "--overwrite", *a.extra.split(),
                   *(["--max_reject_fraction", "1", "--allow_empty"] if a.bad else [])]
            r = procmon.run_measured(cmd, cwd=ROOT, interval=a.interval, timeout=7200)
            if r["returncode"] != 0:
                raise SystemExit(f"the conversion of {n:,} images failed (exit {r['returncode']})")
            main_mb = max((p["rss_mb"] for p in r["peak_breakdown"] if "tfrecord_pipelines.convert" in p["cmd"]),
                          default=0.0)
            rows.append((n, r["wall_s"], r["cpu_s"], r["peak_rss_mb"], main_mb))
            print(f"{n:>10,} images: {r['wall_s']:7.1f} s wall, {r['cpu_s']:7.1f} CPU s, "
                  f"peak tree {r['peak_rss_mb']:,.0f} MB (main process {main_mb:,.0f} MB at the peak), "
                  f"{n / r['wall_s']:,.0f} images/s", flush=True)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    print(f"\n| images | wall s | CPU s | images/s | tree peak MB | main process MB | flags: {a.extra} |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for n, wall, cpu, peak, main_mb in rows:
        print(f"| {n:,} | {wall:.1f} | {cpu:.1f} | {n / wall:,.0f} | {peak:,.0f} | {main_mb:,.0f} | |")
    if len(rows) >= 2:
        (n1, *_, p1, _), (n2, *_, p2, _) = rows[0], rows[-1]
        print(f"growth {n1:,} -> {n2:,}: {(p2 - p1) * 1e6 / (n2 - n1):,.0f} bytes per image")
    return 0


if __name__ == "__main__":
    sys.exit(main())
