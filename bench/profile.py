"""Per-image cost of our hot path, measured in one process on one core.

    python -m bench.profile [--data DIR] [--images 1000] [--bench-json FILE]

Loads `--images` files (spread evenly over the tree), then times each step of
what the converter does per image, each over all the images, `--passes`
times (the median pass is reported, and the fastest):

  read             open + read the file (warm page cache)
  header probe     tfrecord_pipelines.transforms.core.images.probe_image, --validate header (marker walk to EOI)
  full validate    probe_image, --validate full (the header checks + a 1/8-scale draft decode + the
                   perceptual hash's input, the decode box-reduced, as the default near-duplicate check needs)
  Pillow full decode   Image.open(...).load(): the decode_all_cores reference
  fingerprint      tfrecord_pipelines.transforms.core.records.fingerprint (CRC32C of the whole file: the change
                   check of --reads_per_image 2)
  sha256           hashlib.sha256(data).hexdigest() for image/key/sha256
  perceptual hash  quality.hashes of those inputs, HASH_BATCH at a time as the shard writer does
                   (full mode with the default --near_duplicates)
  Example build    features.ExampleEncoder.encode (the shard writer's: rows in key order, repeating entries reused)
  framing+CRC      tfrecord_io.RecordWriter.write into a null sink: framing, the record's
                   CRC32C and the shard's running CRC32C (both shown too)
  write            the framed record written to 8 files on disk (buffered, closed, no fsync)

The steps are module-level functions (read_file, probe, sha256_hex, make_rec,
new_encoder; record_work runs them for one record into a shard file): the
bench's bound_header and bound_full variants (bench/baselines.py) run the same
functions record after record on a process per core, the all-core bound that
`python -m bench.run` compares the conversion with.

The converter's per-image path (from the code of transforms/stages/write_shards.py),
header mode, one read per image (the default for folder trees):
    write stage:    read + header probe + sha256 + Example build + framing+CRC + write
With --reads_per_image 2, add a read and two fingerprints (validate stage:
read + header probe + fingerprint; write stage: read again + fingerprint).
Full mode adds (full validate - header probe) + perceptual hash. With the bench's results
(--bench-json, default: the newest complete bench/results/bench-*.json), the
Beam/runner overhead per image is estimated as
    ours_<mode> marginal CPU us/image (CPU seconds of the whole process tree, between the
    two sizes, divided by the extra images) - the sum of the steps above,
and the start-up CPU as the bench's start-up CPU seconds (CPU at N1 - N1 x marginal).
Decoding on both cores at once costs more CPU per image than on one (shared caches,
vCPUs), which this single-process profile does not see; so the profile also prints
ours_full - validate_all_cores marginal CPU from the bench (both measured on all cores),
to compare with ours_header's. Import costs of one process (python, apache_beam, our
converter's imports, tensorflow) are measured as separate processes (peak RSS sampled
every 25 ms: a process shorter than that shows less).
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import os
import statistics
import sys
import tempfile
import time

from tfrecord_pipelines.transforms.core.features import ExampleEncoder
from tfrecord_pipelines.transforms.core.images import ImagePolicy, Validation, configure_pillow, probe_image
from tfrecord_pipelines.transforms.core.quality import HASH_BATCH, hashes
from tfrecord_pipelines.transforms.core.records import Rec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")


class _NullSink:
    def write(self, data) -> int:
        return len(data)


# ---- the work each record needs, one step a function: timed here one by one, and run whole,
# record after record on a process per core, by bench.baselines' bound_* variants

def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def policies() -> tuple:
    """(header, full) ImagePolicy as a default conversion sets them, Pillow configured as the converter
    does. Full mode's default near-duplicate check hashes every decode (in batches: hash_later)."""
    header, full = ImagePolicy(validation=Validation.HEADER), ImagePolicy(perceptual_hash=True, hash_later=True)
    configure_pillow(full)
    return header, full


def probe(data: bytes, policy):
    """The image checks of `policy`'s mode (header: the marker walk; full: with the 1/8-scale decode)."""
    return probe_image(data, policy)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_rec(root: str, item: tuple, data: bytes, info, crc: int = -1):
    """The Rec a listed image has once validated: (path, class, class id) and what the probe found."""
    path, cls, label = item
    rel = path[len(root) + 1:] if path.startswith(root + os.sep) else os.path.relpath(path, root)
    return Rec(rel=rel, path=path, size=len(data), label_text=cls, label_id=label, crc=crc,
               **{k: v for k, v in info._asdict().items() if k in Rec._fields})


