"""Where the wall time and CPU of a small conversion go: per process, per phase.

    python -m bench.fixed_cost                                 # 100 images, 5 repeats, default/in_process/workers
    python -m bench.fixed_cost --images 2500 --extra "--validate header" --variants default,workers

Each run is `python -m tfrecord_pipelines.convert --input <bench tree> --output
... --overwrite --progress off [variant flags] [--extra]`, measured as a whole
process tree by bench/procmon.py (wall, CPU seconds of every process, peak
summed RSS), with bench/hooks/sitecustomize.py loaded into every Python
process of the tree: it records, per process, when it started, when its
heavy imports finished, the converter's phases (configure, build the graph,
translate it, every runner bundle, publish, report, summary) and which heavy
modules it held at its exit. Variants alternate (`for repeat: for variant`)
after a wait for a quiet machine, as in bench/run.py; medians are printed:

  1. per variant: wall, tree CPU, peak tree RSS, processes;
  2. per variant, the main process's phases: wall and the CPU of the main
     process and of the whole tree in each (the tree's from /proc at the
     phase boundaries: live processes plus reaped ones);
  3. per variant, the runner's bundles by stage (our top-level stage names in
     the fused stage), wall and tree CPU;
  4. per variant, every process by role (main, zygote, worker, worker client):
     count, CPU, life, and the heavy modules it imported.

Variants: default (what the converter decides: in-process for a small input,
pipelines/run/small_run.py), in_process (--direct_running_mode in_memory), workers
(--direct_running_mode multi_processing: worker processes on every core),
whole_beam (default with TFRECORDS_SPEEDUPS=0: the speed layer off, Beam imported whole), and
the baselines python (`python -c pass`), tutorial (bench/baselines.py's
loop, the tf.train.Example + TFRecordWriter tutorial) and beam_floor
(bench/baselines.py: Beam imported, started and stopped as the converter
does for a small input, running a graph with two barriers (a GroupByKey, a
CombineGlobally) and no work: the part of a small run's wall that any
pipeline on Beam pays on this machine).
JSON with every run: bench/results/fixed-cost-<date>.json.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

from bench import dataset, procmon
from bench.run import ROOT, BENCH, child_env, environment, prefault, settle

HOOKS = os.path.join(BENCH, "hooks")
VARIANTS = {
    "default": ([], {}),
    "in_process": (["--direct_running_mode", "in_memory"], {}),
    "workers": (["--direct_running_mode", "multi_processing"], {}),
    "whole_beam": ([], {"TFRECORDS_SPEEDUPS": "0"}),
    "python": (None, {}),
    "tutorial": (None, {}),
    "beam_floor": (None, {}),
}
STAGES = ("ListInputs", "ListAnnotations", "AssignLabels", "Split", "MatchPrevious", "Fingerprint", "ValidateImages",
          "DropDuplicates", "PlanShards", "WriteShards", "CheckQuality", "CheckReport", "AllRejects", "AllStats", "Publish")


def command(variant: str, train: str, out: str, extra: list) -> list:
    py = sys.executable
    if variant == "python":
        return [py, "-c", "pass"]
    if variant in ("tutorial", "beam_floor"):
        return [py, "-m", "bench.baselines", variant, "--input", train, "--output", out, "--shards", "1"]
    flags, _ = VARIANTS[variant]
    return [py, "-m", "tfrecord_pipelines.convert", "--input", train, "--output", out, "--overwrite",
            "--progress", "off", *flags, *extra]


def load_events(folder: str) -> dict:
    """{pid: [event, ...] in time order}."""
    by = collections.defaultdict(list)
    for path in glob.glob(os.path.join(folder, "*.jsonl")):
        with open(path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                by[e["pid"]].append(e)
    for es in by.values():
        es.sort(key=lambda e: e["t"])
    return dict(by)


def stage_label(bundle: str) -> str:
    """Our top-level stage names in a fused stage's name, in order of appearance."""
    found = []
    # Stages nest (Records/AssignLabels, Dataset/PlanShards): every segment of a name counts.
    for m in re.finditer(r"(?:ref_AppliedPTransform_|\(|[-/])([A-Za-z]+)(?=[-/])", bundle):
        name = m.group(1)
        name = next((s for s in STAGES if name.startswith(s)), None)
        if name and name not in found:
            found.append(name)
    return "+".join(found) or bundle[:40]


def _first(events: list, name: str):
    return next((e for e in events if e["event"] == name), None)


def _last(events: list, name: str):
    return next((e for e in reversed(events) if e["event"] == name), None)


