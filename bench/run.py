"""The benchmark: our converter against the baselines, on generated ImageNet-like data.

    python -m bench.run                       # sizes 100,2500,10000, 5 repeats, default variants (~30 min)
    python -m bench.run --sizes 2500,10000 --repeats 3 --variants default,naive_beam_mp

For each size it builds (or reuses, from --data-dir) an image tree with the
project's generator, warms the page cache, then runs every variant as its own
process, alternating (A B C ... A B C ...), `--repeats` times. Before each run
the previous output is deleted, `sync` is called and the machine is left idle
for `--settle` seconds; none of that is timed. Each run is measured as a whole
process tree (see bench/procmon.py): wall, CPU seconds of every process,
peak summed RSS of the tree, busy cores in the middle 80% of the run.

Reported per variant and size: the median wall over the repeats, images/s and
MB/s from it (source image bytes / wall), median CPU seconds, median peak
tree RSS, median busy cores; per variant, the marginal throughput between the
two largest sizes, (N2 - N1) / (wall(N2) - wall(N1)), which leaves
start-up cost out, and the start-up estimate wall(N1) - N1 / marginal. Then
the issue's targets as ratios within this one run. Everything, every raw run
included, goes to a JSON file (default bench/results/bench-<date>.json).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import time
from importlib import metadata

from bench import dataset, procmon

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")

DEFAULT_VARIANTS = ("plain", "plain_all_cores", "tutorial", "naive_beam", "decode_all_cores", "validate_all_cores",
                    "bound_header", "ours_header", "bound_full", "ours_full")
OPT_IN_VARIANTS = ("tutorial_decode", "naive_beam_mp")
ALL_VARIANTS = DEFAULT_VARIANTS + OPT_IN_VARIANTS
DESCRIPTIONS = {
    "plain": "read each file, write it into the shard files, no framing (1 process)",
    "plain_all_cores": "plain, the shard files dealt over a process per core",
    "tutorial": "tf.train.Example wrappers + tf.io.TFRecordWriter loop (1 process)",
    "tutorial_decode": "tutorial loop + tf.io.decode_jpeg(...).shape per image (1 process)",
    "naive_beam": "Create | Map(tf.train.Example) | Reshuffle | WriteToTFRecord, in-process FnApiRunner",
    "naive_beam_mp": "the naive pipeline, multi_processing on all cores",
    "decode_all_cores": "read + Pillow full decode, process pool on all cores (no output)",
    "validate_all_cores": "read + tfrecord_pipelines.transforms.core.images.probe_image (full), process pool on all cores (no output)",
    "bound_header": "the work each header-mode record needs (read, header probe, SHA-256, our Example, two CRC32Cs, "
                    "write), the shard files dealt over a process per core",
    "bound_full": "bound_header with full validation's probe (1/8-scale decode) and the perceptual hash",
    "ours_header": "python -m tfrecord_pipelines.convert --validate header",
    "ours_full": "python -m tfrecord_pipelines.convert --validate full (the default)",
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- variants

def variant_cmd(variant: str, train: str, out: str, shards: int) -> list:
    py = sys.executable
    if variant.startswith("ours_"):
        cmd = [py, "-m", "tfrecord_pipelines.convert", "--input", train, "--output", out,
               "--validate", variant[len("ours_"):], "--progress", "off", "--overwrite"]
        if shards:
            cmd += ["--num_shards", str(shards)]
        return cmd
    return [py, "-m", "bench.baselines", variant, "--input", train, "--output", out, "--shards", str(shards or 8)]


def child_env() -> dict:
    """The environment of a measured process: as a user's install runs it. pip
    compiles an installed package's bytecode; with PYTHONDONTWRITEBYTECODE set
    (as this project's machines set it) a checkout's modules would be compiled from source
    in every process of every run (~0.24 s of a 100-image run's main process,
    measured 2026-11-27), so the bench compiles them once (compile_sources)."""
    compile_sources()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env["PYTHONUNBUFFERED"] = "1"
    return env


_COMPILED = []


def compile_sources() -> None:
    """Bytecode for the checkout's modules, written once, before any timed run.
    The walk skips the bench's data and results: compile_dir over
    bench/data's million hard links took 23 s, and where that walk sat
    between starting a clock and starting a run (bench.incremental (d)'s
    killed run, 2026-11-28) it was counted as the run's."""
    if _COMPILED:
        return
    import compileall
    for folder in ("pipelines", "transforms", "bench"):
        for dirpath, dirnames, _ in os.walk(os.path.join(ROOT, folder)):
            dirnames[:] = sorted(d for d in dirnames if d not in ("data", "results", "__pycache__"))
            compileall.compile_dir(dirpath, maxlevels=0, quiet=1)
    _COMPILED.append(True)


def count_tfrecords(path: str) -> int:
    """Records in an uncompressed TFRecord file, from the length fields only."""
    n = 0
    with open(path, "rb") as f:
        while True:
            head = f.read(12)
            if len(head) < 12:
                return n
            (length,) = struct.unpack("<Q", head[:8])
            f.seek(length + 4, os.SEEK_CUR)
            n += 1


def check_output(variant: str, out: str, stdout_path: str, n: int, nbytes: int) -> dict:
    """What the run produced: records (where known), output bytes, ok."""
    files = [p for p in glob.glob(os.path.join(out, "**", "*"), recursive=True) if os.path.isfile(p)]
    res = {"out_files": len(files), "out_bytes": sum(os.path.getsize(p) for p in files)}
    records = None
    if variant.startswith("ours_"):
        try:
            with open(os.path.join(out, "manifest.json")) as f:
                records = json.load(f)["counts"]["written"]
        except (OSError, ValueError, KeyError):
            records = None
    elif variant.startswith(("tutorial", "naive_beam", "bound_")):
        records = sum(count_tfrecords(p) for p in files if ".tfrecord" in os.path.basename(p))
    else:
        try:
            with open(stdout_path) as f:
                line = [ln for ln in f.read().splitlines() if ln.startswith("{")][-1]
            info = json.loads(line)
            records = info["images"] if info.get("bytes") == nbytes else -1
        except (OSError, ValueError, KeyError, IndexError):
            records = None
        if variant.startswith("plain") and res["out_bytes"] != nbytes:
            records = -1
    res["records"] = records
    res["ok"] = records == n
    return res


def clean(path: str) -> None:
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)


