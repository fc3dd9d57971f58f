"""An incremental version's records matched with what the previous version
recorded of the same path (provenance.py), one group (split and bucket of
the shuffle key) at a time: the pure part of MatchPrevious and of
PlanShards' match, shared by both stages."""
from __future__ import annotations

import collections

from tfrecord_pipelines.transforms.core import provenance
from tfrecord_pipelines.transforms.core.records import Batch

# What a value grouped by bucket holds: the previous version's entry rows, or records.
ENTRIES, RECS = "p", "r"


def match(recs: list, entries: list, after_ns: int) -> tuple:
    """(records, some annotated to be taken from the previous version, and
    counts by what happened) for one group: `entries` are (shard name,
    *provenance.Entry) rows. A path the previous version lists twice (a forged
    or damaged version) is not taken from it. "racy" counts the changed
    records whose identity and metadata match, re-read only because their
    file was modified too close to the previous listing (provenance.racy)."""
    by_rel: dict = {}
    for row in entries:
        e = provenance.Entry(row[1], tuple(row[2]), *row[3:])
        by_rel[e.rel] = None if e.rel in by_rel else (row[0], e)
    counts = collections.Counter()
    out, seen = Batch(), set()
    for rec in recs:
        got = by_rel.get(rec.rel)
        if got is None:
            counts["changed" if rec.rel in by_rel else "new"] += 1
            out.append(rec)
            continue
        seen.add(rec.rel)
        shard, e = got
        if provenance.reusable(rec, e, after_ns):
            counts["unchanged"] += 1
            out.append(provenance.annotate(rec, e, shard))
        else:
            counts["changed"] += 1
            if provenance.reusable(rec, e, 0):  # identical but for times too close to the previous listing
                counts["racy"] += 1
            out.append(rec)
    counts["removed"] = sum(1 for rel, got in by_rel.items() if got and got[1].offset >= 0 and rel not in seen)
    return out, counts


def is_entries(value) -> bool:
    """Whether a value grouped by bucket holds the previous version's entries (else records)."""
    return value[0] == ENTRIES