def analyse(events: dict, root_pid: int) -> dict:
    """Phases of the main process, bundles by stage, processes by role."""
    main = events.get(root_pid, [])
    out = {"phases": {}, "stages": {}, "processes": []}
    if not main:
        return out
    t0 = main[0]["t"]
    marks = [("python start", "process start", "site"),
             ("imports (Beam, the converter; the zygote starts)", "site", "configure start"),
             ("configure (flags, config, runner, lock)", "configure start", "build pipeline start"),
             ("build the graph", "build pipeline start", "build pipeline end"),
             ("translate and fuse (to the runner API)", "pipeline run start", "run stages start"),
             ("run the stages (publish and report included)", "run stages start", "run stages end"),
             ("summary and exit", "run stages end", "exit")]
    for label, a, b in marks:
        ea, eb = _first(main, a), _last(main, b)
        if ea and eb:
            out["phases"][label] = {"wall": eb["t"] - ea["t"], "cpu_main": eb["cpu"] - ea["cpu"],
                                    "cpu_tree": (eb.get("tree_cpu", eb["cpu"]) - ea.get("tree_cpu", ea["cpu"]))}
    end = _last(main, "exit")
    out["wall_main"] = (end["t"] - t0) if end else None
    # bundles: pairs of start/end events in the main process
    open_ = {}
    for e in main:
        n = e["event"]
        if n.startswith("bundle ") and n.endswith(" start"):
            open_[n[:-6]] = e
        elif n.startswith("bundle ") and n.endswith(" end") and n[:-4] in open_:
            s = open_.pop(n[:-4])
            label = stage_label(n[7:-4])
            st = out["stages"].setdefault(label, {"bundles": 0, "wall": 0.0, "cpu_main": 0.0, "cpu_tree": 0.0})
            st["bundles"] += 1
            st["wall"] += e["t"] - s["t"]
            st["cpu_main"] += e["cpu"] - s["cpu"]
            st["cpu_tree"] += e.get("tree_cpu", e["cpu"]) - s.get("tree_cpu", s["cpu"])
    # publish and report, wherever they ran
    for pid, es in events.items():
        for what in ("publish", "report"):
            a, b = _first(es, f"{what} start"), _last(es, f"{what} end")
            if a and b:
                out["phases"].setdefault(f"  of which {what}", {"wall": b["t"] - a["t"], "cpu_main": None,
                                                                 "cpu_tree": b["cpu"] - a["cpu"]})
    for pid, es in events.items():
        roles = [e["role"] for e in es if e.get("role")]
        role = "main" if pid == root_pid else (roles[-1] if roles else "?")
        mods = next((e.get("modules") for e in reversed(es) if "modules" in e), None)
        out["processes"].append({"pid": pid, "role": role, "start": es[0]["t"] - t0, "life": es[-1]["t"] - es[0]["t"],
                                 "cpu": max(e["cpu"] for e in es), "modules": mods})
    return out


def run_once(variant: str, train: str, work: str, extra: list, interval: float) -> dict:
    out = os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix="phases-", dir=work)
    env = child_env()
    env["PYTHONPATH"] = HOOKS + os.pathsep + env["PYTHONPATH"]
    env["TFRECORDS_BENCH_PHASES"] = folder
    env["TFRECORDS_BENCH_PARENT"] = str(os.getpid())
    env.update(VARIANTS[variant][1])
    cmd = command(variant, train, out, extra)
    res = procmon.run_measured(cmd, cwd=ROOT, env=env, interval=interval,
                               stdout_path=os.path.join(work, "last.out"), stderr_path=os.path.join(work, "last.err"))
    events = load_events(folder)
    root = min((pid for pid, es in events.items() if es and es[0].get("ppid") == os.getpid()),
               key=lambda p: events[p][0]["t"], default=None)
    res["analysis"] = analyse(events, root) if root else {}
    res["variant"] = variant
    if res["returncode"] != 0:
        with open(os.path.join(work, "last.err"), errors="replace") as f:
            res["stderr_tail"] = f.read()[-2000:]
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return res


