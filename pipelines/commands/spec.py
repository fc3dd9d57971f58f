"""`tfrecords spec OUT`: print ready-to-paste Python that reads this output.

The code (tf.data, TFDS, PyTorch, DALI, or Grain for ArrayRecord shards) is
generated from the output's manifest by reading_code.py. For a --versioned
dataset root it reads the version LATEST names (said on stderr).
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from tfrecord_pipelines import api

from tfrecord_pipelines.console import process
from tfrecord_pipelines.outputs.finished_output import followed
from tfrecord_pipelines.transforms.core.errors import OutputError


def parser() -> argparse.ArgumentParser:
    """The command's flags (tfrecord_pipelines.spec() takes the same, as keywords)."""
    ap = argparse.ArgumentParser(prog="tfrecords spec", description=__doc__.split("\n\n")[0])
    ap.add_argument("output", help="output folder of a conversion (local or gs://)")
    return ap


def main(argv: Optional[list] = None) -> int:
    args = parser().parse_args(argv)
    try:
        folder, which = followed(args.output)  # a --versioned root: the version LATEST names
        if which:  # on stderr: stdout is the code, often redirected into a file
            print(which, file=sys.stderr)
        code = api.spec(folder)
    except OutputError as e:  # no manifest, or one that cannot be read
        process.error(str(e))
        return process.FAILED
    sys.stdout.write(code)
    return process.OK
