"""Splits, the deterministic shuffle and shard planning (pure functions), and
the PlanShards stage on a real Beam runner."""
import collections
import random

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tfrecord_pipelines.options.config import ShardSpec, SplitSource, SplitSpec
from tfrecord_pipelines.transforms.core import sharding
from tfrecord_pipelines.transforms.core.records import Batch, Rec, Reject, unpack
from tfrecord_pipelines.transforms.stages.plan_shards import PlanShards
from tfrecord_pipelines.transforms.stages.split import assign_split, ratio_split


def test_ratio_splits_are_stable_and_proportional():
    ratios = (("train", 0.8), ("validation", 0.2))
    names = [f"c{i % 7}/img_{i}.jpg" for i in range(20000)]
    got = [ratio_split(n, ratios, "") for n in names]
    share = collections.Counter(got)["validation"] / len(got)
    assert 0.19 < share < 0.21
    # Adding images never moves the old ones; another salt draws another split.
    assert [ratio_split(n, ratios, "") for n in names[:500]] == got[:500]
    assert [ratio_split(n, ratios, "other") for n in names[:500]] != got[:500]


def test_assign_split_sources_and_bad_names():
    r = Rec(rel="validation/cat/1.jpg", path="p", split=" test ")
    assert assign_split(r, SplitSpec(SplitSource.FOLDERS), 0).split == "validation"
    assert assign_split(r, SplitSpec(SplitSource.COLUMN), 0).split == "test"
    assert assign_split(r, SplitSpec(SplitSource.SINGLE, name="all"), 0).split == "all"
    for bad in ("", "../x", "train-extra", "a b"):
        out = assign_split(r._replace(split=bad), SplitSpec(SplitSource.COLUMN), 0)
        assert isinstance(out, Reject) and out.reason == "bad_split"


@pytest.mark.parametrize("count,shards", [(10, 3), (1, 1), (7, 7), (1000, 16), (5, 8), (12345, 100)])
def test_shard_counts_differ_by_at_most_one_and_are_contiguous(count, shards):
    got = [sharding.shard_of(i, count, shards) for i in range(count)]
    assert got == sorted(got)
    sizes = collections.Counter(got)
    full = [sizes.get(k, 0) for k in range(shards)]
    assert max(full) - min(full) <= 1 and sum(full) == count


def test_number_of_shards():
    spec = ShardSpec(shard_bytes=100)
    assert sharding.num_shards_for("train", 10, 1000, spec) == 10
    assert sharding.num_shards_for("train", 3, 1000, spec) == 3  # never more shards than records
    assert sharding.num_shards_for("train", 10, 50, spec) == 1
    assert sharding.num_shards_for("train", 0, 0, spec) == 0
    assert sharding.num_shards_for("train", 10, 1000, ShardSpec(shard_bytes=100, multiple=8)) == 16
    given = ShardSpec(num_shards=(("*", 4), ("validation", 2)))
    assert sharding.num_shards_for("train", 100, 10, given) == 4
    assert sharding.num_shards_for("validation", 100, 10, given) == 2


def test_shard_names():
    assert sharding.shard_name("train", 3, 16) == "train-00003-of-00016.tfrecord"
    assert sharding.shard_name("train", 3, 123456, ".gz") == "train-000003-of-123456.tfrecord.gz"


def test_shuffle_key_depends_on_seed_and_path_only():
    assert sharding.shuffle_key(0, "a.jpg") == sharding.shuffle_key(0, "a.jpg")
    assert sharding.shuffle_key(0, "a.jpg") != sharding.shuffle_key(1, "a.jpg")
    assert sharding.shuffle_key(-5, "ä/ü.jpg") >= 0


def _recs(n, split="train"):
    return [Rec(rel=f"c/{i}.jpg", path=f"/d/c/{i}.jpg", size=100 + i, split=split,
                key=sharding.shuffle_key(0, f"c/{i}.jpg")) for i in range(n)]


def test_plan_shards_stage_orders_by_key_whatever_the_input_order():
    recs = _recs(50) + _recs(7, "validation")
    expected_order = {s: [r.rel for r in sorted((r for r in recs if r.split == s), key=lambda r: (r.key, r.rel))]
                      for s in ("train", "validation")}
    shuffled = recs[:]
    random.Random(3).shuffle(shuffled)
    batches = [Batch(shuffled[i:i + 9]) for i in range(0, len(shuffled), 9)]

    def flatten(element):
        (split, index, num), groups = element
        items = sorted((it for g in groups for it in unpack(g)), key=lambda it: it[0])
        return [(split, index, num, [r.rel for _, r in items])]

    with TestPipeline(runner=FnApiRunner()) as p:  # never the Prism download
        out = p | beam.Create(batches) | PlanShards(ShardSpec(num_shards=(("train", 4), ("validation", 2))))
        shards = out["shards"] | beam.FlatMap(flatten)
        want = []
        for split, num in (("train", 4), ("validation", 2)):
            order = expected_order[split]
            for k in range(num):
                want.append((split, k, num, [rel for i, rel in enumerate(order)
                                             if sharding.shard_of(i, len(order), num) == k]))
        assert_that(shards, equal_to(want))
