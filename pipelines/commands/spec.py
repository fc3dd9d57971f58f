"""`tfrecords spec OUT`: print ready-to-paste Python that reads this output.

The code (tf.data, TFDS, PyTorch, DALI, or Grain for ArrayRecord shards) is
generated from the output's manifest by reading_code.py.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from tfrecord_pipelines import process
from tfrecord_pipelines.finished_output import no_manifest
from tfrecord_pipelines.reading_code import has_tfds_metadata, reading_code
from tfrecord_pipelines.transforms.storage import fsutil, layout


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="tfrecords spec", description=__doc__.split("\n\n")[0])
    ap.add_argument("output", help="output folder of a conversion (local or gs://)")
    args = ap.parse_args(argv)
    output = fsutil.normalize_root(args.output)
    if fsutil.is_local(output):
        output = os.path.abspath(output)
    try:
        m = layout.read_manifest(output)
    except FileNotFoundError:
        process.error(no_manifest(output))
        return process.FAILED
    except Exception as e:  # unreadable or malformed manifest
        process.error(f"{layout.MANIFEST} cannot be read: {e}")
        return process.FAILED
    sys.stdout.write(reading_code(output, m, has_tfds_metadata(m)))
    return process.OK
