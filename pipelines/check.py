"""`tfrecords check`: the pre-flight. The same flags as convert; every file is
listed, labelled, split and validated (the two-read path's ValidateImages), the
quality figures are computed (CheckQuality), and instead of shards and a
manifest the run writes, into --output:

    report.html            the report a conversion writes, marked as a check
    check.json             its figures as data, in the manifest's shape
                           (counts: listed = valid + rejected + not_selected)
    check-rejects.jsonl    every reject, as rejects.jsonl would hold it

It takes the output's lock like a conversion and never writes a shard or a
manifest (the staging folder of a local run is removed at its end, as for
convert). Exit status: 0, or 1 when a conversion with these options would be
refused (for its rejects, or as an empty or shrunken dataset), after writing the report.

The graph is pipelines/pipeline.py's up to validation; the CheckReport stage
(transforms/stages/check_report.py) replaces PlanShards, WriteShards and Publish.
"""
from __future__ import annotations

import json
import sys
from typing import Optional

from tfrecord_pipelines.report import count_lines
from tfrecord_pipelines.transforms.stages.check_report import CHECK_JSON, CHECK_REJECTS
from tfrecord_pipelines.transforms.storage import fsutil, report_data


def run(argv: Optional[list] = None) -> int:
    from tfrecord_pipelines.convert import run as convert_run
    return convert_run(argv, prog="tfrecords check", check_only=True)


# ---- what the launcher prints ---------------------------------------------------------------------------------------


def report_check(options, cfg, outcome: str, seconds: float) -> int:
    """What the launcher prints after a check; its exit status."""
    from tfrecord_pipelines import runtime
    if not runtime.is_local(options):
        print(f"check job {outcome}; it writes {fsutil.join(cfg.output.output, report_data.REPORT)} and "
              f"{CHECK_JSON} when it ends (no shards, no manifest)")
        return 0
    return print_check_summary(cfg.output.output, seconds)


def print_check_summary(output: str, seconds: float, file=None) -> int:
    """The check's summary from check.json; returns the exit status (1: a
    conversion would be refused: for its rejects, or as publishing would be)."""
    file = file or sys.stdout
    f = json.loads(fsutil.read_bytes(fsutil.join(output, CHECK_JSON)))
    c = f["counts"]
    print(f"\nChecked in {seconds:.1f} s; nothing was converted. Report: {fsutil.join(output, report_data.REPORT)}",
          file=file)
    print(f"{'split':<14}{'valid':>10}{'classes':>9}", file=file)
    for name, s in f["splits"].items():
        print(f"{name:<14}{s['records']:>10,}{len(s['label_counts']):>9,}", file=file)
    for line in count_lines(c, "valid", f["rejects_by_reason"], fsutil.join(output, CHECK_REJECTS)):
        print(line, file=file)
    q = f.get("quality") or {}
    d = q.get("duplicates") or {}
    if d.get("groups"):
        print(f"duplicates: {d['groups']:,} groups of identical files ({d.get('across_splits', 0):,} across splits)",
              file=file)
    nd = q.get("near_duplicates") or {}
    if nd.get("pairs"):
        print(f"near duplicates: {nd['pairs']:,} pairs ({nd.get('across_splits', 0):,} across splits)", file=file)
    if (f.get("report") or {}).get("error"):
        print(f"warning: report.html was not written: {f['report']['error']}", file=sys.stderr)
    for line in f.get("warnings") or []:
        print(f"warning: {line}", file=sys.stderr)
    if not f.get("would_publish", True):
        if c["listed"] and c["rejected"] / c["listed"] > (f.get("max_reject_fraction") or 0):
            print(f"error: {c['rejected']:,} of {c['listed']:,} listed records ({c['rejected'] / c['listed']:.1%}) "
                  f"would be rejected, above --max_reject_fraction {f.get('max_reject_fraction')}: a conversion "
                  "with these options would publish nothing", file=sys.stderr)
        else:  # what the publish step would refuse (an empty or shrunken dataset, undecodable table rows)
            print(f"error: a conversion with these options would be refused: {f.get('refusal')}", file=sys.stderr)
        return 1
    return 0


def main() -> None:
    from tfrecord_pipelines.cli import exit_now
    exit_now(run())


if __name__ == "__main__":
    main()
