"""Peers beside us: other ways to turn the same image tree into a training format.

    python -m bench.peers --python /tmp/peers-venv/bin/python            # 2,500 and 50,000 images, 3 rounds
    python -m bench.peers --sizes 200,400 --repeats 1 --python ...       # a check at small scale

The peers run in a separate virtualenv (`--python`), with this project's
`peers` extra installed (setup.py; not in CI):

    python3 -m venv /tmp/peers-venv
    /tmp/peers-venv/bin/python -m pip install -c constraints.txt -e ".[peers]"

Every peer converts the same tree (bench/dataset.py's generated ImageNet-like
JPEGs, the class from the folder, 8 output files where the peer lets us say
so) as its own process tree, measured by bench/procmon.py (wall, CPU seconds
of every process, peak summed RSS), peers alternating within each round:

  tutorial        the tf.train.Example + tf.io.TFRecordWriter loop (bench/baselines.py), one process
  beam_tfrecord   Beam's plain pipeline: Create(paths) | Map(to tf.train.Example) | Reshuffle |
                  WriteToTFRecord(num_shards=8), in-process FnApiRunner (bench/baselines.py naive_beam)
  ray_data        Ray Data: read_binary_files | map_batches (label, Example fields) | write_tfrecords,
                  a local Ray cluster on every core
  litdata         litData's optimize(): raw JPEG bytes and label into its own chunk format, a worker per core
  ours_header     python -m tfrecord_pipelines.convert --validate header
  ours_full       the same, default (full) validation

Printed per size: wall, CPU s, peak tree RSS, images/s, images/s per vCPU of
the machine (images/s / nproc) and images per CPU-second (what a cloud bill
follows), each peer's version, whether two rounds wrote byte-identical files
(measured: a sha256 of every output file), and what the peer does not do.
A peer that exceeds --max-rss-mb is stopped and reported as such. JSON with
every run: bench/results/peers-<date>.json.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

PEERS = ("tutorial", "beam_tfrecord", "ray_data", "litdata", "ours_header", "ours_full")
# What each does not do that ours does (ours: every image validated before it is written, bad
# files quarantined in rejects.jsonl with a reason, byte-identical shards whatever the runner or
# worker count, a manifest with counts and checksums, label map, quality report).
DOES_NOT = {
    "tutorial": "no validation (a bad file is written as it is), no manifest or label map, one core",
    "beam_tfrecord": "no validation; image bytes go through the shuffle (memory ~5x the data); which shard "
                     "holds which record changes between runs",
    "ray_data": "no validation; a label map and shard layout of your own; file order follows scheduling",
    "litdata": "no validation; its own chunk format (not TFRecord), read with litData's StreamingDataset",
    "ours_header": "no decode: images are checked by their structure only (--validate header)",
    "ours_full": "",
}
VERSIONS = {"tutorial": "tensorflow", "beam_tfrecord": "apache-beam", "ray_data": "ray", "litdata": "litdata",
            "ours_header": "tfrecord-pipelines", "ours_full": "tfrecord-pipelines"}


# ---------------------------------------------------------------- the peers (run with --python)

def _items(root: str) -> list:
    """[(path, class name, class id)] in sorted order (bench.baselines.list_images)."""
    from bench.baselines import list_images
    return list_images(root)


def run_ray(root: str, out: str, shards: int) -> int:
    import ray

    items = _items(root)
    ids = {c: i for _, c, i in items}
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        ds = ray.data.read_binary_files([p for p, _, _ in items], include_paths=True)

        def to_fields(batch):
            paths = list(batch["path"])
            names = [os.path.basename(os.path.dirname(p)) for p in paths]
            return {"image/encoded": list(batch["bytes"]), "image/format": [b"jpeg"] * len(paths),
                    "image/class/label": [ids[n] for n in names],
                    "image/class/text": [n.encode() for n in names],
                    "image/filename": [os.path.basename(p).encode() for p in paths]}

        ds.map_batches(to_fields, batch_format="numpy").repartition(shards).write_tfrecords(out)
    finally:
        ray.shutdown()
    return len(items)


def _lit_item(item):
    path, name, label = item
    with open(path, "rb") as f:
        return {"image": f.read(), "label": label, "class": name}


def run_litdata(root: str, out: str, shards: int) -> int:
    from litdata import optimize
    items = _items(root)
    optimize(fn=_lit_item, inputs=items, output_dir=out, chunk_bytes="128MB", num_workers=os.cpu_count() or 1,
             mode="overwrite")
    return len(items)


def run_peer(name: str, root: str, out: str, shards: int) -> None:
    os.makedirs(out, exist_ok=True)
    n = {"ray_data": run_ray, "litdata": run_litdata}[name](root, out, shards)
    print(json.dumps({"images": n}))


# ---------------------------------------------------------------- the harness (this venv)

def command(name: str, python: str, train: str, out: str, shards: int) -> list:
    if name.startswith("ours_"):
        return [sys.executable, "-m", "tfrecord_pipelines.convert", "--input", train, "--output", out,
                "--validate", name[len("ours_"):], "--progress", "off", "--overwrite", "--num_shards", str(shards)]
    if name == "tutorial":
        return [python, "-m", "bench.baselines", "tutorial", "--input", train, "--output", out, "--shards", str(shards)]
    if name == "beam_tfrecord":
        return [python, "-m", "bench.baselines", "naive_beam", "--input", train, "--output", out, "--shards",
                str(shards)]
    return [python, "-m", "bench.peers", "--run", name, "--input", train, "--output", out, "--shards", str(shards)]


def peer_version(name: str, python: str) -> str:
    dist = VERSIONS[name]
    py = sys.executable if name.startswith("ours_") else python
    code = f"from importlib import metadata; print(metadata.version({dist!r}))"
    try:
        return subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def output_digest(out: str) -> str:
    """sha256 over every output file (names and bytes, in name order); run-specific files left out."""
    h = hashlib.sha256()
    skip = ("manifest.json", "report.html")
    for path in sorted(p for p in glob.glob(os.path.join(out, "**", "*"), recursive=True) if os.path.isfile(p)):
        if os.path.basename(path) in skip:
            continue
        h.update(os.path.relpath(path, out).encode() + b"\0")
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", choices=("ray_data", "litdata"), help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--output", help=argparse.SUPPRESS)
    ap.add_argument("--shards", type=int, default=8, help="output files for the peers that take a count")
    ap.add_argument("--python", default=os.environ.get("PEERS_PYTHON", ""),
                    help="the peers' virtualenv python (or $PEERS_PYTHON)")
    ap.add_argument("--sizes", default="2500,50000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--data-dir", default="")
    ap.add_argument("--max-rss-mb", type=float, default=0.0,
                    help="stop a peer whose process tree holds more (default: 80%% of RAM)")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--max-wait", type=float, default=60.0)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    if a.run:
        run_peer(a.run, a.input, a.output, a.shards)
        return 0

    from bench import dataset, procmon
    from bench.run import BENCH, ROOT, child_env, environment, prefault, settle
    if not a.python:
        raise SystemExit("--python: the peers' virtualenv python is needed (see --help)")
    peers = [p for p in a.peers.split(",") if p]
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise SystemExit(f"unknown peer {unknown[0]!r}; known: {', '.join(PEERS)}")
    sizes = sorted(int(s) for s in a.sizes.split(",") if s)
    data_dir = os.path.abspath(a.data_dir or os.path.join(BENCH, "data"))
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e6
    limit = a.max_rss_mb or 0.8 * mem
    trees = {n: dataset.ensure_size(data_dir, n, max_n=max(sizes), log=lambda m: print(m, file=sys.stderr))
             for n in sizes}
    versions = {p: peer_version(p, a.python) for p in peers}
    work = os.path.join(data_dir, "_work", "peers")
    os.makedirs(work, exist_ok=True)
    env = child_env()
    runs = []
    for r in range(a.repeats):
        for n in sizes:
            dataset.warm(trees[n]["train"])
            for p in peers:
                out = os.path.join(work, p)
                shutil.rmtree(out, ignore_errors=True)
                before = settle(1.0, 0.25, a.max_wait)
                prefault(2048)
                res = procmon.run_measured(command(p, a.python, trees[n]["train"], out, a.shards), cwd=ROOT,
                                           env=env, timeout=a.timeout, rss_limit_mb=limit,
                                           stdout_path=os.path.join(work, f"{p}.out"),
                                           stderr_path=os.path.join(work, f"{p}.err"))
                res.update(before, peer=p, images=n, repeat=r + 1)
                if res["returncode"] == 0 and not res.get("stopped"):
                    res["digest"] = output_digest(out)
                else:
                    with open(os.path.join(work, f"{p}.err"), errors="replace") as f:
                        res["stderr_tail"] = f.read()[-2000:]
                runs.append(res)
                shutil.rmtree(out, ignore_errors=True)
                print(f"[{r + 1}/{a.repeats}] {p:<14} n={n:<6} {res['wall_s']:8.2f} s  cpu {res['cpu_s']:7.1f} s  "
                      f"peak {res['peak_rss_mb']:7.0f} MB{'  ' + res['stopped'] if res.get('stopped') else ''}"
                      f"{'  FAILED rc %s' % res['returncode'] if res['returncode'] else ''}", file=sys.stderr,
                      flush=True)
    nproc = os.cpu_count() or 1
    print(f"\n{nproc} vCPUs; medians of {a.repeats} rounds; same-bytes: two rounds wrote identical files")
    print("| peer | version | images | wall s | CPU s | peak tree RSS MB | images/s | images/s per vCPU "
          "| images per CPU-s | same bytes | does not |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    summary = []
    for n in sizes:
        for p in peers:
            rs = [x for x in runs if x["peer"] == p and x["images"] == n]
            ok = [x for x in rs if x["returncode"] == 0 and not x.get("stopped")]
            if not ok:
                why = rs[0].get("stopped") or f"failed (rc {rs[0]['returncode']})" if rs else "not run"
                print(f"| {p} | {versions[p]} | {n:,} | {why} | | | | | | | {DOES_NOT[p]} |")
                summary.append({"peer": p, "images": n, "failed": why})
                continue
            wall = statistics.median(x["wall_s"] for x in ok)
            cpu = statistics.median(x["cpu_s"] for x in ok)
            peak = statistics.median(x["peak_rss_mb"] for x in ok)
            same = "yes" if len({x["digest"] for x in ok}) == 1 and len(ok) > 1 else "no" if len(ok) > 1 else "-"
            row = {"peer": p, "version": versions[p], "images": n, "wall_s": round(wall, 2), "cpu_s": round(cpu, 1),
                   "peak_rss_mb": round(peak), "images_per_s": round(n / wall), "per_vcpu": round(n / wall / nproc),
                   "per_cpu_s": round(n / cpu), "same_bytes": same, "does_not": DOES_NOT[p]}
            summary.append(row)
            print(f"| {p} | {versions[p]} | {n:,} | {wall:.2f} | {cpu:.1f} | {peak:,.0f} | {n / wall:,.0f} | "
                  f"{n / wall / nproc:,.0f} | {n / cpu:,.0f} | {same} | {DOES_NOT[p]} |")
    path = a.out or os.path.join(BENCH, "results", f"peers-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"format": "tfrecord-pipelines peers v1", **environment(), "peers_python": a.python,
                   "versions": versions, "sizes": sizes, "summary": summary, "runs": runs}, f, indent=1)
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
