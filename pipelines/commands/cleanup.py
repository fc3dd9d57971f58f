"""`tfrecords cleanup [OUTPUT ...]`: remove what runs that were killed left behind.

A run removes its scratch files when it ends, however it fails; a run killed
with SIGKILL (or a machine that lost power) cannot. The next conversion on
this machine removes them too (pipelines/run/lifecycle.py); this command does it
now, and for outputs no run will write into again:

* in this machine's temp folder (TMPDIR): the scratch folders of runs whose
  process is gone (transforms/storage/scratch.py), with the spill files of a
  bucket output, and the staging folders of local outputs they name;
* in each OUTPUT given (local or gs://): the staging folders and temp files
  of earlier runs, and the resume areas of killed ones (which a rerun of the
  same command would resume from), and in a --versioned root the version
  folders killed runs left unpublished (never the one LATEST names, nor one
  a live run is writing), under the output's lock, which is taken only if no live run
  holds it (a lock of a dead process on this machine, or an expired one, is
  taken over; a running conversion's output is left alone).
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

from tfrecord_pipelines.run import lifecycle

from tfrecord_pipelines.console import process
from tfrecord_pipelines.outputs.leftovers import clean_output
from tfrecord_pipelines.transforms.storage import fsutil, run_lock


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="tfrecords cleanup", description=__doc__.split("\n\n")[0],
                                 epilog="Removes the temp folder's leftovers of dead runs, then each OUTPUT's.")
    ap.add_argument("outputs", nargs="*", metavar="OUTPUT", help="output folders (local or gs://) to clean as well")
    args = ap.parse_args(argv)
    if not lifecycle.reclaim_scratch(out=sys.stdout):
        print("nothing left by killed runs in the temp folder")
    code = process.OK
    for given in args.outputs:
        output = fsutil.normalize_root(given)
        if not fsutil.is_dir(output):
            process.error(f"{given}: no such output folder")
            code = process.FAILED
            continue
        try:
            removed, areas, versions = clean_output(output)
        except run_lock.LockHeld as e:
            process.error(f"{given}: not cleaned: {e}")
            code = process.FAILED
            continue
        except Exception as e:  # e.g. a bucket that does not answer
            process.error(f"{given}: not cleaned: {lifecycle.describe_failure(e, '')}")
            code = process.FAILED
            continue
        print(f"{given}: removed {len(removed)} staging folder{'s' if len(removed) != 1 else ''} of earlier runs"
              + (f" ({', '.join(removed[:3])}{', ...' if len(removed) > 3 else ''})" if removed else ""))
        if areas:
            print(f"{given}: removed {len(areas)} resume area{'s' if len(areas) != 1 else ''} of killed runs (a rerun "
                  f"would have kept their complete shards) ({', '.join(areas[:3])}{', ...' if len(areas) > 3 else ''})")
        if versions:
            print(f"{given}: removed the version folders killed runs left unpublished (no manifest, nothing but a "
                  f"run's own files; never the one LATEST names): {versions}")
    return code