PAGE_REPORTING = "/sys/module/page_reporting/parameters"


def page_reporting(folder: str = PAGE_REPORTING) -> dict:
    """The free page reporting parameters of this kernel ({} without it)."""
    out = {}
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return out
    for name in names:
        try:
            with open(os.path.join(folder, name)) as f:
                out[name] = f.read().strip()
        except OSError:
            continue
    return out


def page_reporting_warning(params: dict) -> str:
    """A line for a kernel that hands freed memory back to the host soon
    (max_waiting_mib below a run's page cache, or min_free_ms 0): each run
    then refaults memory the one before freed. At 50,000 images (header
    bound, 5.3 GB of images) its system CPU varied 6.8-16.3 s over four
    runs with 1024 MB held back; with 20,000 MB, 3.6-6.9 s."""
    try:
        short = int(params.get("max_waiting_mib", "inf")) < 16384
    except ValueError:
        short = False
    if not short and params.get("min_free_ms") != "0":
        return ""
    return (f"note: free page reporting soon returns freed memory to the host, so walls vary from run to run; "
            f"for steadier figures, as root: echo 20000 > {PAGE_REPORTING}/max_waiting_mib; "
            f"echo 60000 > {PAGE_REPORTING}/min_free_ms (and restore them after)")


DAMON_ADMIN = "/sys/kernel/mm/damon/admin/kdamonds"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _numbered(folder: str) -> list:
    """The numbered entries of a sysfs folder, in order ([] when it is absent)."""
    try:
        return sorted((x for x in os.listdir(folder) if x.isdigit()), key=int)
    except OSError:
        return []