def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def report(runs: list, variants: list) -> None:
    ok = [r for r in runs if r["returncode"] == 0]
    print(f"\n{'variant':<12} {'runs':>4} {'wall s':>7} {'CPU s':>6} {'peak MB':>8} {'procs':>5} {'other cores':>11}")
    for v in variants:
        rs = [r for r in ok if r["variant"] == v]
        if not rs:
            print(f"{v:<12} failed")
            continue
        print(f"{v:<12} {len(rs):>4} {_med(r['wall_s'] for r in rs):>7.2f} {_med(r['cpu_s'] for r in rs):>6.2f} "
              f"{_med(r['peak_rss_mb'] for r in rs):>8,.0f} {_med(r['procs_seen'] for r in rs):>5.0f} "
              f"{_med(r['foreign_cores'] for r in rs):>11.2f}")
    for v in variants:
        rs = [r for r in ok if r["variant"] == v and r.get("analysis", {}).get("phases")]
        if not rs:
            continue
        print(f"\n{v}: the main process's phases (medians; ms)")
        print(f"  {'phase':<52} {'wall':>7} {'CPU main':>9} {'CPU tree':>9}")
        labels = list(dict.fromkeys(k for r in rs for k in r["analysis"]["phases"]))
        for k in labels:
            vals = [r["analysis"]["phases"].get(k) for r in rs]
            vals = [x for x in vals if x]
            w, cm, ct = (_med(x[f] for x in vals) for f in ("wall", "cpu_main", "cpu_tree"))
            print(f"  {k:<52} {w * 1e3:>7.0f} {'' if cm is None else format(cm * 1e3, '.0f'):>9} "
                  f"{ct * 1e3:>9.0f}")
        stages = list(dict.fromkeys(k for r in rs for k in r["analysis"]["stages"]))
        print(f"  {'runner bundles, by the stages fused in them':<52} {'wall':>7} {'CPU main':>9} {'CPU tree':>9}"
              f" {'bundles':>7}")
        for k in stages:
            vals = [r["analysis"]["stages"].get(k) for r in rs]
            vals = [x for x in vals if x]
            print(f"    {k[:50]:<50} {_med(x['wall'] for x in vals) * 1e3:>7.0f} "
                  f"{_med(x['cpu_main'] for x in vals) * 1e3:>9.0f} {_med(x['cpu_tree'] for x in vals) * 1e3:>9.0f} "
                  f"{_med(x['bundles'] for x in vals):>7.0f}")
        print(f"  {'processes, by role':<30} {'count':>5} {'CPU s':>6} {'life s':>6}  heavy modules imported")
        roles = list(dict.fromkeys(p["role"] for r in rs for p in r["analysis"]["processes"]))
        for role in roles:
            per_run = [[p for p in r["analysis"]["processes"] if p["role"] == role] for r in rs]
            mods = sorted({m for ps in per_run for p in ps for m in (p["modules"] or [])})
            print(f"    {role[:28]:<28} {_med(len(ps) for ps in per_run):>5.0f} "
                  f"{_med(sum(p['cpu'] for p in ps) for ps in per_run):>6.2f} "
                  f"{_med(max((p['life'] for p in ps), default=0) for ps in per_run):>6.2f}  {', '.join(mods)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fixed_cost", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=100, help="bench tree size (the first N of bench.run's pool)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--variants", default="default,in_process,workers",
                    help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--extra", default="", help="more converter flags, e.g. \"--validate header\"")
    ap.add_argument("--data-dir", default=os.path.join(BENCH, "data"))
    ap.add_argument("--max-n", type=int, default=10000, help="pool size to generate if missing (as bench.run)")
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--quiet-cores", type=float, default=0.25)
    ap.add_argument("--max-wait", type=float, default=60.0)
    ap.add_argument("--prefault-mb", type=int, default=1024)
    ap.add_argument("--interval", type=float, default=0.025)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant {unknown[0]!r}; known: {', '.join(VARIANTS)}")
    d = dataset.ensure_size(os.path.abspath(a.data_dir), a.images, max_n=max(a.max_n, a.images),
                            log=lambda m: print(m, file=sys.stderr))
    dataset.warm(d["train"])
    work = os.path.join(os.path.abspath(a.data_dir), "_work", "fixed_cost")
    os.makedirs(work, exist_ok=True)
    extra = a.extra.split()
    runs = []
    for r in range(a.repeats):
        for v in variants:
            before = settle(a.settle, a.quiet_cores, a.max_wait)
            before["prefault_s"] = round(prefault(a.prefault_mb), 2)
            res = run_once(v, d["train"], work, extra, a.interval)
            res.update(before, repeat=r + 1)
            runs.append(res)
            print(f"[{r + 1}/{a.repeats}] {v:<12} {res['wall_s']:6.2f} s  cpu {res['cpu_s']:5.2f} s  "
                  f"peak {res['peak_rss_mb']:6.0f} MB  procs {res['procs_seen']}  other {res['foreign_cores']:.2f}"
                  f"{'' if res['returncode'] == 0 else '  FAILED: ' + res.get('stderr_tail', '')[-300:]}",
                  file=sys.stderr, flush=True)
    print(f"\n{a.images:,} images ({d['bytes'] / 1e6:,.1f} MB, {d['train']}), extra flags: {a.extra or '(none)'}; "
          f"medians of {a.repeats}")
    report(runs, variants)
    path = a.out or os.path.join(BENCH, "results", f"fixed-cost-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"format": "tfrecord-pipelines fixed-cost v1", **environment(), "images": a.images,
                   "extra": a.extra, "variants": variants, "dataset": d, "runs": runs}, f, indent=1)
    print(f"\nresults: {path}")
    return 0 if all(r["returncode"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
