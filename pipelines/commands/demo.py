"""`tfrecords demo`: the main job on a sample dataset. It generates an image
tree from the shipped photos (with two broken files, to show what happens to
them), converts it into train/validation shards, verifies the output and
prints a summary.

    tfrecords demo [--dir demo]        (or: python -m tfrecord_pipelines.demo)
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

from tfrecord_pipelines import sample_data



from tfrecord_pipelines.console import process
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tfrecords demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="demo", help="folder for the sample data and the output")
    ap.add_argument("--classes", type=int, default=8)
    ap.add_argument("--per_class", type=int, default=40)
    args = ap.parse_args(argv)
    data, out = os.path.join(args.dir, "data"), os.path.join(args.dir, "out")
    t = time.time()
    info = sample_data.make_imagefolder(data, args.classes, args.per_class, seed=0)
    first = sample_data.class_names(args.classes, 0)[0]
    with open(os.path.join(info["root"], first, "truncated.JPEG"), "wb") as f:
        f.write(sample_data.make_image(0, 999, 0)[:5000])  # a download cut short
    with open(os.path.join(info["root"], first, "notes.jpg"), "wb") as f:
        f.write(b"<html>not an image</html>\n")
    print(f"[1/3] sample dataset: {info['images']:,} JPEGs + 2 broken files, {info['bytes'] / 1e6:.1f} MB in "
          f"{info['root']} ({time.time() - t:.1f} s)")

    from tfrecord_pipelines.commands.convert import run
    print(f"[2/3] tfrecords convert --input {info['root']} --output {out} --split train=0.8,validation=0.2 "
          "--overwrite")
    rc = run(["--input", info["root"], "--output", out, "--split", "train=0.8,validation=0.2", "--overwrite"])
    if rc:
        return rc

    from tfrecord_pipelines.outputs.verification import verify_output
    print(f"[3/3] tfrecords verify {out}")
    report = verify_output(out)
    for err in report.errors:
        print(f"ERROR {err}", file=sys.stderr)
    if not report.ok:
        return process.FAILED
    print(f"OK: {report.shards} shards, {report.records:,} records re-read; framing, CRCs, Examples, image "
          "checksums, counts and shard checksums match the manifest.")
    # The command beside this Python: on PATH only once its environment is activated (make demo does not).
    tool = os.path.join(os.path.dirname(sys.executable), "tfrecords")
    tool = "tfrecords" if shutil.which("tfrecords") == tool or not os.path.exists(tool) else os.path.relpath(tool)
    print(f"\nNext: {tool} inspect {out}   |   the rejects are in {os.path.join(out, 'rejects.jsonl')}")
    return process.OK

