"""Stage PlanShards: the deterministic shuffle and the shard of every record
(see transforms/core/sharding.py). Only metadata is grouped here.

With `previous` (an incremental version whose records go straight from the
split to the plan: pipelines/run/pipeline.py match_in_plan), the previous
version's provenance entries join the records' grouping by bucket, and each
bucket's records are matched there (transforms/core/matching.py) before they are
ordered: MatchPrevious' own grouping of every record is not needed. The
plan is the same: it counts the listed sizes, which a matched record keeps.

Input:  [Rec, ...] batches of records with split and key (validated, or
        listed with their sizes when WriteShards validates)
Output: shards  ((split, index, num_shards), [packed [(position, Rec), ...], ...]),
                one element for every planned shard, empty ones included; the
                batches are records.pack()ed bytes (see there), or on a
                local run references to spill files (transforms/storage/spill.py)
        plans   a singleton {split: SplitPlan}
        stats   with `previous`: match_previous' ("incremental/<what>", n)
"""
from __future__ import annotations

import itertools
import operator
from typing import Iterable, Optional

import apache_beam as beam

from tfrecord_pipelines.transforms.core import sharding
from tfrecord_pipelines.transforms.core.records import pack
from tfrecord_pipelines.transforms.core.specs import STATS, ShardSpec
from tfrecord_pipelines.transforms.core import matching
from tfrecord_pipelines.transforms.storage import previous_entries
from tfrecord_pipelines.transforms.storage import spill


def by_bucket(groups: dict, spill_dir: str = "") -> list:
    """((split, bucket), (count, bytes, packed records or their spill
    reference)) for each group; spilled groups share one file."""
    # A size the listing did not give (-1) counts as 0: such runs plan by
    # --num_shards, or validate first (pipelines/options/parse.py).
    put = spill.putter(spill_dir)
    return [(k, (len(recs), sum(max(r.size, 0) for r in recs), put(recs))) for k, recs in sorted(groups.items())]


class _ByBucketFn(spill.Gather):
    """Groups records by (split, bucket) across a bundle before the shuffle.
    Batch by batch, a record would mostly travel alone (a batch of 500 over 256
    buckets), costing an element, its encoding and its memory in the runner
    each; this way an element carries many. At most 20,000 records wait."""

    def __init__(self, spill_dir: str = ""):
        super().__init__()
        self._spill_dir = spill_dir

    def items(self, batch):
        return spill.load(batch)

    def key(self, rec):
        return rec.split, sharding.bucket_of(rec.key)

    def emit(self, groups: dict) -> list:
        return by_bucket(groups, self._spill_dir)


def _sum_pairs(pairs: Iterable[tuple]) -> tuple:
    count = nbytes = 0
    for c, b in pairs:
        count += c
        nbytes += b
    return count, nbytes


_KEY_ORDER = operator.attrgetter("key", "rel")  # shuffle order: the key, then the path for a tie


def _assign(element: tuple, plans: dict, spill_dir: str = "", after_ns: Optional[int] = None) -> list:
    """A bucket's records in shuffle order, by shard; `after_ns` (not None):
    matched first with the previous version's entries grouped with them, and
    the match's counts emitted as STATS."""
    (split, bucket), groups = element
    groups, out = list(groups), []
    recs = list(itertools.chain.from_iterable(spill.load(v[2]) for v in groups if not matching.is_entries(v)))
    if after_ns is not None:
        entries = previous_entries.entries_of(v for v in groups if matching.is_entries(v))
        recs, counts = matching.match(recs, entries, after_ns)
        out += previous_entries.stats(counts)
    if not recs:  # a bucket of removed records only (whose split may be gone)
        return out
    recs.sort(key=_KEY_ORDER)
    plan = plans[split]
    put = spill.putter(spill_dir)
    return out + [((split, shard, plan.num_shards), put(items))
                  for shard, items in sharding.assign_shards(split, bucket, recs, plan).items()]


def _every_shard(plans: dict) -> list:
    return [((split, i, p.num_shards), pack([])) for split, p in sorted(plans.items()) for i in range(p.num_shards)]


class PlanShards(beam.PTransform):
    """`spill_dir`: a local run's spill folder (records wait there, not in the
    runner); `previous`: the records are matched with that version's here."""

    def __init__(self, spec: ShardSpec, spill_dir: str = "", previous: Optional[previous_entries.MatchSpec] = None):
        super().__init__()
        self._spec = spec
        self._spill_dir = spill_dir
        self._previous = previous

    def expand(self, batches):
        keyed = batches | "ByBucket" >> beam.ParDo(_ByBucketFn(self._spill_dir))
        plans = (keyed
                 | "BucketTotals" >> beam.MapTuple(lambda k, v: (k, v[:2]))
                 | "SumBuckets" >> beam.CombinePerKey(_sum_pairs)
                 | "AllBuckets" >> beam.combiners.ToDict()
                 | "Plans" >> beam.Map(sharding.make_plans, self._spec))
        grouped, after_ns, out = keyed, None, {}
        if self._previous is not None:
            prev = batches.pipeline | "Previous" >> previous_entries.PreviousEntries(self._previous)
            grouped, after_ns = (keyed, prev["e"]) | "WithPrevious" >> beam.Flatten(), self._previous.previous.after_ns
        assigned = (grouped
                    | "GroupBuckets" >> beam.GroupByKey()
                    | "SortAndAssign" >> beam.FlatMap(_assign, beam.pvalue.AsSingleton(plans), self._spill_dir,
                                                      after_ns).with_outputs(STATS, main="shards"))
        if self._previous is not None:
            out[STATS] = (prev[STATS], assigned[STATS]) | "MatchStats" >> beam.Flatten()
        every = plans | "EveryShard" >> beam.FlatMap(_every_shard)
        shards = (assigned["shards"], every) | "AllShards" >> beam.Flatten() | "GroupShards" >> beam.GroupByKey()
        return {"shards": shards, "plans": plans, **out}
