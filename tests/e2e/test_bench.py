"""Smoke test of the benchmark harness (bench/): it runs end to end on a tiny
generated dataset and writes complete results. No timing assertions: only
that every variant and size was measured and the numbers are there."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT

SIZES = (24, 48)


def _run(args, cwd=ROOT, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_bench_runs_end_to_end(tmp_path):
    from bench.run import DEFAULT_VARIANTS, page_reporting

    out = tmp_path / "results" / "bench.json"
    p = _run(["-m", "bench.run", "--sizes", ",".join(map(str, SIZES)), "--scale", "0.25", "--classes", "4",
              "--repeats", "1", "--settle", "0", "--max-wait", "0", "--retries", "0", "--prefault-mb", "0",
              "--no-warmup", "--data-dir", str(tmp_path / "data"), "--out", str(out)])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "targets" in p.stdout and "marginal" in p.stdout

    doc = json.loads(out.read_text())
    assert doc["complete"] is True
    assert doc["machine"]["page_reporting"].keys() == page_reporting().keys()
    assert doc["machine"]["nproc"] >= 1 and doc["versions"]["apache-beam"] and doc["versions"]["tensorflow"]
    assert set(doc["datasets"]) == {str(n) for n in SIZES}
    for n in SIZES:
        d = doc["datasets"][str(n)]
        assert d["images"] == n and d["bytes"] > 0

    runs = doc["runs"]
    assert {(r["variant"], r["images"]) for r in runs} == {(v, n) for v in DEFAULT_VARIANTS for n in SIZES}
    for r in runs:
        assert r["returncode"] == 0 and r["ok"] and r["records"] == r["images"], r
        for key in ("wall_s", "cpu_s", "peak_rss_mb"):
            assert r[key] > 0, (key, r)
        # What the 25 ms /proc scans saw depends on timing, so only its presence is checked
        # here; test_tree_sampler_finds_every_process checks the scan itself.
        for key in ("samples", "peak_procs", "procs_seen", "busy_cores_mid", "timeline_cores", "foreign_cores",
                    "peak_breakdown"):
            assert key in r, (key, r)
    # outputs are removed after each run
    assert not any((tmp_path / "data" / "_work" / v).exists() for v in DEFAULT_VARIANTS)

    table = doc["summary"]["table"]
    for v in DEFAULT_VARIANTS:
        for n in SIZES:
            row = table[v][str(n)]
            for key in ("wall_s_median", "images_per_s", "mb_per_s", "cpu_s_median", "peak_rss_mb_median"):
                assert row[key] > 0, (v, n, key, row)
            assert "busy_cores_mid_median" in row
    assert set(doc["summary"]["marginal"]) == set(DEFAULT_VARIANTS)
    for m in doc["summary"]["marginal"].values():
        assert {"images_per_s", "mb_per_s", "startup_s", "cpu_us_per_image", "peak_rss_growth"} <= set(m)
    names = {t["target"] for t in doc["targets"]}
    assert {"header_marginal_vs_bound", "full_marginal_vs_bound", "tutorial_wall_vs_header", "naive_beam_wall_vs_header",
            "full_marginal_vs_validate_all_cores", "full_marginal_vs_decode_all_cores",
            "ours_header_peak_rss_mb", "ours_full_peak_rss_mb", "ours_full_peak_rss_growth"} <= names

    # the per-image profile runs on the same data and reads these results
    prof = tmp_path / "results" / "profile.json"
    p = _run(["-m", "bench.profile", "--data", doc["datasets"]["48"]["root"], "--images", "24", "--passes", "1",
              "--bench-json", str(out), "--no-imports", "--out", str(prof)])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads(prof.read_text())
    assert res["images"] == 24
    for step in ("read", "header probe", "full validate", "sha256", "Example build", "framing+CRC", "write"):
        assert res["steps_us_per_image"][step]["us_median"] > 0, step
    assert set(res["overhead"]) >= {"ours_header", "ours_full"}


def test_the_bench_names_a_kernel_that_returns_freed_memory_soon(tmp_path):
    from bench.run import page_reporting, page_reporting_warning

    folder = tmp_path / "parameters"
    folder.mkdir()
    (folder / "max_waiting_mib").write_text("1024\n")
    (folder / "min_free_ms").write_text("0\n")
    params = page_reporting(str(folder))
    assert params == {"max_waiting_mib": "1024", "min_free_ms": "0"}
    line = page_reporting_warning(params)
    assert "max_waiting_mib" in line and "min_free_ms" in line and "restore" in line
    assert page_reporting_warning({"max_waiting_mib": "20000", "min_free_ms": "60000"}) == ""
    assert page_reporting_warning({}) == "" and page_reporting(str(tmp_path / "absent")) == {}


def test_tree_sampler_finds_every_process():
    """One /proc scan finds every process of a tree (a parent and three children that
    stay alive until the test ends them), with their memory: deterministic, where the
    bench's own 25 ms sampling of short runs is not."""
    from bench.procmon import TreeSampler
    code = ("import subprocess, sys, time\n"
            "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']) for _ in range(3)]\n"
            "print(' '.join(str(k.pid) for k in kids), flush=True)\n"
            "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    kids: set = set()
    try:
        kids = {int(p) for p in parent.stdout.readline().split()}
        assert len(kids) == 3
        sampler = TreeSampler(parent.pid)
        sampler.scan()
        assert kids <= sampler.pids_seen and sampler.peak_procs >= 3 and len(sampler.samples) == 1
        assert sampler.peak_rss > 0 and {p for p, *_ in sampler.peak_breakdown} >= kids
    finally:
        for pid in kids:
            os.kill(pid, 9)
        parent.kill()
        parent.wait()


def test_the_shuffled_tree_keeps_each_image_but_not_its_layout(tmp_path):
    """bench.quality --tiles: every image of the tree, decodable, as large as
    its source (to a whole number of tiles), labels kept, its tiles moved."""
    import numpy as np
    from PIL import Image

    from bench import dataset
    data = str(tmp_path / "data")
    shuffled = dataset.ensure_shuffled(data, 12, log=lambda m: None)
    base = dataset.ensure_size(data, 12, log=lambda m: None)
    rels = sorted(os.path.relpath(os.path.join(d, f), base["train"]) for d, _, fs in os.walk(base["train"]) for f in fs)
    assert len(rels) == 12 and shuffled["images"] == 12
    moved = 0
    for rel in rels:
        a, b = Image.open(os.path.join(base["train"], rel)), Image.open(os.path.join(shuffled["train"], rel))
        t = dataset.TILES
        assert b.format == "JPEG" and b.size == (a.width // t * t, a.height // t * t)
        crop = np.asarray(a.convert("RGB").crop((0, 0) + b.size), dtype=np.int16)
        moved += np.abs(np.asarray(b.convert("RGB"), dtype=np.int16) - crop).mean() > 10
    assert moved >= 10  # a tile left in place and unflipped (1 in 36 per tile) may leave an image alike
    with open(os.path.join(shuffled["root"], "labels.csv")) as f, open(os.path.join(base["root"], "labels.csv")) as g:
        assert f.read() == g.read()
    assert dataset.ensure_shuffled(data, 12, log=lambda m: None)["generate_seconds"] == shuffled["generate_seconds"]


def test_fixed_cost_breaks_a_run_down_by_process_and_phase(tmp_path):
    """bench.fixed_cost on a tiny tree: every variant measured, the main process's
    phases found by the hooks (in order, each with its CPU), the runner's bundles
    named by our stages, the processes by role; a run in-process has one process,
    one with workers a zygote and workers, and none imports TensorFlow."""
    out = tmp_path / "fixed.json"
    p = _run(["-m", "bench.fixed_cost", "--images", "24", "--repeats", "1", "--max-wait", "0", "--prefault-mb", "0",
              "--settle", "0", "--max-n", "24", "--variants", "default,workers", "--data-dir", str(tmp_path / "data"),
              "--out", str(out)], timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    runs = {r["variant"]: r for r in doc["runs"]}
    assert set(runs) == {"default", "workers"}
    for variant, r in runs.items():
        assert r["returncode"] == 0 and r.get("analysis"), (variant, r.get("stderr_tail"), p.stderr[-2000:])
        a = r["analysis"]
        phases = list(a["phases"])
        assert phases[:3] == ["python start", "imports (Beam, the converter; the zygote starts)",
                              "configure (flags, config, runner, lock)"], phases
        assert "build the graph" in phases and "  of which report" in phases
        assert all(v["wall"] >= 0 and v["cpu_tree"] >= 0 for v in a["phases"].values())
        assert {"ListInputs", "PlanShards"} <= {s for k in a["stages"] for s in k.split("+")}, a["stages"]
        roles = {proc["role"] for proc in a["processes"]}
        assert (roles == {"main"}) if variant == "default" else ({"main", "zygote", "worker"} <= roles), a["processes"]
        assert not any("tensorflow" in (proc["modules"] or []) for proc in a["processes"])
    assert "the main process's phases" in p.stdout and "processes, by role" in p.stdout


def test_detection_bench_runs_each_converter_at_small_scale(tmp_path):
    """bench.detection (docs/detection.md's table) on 12 generated COCO images
    with masks: ours in both modes and the create_coco_tf_record-shaped loop
    each write every image; no timing is asserted."""
    out = tmp_path / "detection.json"
    p = _run(["-m", "bench.detection", "--size", "12", "--repeats", "1", "--shards", "2", "--masks",
              "--data", str(tmp_path / "data"), "--work", str(tmp_path / "work"), "--out", str(out)], timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["size"] == 12 and doc["masks"] is True and doc["boxes"] > 0
    assert set(doc["summary"]) == {"ours_header", "ours_full", "coco_script"}
    for v, s in doc["summary"].items():
        assert "error" not in s and s["runs"] == 1 and s["images_per_s"] > 0, (v, s)
        assert [r["records"] for r in doc["runs"][v]] == [12], v


def test_detection_bench_measures_a_killed_runs_resume_at_small_scale(tmp_path):
    """bench.detection --kill_at: a COCO run SIGKILLed once half its shards are
    complete, rerun: some shards kept, the output byte-identical to an
    uninterrupted run's; no timing is asserted."""
    out = tmp_path / "resume.json"
    p = _run(["-m", "bench.detection", "--size", "240", "--repeats", "1", "--shards", "8", "--variants", "",
              "--kill_at", "0.5", "--data", str(tmp_path / "data"), "--work", str(tmp_path / "work"),
              "--out", str(out)], timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (row,) = json.loads(out.read_text())["resume"]
    assert row["identical"] is True
    assert 4 <= row["kept"] == row["resumed"] < 8, row


def test_beam_floor_runs_beam_as_the_converter_does_and_reads_no_image(tmp_path):
    """bench.baselines beam_floor (bench.fixed_cost's Beam floor): every path
    goes through the pipeline (counted there), no image is read, and Beam is
    imported lean, as the converter's small run imports it (its import of
    beartype is deferred: tfrecord_pipelines/lean_beam.py)."""
    from conftest import make_tree

    make_tree(str(tmp_path / "train"), per_class=5)
    probe = ("import runpy, sys\n"
             "import os\n"
             "real_exit = os._exit\n"
             "def _exit(code):\n"
             "    print('beartype' in sys.modules, 'PIL' in sys.modules, file=sys.stderr)\n"
             "    real_exit(code)\n"
             "os._exit = _exit\n"
             "sys.argv = ['bench.baselines', 'beam_floor', '--input', sys.argv[1], '--output', sys.argv[2]]\n"
             "runpy.run_module('bench.baselines', run_name='__main__')\n")
    p = _run(["-c", probe, str(tmp_path / "train"), str(tmp_path / "out")])
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"images": 15, "bytes": 0}
    assert p.stderr.strip().splitlines()[-1] == "False False", p.stderr[-2000:]


def test_the_bench_names_a_kernel_whose_damon_pages_out_idle_memory(tmp_path):
    from bench.run import damon_pageout, damon_warning

    kdamond = tmp_path / "kdamonds" / "0"
    ctx = kdamond / "contexts" / "0"
    (ctx / "monitoring_attrs" / "intervals").mkdir(parents=True)
    (ctx / "monitoring_attrs" / "intervals" / "aggr_us").write_text("5000000\n")
    for n, action in (("0", "pageout"), ("1", "stat")):
        scheme = ctx / "schemes" / n
        (scheme / "access_pattern" / "age").mkdir(parents=True)
        (scheme / "quotas").mkdir()
        (scheme / "action").write_text(action + "\n")
        (scheme / "access_pattern" / "age" / "min").write_text("12\n")
        (scheme / "quotas" / "bytes").write_text(str(128 * 2**20) + "\n")
        (scheme / "quotas" / "reset_interval_ms").write_text("1000\n")
    (kdamond / "state").write_text("on\n")
    found = damon_pageout(str(tmp_path / "kdamonds"))
    assert found == [{"kdamond": str(kdamond), "state": "on", "min_age_s": 60.0, "quota_mb_per_s": 128.0}]
    line = damon_warning(found)
    assert "60 s" in line and f"echo off > {kdamond}/state" in line and "echo on after" in line
    (kdamond / "state").write_text("off\n")
    assert damon_warning(damon_pageout(str(tmp_path / "kdamonds"))) == ""
    assert damon_pageout(str(tmp_path / "absent")) == [] and damon_warning([]) == ""
