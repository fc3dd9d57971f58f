"""Stage MatchPrevious (incremental versions): each record joined with what
the previous version recorded of the same path (transforms/core/provenance.py),
so that an unchanged record is copied from the previous version's shards
instead of being read, validated and encoded again.

The previous version's provenance files are read in parallel, one element per
shard, and their entries keyed like the records: by split and bucket of the
shuffle key (transforms/core/sharding.py), about N / 256 of each per group.
No step holds the previous version whole. A record that moved to another
split meets no entry, and is read (as a new one is). A provenance file that
is damaged gives no entries: its records are read from their sources.

Input:  [Rec, ...] batches with split and key (and stamp)
Output: records [Rec, ...] batches: those that may be taken from the previous
                version carry Rec.prev (and the fields planning, duplicates
                and the quality checks need, from the provenance)
        stats   ("incremental/<what>", n): unchanged, changed, new, removed,
                damaged (records of unreadable provenance files)
"""
from __future__ import annotations

import apache_beam as beam

from tfrecord_pipelines.transforms.core import sharding
from tfrecord_pipelines.transforms.core.matching import ENTRIES, RECS, match  # noqa: F401 (ENTRIES re-exported)
from tfrecord_pipelines.transforms.core.specs import RECORDS, STATS
from tfrecord_pipelines.transforms.storage import spill
from tfrecord_pipelines.transforms.storage.previous_entries import MatchSpec, PreviousEntries, stats  # noqa: F401


class _RecordsByBucketFn(spill.Gather):
    """Records gathered by (split, bucket) across a bundle: one element per group."""

    def __init__(self, spill_dir: str = ""):
        super().__init__()
        self._spill_dir = spill_dir

    def items(self, batch):
        return spill.load(batch)

    def key(self, rec):
        return rec.split, sharding.bucket_of(rec.key)

    def emit(self, groups: dict) -> list:
        put = spill.putter(self._spill_dir)
        return [(k, (RECS, put(recs))) for k, recs in sorted(groups.items())]


class _MatchFn(beam.DoFn):
    def __init__(self, after_ns: int):
        self._after_ns = after_ns

    def process(self, element):
        _, tagged = element
        recs, entries = [], []
        for tag, ref in tagged:
            (recs if tag == RECS else entries).extend(spill.load(ref))
        out, counts = match(recs, entries, self._after_ns)
        if out:
            yield out
        yield from stats(counts)


class MatchPrevious(beam.PTransform):
    def __init__(self, spec: MatchSpec):
        super().__init__()
        self._spec = spec

    def expand(self, batches):
        prev = self._spec.previous
        entries = batches.pipeline | "Previous" >> PreviousEntries(self._spec)
        recs = batches | "ByBucket" >> beam.ParDo(_RecordsByBucketFn(self._spec.spill_dir))
        matched = ((entries["e"], recs) | "Both" >> beam.Flatten()
                   | "Group" >> beam.GroupByKey()
                   | "Match" >> beam.ParDo(_MatchFn(prev.after_ns)).with_outputs(STATS, main=RECORDS))
        stats = (entries[STATS], matched[STATS]) | "Stats" >> beam.Flatten()
        return {RECORDS: matched[RECORDS], STATS: stats}