def new_encoder():
    """The shard writer's Example encoder (class labels, default keys)."""
    return ExampleEncoder("class", {})


def record_work(root: str, item: tuple, policy, encoder, writer, hash_inputs: list) -> int:
    """One record, whole, as the shard writer does it with one read per image:
    read, probe, SHA-256, the Example, framed (the record's CRC32C and the
    shard's running one) into `writer` (a tfrecord_io.RecordWriter); with
    policy.hash_later, the perceptual hash's input joins `hash_inputs`, and
    every HASH_BATCH of them are hashed (perceptual_hashes). Returns the
    image's bytes."""
    data = read_file(item[0])
    info = probe(data, policy)
    rec = make_rec(root, item, data, info)
    sha = sha256_hex(data)
    writer.write(*encoder.encode(rec, data, sha))
    if policy.hash_later:
        hash_inputs.append(info.hash_input)
        if len(hash_inputs) >= HASH_BATCH:
            perceptual_hashes(hash_inputs)
    return len(data)


def perceptual_hashes(hash_inputs: list) -> list:
    """The perceptual hashes of the inputs waiting (emptied), as the shard writer computes them."""
    out = hashes(hash_inputs)
    hash_inputs.clear()
    return out


def _time_pass(fn, items) -> float:
    t = time.perf_counter()
    for it in items:
        fn(it)
    return time.perf_counter() - t


def per_image(times: list, n: int) -> dict:
    """The median and fastest of several passes over n images, in µs an image."""
    return {"us_median": round(statistics.median(times) / n * 1e6, 1), "us_min": round(min(times) / n * 1e6, 1)}


def measure(items, passes: int, fn) -> dict:
    return per_image([_time_pass(fn, items) for _ in range(passes)], len(items))


def find_train(data: str) -> str:
    return os.path.join(data, "train") if os.path.isdir(os.path.join(data, "train")) else data


def default_data(images: int) -> str:
    """The largest cached bench tree, or a generated one."""
    trees = sorted(glob.glob(os.path.join(BENCH, "data", "size-*", "train")),
                   key=lambda p: int(os.path.basename(os.path.dirname(p)).split("-")[1]))
    big = [t for t in trees if int(os.path.basename(os.path.dirname(t)).split("-")[1]) >= images]
    if big:
        return big[-1]
    from bench import dataset
    return dataset.ensure_size(os.path.join(BENCH, "data"), images, log=lambda m: print(m, file=sys.stderr))["train"]


def newest_bench_json() -> str:
    for path in sorted(glob.glob(os.path.join(BENCH, "results", "bench-*.json")), reverse=True):
        try:
            with open(path) as f:
                if json.load(f).get("complete"):
                    return path
        except (OSError, ValueError):
            continue
    return ""


