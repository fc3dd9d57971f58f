"""The Python API's overhead: tfrecord_pipelines.convert() of N images from a
pandas DataFrame against the command on the same images, and the fixed cost
of a call.

    python -m bench.api --images 500 --repeats 5

Data: N ImageNet-like JPEGs from the project's generator (sample_data), in
10 class folders, with labels.csv (filename,label). Two variants, each its
own process, alternating (api cli api cli ...), measured as a whole process
tree (bench/procmon.py: wall, CPU seconds, peak RSS):

  api   python -c: read labels.csv into a DataFrame, tfp.convert(label_table=df, ...)
  cli   tfrecords convert --label_table labels.csv --image_root train ...

with the same options (--num_shards 4, the rest default), so both write the
same shards (checked). Inside the api process the call itself is timed too.

The fixed cost of a call: one process converts a 10-image DataFrame
`--calls` times (default 4) and times each call: the first pays Beam's import
and the workers' start; the later ones are what a notebook pays per call
(the workers' zygote stays up between calls). Also timed: `import
tfrecord_pipelines` alone.

Everything goes to bench/results/api-<date>.json; a table is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from bench import procmon

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

API_CODE = """
import json, sys, time
t0 = time.perf_counter()
import pandas as pd
import tfrecord_pipelines as tfp
data, out = sys.argv[1], sys.argv[2]
df = pd.read_csv(data + "/labels.csv")
df["filename"] = data + "/train/" + df["filename"]
t1 = time.perf_counter()
r = tfp.convert(label_table=df, output=out, num_shards=4, progress=False)
t2 = time.perf_counter()
assert r.counts["written"] == len(df), r.counts
print(json.dumps({"call_s": t2 - t1, "before_call_s": t1 - t0}))
"""

FIXED_CODE = """
import json, sys, time
t0 = time.perf_counter()
import tfrecord_pipelines as tfp
t_import = time.perf_counter() - t0
import pandas as pd
data, out, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
df = pd.read_csv(data + "/labels.csv").head(10)
df["filename"] = data + "/train/" + df["filename"]
times = []
for i in range(calls):
    t = time.perf_counter()
    tfp.convert(label_table=df, output=f"{out}/{i}", num_shards=1, progress=False)
    times.append(time.perf_counter() - t)
print(json.dumps({"import_s": t_import, "calls_s": times}))
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_data(folder: str, images: int) -> str:
    from tfrecord_pipelines import sample_data
    if not os.path.exists(os.path.join(folder, "labels.csv")):
        per_class = max(1, images // 10)
        sample_data.make_imagefolder(folder, classes=10, per_class=per_class)
    return folder


def _shards(out: str) -> dict:
    names = sorted(n for n in os.listdir(out) if n.endswith(".tfrecord"))
    return {n: open(os.path.join(out, n), "rb").read() for n in names}


def run_variant(name: str, data: str, out: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    if name == "api":
        cmd = [sys.executable, "-c", API_CODE, data, out]
    else:
        cmd = [os.path.join(os.path.dirname(sys.executable), "tfrecords"), "convert", "--label_table",
               os.path.join(data, "labels.csv"), "--image_root", os.path.join(data, "train"), "--output", out,
               "--num_shards", "4", "--progress", "off"]
    stdout = out + ".stdout"
    res = procmon.run_measured(cmd, cwd=ROOT, stdout_path=stdout, stderr_path=out + ".stderr")
    if res["returncode"] != 0:
        raise SystemExit(f"{name} failed: {open(out + '.stderr').read()[-2000:]}")
    if name == "api":
        res.update(json.loads(open(stdout).read().strip().splitlines()[-1]))
    return {k: v for k, v in res.items() if k not in ("peak_breakdown",)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=4, help="calls in the fixed-cost process")
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "bench", "data"))
    ap.add_argument("--out", default="", help="JSON results (default bench/results/api-<date>.json)")
    a = ap.parse_args(argv)
    data = make_data(os.path.join(a.data_dir, f"api-{a.images}"), a.images)
    work = os.path.join(a.data_dir, f"api-{a.images}-out")
    os.makedirs(work, exist_ok=True)
    runs: dict = {"api": [], "cli": []}
    for i in range(a.repeats):
        for name in ("api", "cli"):
            res = run_variant(name, data, os.path.join(work, name))
            runs[name].append(res)
            log(f"repeat {i + 1}/{a.repeats} {name}: wall {res['wall_s']:.2f} s, CPU {res['cpu_s']:.1f} s"
                + (f", the call {res['call_s']:.2f} s" if name == "api" else ""))
    same = _shards(os.path.join(work, "api")) == _shards(os.path.join(work, "cli"))
    fixed_out = os.path.join(work, "fixed")
    shutil.rmtree(fixed_out, ignore_errors=True)
    p = subprocess.run([sys.executable, "-c", FIXED_CODE, data, fixed_out, str(a.calls)], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    fixed = json.loads(p.stdout.strip().splitlines()[-1])
    med = {n: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "peak_rss_mb")}
           for n, rs in runs.items()}
    med["api"]["call_s"] = statistics.median(r["call_s"] for r in runs["api"])
    later = fixed["calls_s"][1:] or fixed["calls_s"]
    summary = {"images": a.images, "repeats": a.repeats, "same_shards": same, "median": med,
               "fixed": {"import_s": fixed["import_s"], "first_call_s": fixed["calls_s"][0],
                         "later_calls_median_s": statistics.median(later), "calls_s": fixed["calls_s"]},
               "runs": runs, "when": time.strftime("%Y-%m-%d %H:%M:%S"), "python": sys.version.split()[0]}
    out = a.out or os.path.join(ROOT, "bench", "results", f"api-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{a.images} images, median of {a.repeats} (alternating); shards identical: {same}")
    print(f"{'variant':<40}{'wall s':>9}{'CPU s':>9}{'peak MB':>9}")
    print(f"{'convert(label_table=df), whole process':<40}{med['api']['wall_s']:>9.2f}{med['api']['cpu_s']:>9.1f}"
          f"{med['api']['peak_rss_mb']:>9.0f}")
    print(f"{'  of which the call':<40}{med['api']['call_s']:>9.2f}")
    print(f"{'tfrecords convert --label_table':<40}{med['cli']['wall_s']:>9.2f}{med['cli']['cpu_s']:>9.1f}"
          f"{med['cli']['peak_rss_mb']:>9.0f}")
    print(f"fixed cost of a call (10 images): first {fixed['calls_s'][0]:.2f} s, then "
          f"{statistics.median(later):.2f} s (median of {len(later)}); import tfrecord_pipelines "
          f"{fixed['import_s'] * 1000:.0f} ms")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
