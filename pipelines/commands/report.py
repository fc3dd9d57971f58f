"""`tfrecords report OUT`: (re)build OUT/report.html from a converted output
(local or gs://): its manifest, the first records of its shards, its rejects.
The conversion's publish step writes the same page; this rebuilds it, e.g.
for an output written before reports existed, or one whose report failed.
The manifest is left as it is (it is the output's create-only success marker).

The output is read as untrusted input: only its own files, and input files
(thumbnails of rejects and of duplicates the shards do not hold) only under
a folder given with --sources, never under the root the manifest records.
"""
from __future__ import annotations

import argparse
import time
from typing import Optional

from tfrecord_pipelines import process
from tfrecord_pipelines.transforms.storage import fsutil, layout, report_data


def main(argv: Optional[list] = None) -> int:
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
    args = ap.parse_args(argv)
    output = fsutil.normalize_root(args.output)
    try:
        m = layout.read_manifest(output)
    except FileNotFoundError:
        hint = ""
        if fsutil.exists(fsutil.join(output, "check.json")):
            hint = " (it holds a `tfrecords check` report: rerun the check to rebuild that)"
        process.error(f"{output} has no {layout.MANIFEST}: not a complete converted output{hint}")
        return process.FAILED
    except Exception as e:  # malformed manifest, unreadable folder
        process.error(f"{layout.MANIFEST} of {output} cannot be read: {e}")
        return process.FAILED
    if not args.deadline > 0:
        process.error(f"--deadline {args.deadline} must be positive")
        return process.USAGE
    target = fsutil.normalize_root(args.to) if args.to else fsutil.join(output, report_data.REPORT)
    started = time.monotonic()
    try:
        budget = report_data.Budget(args.deadline)
        sources = fsutil.normalize_root(args.sources) if args.sources else ""
        page = report_data.build(output, m, args.deadline, sources, budget)
        fsutil.write_bytes(target, page.encode("utf-8"))
    except Exception as e:  # unreadable shards are noted in the page; this is a failure to build or write it
        process.error(f"the report of {output} could not be built or written: {type(e).__name__}: {e}")
        return process.FAILED
    print(f"wrote {target} ({len(page) / 1e3:,.0f} KB) in {time.monotonic() - started:.1f} s: {budget.summary()}")
    return process.OK

