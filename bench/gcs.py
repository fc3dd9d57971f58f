"""Conversion from a bucket with latency: our converter against a plain
parallel download of the same objects.

    .venv/bin/python -m bench.gcs                       # 0 and 30 ms, 400 and 1,200 images, 3 rounds
    .venv/bin/python -m bench.gcs --latency 0,30,60 --sizes 500,1500 --rounds 5

It starts the GCS emulator (threaded, tests/gcs_server.py) behind a proxy that
holds every HTTP request for the given latency and counts requests
(tests/gcs_proxy.py), uploads two datasets of small JPEGs (10-25 KB, 10 class
folders), then for each latency and round runs, as a user would,
`python -m tfrecord_pipelines.convert --input gs://... --output <local> --validate
header --num_shards 4` on both sizes, and a 32-thread `download_as_bytes` of
the larger set. Our throughput is marginal, (N2 - N1) / (t2 - t1), so process
start-up and fixed costs cancel; requests per image likewise come from the
difference. Medians over the rounds are printed; every run's output is
checked to hold N records.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from gcs_emulator import BUCKET, point_clients_at, start_emulator  # noqa: E402
from gcs_proxy import GcsProxy  # noqa: E402


def make_objects(n: int, prefix: str, classes: int = 10, scale: float = 0.3) -> int:
    """Uploads n JPEGs (prefix/<class>/<k>.jpg); returns their total bytes."""
    from tfrecord_pipelines.sample_data import make_image
    from tfrecord_pipelines.transforms.storage import gcs
    bucket = gcs.client().bucket(BUCKET)

    def one(i):
        data = make_image(i % classes, i // classes, seed=1, scale=scale)
        bucket.blob(f"{prefix}/c{i % classes}/{i // classes}.jpg").upload_from_string(data)
        return len(data)
    with concurrent.futures.ThreadPoolExecutor(16) as ex:
        return sum(ex.map(one, range(n)))


def parallel_download(prefix: str, threads: int = 32) -> tuple[int, float]:
    from tfrecord_pipelines.transforms.storage import gcs
    bucket = gcs.client().bucket(BUCKET)
    names = [b.name for b in gcs.client().list_blobs(BUCKET, prefix=prefix + "/")]
    t, cpu = time.perf_counter(), time.process_time()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        total = sum(ex.map(lambda n: len(bucket.blob(n).download_as_bytes()), names))
    assert total > 0
    return len(names), time.perf_counter() - t, time.process_time() - cpu


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def convert(prefix: str, out: str, extra: list) -> tuple[float, float]:
    """(wall, CPU seconds of the converter's whole process tree)."""
    cmd = [sys.executable, "-m", "tfrecord_pipelines.convert", "--input", f"gs://{BUCKET}/{prefix}", "--output", out,
           "--num_shards", "4", "--progress", "off", "--overwrite", *extra]
    t, cpu = time.perf_counter(), children_cpu()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return dt, children_cpu() - cpu


def written(out: str) -> int:
    from tfrecord_pipelines.transforms.storage import fsutil
    return json.loads(fsutil.read_bytes(fsutil.join(out, "manifest.json")))["counts"]["written"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", default="0,30", help="milliseconds per request, comma-separated")
    ap.add_argument("--sizes", default="400,1200", help="the two dataset sizes (marginal throughput)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=32, help="threads of the parallel-download baseline")
    ap.add_argument("--extra", default="--validate header", help="flags for the converter, space-separated")
    ap.add_argument("--scale", type=float, default=0.3,
                    help="image side scale for the generator: 0.3 gives 10-25 KB JPEGs, 1.0 ImageNet-like ~110 KB")
    ap.add_argument("--output", default="local", choices=["local", "gcs"], help="where the shards go")
    a = ap.parse_args(argv)
    latencies = [float(x) for x in a.latency.split(",")]
    n1, n2 = (int(x) for x in a.sizes.split(","))
    extra = a.extra.split()
    proc, url = start_emulator()
    try:
        with GcsProxy(url, latency_ms=0) as proxy:
            point_clients_at(proxy.url)
            nbytes = {n: make_objects(n, f"ds{n}", scale=a.scale) for n in (n1, n2)}
            print(f"objects: {n1} and {n2} JPEGs, mean {nbytes[n2] / n2 / 1024:.1f} KB; converter flags: "
                  f"--num_shards 4 {' '.join(extra)}; output {a.output}; {os.cpu_count()} cores", flush=True)
            rows = []
            with tempfile.TemporaryDirectory(prefix="bench-gcs-") as tmp:
                for ms in latencies:
                    proxy.set(latency_ms=ms)
                    ours, reqs, base, cpu_ours, cpu_base = [], [], [], [], []
                    for r in range(a.rounds):
                        t, c, q = {}, {}, {}
                        for n in (n1, n2):
                            out = os.path.join(tmp, f"out{n}")
                            target = out if a.output == "local" else f"gs://{BUCKET}/out{n}"
                            proxy.reset_stats()
                            t[n], c[n] = convert(f"ds{n}", target, extra)
                            q[n] = proxy.stats()["requests"]
                            assert written(target) == n, (written(target), n)
                        ours.append((n2 - n1) / (t[n2] - t[n1]))
                        cpu_ours.append((c[n2] - c[n1]) / (n2 - n1) * 1e6)
                        reqs.append((q[n2] - q[n1]) / (n2 - n1))
                        count, dt, cpu = parallel_download(f"ds{n2}", a.threads)
                        base.append(count / dt)
                        cpu_base.append(cpu / count * 1e6)
                        print(f"  {ms:g} ms round {r + 1}: ours {ours[-1]:,.0f} img/s marginal "
                              f"({t[n1]:.1f} s / {t[n2]:.1f} s), {cpu_ours[-1]:,.0f} us CPU/img, "
                              f"{reqs[-1]:.2f} requests/img; {a.threads}-thread download {base[-1]:,.0f} img/s, "
                              f"{cpu_base[-1]:,.0f} us CPU/img", flush=True)
                    rows.append((ms, statistics.median(ours), statistics.median(base), statistics.median(reqs),
                                 statistics.median(cpu_ours), statistics.median(cpu_base)))
    finally:
        proc.kill()
    print(f"\n| latency | ours (img/s, marginal) | {a.threads}-thread download (img/s) | ratio | requests/img "
          "| ours CPU us/img (client side, marginal) | download CPU us/img |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for ms, ours, base, reqs, c_ours, c_base in rows:
        print(f"| {ms:g} ms | {ours:,.0f} | {base:,.0f} | {ours / base:.0%} | {reqs:.2f} | {c_ours:,.0f} | "
              f"{c_base:,.0f} |")
    print(f"medians of {a.rounds} rounds; the emulator and the proxy run on the same cores as both")
    return 0


if __name__ == "__main__":
    sys.exit(main())