def import_costs() -> dict:
    from bench import procmon
    from bench.run import child_env  # with bytecode, as an installed package runs
    env = child_env()
    out = {}
    for name, stmt in [("python", "pass"), ("apache_beam", "import apache_beam"),
                       ("apache_beam, lean", "from tfrecord_pipelines.speed import lean_import; lean_import.import_lean()"),
                       ("tfrecord_pipelines.commands.convert", "import tfrecord_pipelines.commands.convert"),
                       ("tensorflow", "import tensorflow")]:
        runs = [procmon.run_measured([sys.executable, "-c", stmt], cwd=ROOT, env=env) for _ in range(3)]
        out[name] = {"wall_s": round(statistics.median(r["wall_s"] for r in runs), 2),
                     "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 2),
                     "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in runs))}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="", help="an image tree (or a folder holding train/); default: a bench dataset")
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--bench-json", default="", help="bench results for the overhead estimate (default: newest)")
    ap.add_argument("--out", default="", help="JSON file (default bench/results/profile-<date>.json)")
    ap.add_argument("--no-imports", action="store_true", help="skip timing the imports")
    a = ap.parse_args(argv)

    sys.path.insert(0, ROOT)
    import google_crc32c
    from PIL import Image

    from bench.baselines import list_images
    from tfrecord_pipelines.transforms.core.records import fingerprint
    from tfrecord_pipelines.transforms.core.tfrecord_io import RecordWriter, masked_crc

    train = find_train(os.path.abspath(a.data)) if a.data else default_data(a.images)
    items = list_images(train)
    step = max(1, len(items) // a.images)
    items = items[::step][:a.images]
    paths = [p for p, _, _ in items]
    datas = [read_file(p) for p in paths]
    n = len(datas)
    nbytes = sum(map(len, datas))
    print(f"{n} images from {train}, mean {nbytes / n / 1e3:.1f} KB; {a.passes} passes per step, one process")

    header_policy, full_policy = policies()
    # what validation records (ImageInfo fields that Rec also has: fmt, height, width, channels, ...)
    recs = [make_rec(train, it, d, probe(d, header_policy), fingerprint(d)) for it, d in zip(items, datas)]
    shas = [sha256_hex(d) for d in datas]
    encoder = new_encoder()
    encoded = [encoder.encode(r, d, s) for r, d, s in zip(recs, datas, shas)]
    idx = list(range(n))

    def pil_decode(d):
        with Image.open(io.BytesIO(d)) as im:
            im.load()

    def framing(i):
        RecordWriter(_NullSink()).write(*encoded[i])

    def shard_crc(i):
        crc = 0
        for c in encoded[i][0]:
            crc = google_crc32c.extend(crc, c)

    steps = {}
    steps["read"] = measure(paths, a.passes, read_file)
    steps["header probe"] = measure(datas, a.passes, lambda d: probe(d, header_policy))
    steps["full validate"] = measure(datas, a.passes, lambda d: probe(d, full_policy))
    steps["Pillow full decode"] = measure(datas, a.passes, pil_decode)
    steps["fingerprint"] = measure(datas, a.passes, fingerprint)
    steps["sha256"] = measure(datas, a.passes, sha256_hex)
    hash_in = [probe(d, full_policy).hash_input for d in datas]
    batches = [hash_in[i:i + HASH_BATCH] for i in range(0, n, HASH_BATCH)]
    steps["perceptual hash"] = per_image([_time_pass(hashes, batches) for _ in range(a.passes)], n)
    steps["Example build"] = measure(idx, a.passes, lambda i: encoder.encode(recs[i], datas[i], shas[i]))
    steps["framing+CRC"] = measure(idx, a.passes, framing)
    steps["  of which CRC32C"] = measure(idx, a.passes, lambda i: masked_crc(encoded[i][0]))
    steps["  of which shard CRC32C"] = measure(idx, a.passes, shard_crc)

    # write: the framed bytes of every record into 8 files, as a shard writer does
    framed = []
    for chunks, length in encoded:
        buf = io.BytesIO()
        RecordWriter(buf).write(chunks, length)
        framed.append(buf.getvalue())
    with tempfile.TemporaryDirectory(prefix="bench-profile-", dir=os.path.join(BENCH, "data")
                                     if os.path.isdir(os.path.join(BENCH, "data")) else None) as tmp:
        times = []
        for k in range(a.passes):
            os.sync()
            t = time.perf_counter()
            per = (n + 7) // 8
            for s in range(8):
                with open(os.path.join(tmp, f"s{s}-{k}"), "wb") as f:
                    for rec in framed[s * per:(s + 1) * per]:
                        f.write(rec)
            times.append(time.perf_counter() - t)
            for s in range(8):
                os.remove(os.path.join(tmp, f"s{s}-{k}"))
        steps["write"] = per_image(times, n)

    u = {k: v["us_median"] for k, v in steps.items()}
    header_path = u["read"] + u["header probe"] + u["sha256"] + u["Example build"] + u["framing+CRC"] + u["write"]
    full_path = header_path + u["full validate"] - u["header probe"] + u["perceptual hash"]
    two_reads = u["read"] + 2 * u["fingerprint"]
    paths_us = {"ours_header": round(header_path, 1), "ours_full": round(full_path, 1),
                "two_reads_extra": round(two_reads, 1)}

    print(f"\n{'step':<26} {'us/image':>9} {'(fastest)':>10}")
    print("-" * 47)
    for k, v in steps.items():
        print(f"{k:<26} {v['us_median']:>9,.1f} {'(' + format(v['us_min'], ',.1f') + ')':>10}")
    print("-" * 47)
    print(f"{'our path, header mode':<26} {header_path:>9,.1f}   = read + header probe + sha256"
          " + Example build + framing+CRC + write")
    print(f"{'our path, full mode':<26} {full_path:>9,.1f}   = header path + (full validate - header probe)"
          " + perceptual hash")
    print(f"{'--reads_per_image 2 adds':<26} {two_reads:>9,.1f}   = read + 2 x fingerprint")

    result = {"data": train, "images": n, "mean_bytes": round(nbytes / n), "passes": a.passes,
              "steps_us_per_image": steps, "path_us_per_image": paths_us}

    bench_json = a.bench_json or newest_bench_json()
    if bench_json:
        with open(bench_json) as f:
            b = json.load(f)
        marg = b.get("summary", {}).get("marginal", {})
        table = b.get("summary", {}).get("table", {})
        n2 = b.get("summary", {}).get("n2")
        print(f"\nBeam/runner overhead, from {bench_json}")
        est = {}
        for v in ("ours_header", "ours_full"):
            m = marg.get(v)
            if not m:
                continue
            total = m["cpu_us_per_image"]
            over = total - paths_us[v]
            row = table.get(v, {}).get(str(n2), {})
            est[v] = {"marginal_cpu_us_per_image": total, "hot_path_us_per_image": paths_us[v],
                      "overhead_us_per_image": round(over, 1),
                      "overhead_share": round(over / total, 3) if total else None,
                      "startup_cpu_s": m.get("startup_cpu_s"), "startup_wall_s": m.get("startup_s"),
                      "cpu_s_at_n2": row.get("cpu_s_median"), "n2": n2}
            # Tiny smoke-test sizes can give a zero or negative marginal: no share then.
            share = f"{over / total * 100:.0f}%" if total > 0 else "n/a"
            print(f"  {v:<12} marginal CPU {total:,.0f} us/image (whole tree) - hot path {paths_us[v]:,.0f} us"
                  f" = {over:,.0f} us/image outside the measured steps ({share}); "
                  f"start-up {m.get('startup_cpu_s')} CPU s, {m.get('startup_s')} s wall")
        # Measured in the bench's own run: the conversion against its bound, both on all cores.
        for mode in ("header", "full"):
            om, bm = marg.get(f"ours_{mode}"), marg.get(f"bound_{mode}")
            if om and bm:
                beyond = om["cpu_us_per_image"] - bm["cpu_us_per_image"]
                est[f"{mode}_beyond_bound_us_per_image"] = round(beyond, 1)
                print(f"  ours_{mode} - bound_{mode} marginal CPU = {beyond:,.0f} us/image (bound_{mode}: "
                      f"{bm['cpu_us_per_image']:,.0f} us/image on all cores)")
        # Cross-check within the bench itself (both cores busy in both runs, so the slowdown of
        # running two decoders side by side cancels): full mode minus decoding alone, vs header mode.
        fm, vm, hm = marg.get("ours_full"), marg.get("validate_all_cores"), marg.get("ours_header")
        if fm and vm and hm:
            extra = fm["cpu_us_per_image"] - vm["cpu_us_per_image"]
            est["full_minus_validate_all_cores_us_per_image"] = round(extra, 1)
            print(f"  cross-check: ours_full - validate_all_cores marginal CPU = {extra:,.0f} us/image "
                  f"(ours_header: {hm['cpu_us_per_image']:,.0f} us/image); single-core full validate here "
                  f"{u['full validate']:,.0f} us vs validate_all_cores {vm['cpu_us_per_image']:,.0f} us/image "
                  f"on all cores (read included)")
        result["overhead"] = {"bench_json": bench_json, **est}
    else:
        print("\n(no complete bench results found: run python -m bench.run for the overhead estimate)")

    if not a.no_imports:
        imps = import_costs()
        result["imports"] = imps
        print("\nimport cost, one process (median of 3)")
        for k, v in imps.items():
            print(f"  {k:<20} {v['wall_s']:5.2f} s wall  {v['cpu_s']:5.2f} CPU s  {v['peak_rss_mb']:5.0f} MB RSS")

    out = a.out or os.path.join(BENCH, "results", f"profile-{time.strftime('%Y%m%d-%H%M%S')}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
