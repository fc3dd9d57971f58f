"""Stage PlanShards: the deterministic shuffle and the shard of every record
(see transforms/sharding.py). Only metadata is grouped here.

Input:  [Rec, ...] batches of valid records with split and key
Output: shards  ((split, index, num_shards), [packed [(position, Rec), ...], ...]),
                one element for every planned shard, empty ones included; the
                batches are records.pack()ed bytes (see there)
        plans   a singleton {split: SplitPlan}
"""
from __future__ import annotations

import itertools
from typing import Iterable

import apache_beam as beam

from pipelines.config import ShardSpec
from transforms import sharding
from transforms.records import pack, unpack


def by_bucket(batch: list) -> list:
    """((split, bucket), (count, bytes, packed records)) for each bucket in a batch."""
    groups: dict = {}
    for rec in batch:
        groups.setdefault((rec.split, sharding.bucket_of(rec.key)), []).append(rec)
    return [(k, (len(recs), sum(r.size for r in recs), pack(recs))) for k, recs in groups.items()]


def _sum_pairs(pairs: Iterable[tuple]) -> tuple:
    count = nbytes = 0
    for c, b in pairs:
        count += c
        nbytes += b
    return count, nbytes


def _assign(element: tuple, plans: dict) -> list:
    (split, bucket), groups = element
    recs = sorted(itertools.chain.from_iterable(unpack(packed) for _, _, packed in groups),
                  key=lambda r: (r.key, r.rel))
    plan = plans[split]
    return [((split, shard, plan.num_shards), pack(items))
            for shard, items in sharding.assign_shards(split, bucket, recs, plan).items()]


def _every_shard(plans: dict) -> list:
    return [((split, i, p.num_shards), pack([])) for split, p in sorted(plans.items()) for i in range(p.num_shards)]


class PlanShards(beam.PTransform):
    def __init__(self, spec: ShardSpec):
        super().__init__()
        self._spec = spec

    def expand(self, batches):
        keyed = batches | "ByBucket" >> beam.FlatMap(by_bucket)
        plans = (keyed
                 | "BucketTotals" >> beam.MapTuple(lambda k, v: (k, v[:2]))
                 | "SumBuckets" >> beam.CombinePerKey(_sum_pairs)
                 | "AllBuckets" >> beam.combiners.ToDict()
                 | "Plans" >> beam.Map(sharding.make_plans, self._spec))
        assigned = (keyed
                    | "GroupBuckets" >> beam.GroupByKey()
                    | "SortAndAssign" >> beam.FlatMap(_assign, beam.pvalue.AsSingleton(plans)))
        every = plans | "EveryShard" >> beam.FlatMap(_every_shard)
        shards = (assigned, every) | "AllShards" >> beam.Flatten() | "GroupShards" >> beam.GroupByKey()
        return {"shards": shards, "plans": plans}