def damon_pageout(folder: str = DAMON_ADMIN) -> list:
    """The DAMON schemes of this kernel that page memory out (action
    "pageout"), each {"kdamond", "state", "min_age_s", "quota_mb_per_s"}
    ([] without DAMON or without such a scheme)."""
    out = []
    for k in _numbered(folder):
        contexts = os.path.join(folder, k, "contexts")
        for c in _numbered(contexts):
            attrs = os.path.join(contexts, c, "monitoring_attrs", "intervals")
            schemes = os.path.join(contexts, c, "schemes")
            for s in _numbered(schemes):
                scheme = os.path.join(schemes, s)
                if _read(os.path.join(scheme, "action")) != "pageout":
                    continue
                try:
                    age = int(_read(os.path.join(scheme, "access_pattern", "age", "min")))
                    age_s = age * int(_read(os.path.join(attrs, "aggr_us"))) / 1e6
                except ValueError:
                    age_s = None
                try:
                    quota = int(_read(os.path.join(scheme, "quotas", "bytes"))) / 2**20 / (
                        int(_read(os.path.join(scheme, "quotas", "reset_interval_ms"))) / 1000)
                except (ValueError, ZeroDivisionError):
                    quota = None
                out.append({"kdamond": os.path.join(folder, k), "state": _read(os.path.join(folder, k, "state")),
                            "min_age_s": age_s, "quota_mb_per_s": quota})
    return out


def damon_warning(schemes: list) -> str:
    """A line for a kernel whose DAMON pages out memory idle for a while: the
    page cache of a bench tree not read for that long is paged out between
    runs and read back from disk (~5 GB for the 50,000-image tree)."""
    on = [s for s in schemes if s["state"] == "on"]
    if not on:
        return ""
    ages = ", ".join(f"{s['min_age_s']:g} s" for s in on if s["min_age_s"] is not None) or "a while"
    offs = "; ".join(f"echo off > {s['kdamond']}/state" for s in on)
    return (f"note: DAMON pages out memory idle for {ages}, so the trees' page cache is read back from disk "
            f"between runs and walls vary; for steadier figures, as root: {offs} (and echo on after)")


def prefault(mb: int) -> float:
    """Touches `mb` MB of fresh memory and frees it; returns the seconds it took.

    On a VM with free page reporting (virtio-balloon, as here) memory the guest
    freed goes back to the host about 2 s later, and touching it again costs a
    host page fault per page (here ~5 s for 3 GB). Without this, a run's first
    GB of page cache and heap pays that VM-only cost, which varied 2-5x
    between runs. Done just before each timed run, outside the timing."""
    if mb <= 0:
        return 0.0
    t = time.perf_counter()
    buf = bytearray(mb << 20)
    buf[::4096] = bytes(len(range(0, len(buf), 4096)))
    del buf
    return time.perf_counter() - t


def settle(seconds: float, quiet_cores: float, max_wait: float) -> dict:
    """sync, idle `seconds`, then wait (up to max_wait) until other programs use at most
    quiet_cores. Returns what was seen, for the record."""
    os.sync()
    if seconds > 0:
        time.sleep(seconds)
    if max_wait <= 0:
        return {}
    load, waited = procmon.wait_quiet(quiet_cores, max_wait, quiet_for=min(2.0, max_wait))
    return {"load_before": round(load, 2), "waited_s": round(waited, 1)}


# ---------------------------------------------------------------- summary

