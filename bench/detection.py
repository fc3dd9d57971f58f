"""Detection conversion speed and memory: a COCO-like tree (one folder of
ImageNet-like JPEGs from bench/dataset.py's pool, an instances JSON with ~7
boxes an image over 80 categories with COCO's ids, polygons for masks)
converted by us (`--annotations`) and by the single-process loop of the
TensorFlow models' create_coco_tf_record.py (bench/coco_baseline.py), each
run as its own process with the whole process tree measured (bench/procmon.py),
alternating, medians of the repeats.

    .venv/bin/python -m bench.detection --size 20000 --repeats 3           # the figures (~15 min on 2 cores)
    .venv/bin/python -m bench.detection --size 500 --repeats 1              # a check
    .venv/bin/python -m bench.detection --size 20000 --masks               # with image/object/mask
    .venv/bin/python -m bench.detection --size 20000 --variants "" --kill_at 0.6  # resume (issue 23)

Writes bench/results/detection-<time>.json and prints a table: images/s
(whole process: start-up included), CPU seconds, peak RSS of the tree.

With --kill_at F, also the resume of a killed detection run, per repeat: an
uninterrupted conversion (default options: full validation), then the same
into a new folder, its whole process group SIGKILLed once F of the shards are
complete, then the same command again: the rerun's wall against the
uninterrupted run's, and its shards and reader files byte for byte.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time

from bench import dataset
from bench.incremental import done_records
from bench.procmon import run_measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# COCO's 80 category ids (1..90 with gaps), named c<id>.
COCO_IDS = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]


def make_coco_tree(data_dir: str, n: int, boxes: float, seed: int = 0, log=print) -> dict:
    """data_dir/coco-<n>-b<boxes>/{train2017/*.jpg, annotations/instances_train2017.json}:
    hard links to the pool's first n images and their annotations (cached)."""
    from PIL import Image
    folder = os.path.join(data_dir, f"coco-{n}-b{boxes:g}-s{seed}")
    info_path = os.path.join(folder, "bench-coco.json")
    if os.path.exists(info_path):
        with open(info_path) as f:
            return json.load(f)
    src = dataset.ensure_size(data_dir, n, log=log)
    tmp = folder + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "train2017"))
    os.makedirs(os.path.join(tmp, "annotations"))
    rng = random.Random(seed)
    images, anns, nbytes = [], [], 0
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(src["train"]) for f in fs)
    for i, path in enumerate(files):
        name = f"{i + 1:012d}.jpg"
        dst = os.path.join(tmp, "train2017", name)
        os.link(path, dst)
        nbytes += os.path.getsize(dst)
        with Image.open(dst) as im:
            w, h = im.size
        images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
        for _ in range(max(0, min(30, int(rng.gauss(boxes, 3) + 0.5)))):
            bw, bh = rng.uniform(8, w / 2), rng.uniform(8, h / 2)
            x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
            poly = [x, y + bh / 2, x + bw / 2, y, x + bw, y + bh / 2, x + bw / 2, y + bh]
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": rng.choice(COCO_IDS),
                         "bbox": [round(v, 2) for v in (x, y, bw, bh)], "iscrowd": 0,
                         "area": round(bw * bh / 2, 2), "segmentation": [[round(v, 2) for v in poly]]})
    rng.shuffle(anns)
    doc = {"info": {"description": "bench"}, "images": images, "annotations": anns,
           "categories": [{"id": c, "name": f"c{c}", "supercategory": "x"} for c in COCO_IDS]}
    with open(os.path.join(tmp, "annotations", "instances_train2017.json"), "w") as f:
        json.dump(doc, f)
    info = {"root": folder, "json": os.path.join(folder, "annotations", "instances_train2017.json"),
            "images_dir": os.path.join(folder, "train2017"), "images": n, "boxes": len(anns), "bytes": nbytes}
    with open(os.path.join(tmp, "bench-coco.json"), "w") as f:
        json.dump(info, f)
    os.replace(tmp, folder)
    log(f"built {folder}: {n:,} images, {len(anns):,} boxes, {nbytes / 1e6:,.0f} MB")
    return info


def command(variant: str, tree: dict, out: str, shards: int, masks: bool) -> list:
    py = sys.executable
    if variant == "coco_script":
        return [py, "-m", "bench.coco_baseline", "--annotations", tree["json"], "--image_dir", tree["images_dir"],
                "--output", out, "--shards", str(shards)] + (["--masks"] if masks else [])
    validate = variant.split("_", 1)[1]
    return [py, "-m", "tfrecord_pipelines.convert", "--annotations", tree["json"], "--output", out,
            "--num_shards", str(shards), "--validate", validate, "--progress", "off", "--overwrite"] + \
        (["--masks", "png"] if masks else [])


def written(variant: str, out: str) -> int:
    if variant == "coco_script":
        from bench.run import count_tfrecords
        return sum(count_tfrecords(os.path.join(out, f)) for f in os.listdir(out))
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)["counts"]["written"]


def _files(out: str) -> dict:
    """{name: sha256} of an output's files but its manifest and report (which record how it was made)."""
    return {n: hashlib.sha256(open(os.path.join(out, n), "rb").read()).hexdigest() for n in sorted(os.listdir(out))
            if os.path.isfile(os.path.join(out, n)) and n not in ("manifest.json", "report.html")}


def resume_round(tree: dict, a, env: dict, r: int) -> dict:
    """An uninterrupted run, then one killed once --kill_at of its shards are complete, and its rerun."""
    clean, out = os.path.join(a.work, f"resume-clean{r}"), os.path.join(a.work, f"resume-out{r}")
    for d in (clean, out):
        shutil.rmtree(d, ignore_errors=True)
    args = ["--annotations", tree["json"], "--num_shards", str(a.shards), "--progress", "off"] + \
        (["--masks", "png"] if a.masks else [])
    full = run_measured([sys.executable, "-m", "tfrecord_pipelines.convert", *args, "--output", clean], cwd=ROOT,
                        env=env, stderr_path=clean + ".stderr")
    if full["returncode"] != 0:
        raise SystemExit(f"the uninterrupted run failed: see {clean}.stderr")
    target = max(1, round(a.shards * a.kill_at))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tfrecord_pipelines.convert", *args, "--output", out], cwd=ROOT,
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while done_records(out) < target:
        if proc.poll() is not None:
            raise SystemExit("the run to be killed ended first")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_after, kept = time.perf_counter() - t0, done_records(out)
    rerun = run_measured([sys.executable, "-m", "tfrecord_pipelines.convert", *args, "--output", out], cwd=ROOT,
                         env=env, stderr_path=out + ".stderr")
    if rerun["returncode"] != 0:
        raise SystemExit(f"the rerun failed: see {out}.stderr")
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    with open(os.path.join(clean, "manifest.json")) as f:
        same_boxes = m["detection"] == json.load(f)["detection"]
    row = {"full_wall_s": full["wall_s"], "killed_after_s": round(killed_after, 2), "kept": kept,
           "resumed": m["made"]["shards_resumed"], "rerun_wall_s": rerun["wall_s"],
           "ratio": rerun["wall_s"] / full["wall_s"], "identical": _files(out) == _files(clean) and same_boxes}
    print(f"  resume round {r + 1}: full {full['wall_s']:.1f} s; killed after {killed_after:.1f} s with {kept} of "
          f"{a.shards} shards complete; rerun {rerun['wall_s']:.1f} s ({row['resumed']} kept, "
          f"{row['ratio']:.0%}); identical {row['identical']}", file=sys.stderr)
    for d in (clean, out):
        shutil.rmtree(d, ignore_errors=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=20000)
    ap.add_argument("--boxes", type=float, default=7.0, help="mean boxes per image")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--masks", action="store_true", help="also write image/object/mask (both variants)")
    ap.add_argument("--variants", default="ours_header,ours_full,coco_script")
    ap.add_argument("--data", default=os.path.join(ROOT, "bench", "data"))
    ap.add_argument("--work", default=os.path.join(ROOT, "bench", "work"))
    ap.add_argument("--out", default="", help="the results' JSON (default: bench/results/detection-<time>.json)")
    ap.add_argument("--kill_at", type=float, default=0.0,
                    help="also measure a killed run's resume: SIGKILL once this fraction of the shards is complete")
    a = ap.parse_args(argv)
    tree = make_coco_tree(a.data, a.size, a.boxes, log=lambda m: print(m, file=sys.stderr))
    os.makedirs(a.work, exist_ok=True)
    from bench.run import child_env  # with bytecode, as an installed package runs
    env = child_env()
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    runs: dict = {v: [] for v in variants}
    for r in range(a.repeats):
        for v in variants:
            out = os.path.join(a.work, f"detection-{v}")
            shutil.rmtree(out, ignore_errors=True)
            got = run_measured(command(v, tree, out, a.shards, a.masks), cwd=ROOT, env=env,
                               stderr_path=out + ".stderr")
            got["records"] = written(v, out) if got["returncode"] == 0 else 0
            print(f"  {v} run {r + 1}: {got['wall_s']:.1f} s, {got['cpu_s']:.1f} CPU s, "
                  f"{got['peak_rss_mb']:,.0f} MB, {got['records']:,} records", file=sys.stderr)
            runs[v].append(got)
    summary = {}
    for v, rs in runs.items():
        ok = [x for x in rs if x["returncode"] == 0 and x["records"] == a.size]
        if not ok:
            summary[v] = {"error": f"failed: see {os.path.join(a.work, f'detection-{v}')}.stderr"}
            continue
        wall = statistics.median(x["wall_s"] for x in ok)
        summary[v] = {"wall_s": wall, "images_per_s": round(a.size / wall, 1),
                      "cpu_s": statistics.median(x["cpu_s"] for x in ok),
                      "peak_rss_mb": statistics.median(x["peak_rss_mb"] for x in ok), "runs": len(ok)}
    resume = [resume_round(tree, a, env, r) for r in range(a.repeats)] if a.kill_at > 0 else []
    print(f"\n{a.size:,} images, {tree['boxes']:,} boxes ({tree['bytes'] / 1e6:,.0f} MB), {a.shards} shards"
          f"{', masks' if a.masks else ''}; medians of {a.repeats}")
    print(f"{'variant':<14} {'wall s':>8} {'images/s':>9} {'CPU s':>8} {'peak tree MB':>13}")
    for v, s in summary.items():
        if "error" in s:
            print(f"{v:<14} {s['error']}")
        else:
            print(f"{v:<14} {s['wall_s']:>8.2f} {s['images_per_s']:>9,.0f} {s['cpu_s']:>8.1f} {s['peak_rss_mb']:>13,.0f}")
    if resume:
        print(f"resume after a SIGKILL at {a.kill_at:.0%} of the shards: rerun "
              f"{statistics.median(x['rerun_wall_s'] for x in resume):.1f} s against "
              f"{statistics.median(x['full_wall_s'] for x in resume):.1f} s uninterrupted = "
              f"{statistics.median(x['ratio'] for x in resume):.0%} (median of the rounds' ratios); identical "
              f"{all(x['identical'] for x in resume)}")
    path = a.out or os.path.join(ROOT, "bench", "results", time.strftime("detection-%Y%m%d-%H%M%S.json"))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"size": a.size, "boxes": tree["boxes"], "bytes": tree["bytes"], "masks": a.masks,
                   "shards": a.shards, "summary": summary, "runs": runs, "kill_at": a.kill_at, "resume": resume}, f,
                  indent=1)
    print(f"wrote {path}")
    return 0 if all("error" not in s for s in summary.values()) and all(x["identical"] for x in resume) else 1


if __name__ == "__main__":
    sys.exit(main())
