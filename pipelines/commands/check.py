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

The graph is pipelines/run/pipeline.py's up to validation; the CheckReport stage
(transforms/stages/check_report.py) replaces PlanShards, WriteShards and Publish.
"""
from __future__ import annotations

from typing import Optional

from tfrecord_pipelines.commands import convert


def run(argv: Optional[list] = None, own_process: bool = False) -> int:
    """`tfrecords check ARGS`: convert's path with check_only (its summary: summary.print_check_outcome)."""
    return convert.run(argv, prog="tfrecords check", check_only=True, own_process=own_process)