def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: list, variants: list, sizes: list, datasets: dict) -> dict:
    table = {}
    for v in variants:
        for n in sizes:
            rs = [r for r in runs if r["variant"] == v and r["images"] == n and r["returncode"] == 0
                  and not r.get("discarded")]
            if not rs:
                continue
            wall = _median(r["wall_s"] for r in rs)
            nbytes = datasets[n]["bytes"]
            table.setdefault(v, {})[str(n)] = {
                "runs": len(rs),
                "all_ok": all(r.get("ok") for r in rs),
                "wall_s_median": round(wall, 3),
                "wall_s_min": round(min(r["wall_s"] for r in rs), 3),
                "wall_s_max": round(max(r["wall_s"] for r in rs), 3),
                "images_per_s": round(n / wall, 2),
                "mb_per_s": round(nbytes / 1e6 / wall, 3),
                "cpu_s_median": round(_median(r["cpu_s"] for r in rs), 2),
                "cpu_us_per_image": round(_median(r["cpu_s"] for r in rs) / n * 1e6, 1),
                "peak_rss_mb_median": round(_median(r["peak_rss_mb"] for r in rs), 1),
                "peak_rss_mb_max": round(max(r["peak_rss_mb"] for r in rs), 1),
                "busy_cores_mid_median": round(_median(r.get("busy_cores_mid") for r in rs) or 0, 2),
                "busy_cores_active_median": round(_median(r.get("busy_cores_active") for r in rs) or 0, 2),
                "parallel_fraction_median": round(_median(r.get("parallel_fraction") for r in rs) or 0, 3),
                "peak_procs_max": max(r.get("peak_procs", 0) for r in rs),
                "foreign_cores_median": round(_median(r.get("foreign_cores") for r in rs) or 0, 2),
                "noisy_runs": sum(1 for r in rs if r.get("noisy")),
                "discarded_runs": sum(1 for r in runs if r["variant"] == v and r["images"] == n
                                      and r.get("discarded")),
            }
    # The marginal rate is taken between the two largest sizes (start-up cancels; the smallest,
    # e.g. 100 images, is there for the fixed cost).
    n1, n2 = (sorted(sizes)[-2], max(sizes)) if len(sizes) > 1 else (min(sizes), max(sizes))
    marginal = {}
    if n2 > n1:
        b1, b2 = datasets[n1]["bytes"], datasets[n2]["bytes"]
        for v, rows in table.items():
            a, b = rows.get(str(n1)), rows.get(str(n2))
            if not a or not b:
                continue
            dw = b["wall_s_median"] - a["wall_s_median"]
            dc = b["cpu_s_median"] - a["cpu_s_median"]
            ips = (n2 - n1) / dw if dw > 0 else None
            marginal[v] = {
                "images_per_s": round(ips, 1) if ips else None,
                "mb_per_s": round((b2 - b1) / 1e6 / dw, 1) if dw > 0 else None,
                "startup_s": round(a["wall_s_median"] - n1 / ips, 2) if ips else None,
                "cpu_us_per_image": round(dc / (n2 - n1) * 1e6, 1),
                "startup_cpu_s": round(a["cpu_s_median"] - n1 * dc / (n2 - n1), 2),
                "peak_rss_growth": round(b["peak_rss_mb_median"] / a["peak_rss_mb_median"] - 1, 3),
            }
    return {"table": table, "marginal": marginal, "n1": n1, "n2": n2, "sizes": sorted(sizes)}


