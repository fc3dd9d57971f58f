"""`tfrecords report OUT`: (re)build OUT/report.html from a converted output
(local or gs://): its manifest, the first records of its shards, its rejects.
The conversion's publish step writes the same page; this rebuilds it, e.g.
for an output written before reports existed, or one whose report failed.
The manifest is left as it is (it is the output's create-only success marker).
For a --versioned dataset root, the version LATEST names is the one rebuilt.

The output is read as untrusted input: only its own files, and input files
(thumbnails of rejects and of duplicates the shards do not hold) only under
a folder given with --sources, never under the root the manifest records.
"""
from __future__ import annotations

import argparse
from typing import Optional

from tfrecord_pipelines import api

from tfrecord_pipelines.console import process
from tfrecord_pipelines.outputs.finished_output import followed
from tfrecord_pipelines.transforms.core.errors import OutputError, RunError, UsageError
from tfrecord_pipelines.transforms.storage import report_data


def parser() -> argparse.ArgumentParser:
    """The command's flags (tfrecord_pipelines.report() takes the same, as keywords)."""
    ap = argparse.ArgumentParser(prog="tfrecords report", description=__doc__.split("\n\n")[0])
    ap.add_argument("output", help="output folder of a conversion (local or gs://)")
    ap.add_argument("--to", default="",
                    help="write the page here instead of OUTPUT/report.html (a local path or gs://)")
    ap.add_argument("--sources", default="",
                    help="the folder (local or gs://) the run converted: thumbnails of rejected files, and of "
                         "duplicates the shards do not hold, are made from files under it. Without it the page "
                         "shows only images from the shards (the manifest names a folder too, but anyone who can "
                         "edit the manifest could point it at files of yours, and the page is written into the "
                         "output)")
    ap.add_argument("--deadline", type=float, default=report_data.DEADLINE_SECONDS,
                    help="seconds to spend reading thumbnails; the page is built from what was read by then")
    return ap


def main(argv: Optional[list] = None) -> int:
    args = parser().parse_args(argv)
    try:
        folder, which = followed(args.output)  # a --versioned root: the version LATEST names
        if which:
            print(which)
        got = api.report(folder, to=args.to, deadline=args.deadline, sources=args.sources)
    except UsageError as e:
        process.error(f"--{e}")
        return process.USAGE
    except (OutputError, RunError) as e:  # no readable manifest; the page could not be built or written
        process.error(str(e))
        return process.FAILED
    print(f"wrote {got.path} ({got.bytes / 1e3:,.0f} KB) in {got.seconds:.1f} s: {got.reads}")
    return process.OK
