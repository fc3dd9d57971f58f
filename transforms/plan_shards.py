"""Stage PlanShards: the deterministic shuffle and the shard of every record
(see transforms/sharding.py). Only metadata is grouped here.

Input:  [Rec, ...] batches of valid records with split and key
Output: shards  ((split, index, num_shards), [[(position, Rec), ...], ...]),
                one element for every planned shard, empty ones included
        plans   a singleton {split: SplitPlan}
"""
from __future__ import annotations

import itertools
from typing import Iterable

import apache_beam as beam

from pipelines.config import ShardSpec
from transforms import sharding
from transforms.records import Batch


def by_bucket(batch: list) -> list:
    groups: dict = {}
    for rec in batch:
        groups.setdefault((rec.split, sharding.bucket_of(rec.key)), Batch()).append(rec)
    return list(groups.items())


def _sum_pairs(pairs: Iterable[tuple]) -> tuple:
    count = nbytes = 0
    for c, b in pairs:
        count += c
        nbytes += b
    return count, nbytes


def _assign(element: tuple, plans: dict) -> list:
    (split, bucket), groups = element
    recs = sorted(itertools.chain.from_iterable(groups), key=lambda r: (r.key, r.rel))
    plan = plans[split]
    return [((split, shard, plan.num_shards), Batch(items))
            for shard, items in sharding.assign_shards(split, bucket, recs, plan).items()]


def _every_shard(plans: dict) -> list:
    return [((split, i, p.num_shards), []) for split, p in sorted(plans.items()) for i in range(p.num_shards)]


class PlanShards(beam.PTransform):
    def __init__(self, spec: ShardSpec):
        super().__init__()
        self._spec = spec

    def expand(self, batches):
        keyed = batches | "ByBucket" >> beam.FlatMap(by_bucket)
        plans = (keyed
                 | "BucketTotals" >> beam.MapTuple(lambda k, recs: (k, (len(recs), sum(r.size for r in recs))))
                 | "SumBuckets" >> beam.CombinePerKey(_sum_pairs)
                 | "AllBuckets" >> beam.combiners.ToDict()
                 | "Plans" >> beam.Map(sharding.make_plans, self._spec))
        assigned = (keyed
                    | "GroupBuckets" >> beam.GroupByKey()
                    | "SortAndAssign" >> beam.FlatMap(_assign, beam.pvalue.AsSingleton(plans)))
        every = plans | "EveryShard" >> beam.FlatMap(_every_shard)
        shards = (assigned, every) | "AllShards" >> beam.Flatten() | "GroupShards" >> beam.GroupByKey()
        return {"shards": shards, "plans": plans}