def targets(summary: dict) -> list:
    """The issue's targets, as ratios from this run. Each: name, value, goal, pass (None: not measurable)."""
    t, m, n1, n2 = summary["table"], summary["marginal"], summary["n1"], summary["n2"]
    out = []

    def get(v, n, key):
        return t.get(v, {}).get(str(n), {}).get(key)

    def mget(v, key):
        return m.get(v, {}).get(key)

    def ratio(a, b):
        return round(a / b, 3) if a is not None and b else None

    def add(name, value, op, goal, what, primary=True):
        ok = None if value is None else (value >= goal if op == ">=" else value <= goal if op == "<=" else value < goal)
        out.append({"target": name, "value": value, "goal": f"{op} {goal}", "pass": ok,
                    "what": what, "primary": primary})

    # Issue 26: a small run; 2,500 images no slower than the tutorial loop, 10,000 in at most 0.6x its
    # wall (header mode, as the loop decodes nothing; full mode beside it); the per-image rates.
    small = min(summary.get("sizes", [n1]))
    for v, primary in (("ours_full", True), ("ours_header", False)):
        add(f"{v}_wall_s_at_{small}", get(v, small, "wall_s_median"), "<=", 1.5,
            f"{v} wall at {small} images, s (issue 26: 100 images in <= 1.5 s)", primary and small == 100)
        add(f"{v}_cpu_s_at_{small}", get(v, small, "cpu_s_median"), "<=", 2.0,
            f"{v} CPU seconds of the process tree at {small} images (issue 26: <= 2 s)", primary and small == 100)
    for n in summary.get("sizes", [n1, n2]):
        if n == small and n < 1000:
            continue
        goal = 0.6 if n >= 10000 else 1.0
        for v, primary in (("ours_header", n in (2500, 10000)), ("ours_full", False)):
            add(f"{v}_wall_vs_tutorial_at_{n}", ratio(get(v, n, "wall_s_median"), get("tutorial", n, "wall_s_median")),
                "<=", goal, f"{v} wall / tutorial wall at {n} images", primary)
    # The conversion against the work its records need (bound_<mode>: the same images, the same run).
    add("header_marginal_vs_bound", ratio(mget("ours_header", "images_per_s"), mget("bound_header", "images_per_s")),
        ">=", 0.90, f"ours_header marginal images/s / bound_header marginal images/s ({n1}->{n2})")
    add("full_marginal_vs_bound", ratio(mget("ours_full", "images_per_s"), mget("bound_full", "images_per_s")),
        ">=", 0.95, f"ours_full marginal images/s / bound_full marginal images/s ({n1}->{n2})")
    add("tutorial_wall_vs_header", ratio(get("tutorial", n2, "wall_s_median"), get("ours_header", n2, "wall_s_median")),
        ">=", 1.0, f"tutorial wall / ours_header wall at {n2} images (>= 1: ours no slower; informational)",
        primary=False)
    add("tutorial_wall_vs_full", ratio(get("tutorial", n2, "wall_s_median"), get("ours_full", n2, "wall_s_median")),
        ">=", 1.0, f"tutorial wall / ours_full wall at {n2} images (informational)", primary=False)
    add("naive_beam_wall_vs_header", ratio(get("naive_beam", n2, "wall_s_median"),
                                           get("ours_header", n2, "wall_s_median")),
        ">=", 5.0, f"naive_beam wall / ours_header wall at {n2} images")
    add("naive_beam_wall_vs_full", ratio(get("naive_beam", n2, "wall_s_median"),
                                         get("ours_full", n2, "wall_s_median")),
        ">=", 5.0, f"naive_beam wall / ours_full wall at {n2} images (informational)", primary=False)
    add("full_marginal_vs_validate_all_cores", ratio(mget("ours_full", "images_per_s"),
                                                     mget("validate_all_cores", "images_per_s")),
        ">=", 0.90, "ours_full marginal images/s / validate_all_cores marginal images/s (its own decode, all cores; "
        "informational)", primary=False)
    add("full_marginal_vs_decode_all_cores", ratio(mget("ours_full", "images_per_s"),
                                                   mget("decode_all_cores", "images_per_s")),
        ">=", 0.90, "ours_full marginal images/s / decode_all_cores marginal images/s (a full Pillow decode; "
        "informational)", primary=False)
    add("full_whole_vs_validate_all_cores", ratio(get("ours_full", n2, "images_per_s"),
                                                  get("validate_all_cores", n2, "images_per_s")),
        ">=", 0.85, f"ours_full images/s / validate_all_cores images/s, whole process at {n2} (start-up included)",
        primary=False)
    add("full_whole_vs_decode_all_cores", ratio(get("ours_full", n2, "images_per_s"),
                                                get("decode_all_cores", n2, "images_per_s")),
        ">=", 0.85, f"ours_full images/s / decode_all_cores images/s, whole process at {n2} (start-up included)",
        primary=False)
    for v in ("ours_header", "ours_full"):
        add(f"{v}_peak_rss_mb", get(v, n2, "peak_rss_mb_max"), "<", 1500,
            f"{v} peak RSS of the process tree at {n2} images, MB (max over repeats)")
        add(f"{v}_peak_rss_growth", mget(v, "peak_rss_growth"), "<", 0.10,
            f"{v} median peak tree RSS growth from {n1} to {n2} images")
    return out


# ---------------------------------------------------------------- printing

def _fmt(v, spec="{:,.1f}"):
    return "-" if v is None else spec.format(v)


