"""`tfrecords spec OUT`: print ready-to-paste Python that reads this output.

The code (tf.data, TFDS, PyTorch, DALI, or Grain for ArrayRecord shards) is
generated from the output's manifest by reading_code.py.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from tfrecord_pipelines import api

from tfrecord_pipelines.console import process
from tfrecord_pipelines.transforms.core.errors import OutputError


def parser() -> argparse.ArgumentParser:
    """The command's flags (tfrecord_pipelines.spec() takes the same, as keywords)."""
    ap = argparse.ArgumentParser(prog="tfrecords spec", description=__doc__.split("\n\n")[0])
    ap.add_argument("output", help="output folder of a conversion (local or gs://)")
    return ap


def main(argv: Optional[list] = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = api.spec(args.output)
    except OutputError as e:  # no manifest, or one that cannot be read
        process.error(str(e))
        return process.FAILED
    sys.stdout.write(code)
    return process.OK
