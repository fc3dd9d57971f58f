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

import collections
import dataclasses
import logging

import apache_beam as beam

from tfrecord_pipelines.transforms.core import provenance, sharding
from tfrecord_pipelines.transforms.core.records import Batch
from tfrecord_pipelines.transforms.core.specs import DEFAULT_IO_TIMEOUT, RECORDS, STATS
from tfrecord_pipelines.transforms.storage import previous, spill

ENTRIES, RECS = "p", "r"
log = logging.getLogger(__name__)


class _ReadProvenanceFn(beam.DoFn):
    """One previous shard's provenance entries, by (split, bucket)."""

    def __init__(self, prev: provenance.PreviousVersion, seed: int, timeout: float, spill_dir: str = ""):
        self._prev, self._seed, self._timeout, self._spill_dir = prev, seed, timeout, spill_dir

    def process(self, shard: provenance.PrevShard):
        try:
            entries = previous.read_provenance(self._prev.folder, shard, self._timeout)
        except previous.Damaged as e:
            log.warning("version %s: %s; its %d records are read from their sources", self._prev.version, e,
                        shard.records)
            yield beam.pvalue.TaggedOutput(STATS, ("incremental/damaged", shard.records))
            return
        groups = collections.defaultdict(list)
        for e in entries:
            groups[(shard.split, sharding.bucket_of(sharding.shuffle_key(self._seed, e.rel)))].append(
                (shard.name, *e))
        put = spill.putter(self._spill_dir)
        for key, items in sorted(groups.items()):
            yield key, (ENTRIES, put(items))


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


def match(recs: list, entries: list, after_ns: int) -> tuple:
    """(records, some annotated to be taken from the previous version, and
    counts by what happened) for one group: `entries` are (shard name,
    *provenance.Entry) rows. A path the previous version lists twice (a forged
    or damaged version) is not taken from it."""
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
            out.append(rec)
    counts["removed"] = sum(1 for rel, got in by_rel.items() if got and got[1].offset >= 0 and rel not in seen)
    return out, counts


def stats(counts: collections.Counter) -> list:
    """match's counts as STATS elements."""
    return [beam.pvalue.TaggedOutput(STATS, ("incremental/" + what, n)) for what, n in sorted(counts.items()) if n]


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


@dataclasses.dataclass(frozen=True)
class MatchSpec:
    """MatchPrevious' settings."""
    previous: provenance.PreviousVersion  # the version whose records may be copied
    seed: int = 0                  # the run's shuffle seed: records and entries are keyed alike
    timeout: float = DEFAULT_IO_TIMEOUT  # --io_timeout, for a previous version in a bucket
    spill_dir: str = ""            # a local run's spill folder (transforms/storage/spill.py)


class PreviousEntries(beam.PTransform):
    """The previous version's provenance entries, read in parallel (a shard
    each), keyed like the records: ((split, bucket), (ENTRIES, [entry rows]
    packed or spilled)); STATS: records of damaged provenance files. Applied
    to the pipeline. PlanShards takes them into its own grouping by bucket
    when nothing between the split and the plan needs the match
    (pipelines/pipeline.py match_in_plan): one grouping of every record fewer."""

    def __init__(self, spec: MatchSpec):
        super().__init__()
        self._spec = spec

    def expand(self, pipeline):
        spec = self._spec
        return (pipeline
                | "PreviousShards" >> beam.Create(list(spec.previous.shards))
                | "Spread" >> beam.Reshuffle()
                | "ReadProvenance" >> beam.ParDo(_ReadProvenanceFn(spec.previous, spec.seed, spec.timeout,
                                                                   spec.spill_dir)).with_outputs(STATS, main="e"))


def is_entries(value) -> bool:
    """Whether a value grouped by bucket is PreviousEntries' (else the records')."""
    return value[0] == ENTRIES


def entries_of(values) -> list:
    """The entry rows of PreviousEntries' values."""
    return [row for v in values for row in spill.load(v[1])]


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