def print_report(summary: dict, tgts: list, datasets: dict, variants: list, sizes: list, repeats: int) -> None:
    t, m = summary["table"], summary["marginal"]
    print()
    for n in sizes:
        d = datasets[n]
        print(f"dataset {n:,} images: {d['bytes'] / 1e6:,.1f} MB, mean {d['bytes'] / n / 1e3:.0f} KB, "
              f"{d['classes_used']} classes ({d['root']})")
    print(f"medians of {repeats} runs; img/s and MB/s from the median wall; CPU s of the whole process tree; "
          f"peak MB = peak summed RSS of the tree;\ncores = tree CPU s / wall s over the middle 80% of the run "
          f"({procmon.NPROC} cores); par% = share of the wall with all cores busy; other = cores used by other "
          f"programs meanwhile")
    head = (f"{'variant':<19} {'images':>7} {'wall s':>8} {'(min-max)':>13} {'img/s':>8} {'MB/s':>7} "
            f"{'CPU s':>7} {'peak MB':>8} {'cores':>5} {'par%':>5} {'other':>5} {'marg img/s':>10}")
    print(head)
    print("-" * len(head))
    for v in variants:
        for n in sizes:
            row = t.get(v, {}).get(str(n))
            if not row:
                print(f"{v:<19} {n:>7,} {'failed':>8}")
                continue
            marg = m.get(v, {}).get("images_per_s") if n == summary["n2"] else None
            flag = "" if row["all_ok"] else " !bad output"
            flag += f" ({row['noisy_runs']} noisy)" if row["noisy_runs"] else ""
            print(f"{v:<19} {n:>7,} {row['wall_s_median']:>8.2f} "
                  f"{'(' + format(row['wall_s_min'], '.2f') + '-' + format(row['wall_s_max'], '.2f') + ')':>13} "
                  f"{row['images_per_s']:>8,.0f} {row['mb_per_s']:>7,.1f} {row['cpu_s_median']:>7.1f} "
                  f"{row['peak_rss_mb_median']:>8,.0f} {row['busy_cores_mid_median']:>5.2f} "
                  f"{row['parallel_fraction_median'] * 100:>5.0f} {row['foreign_cores_median']:>5.2f} "
                  f"{_fmt(marg, '{:,.0f}'):>10}{flag}")
    if m:
        print()
        print(f"marginal, {summary['n1']:,} -> {summary['n2']:,} images (from the median walls and CPU seconds)")
        head = (f"{'variant':<19} {'img/s':>8} {'MB/s':>7} {'start-up s':>10} {'CPU us/img':>10} "
                f"{'start-up CPU s':>14} {'peak RSS growth':>15}")
        print(head)
        print("-" * len(head))
        for v in variants:
            r = m.get(v)
            if not r:
                continue
            print(f"{v:<19} {_fmt(r['images_per_s'], '{:,.0f}'):>8} {_fmt(r['mb_per_s']):>7} "
                  f"{_fmt(r['startup_s'], '{:.2f}'):>10} {r['cpu_us_per_image']:>10,.0f} "
                  f"{r['startup_cpu_s']:>14.2f} {r['peak_rss_growth'] * 100:>14.1f}%")
        beyond = [(mode, m[f"ours_{mode}"]["cpu_us_per_image"] - m[f"bound_{mode}"]["cpu_us_per_image"])
                  for mode in ("header", "full") if f"ours_{mode}" in m and f"bound_{mode}" in m]
        if beyond:
            print("marginal CPU per image beyond the bound (ours_<mode> - bound_<mode>, the runner's and the "
                  "stages' own share): " + ", ".join(f"{mode} {us:,.0f} us" for mode, us in beyond))
    print()
    print("targets (ratios within this run)")
    for x in tgts:
        status = "n/a " if x["pass"] is None else ("PASS" if x["pass"] else "FAIL")
        if not x["primary"]:
            status = status.lower() if x["pass"] is not None else status
        print(f"  {status} {x['target']:<38} {_fmt(x['value'], '{:,.3f}'):>9} (goal {x['goal']}): {x['what']}")


# ---------------------------------------------------------------- environment

def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def environment() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "pipelines", "transforms"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip())
    except OSError:
        commit, dirty = "", None
    return {
        "machine": {"nproc": os.cpu_count(), "mem_total_gb": round(mem / 2**30, 1), "cpu_model": model,
                    "kernel": platform.release(), "platform": platform.platform(),
                    "page_reporting": page_reporting(), "damon_pageout": damon_pageout()},
        "versions": {"python": platform.python_version(), "apache-beam": _version("apache-beam"),
                     "tensorflow": _version("tensorflow"), "pillow": _version("pillow"),
                     "tfx-bsl": _version("tfx-bsl"), "protobuf": _version("protobuf"),
                     "google-crc32c": _version("google-crc32c"), "numpy": _version("numpy")},
        "git": {"commit": commit, "pipelines_or_transforms_modified": dirty},
    }


# ---------------------------------------------------------------- main

