"""`tfrecords verify OUT`: re-read every shard and hold it against the manifest.

A --versioned dataset root is verified at the version its LATEST names (said
first); the rejects a refused run left beside the dataset are noted.

Checks, each failure naming the shard and, for record damage, the byte offset:
the manifest exists and its counts reconcile; the folder holds exactly the
manifest's shards (a stale shard would be read by a `train-*` glob); every
record's framing and both CRCs; every Example parses with the manifest's
feature types (tfx-bsl's Arrow decoder, in C++); every image's bytes match its
recorded sha256; each shard's record count, byte size and CRC32C match;
each label id (and each object's, for --annotations) is in the label map
and matches its text; each split's label counts match the manifest's; no file is written twice (image/filename);
with --decode, every image decodes with TensorFlow to its recorded shape;
with --index_files, each shard's index names every record's offset and
length, and no index is stale. (The checks themselves: verification.py.)
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from tfrecord_pipelines.console import process
from tfrecord_pipelines.transforms.core.units import human_bytes, plural
from tfrecord_pipelines.transforms.storage import gcs
from tfrecord_pipelines.transforms.storage.gcs import StorageUnavailable
from tfrecord_pipelines.outputs.finished_output import followed
from tfrecord_pipelines.outputs.verification import verify_output
from tfrecord_pipelines.transforms.core.errors import OutputError


def add_io_timeout(ap) -> None:
    """--io_timeout of the commands that read an output: a bucket that stops
    answering ends them with one line after this long, not minutes later with
    a traceback."""
    def seconds(text: str) -> float:
        import argparse
        try:
            value = float(text)
        except ValueError:
            value = 0.0
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
        return value

    def set_timeout(value: float) -> float:
        gcs.set_timeout(value)
        return value
    ap.add_argument("--io_timeout", type=lambda t: set_timeout(seconds(t)), default=gcs.DEFAULT_TIMEOUT,
                    help="seconds Cloud Storage may fail to answer (transient errors are retried until then) before "
                         "the command stops with an error naming the bucket (default: %(default)s)")


def parser() -> argparse.ArgumentParser:
    """The command's flags (tfrecord_pipelines.verify() takes the same, as keywords)."""
    ap = argparse.ArgumentParser(prog="tfrecords verify", description=__doc__.split("\n\n")[0])
    ap.add_argument("output", help="output folder of a conversion (local or gs://)")
    ap.add_argument("--fast", action="store_true", help="skip re-hashing every image (framing, CRCs, parsing, "
                    "counts and shard checksums are still checked)")
    ap.add_argument("--quiet", action="store_true", help="print only problems and the verdict")
    ap.add_argument("--decode", action="store_true", help="also decode every image with TensorFlow "
                    "(tf.io.decode_image) and check its height, width and channels against the record; slower")
    add_io_timeout(ap)
    return ap


def main(argv: Optional[list] = None) -> int:
    args = parser().parse_args(argv)
    try:
        folder, which = followed(args.output)  # a --versioned root: the version LATEST names
        if which:
            print(which)
        report = verify_output(folder, deep=not args.fast, log=None if args.quiet else print,
                               decode=args.decode)
    except OutputError as e:  # a LATEST that cannot be followed safely
        process.error(f"{e} (verify FAILED)")
        return process.FAILED
    except StorageUnavailable as e:  # a bucket that stopped answering: one line, not a traceback
        process.error(f"{e}; nothing more was checked")
        return process.FAILED
    if report.fatal:  # one line: there was nothing to verify
        process.error(f"{report.errors[0]} (verify FAILED)")
        return process.FAILED
    for err in report.errors:
        print(f"ERROR {err}", file=sys.stderr)
    for note in report.notes:
        print(f"note: {note}")
    if report.ok and not report.records:
        print(f"OK, but EMPTY: 0 records ({plural(report.shards, 'shard')}) match the manifest; a training job "
              "reading this dataset gets nothing")
        return process.OK
    if report.ok:
        print(f"OK: {plural(report.shards, 'shard')}, {plural(report.records, 'record')}, "
              f"{human_bytes(report.bytes)} match the manifest")
        if not args.decode:
            print("note: images were not decoded, so whether each decodes in TensorFlow to its recorded height, "
                  "width and channels is not checked: run with --decode for that")
        return process.OK
    print(f"FAILED: {len(report.errors)} problem(s) in {args.output}", file=sys.stderr)
    return process.FAILED
