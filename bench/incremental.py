"""Incremental versions and resume (issue 23): what a scheduled run costs
when a little changed, and what a killed run costs to finish.

    .venv/bin/python -m bench.incremental                          # all four parts, full scale (long)
    .venv/bin/python -m bench.incremental --parts a --images 2000  # a quick check

(a) local disk: an ImageNet-like tree made by ../shared/bench/make_imagefolder.py
    (--images, default 50,000; default options, full validation), a --versioned
    full conversion, then 1% added, 0.1% removed, 0.1% rewritten in place. Per
    round, the incremental run and a full conversion of the same changed tree
    (alternating which goes first); medians of --rounds. Then one more
    incremental run under `strace -f -e trace=openat`: the regular files under
    the input root it opens before its publish step (the conversion's reads:
    they must be exactly the added and rewritten ones), and after it
    (report.html's thumbnails of rejected or duplicate examples, which a full
    run opens too). Its shards are held byte for byte to the full conversion's.
(b) the same through the GCS emulator with --latency ms per request
    (tests/gcs_proxy.py): small JPEGs in a bucket (--gcs_images, --gcs_scale),
    output on local disk; the source requests (by prefix) and the downloads
    pinned to a generation (the conversion's reads; report.html's are not
    pinned) of the incremental run.
(c) memory: --links hard links to 50 tiny JPEGs (bench/scale.py's tree),
    `--validate header --num_shards 256`, a full conversion, 1% added (links to
    new files, so the old files' change times stay), then the incremental run
    and a fresh full conversion of the changed tree: whole-tree peak RSS
    (bench/procmon.py).
(d) resume: the tree of (a), a full conversion, then the same conversion into
    a new root killed with SIGKILL (the whole process group) at --kill_at of the
    uninterrupted run's wall time, and again (into another root) once --kill_at
    of its shards are complete (their done-records in the resume area), each
    rerun: its wall against the uninterrupted run's, and its shards byte for byte.

Before every timed run (untimed, as bench/run.py does): sync, --settle s idle,
and --prefault-mb of memory touched and freed.

Disk: the pool of (a) and (d) is ~5.9 GB at 50,000 images (made once, kept in
--data-dir), and a run holds two outputs of ~5.8 GB at once: ~18 GB free.

Targets (issue 23): (a), (b) incremental <= 20% of the full run's wall, and
reads exactly added + rewritten; (c) <= 1.25x the full run's peak; (d) the
rerun <= 50% of a full run's wall. Results go to --json (default
bench/results/incremental-<date>.json).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from bench import procmon  # noqa: E402

# The shared generator (../shared/bench/ of a checkout under /work/main or /work/wt/NAME); --generator overrides.
GENERATORS = [os.path.normpath(os.path.join(ROOT, up, "shared", "bench", "make_imagefolder.py")) for up in ("..", "../..")]
MARGIN = 2.2  # seconds: past provenance.RACY_MARGIN_NS, so files just made or linked are trusted unchanged


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def env() -> dict:
    from bench.run import child_env  # with bytecode, as an installed package runs
    return child_env()


def convert_cmd(*args) -> list:
    return [sys.executable, "-m", "tfrecord_pipelines.convert", *map(str, args), "--progress", "off"]


SETTLE = {"seconds": 1.0, "prefault_mb": 2048}  # --settle, --prefault-mb


def prepare() -> None:
    """Before each timed run, as bench/run.py does (untimed): the previous
    runs' writes flushed to disk (a run started seconds after another wrote
    6 GB found the disk still busy with it, which no scheduled run meets), a
    second idle, and memory touched and freed, so that the run's first page
    cache is not the host's fresh memory (this VM's free page reporting:
    bench/run.py prefault)."""
    from bench.run import prefault
    os.sync()
    time.sleep(SETTLE["seconds"])
    prefault(SETTLE["prefault_mb"])


PHASES = {"on": False}  # --phases


def measured(cmd: list, what: str) -> dict:
    """The run's wall, CPU and peak memory (bench/procmon.py); with --phases,
    also where its time went (bench/fixed_cost.py's hooks: the main process's
    phases and the runner's stages)."""
    run_env, folder = env(), ""  # first: it may compile bytecode, which prepare() is to come after
    prepare()
    if PHASES["on"]:
        from bench.fixed_cost import HOOKS
        folder = tempfile.mkdtemp(prefix="phases-")
        run_env["PYTHONPATH"] = HOOKS + os.pathsep + run_env.get("PYTHONPATH", "")
        run_env.update(TFRECORDS_BENCH_PHASES=folder, TFRECORDS_BENCH_PARENT=str(os.getpid()))
    r = procmon.run_measured(cmd, cwd=ROOT, env=run_env, timeout=4 * 3600,
                             stderr_path=os.path.join(tempfile.gettempdir(), "bench-incremental.err"))
    if r["returncode"] != 0:
        err = open(os.path.join(tempfile.gettempdir(), "bench-incremental.err")).read()[-3000:]
        raise SystemExit(f"{what} failed (exit {r['returncode']}): {' '.join(map(str, cmd))}\n{err}")
    if folder:
        r["phases"] = phases(folder)
        shutil.rmtree(folder, ignore_errors=True)
    return r


def phases(folder: str) -> dict:
    """{phase or stage: wall s} of the run whose hook events are in `folder`."""
    from bench.fixed_cost import analyse, load_events
    events = load_events(folder)
    root = min((pid for pid, es in events.items() if es and es[0].get("ppid") == os.getpid()),
               key=lambda p: events[p][0]["t"], default=None)
    if root is None:
        return {}
    got = analyse(events, root)
    out = {k: round(v["wall"], 2) for k, v in got["phases"].items()}
    out.update({f"stage {k}": round(v["wall"], 2) for k, v in got["stages"].items()})
    return out


def timed(cmd: list, what: str) -> dict:
    """wall and CPU seconds (the reaped process tree's) of a run, without
    bench/procmon.py, which ends every other child of this process when a run
    ends: (b)'s emulator and proxy are children too."""
    import resource
    prepare()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{what} failed (exit {r.returncode}): {' '.join(map(str, cmd))}\n{r.stderr[-3000:]}")
    ru2 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": round(wall, 3), "cpu_s": round(ru2.ru_utime + ru2.ru_stime - ru.ru_utime - ru.ru_stime, 3)}


def manifest(folder: str) -> dict:
    with open(os.path.join(folder, "manifest.json")) as f:
        return json.load(f)


def latest(root: str) -> str:
    with open(os.path.join(root, "LATEST")) as f:
        return os.path.join(root, f.read().strip())


def digests(folder: str) -> dict:
    """{name: sha256} of an output folder's shards, indexes and label map
    (the files readers use): outputs are compared by these, so that each can
    be removed as soon as it is hashed (a 50,000-image output is ~6 GB)."""
    import hashlib
    out = {}
    for n in sorted(os.listdir(folder)):
        if re.match(r"^[A-Za-z0-9_]+-\d{5,}-of-\d{5,}\.", n) or n in ("label_map.json", "schema.pbtxt"):
            h = hashlib.sha256()
            with open(os.path.join(folder, n), "rb") as f:
                while block := f.read(8 << 20):
                    h.update(block)
            out[n] = h.hexdigest()
    return out


def median(xs):
    return statistics.median(xs) if xs else None


# ---- the image tree of (a) and (d) --------------------------------------------------------------------------------

class Tree:
    """A pool made by the shared generator (classes x (per_class + extra)),
    and a working tree of hard links to the first per_class images of each
    class, changed and restored round by round."""

    def __init__(self, data_dir: str, images: int, classes: int, generator: str):
        self.generator = generator
        self.classes = classes
        self.per_class = max(1, images // classes)
        self.n = self.per_class * classes
        self.added = max(1, round(self.n * 0.01))
        self.removed = max(1, round(self.n * 0.001))
        self.rewritten = max(1, round(self.n * 0.001))
        self.extra = math.ceil(self.added / classes) + 1  # the last extra image of a class: a rewrite's bytes
        self.pool = os.path.join(data_dir, f"pool-{classes}x{self.per_class + self.extra}")
        self.work = os.path.join(data_dir, f"work-{self.n}")

    def ensure_pool(self) -> None:
        done = os.path.join(self.pool, ".complete")
        if os.path.exists(done):
            return
        log(f"generating {self.classes} x {self.per_class + self.extra} images into {self.pool} ...")
        subprocess.run([sys.executable, self.generator, "--out", self.pool, "--classes",
                        str(self.classes), "--per-class", str(self.per_class + self.extra), "--seed", "0",
                        "--force"], check=True)
        open(done, "w").close()

    def _classes(self) -> list:
        return sorted(os.listdir(os.path.join(self.pool, "train")))

    def _image(self, cls: str, k: int) -> str:
        return os.path.join(cls, f"{cls}_{k}.JPEG")

    def changes(self) -> tuple:
        """(added, removed, rewritten) relative paths, spread over the classes."""
        cs = self._classes()
        added = [self._image(cs[i % len(cs)], self.per_class + i // len(cs)) for i in range(self.added)]
        removed = [self._image(cs[i % len(cs)], 2 * (i // len(cs))) for i in range(self.removed)]
        rewritten = [self._image(cs[(i + len(cs) // 2) % len(cs)], 2 * (i // len(cs)) + 1)
                     for i in range(self.rewritten)]
        return added, removed, rewritten

    def build(self) -> str:
        """The working tree as before the changes: links, except the files
        to be rewritten in place (copies, so the pool is never written)."""
        shutil.rmtree(self.work, ignore_errors=True)
        src = os.path.join(self.pool, "train")
        _, _, rewritten = self.changes()
        for cls in self._classes():
            os.makedirs(os.path.join(self.work, cls))
            for k in range(self.per_class):
                rel = self._image(cls, k)
                (shutil.copyfile if rel in rewritten else os.link)(os.path.join(src, rel), os.path.join(self.work, rel))
        time.sleep(MARGIN)  # new links change the pool files' change times
        return self.work

    def apply(self) -> None:
        src = os.path.join(self.pool, "train")
        added, removed, rewritten = self.changes()
        for rel in added:
            os.link(os.path.join(src, rel), os.path.join(self.work, rel))
        for rel in removed:
            os.remove(os.path.join(self.work, rel))
        for rel in rewritten:  # in place: the same file (inode), other bytes
            cls = rel.split("/")[0]
            with open(os.path.join(src, self._image(cls, self.per_class + self.extra - 1)), "rb") as f:
                data = f.read()
            with open(os.path.join(self.work, rel), "r+b") as f:
                f.write(data)
                f.truncate()

    def warm(self) -> None:
        for dirpath, _, names in os.walk(self.work):
            for n in names:
                with open(os.path.join(dirpath, n), "rb") as f:
                    while f.read(1 << 20):
                        pass


# ---- counting the source files a run opens (strace) ----------------------------------------------------------------

_OPEN = re.compile(r'^(?P<pid>\d+)\s+openat\(AT_FDCWD, "(?P<path>(?:[^"\\]|\\.)*)", (?P<flags>[A-Z_|]+)')
_DONE = re.compile(r"= (?P<ret>-?\d+)")
_RESUMED = re.compile(r"^(?P<pid>\d+)\s+<\.\.\. openat resumed>")


def _opens(trace: str):
    """(path, flags, result) of each openat in a `strace -f` log, in the
    order they returned; a call another process interrupted is printed as
    `<unfinished ...>` and completed by a later `<... openat resumed>` line."""
    pending = {}
    with open(trace, errors="replace") as f:
        for line in f:
            m = _OPEN.match(line)
            if m:
                done = _DONE.search(line[m.end():])
                if done:
                    yield m.group("path"), m.group("flags"), int(done.group("ret"))
                else:
                    pending[m.group("pid")] = (m.group("path"), m.group("flags"))
                continue
            m = _RESUMED.match(line)
            if m and m.group("pid") in pending:
                done = _DONE.search(line)
                path, flags = pending.pop(m.group("pid"))
                yield path, flags, int(done.group("ret")) if done else -1


def traced(cmd: list, trace: str) -> None:
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", trace, *cmd], cwd=ROOT, env=env(),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"the traced run failed: {r.stderr[-3000:]}")


def source_opens(trace: str, source: str, marker: str) -> tuple:
    """(files under `source` opened before the first open of a path
    containing `marker` (the publish step's first write), those opened after)."""
    before, after, seen_marker = set(), set(), False
    prefix = os.path.join(source, "")
    for path, flags, ret in _opens(trace):
        if marker in path:
            seen_marker = True
        if path.startswith(prefix) and "O_DIRECTORY" not in flags and ret >= 0:
            (after if seen_marker else before).add(os.path.relpath(path, source))
    return before, after


# ---- (a) ---------------------------------------------------------------------------------------------------------

def _copy_part(job: tuple) -> int:
    """One process's share of copy_floor: every other shard, by the kernel."""
    names, src, dst = job
    total = 0
    for name in names:
        fi = os.open(os.path.join(src, name), os.O_RDONLY)
        fo = os.open(os.path.join(dst, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            size, pos = os.fstat(fi).st_size, 0
            while pos < size:
                n = os.copy_file_range(fi, fo, min(8 << 20, size - pos), pos)
                os.posix_fadvise(fi, pos, n, os.POSIX_FADV_DONTNEED)  # as the run does (previous._drop_cached)
                pos += n
            total += size
        finally:
            os.close(fi)
            os.close(fo)
    return total


def copy_floor(version: str, tmp: str, procs: int = 2) -> dict:
    """What copying a version's shards alone takes on this disk, as the
    incremental run copies them (copy_file_range, one process per core): the
    byte-identical contract writes every byte of the new version, so this is
    the floor under an incremental run that changes 1%. Measured after the
    round's incremental run, from the version it copied, read into the page
    cache first (untimed: the floor of a previous version still cached, the
    bench's best case) and dropped from the cache as it is copied, as the run
    does. (On this project's VM the page cache's untouched pages are paged
    out after 60 s, so the incremental run found it cached only when it
    followed v1's writing: docs/scheduling.md.)"""
    names = sorted(n for n in os.listdir(version) if n.endswith(".tfrecord"))
    dst = os.path.join(tmp, "copy-floor")
    os.makedirs(dst, exist_ok=True)
    for name in names:
        with open(os.path.join(version, name), "rb") as f:
            while f.read(16 << 20):
                pass
    prepare()
    import multiprocessing
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        total = sum(pool.map(_copy_part, [(names[i::procs], version, dst) for i in range(procs)]))
    wall = time.perf_counter() - start
    shutil.rmtree(dst, ignore_errors=True)
    return {"wall_s": round(wall, 3), "bytes": total, "shards": len(names)}


def part_a(a, tmp: str) -> dict:
    tree = Tree(a.data_dir, a.images, a.classes, a.generator)
    tree.ensure_pool()
    added, removed, rewritten = tree.changes()
    log(f"(a) {tree.n:,} images; changes: {len(added)} added, {len(removed)} removed, {len(rewritten)} rewritten")
    walls = {"incremental": [], "full": [], "first": [], "copy_floor": []}
    rounds = []
    for r in range(a.rounds):
        work = tree.build()
        tree.warm()
        root, full = os.path.join(tmp, f"a-root{r}"), os.path.join(tmp, f"a-full{r}")
        first = measured(convert_cmd("--input", work, "--output", root, "--versioned", "--version", "v1"), "full v1")
        tree.apply()
        tree.warm()
        order = ("incremental", "full") if r % 2 == 0 else ("full", "incremental")
        got, sums = {}, {}
        for what in order:
            if what == "incremental":
                got[what] = measured(convert_cmd("--input", work, "--output", root, "--versioned", "--version", "v2"),
                                     "incremental v2")
                sums[what] = digests(os.path.join(root, "v2"))
                made = manifest(os.path.join(root, "v2"))["made"]
                shutil.rmtree(os.path.join(root, "v2"), ignore_errors=True)
                floor = copy_floor(os.path.join(root, "v1"), tmp)
                shutil.rmtree(root, ignore_errors=True)
            else:
                got[what] = measured(convert_cmd("--input", work, "--output", full), "full of the changed tree")
                sums[what] = digests(full)
                shutil.rmtree(full, ignore_errors=True)
        identical = sums["incremental"] == sums["full"]
        walls["first"].append(first["wall_s"])
        walls["copy_floor"].append(floor["wall_s"])
        for k in ("incremental", "full"):
            walls[k].append(got[k]["wall_s"])
        rounds.append({"first": first, **got, "identical": identical, "made": made, "copy_floor": floor})
        log(f"  round {r + 1}: full v1 {first['wall_s']:.1f} s; v1's shards copied alone {floor['wall_s']:.1f} s "
            f"({floor['bytes'] / 1e9:.2f} GB); incremental {got['incremental']['wall_s']:.1f} s; "
            f"full of the changed tree {got['full']['wall_s']:.1f} s; shards identical: {identical}; "
            f"copied {made['records_copied']:,}, read {made['images_read']:,}")
        if got["incremental"].get("phases"):
            top = sorted(got["incremental"]["phases"].items(), key=lambda kv: -kv[1])[:8]
            log("    incremental's longest phases and stages: " + "; ".join(f"{k} {v:.2f} s" for k, v in top))
    # The reads, counted: one more incremental run under strace.
    work = tree.build()
    root = os.path.join(tmp, "a-traced")
    measured(convert_cmd("--input", work, "--output", root, "--versioned", "--version", "v1"), "full v1")
    tree.apply()
    trace = os.path.join(tmp, "a.strace")
    traced(convert_cmd("--input", work, "--output", root, "--versioned", "--version", "v2"), trace)
    before, after = source_opens(trace, work, os.path.join(root, "v2", "rejects.jsonl"))
    expected = set(added) | set(rewritten)
    shutil.rmtree(root, ignore_errors=True)
    result = {"images": tree.n, "added": len(added), "removed": len(removed), "rewritten": len(rewritten),
              "incremental_wall_s": median(walls["incremental"]), "full_wall_s": median(walls["full"]),
              "first_full_wall_s": median(walls["first"]), "copy_floor_wall_s": median(walls["copy_floor"]),
              "rounds": rounds,
              "source_files_opened": len(before), "opened_as_expected": before == expected,
              "unexpected_opens": sorted(before - expected)[:20], "missing_opens": sorted(expected - before)[:20],
              "report_thumbnail_opens": len(after)}
    result["ratio"] = result["incremental_wall_s"] / result["full_wall_s"]
    result["copy_floor_ratio"] = result["copy_floor_wall_s"] / result["full_wall_s"]
    result["identical"] = all(x["identical"] for x in rounds)
    shutil.rmtree(tree.work, ignore_errors=True)
    return result


# ---- (b) ---------------------------------------------------------------------------------------------------------

def part_b(a, tmp: str) -> dict:
    from gcs_emulator import BUCKET, point_clients_at, start_emulator
    from gcs_proxy import GcsProxy
    proc, url = start_emulator()
    try:
        with GcsProxy(url, latency_ms=0) as proxy:
            point_clients_at(proxy.url)
            return _part_b(a, tmp, proxy, BUCKET)
    finally:
        proc.kill()


def _upload(names: dict, threads: int = 16) -> None:
    import concurrent.futures

    from tfrecord_pipelines.transforms.storage import gcs
    from gcs_emulator import BUCKET
    bucket = gcs.client().bucket(BUCKET)
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda kv: bucket.blob(kv[0]).upload_from_string(kv[1]), names.items()))


def _part_b(a, tmp: str, proxy, bucket_name: str) -> dict:
    from tfrecord_pipelines.sample_data import make_image
    from tfrecord_pipelines.transforms.storage import gcs
    n, classes = a.gcs_images, 10
    added, removed, rewritten = max(1, round(n * 0.01)), max(1, round(n * 0.001)), max(1, round(n * 0.001))
    name = lambda i: f"c{i % classes}/{i // classes}.jpg"  # noqa: E731
    image = lambda i, seed=1: make_image(i % classes, i // classes, seed=seed, scale=a.gcs_scale)  # noqa: E731
    log(f"(b) uploading {n:,} JPEGs (scale {a.gcs_scale}) to the emulator ...")
    walls = {"incremental": [], "full": []}
    rounds = []
    bucket = gcs.client().bucket(bucket_name)
    for r in range(a.rounds):
        prefix = f"src{r}"
        _upload({f"{prefix}/{name(i)}": image(i) for i in range(n)})
        time.sleep(MARGIN)
        src = f"gs://{bucket_name}/{prefix}"
        root, full = os.path.join(tmp, f"b-root{r}"), os.path.join(tmp, f"b-full{r}")
        proxy.set(latency_ms=a.latency)
        timed(convert_cmd("--input", src, "--output", root, "--versioned", "--version", "v1"), "full v1")
        proxy.set(latency_ms=0)
        _upload({f"{prefix}/{name(i)}": image(i) for i in range(n, n + added)})
        for i in range(removed):
            bucket.blob(f"{prefix}/{name(2 * i)}").delete()
        _upload({f"{prefix}/{name(2 * i + 1)}": image(2 * i + 1, seed=7) for i in range(rewritten)})
        proxy.set(latency_ms=a.latency)
        got, stats, sums = {}, {}, {}
        for what in (("incremental", "full") if r % 2 == 0 else ("full", "incremental")):
            proxy.reset_stats()
            if what == "incremental":
                got[what] = timed(convert_cmd("--input", src, "--output", root, "--versioned", "--version", "v2"),
                                  "incremental v2")
                sums[what] = digests(os.path.join(root, "v2"))
            else:
                got[what] = timed(convert_cmd("--input", src, "--output", full), "full of the changed bucket")
                sums[what] = digests(full)
            stats[what] = proxy.stats()
        proxy.set(latency_ms=0)
        v2 = os.path.join(root, "v2")
        identical = sums["incremental"] == sums["full"]
        inc = stats["incremental"]
        row = {"incremental": got["incremental"], "full": got["full"], "identical": identical,
               "source_requests": inc["by_prefix"].get(prefix, 0),
               "source_downloads": inc["media_by_prefix"].get(prefix, 0),
               "conversion_downloads": inc["pinned_media_by_prefix"].get(prefix, 0),
               "full_source_requests": stats["full"]["by_prefix"].get(prefix, 0),
               "made": manifest(v2)["made"]}
        rounds.append(row)
        for k in ("incremental", "full"):
            walls[k].append(got[k]["wall_s"])
        log(f"  round {r + 1}: incremental {got['incremental']['wall_s']:.1f} s, full {got['full']['wall_s']:.1f} s; "
            f"source requests {row['source_requests']:,} (downloads {row['source_downloads']:,}, of them pinned "
            f"{row['conversion_downloads']:,}); full run's {row['full_source_requests']:,}; identical {identical}")
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(full, ignore_errors=True)
    result = {"images": n, "added": added, "removed": removed, "rewritten": rewritten, "latency_ms": a.latency,
              "incremental_wall_s": median(walls["incremental"]), "full_wall_s": median(walls["full"]),
              "rounds": rounds, "identical": all(x["identical"] for x in rounds),
              "conversion_downloads": median([x["conversion_downloads"] for x in rounds]),
              "source_requests": median([x["source_requests"] for x in rounds])}
    result["ratio"] = result["incremental_wall_s"] / result["full_wall_s"]
    result["reads_as_expected"] = all(x["conversion_downloads"] == added + rewritten for x in rounds)
    return result


# ---- (c) ---------------------------------------------------------------------------------------------------------

def part_c(a, tmp: str) -> dict:
    from bench import scale
    train = scale.ensure_tree(a.data_dir, a.links)
    added = max(1, round(a.links * 0.01))
    extra = os.path.join(os.path.dirname(train), "sources-added")
    os.makedirs(extra, exist_ok=True)
    srcs = []
    for k in range(scale.SOURCES):  # new files (inodes): linking to them leaves the old ones' change times alone
        path = os.path.join(extra, f"add{k}.jpg")
        if not os.path.exists(path):
            shutil.copyfile(os.path.join(os.path.dirname(train), "sources", f"src{k}.jpg"), path)
        srcs.append(path)
    time.sleep(MARGIN)
    flags = a.links_flags.split()
    log(f"(c) {a.links:,} hard links, {added:,} added; flags {a.links_flags}")
    root, full = os.path.join(tmp, "c-root"), os.path.join(tmp, "c-full")
    new = [os.path.join(train, f"c{i % scale.CLASSES:03d}", f"a{i:07d}.jpg") for i in range(added)]
    try:
        first = measured(convert_cmd("--input", train, "--output", root, "--versioned", "--version", "v1", *flags),
                         "full v1")
        for i, path in enumerate(new):
            os.link(srcs[i % len(srcs)], path)
        inc = measured(convert_cmd("--input", train, "--output", root, "--versioned", "--version", "v2", *flags),
                       "incremental v2")
        fresh = measured(convert_cmd("--input", train, "--output", full, *flags), "full of the changed tree")
        identical = digests(os.path.join(root, "v2")) == digests(full)
    finally:
        for path in new:
            if os.path.exists(path):
                os.remove(path)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(full, ignore_errors=True)
    log(f"  peak tree RSS: full v1 {first['peak_rss_mb']:,.0f} MB, incremental {inc['peak_rss_mb']:,.0f} MB, full of "
        f"the changed tree {fresh['peak_rss_mb']:,.0f} MB; walls {first['wall_s']:.0f} / {inc['wall_s']:.0f} / "
        f"{fresh['wall_s']:.0f} s; identical {identical}")
    return {"links": a.links, "added": added, "flags": a.links_flags, "first": first, "incremental": inc,
            "full": fresh, "identical": identical, "ratio": inc["peak_rss_mb"] / fresh["peak_rss_mb"]}


# ---- (d) ---------------------------------------------------------------------------------------------------------

def done_records(parent: str) -> int:
    """Done-records in the resume areas under `parent` (the shards a killed run completed)."""
    try:
        areas = [d for d in os.listdir(parent) if d.startswith(".tfrecords-resume-")]
    except FileNotFoundError:
        return 0
    return sum(n.endswith(".done") for d in areas for n in os.listdir(os.path.join(parent, d)))


def _killed_and_rerun(args: list, root: str, until, what: str) -> dict:
    """Starts the conversion, SIGKILLs its whole process group once until(root,
    elapsed seconds) holds, then reruns the same command: the kill's time, the
    shards complete at the kill and the rerun's measurement. The killed run
    starts as every measured run does: its environment built, then prepare(),
    then the clock (building the environment had once walked bench/data for
    23 s inside the clock: 13 of 39 shards complete at 60% of the wall)."""
    run_env = env()
    prepare()
    t0 = time.perf_counter()
    proc = subprocess.Popen(convert_cmd(*args, "--output", root), cwd=ROOT, env=run_env,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not until(root, time.perf_counter() - t0):
        if proc.poll() is not None:
            raise SystemExit(f"(d) the run ended before the kill ({what})")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # The killed run's other processes were re-parented to this one (procmon makes it a subreaper): reaped
    # here, else the rerun's measurement finds them as zombies in its tree and counts their CPU as its own.
    procmon.reap_orphans(5.0)
    killed_after = time.perf_counter() - t0
    kept = done_records(root)
    rerun = measured(convert_cmd(*args, "--output", root), "the rerun")
    return {"killed_after_s": round(killed_after, 2), "kept": kept, "rerun": rerun}


def part_d(a, tmp: str) -> dict:
    """Two kills a round, each of a fresh run into a new root: at --kill_at of
    the uninterrupted run's wall time (a machine preempted 60% of the way
    through), and once --kill_at of the shards are complete (60% of the
    records written, as the progress bar counts). The second leaves 40% of
    the writing to the rerun whatever the fixed costs, the first the work
    left at that moment."""
    tree = Tree(a.data_dir, a.images, a.classes, a.generator)
    tree.ensure_pool()
    work = tree.build()
    tree.warm()
    rounds = []
    try:
        for r in range(a.rounds):
            clean = os.path.join(tmp, f"d-clean{r}")
            args = ["--input", work, "--versioned", "--version", "v1"]
            full = measured(convert_cmd(*args, "--output", clean), "uninterrupted")
            shards = sum(s["num_shards"] for s in manifest(os.path.join(clean, "v1"))["splits"].values())
            want = digests(os.path.join(clean, "v1"))
            shutil.rmtree(clean, ignore_errors=True)
            target = max(1, round(shards * a.kill_at))
            row = {"full": full, "shards": shards}
            for kind, until in (("time", lambda root, t: t >= a.kill_at * full["wall_s"]),
                                ("shards", lambda root, t: done_records(root) >= target)):
                root = os.path.join(tmp, f"d-root{r}-{kind}")
                got = _killed_and_rerun(args, root, until, kind)
                got["identical"] = digests(os.path.join(root, "v1")) == want
                got["resumed"] = manifest(os.path.join(root, "v1"))["made"]["shards_resumed"]
                row[kind] = got
                log(f"  round {r + 1}: full {full['wall_s']:.1f} s; killed at {kind} after {got['killed_after_s']:.1f} s "
                    f"with {got['kept']} of {shards} shards complete; rerun {got['rerun']['wall_s']:.1f} s "
                    f"({got['resumed']} kept); identical {got['identical']}")
                shutil.rmtree(root, ignore_errors=True)
            rounds.append(row)
    finally:
        shutil.rmtree(tree.work, ignore_errors=True)
    result = {"images": tree.n, "kill_at": a.kill_at, "rounds": rounds,
              "full_wall_s": median([x["full"]["wall_s"] for x in rounds]),
              "identical": all(x[k]["identical"] for x in rounds for k in ("time", "shards"))}
    for kind in ("time", "shards"):
        result[f"rerun_{kind}_wall_s"] = median([x[kind]["rerun"]["wall_s"] for x in rounds])
        result[f"ratio_{kind}"] = median([x[kind]["rerun"]["wall_s"] / x["full"]["wall_s"] for x in rounds])
    result["rerun_wall_s"], result["ratio"] = result["rerun_time_wall_s"], result["ratio_time"]
    return result


# ---- main --------------------------------------------------------------------------------------------------------

def report(results: dict) -> None:
    print("\n| part | what | incremental (or rerun) | full | ratio | target | reads / requests | identical |")
    print("|---|---|---:|---:|---:|---:|---|---|")
    if "a" in results:
        r = results["a"]
        print(f"| (a) | {r['images']:,} images, +{r['added']} -{r['removed']} ~{r['rewritten']}, local | "
              f"{r['incremental_wall_s']:.1f} s | {r['full_wall_s']:.1f} s | {r['ratio']:.0%} | <= 20% | "
              f"{r['source_files_opened']:,} source files opened before publishing (expected "
              f"{r['added'] + r['rewritten']:,}: {'exactly' if r['opened_as_expected'] else 'NOT'} those), "
              f"{r['report_thumbnail_opens']} by report.html | {r['identical']} |")
        print(f"| (a) | the previous version's shards copied alone (copy_file_range, 2 processes): the floor of "
              f"the byte-identical contract | {r['copy_floor_wall_s']:.1f} s | {r['full_wall_s']:.1f} s | "
              f"{r['copy_floor_ratio']:.0%} | | | |")
    if "b" in results:
        r = results["b"]
        print(f"| (b) | {r['images']:,} objects, {r['latency_ms']:g} ms/request | {r['incremental_wall_s']:.1f} s | "
              f"{r['full_wall_s']:.1f} s | {r['ratio']:.0%} | <= 20% | {r['conversion_downloads']:,} pinned "
              f"downloads (expected {r['added'] + r['rewritten']:,}), {r['source_requests']:,} source requests in "
              f"all | {r['identical']} |")
    if "c" in results:
        r = results["c"]
        print(f"| (c) | {r['links']:,} hard links, +{r['added']:,}, peak tree RSS | "
              f"{r['incremental']['peak_rss_mb']:,.0f} MB | {r['full']['peak_rss_mb']:,.0f} MB | {r['ratio']:.2f}x | "
              f"<= 1.25x | | {r['identical']} |")
    if "d" in results:
        r = results["d"]
        for kind, when in (("time", "of the uninterrupted run's wall"), ("shards", "of the shards complete")):
            print(f"| (d) | {r['images']:,} images, SIGKILL at {r['kill_at']:.0%} {when}, rerun | "
                  f"{r[f'rerun_{kind}_wall_s']:.1f} s | {r['full_wall_s']:.1f} s | {r[f'ratio_{kind}']:.0%} "
                  f"(median of the rounds' ratios) | <= 50% | | {r['identical']} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="a,b,c,d")
    ap.add_argument("--images", type=int, default=50_000, help="(a), (d): images in the tree")
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    ap.add_argument("--gcs_images", type=int, default=50_000)
    ap.add_argument("--gcs_scale", type=float, default=0.3, help="(b): image scale of sample_data.make_image")
    ap.add_argument("--latency", type=float, default=30.0, help="(b): milliseconds held per request")
    ap.add_argument("--links", type=int, default=1_000_000, help="(c): hard links")
    ap.add_argument("--links_flags", default="--validate header --num_shards 256")
    ap.add_argument("--kill_at", type=float, default=0.6, help="(d): fraction of the uninterrupted wall, and of the shards complete, at the kills")
    ap.add_argument("--json", default="")
    ap.add_argument("--generator", default=next((g for g in GENERATORS if os.path.exists(g)), GENERATORS[0]),
                    help="the shared make_imagefolder.py (run with this Python)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds idle after sync before each timed run")
    ap.add_argument("--prefault-mb", type=int, default=2048, help="memory touched and freed before each timed run")
    ap.add_argument("--phases", action="store_true",
                    help="record each timed run's phases and runner stages (bench/fixed_cost.py's hooks) in the JSON")
    a = ap.parse_args(argv)
    SETTLE.update(seconds=a.settle, prefault_mb=a.prefault_mb)
    PHASES["on"] = a.phases
    parts = [p.strip() for p in a.parts.split(",") if p.strip()]
    os.makedirs(a.data_dir, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-incremental-", dir=a.data_dir) as tmp:
        for p in parts:
            results[p] = {"a": part_a, "b": part_b, "c": part_c, "d": part_d}[p](a, tmp)
    report(results)
    path = a.json or os.path.join(HERE, "results", f"incremental-{datetime.date.today():%Y%m%d}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"args": vars(a), "results": results, "cpus": os.cpu_count()}, f, indent=1, default=str)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
