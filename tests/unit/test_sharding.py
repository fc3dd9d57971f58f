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
from tfrecord_pipelines.transforms.core.specs import ShardNames
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


TPU = dict(shard_bytes=150 * 10**6, multiple=8, counts="tpu")


@pytest.mark.parametrize("count, nbytes, want", [
    (1_281_167, 140 * 10**9, 1024),   # ImageNet-1k train: 934 shards of 150 MB, raised to its converter's 1024
    (50_000, 6_400 * 10**6, 128),     # ImageNet-1k validation: 43, raised to 128
    (49_999, 6_400 * 10**6, 48),      # below ImageNet's size: a multiple of 8 hosts
    (999_999, 100 * 10**9, 672),      # 667 shards of 150 MB, over the 128 floor: kept near --shard_size
    (14_000_000, 1_400 * 10**9, 9336),  # ImageNet-21k: shards near 150 MB, not 1.3 GB at 1024
    (40, 10**6, 8),                   # a small split: one shard, rounded up to 8
])
def test_tpu_shard_counts(count, nbytes, want):
    """--shard_counts tpu (the tpu-* profiles): tensorflow/tpu's 1024 / 128 for
    a split of ImageNet's size, else --shard_size rounded to a multiple of 8."""
    assert sharding.num_shards_for("any", count, nbytes, ShardSpec(**TPU)) == want
    assert sharding.num_shards_for("any", count, nbytes, ShardSpec(**TPU, num_shards=(("*", 24),))) == 24  # given wins


def test_tpu_floor_is_by_record_count():
    assert [sharding.tpu_floor(n) for n in (0, 49_999, 50_000, 999_999, 1_000_000, 10**8)] == [0, 0, 128, 128, 1024,
                                                                                             1024]
    # The default rule (size) has no floor: 1,000,000 tiny records in one shard.
    assert sharding.num_shards_for("train", 1_000_000, 10**6, ShardSpec()) == 1


@pytest.mark.parametrize("names, fmt, compression, want, pattern", [
    (ShardNames(), "tfrecord", "none", "train-00003-of-00016.tfrecord", "train-*"),
    (ShardNames(suffix=".tfrecords"), "tfrecord", "none", "train-00003-of-00016.tfrecords", "train-*"),
    (ShardNames(suffix="none"), "tfrecord", "none", "train-00003-of-00016", "train-*"),
    (ShardNames(suffix="none"), "tfrecord", "gzip", "train-00003-of-00016.gz", "train-*"),
    (ShardNames(), "array_record", "none", "train-00003-of-00016.array_record", "train-*"),
    (ShardNames(template="tfds", dataset="mnist"), "tfrecord", "none", "mnist-train.tfrecord-00003-of-00016",
     "mnist-train.tfrecord-*"),
    (ShardNames(template="tfds", dataset="mnist"), "array_record", "none", "mnist-train.array_record-00003-of-00016",
     "mnist-train.array_record-*"),
])
def test_shard_names_of_every_naming_are_read_back_as_shards(names, fmt, compression, want, pattern):
    """The name the writer gives, the manifest's pattern, and the readers' test
    (layout.SHARD_RE and split_of: verify, the manifest's check, cleanup) agree."""
    import fnmatch
    from tfrecord_pipelines.options.config import Compression
    from tfrecord_pipelines.transforms.core.specs import OutputFormat
    from tfrecord_pipelines.transforms.storage import layout
    spec = ShardSpec(names=names, output_format=OutputFormat(fmt), compression=Compression(compression))
    name = sharding.name_of(spec, "train", 3, 16)
    assert name == want
    assert sharding.pattern_of(names, fmt, "train") == pattern and fnmatch.fnmatch(name, pattern)
    assert layout.SHARD_RE.match(name) and layout.split_of(name) == "train"
    assert not layout.SHARD_RE.match(layout.index_name(name).rsplit("/", 1)[1])  # an index is never a shard
    assert not fnmatch.fnmatch(sharding.name_of(spec, "train_extra", 3, 16), pattern)  # another split's


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


def _described(shards: ShardSpec, source_ids: bool = False) -> dict:
    """The settings as ConvertConfig.describe() gives them, for the parts shard_options reads."""
    import dataclasses
    import json
    plain = json.loads(json.dumps(dataclasses.asdict(shards), default=lambda e: e.value))
    return {"shards": plain, "output": {"feature_keys": [], "source_ids": source_ids}, "inputs": {}, "labels": {},
            "images": {"reads": {}}}


def test_default_names_and_counts_fingerprint_as_before_they_existed():
    """A --versioned dataset made before --shard_suffix, --shard_template,
    --shard_counts and --source_ids existed is not 'changed options' for a run
    that leaves them at their defaults; any other value is a change."""
    from tfrecord_pipelines.transforms.core import fingerprint
    plain = fingerprint.shard_options(_described(ShardSpec()))
    assert "names" not in plain["shards"] and "counts" not in plain["shards"] and "source_ids" not in plain
    for spec, ids in ((ShardSpec(names=ShardNames(suffix="none")), False), (ShardSpec(counts="tpu"), False),
                      (ShardSpec(names=ShardNames(template="tfds", dataset="x")), False), (ShardSpec(), True)):
        assert fingerprint.shard_options(_described(spec, ids)) != plain


def test_tfds_file_name_template_of_each_naming():
    """dataset_info.json's filepathTemplate, which TFDS formats to open each shard."""
    from tfrecord_pipelines.transforms.core.tfds_metadata import filename_template
    def names(**kw):
        return {"shards": {"names": {**{"suffix": ".tfrecord", "template": "split", "dataset": ""}, **kw}}}
    assert filename_template({}) == filename_template(names()) == "{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}"
    assert filename_template(names(suffix="none")) == "{SPLIT}-{SHARD_X_OF_Y}"
    assert filename_template(names(suffix=".tfrecords")) == "{SPLIT}-{SHARD_X_OF_Y}.tfrecords"
    assert filename_template(names(template="tfds", dataset="mnist")) == "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