def parse_variants(text: str) -> list:
    out = []
    for name in [s.strip() for s in text.split(",") if s.strip()]:
        if name == "default":
            out += [v for v in DEFAULT_VARIANTS if v not in out]
        elif name == "all":
            out += [v for v in ALL_VARIANTS if v not in out]
        elif name.startswith("-") and name[1:] in out:
            out.remove(name[1:])
        elif name in ALL_VARIANTS:
            if name not in out:
                out.append(name)
        else:
            raise SystemExit(f"unknown variant {name!r}; known: {', '.join(ALL_VARIANTS)}, default, all")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="variants:\n" + "\n".join(f"  {k:<19} {v}" for k, v in DESCRIPTIONS.items())
                                 + f"\n\ndefault: {','.join(DEFAULT_VARIANTS)}; opt-in: {','.join(OPT_IN_VARIANTS)}")
    ap.add_argument("--sizes", default="100,2500,10000",
                    help="dataset sizes in images, comma-separated (default 100,2500,10000); the marginal rate is "
                         "taken between the two largest")
    ap.add_argument("--repeats", type=int, default=5, help="runs of each variant and size; the median is reported")
    ap.add_argument("--variants", default="default",
                    help="comma-separated: names, 'default', 'all', '-name' to drop one (default: default)")
    ap.add_argument("--data-dir", default=os.path.join(BENCH, "data"), help="generated datasets, reused (bench/data)")
    ap.add_argument("--work-dir", default="", help="where the variants write (default: DATA_DIR/_work)")
    ap.add_argument("--out", default="", help="JSON results file (default bench/results/bench-<date>.json)")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="image side scale for the generator (0.25: thumbnails)")
    ap.add_argument("--shards", type=int, default=8,
                    help="output files for every variant (our converter gets --num_shards; 0: its own default)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds idle after sync before each run")
    ap.add_argument("--quiet-cores", type=float, default=0.25,
                    help="before each run, wait until other programs use at most this many cores (default 0.25)")
    ap.add_argument("--max-wait", type=float, default=120.0,
                    help="seconds to wait for 2 s of such quiet at most (0: do not wait)")
    ap.add_argument("--noisy-cores", type=float, default=0.3,
                    help="a run during which other programs used more cores than this is noisy and retried")
    ap.add_argument("--retries", type=int, default=2, help="extra attempts of a noisy run (default 2)")
    ap.add_argument("--prefault-mb", type=int, default=2048,
                    help="touch and free this much memory just before each run (VM free page reporting; 0: off)")
    ap.add_argument("--interval", type=float, default=0.025, help="seconds between /proc scans")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds before a run is killed")
    ap.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up (page cache, imports)")
    a = ap.parse_args(argv)

    sizes = sorted({int(s) for s in a.sizes.split(",") if s.strip()})
    variants = parse_variants(a.variants)
    if not sizes or not variants:
        raise SystemExit("nothing to run")
    data_dir = os.path.abspath(a.data_dir)
    work = os.path.abspath(a.work_dir or os.path.join(data_dir, "_work"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = os.path.abspath(a.out or os.path.join(BENCH, "results", f"bench-{stamp}.json"))
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    os.makedirs(work, exist_ok=True)
    logs = os.path.join(work, "logs")
    os.makedirs(logs, exist_ok=True)

    for warning in (page_reporting_warning(page_reporting()), damon_warning(damon_pageout())):
        if warning:
            log(warning)
    datasets = {}
    for n in sizes:
        datasets[n] = dataset.ensure_size(data_dir, n, a.classes, a.seed, a.scale, max_n=max(sizes), log=log)
        log(f"dataset {n:,}: {datasets[n]['bytes'] / 1e6:,.1f} MB in {datasets[n]['train']}")
    env = child_env()
    if not a.no_warmup:
        t = time.time()
        for n in sizes:
            dataset.warm(datasets[n]["train"])
        imports = "import tensorflow, apache_beam, PIL.Image, google_crc32c, tfrecord_pipelines.commands.convert, bench.baselines"
        subprocess.run([sys.executable, "-c", imports], cwd=ROOT, env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        log(f"warm-up (page cache, imports): {time.time() - t:.1f} s")

    doc = {"format": "tfrecord-pipelines bench v1", "started": stamp, "command": [sys.executable, "-m", "bench.run"]
           + (list(argv) if argv is not None else sys.argv[1:]),
           **environment(),
           "settings": {"sizes": sizes, "repeats": a.repeats, "variants": variants, "shards": a.shards,
                        "settle_s": a.settle, "interval_s": a.interval, "quiet_cores": a.quiet_cores,
                        "max_wait_s": a.max_wait, "noisy_cores": a.noisy_cores, "retries": a.retries,
                        "prefault_mb": a.prefault_mb,
                        "order": "for repeat: for size: for variant"},
           "definitions": {
               "wall_s": "fork to reap of the root process",
               "cpu_s": "user+sys of the whole tree: getrusage(RUSAGE_CHILDREN) delta; orphans re-parented "
                        "to the bench (subreaper) and reaped",
               "peak_rss_mb": "max over /proc scans of the summed RSS of every descendant (shared pages "
                              "counted once per process)",
               "busy_cores_mid": "tree CPU seconds / wall seconds over the middle 80% of the run",
               "busy_cores_active": "the same over the 100 ms slots where the tree used > 0.5 core",
               "parallel_fraction": "share of the wall time with the tree using > (cores - 0.5) cores",
               "foreign_cores": "(machine busy CPU s from /proc/stat - tree CPU s - monitor CPU s) / wall: other "
                                "programs and kernel threads; a run above --noisy-cores is discarded and retried",
               "images_per_s": "images / median wall", "mb_per_s": "source image bytes / 1e6 / median wall",
               "marginal": "(N2 - N1) / (median wall N2 - median wall N1); start-up = wall N1 - N1 / marginal"},
           "variants": {v: DESCRIPTIONS[v] for v in variants},
           "datasets": {str(n): datasets[n] for n in sizes},
           "runs": []}

    def save(final: bool) -> None:
        doc["complete"] = final
        tmp = out_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, out_path)

    total = a.repeats * len(sizes) * len(variants)
    k = 0
    for r in range(a.repeats):
        for n in sizes:
            d = datasets[n]
            for v in variants:
                k += 1
                out = os.path.join(work, v)
                base = os.path.join(logs, f"{v}-{n}-r{r + 1}")
                cmd = variant_cmd(v, d["train"], out, a.shards)
                for attempt in range(1 + max(0, a.retries)):
                    clean(out)
                    before = settle(a.settle, a.quiet_cores, a.max_wait)
                    before["prefault_s"] = round(prefault(a.prefault_mb), 2)
                    started = time.time()
                    res = procmon.run_measured(cmd, cwd=ROOT, env=env, interval=a.interval, timeout=a.timeout,
                                               stdout_path=base + ".out", stderr_path=base + ".err")
                    res.update(check_output(v, out, base + ".out", n, d["bytes"]))
                    res = {"variant": v, "images": n, "repeat": r + 1, "attempt": attempt + 1,
                           "started": round(started, 3), **before, **res}
                    res["noisy"] = res.get("foreign_cores", 0) > a.noisy_cores
                    if res["returncode"] != 0 or not res["ok"]:
                        try:
                            with open(base + ".err", errors="replace") as f:
                                res["stderr_tail"] = f.read()[-3000:]
                        except OSError:
                            pass
                    retry = res["noisy"] and res["returncode"] == 0 and attempt < a.retries
                    if retry:
                        res["discarded"] = "noisy: other programs used %.2f cores" % res["foreign_cores"]
                    doc["runs"].append(res)
                    clean(out)
                    log(f"[{k}/{total}] {v:<19} n={n:<6} r{r + 1}: {res['wall_s']:7.2f} s  cpu {res['cpu_s']:6.1f} s  "
                        f"peak {res['peak_rss_mb']:7.0f} MB  cores {res.get('busy_cores_mid', 0):.2f}  "
                        f"other {res.get('foreign_cores', 0):.2f}"
                        f"{'' if res['ok'] else '  FAILED (rc %s, records %s)' % (res['returncode'], res['records'])}"
                        f"{'  noisy, again' if retry else ''}")
                    save(False)
                    if not retry:
                        break
    summary = summarize(doc["runs"], variants, sizes, datasets)
    tgts = targets(summary)
    doc["summary"] = summary
    doc["targets"] = tgts
    doc["finished"] = time.strftime("%Y%m%d-%H%M%S")
    save(True)
    print_report(summary, tgts, datasets, variants, sizes, a.repeats)
    print(f"\nresults: {out_path}")
    discarded = sum(1 for r in doc["runs"] if r.get("discarded"))
    noisy = sum(1 for r in doc["runs"] if r.get("noisy") and not r.get("discarded"))
    if discarded or noisy:
        print(f"{discarded} run(s) discarded and repeated because other programs were busy; "
              f"{noisy} kept run(s) still noisy (see foreign_cores in the JSON)")
    failed = [r for r in doc["runs"] if r["returncode"] != 0 or not r["ok"]]
    if failed:
        log(f"{len(failed)} run(s) failed; see stderr_tail in the JSON and {logs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
