"""Deterministic shuffle and shard planning, as pure functions.

Within a split, records are ordered by a 64-bit key hashed from (seed, relative
path): a seeded pseudo-random permutation that does not depend on listing
order, runner or worker count. Shard k of S holds the records at positions
[floor(k*N/S), floor((k+1)*N/S)) of that order, so shard counts differ by at
most one. Exact positions are found without gathering a split in one place:
the key space is cut into buckets by the key's top bits, each bucket is sorted
on its own, and a bucket's offset is the count of the buckets before it
(tensorflow_datasets' writer does the same).
"""
from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

from tfrecord_pipelines.transforms.core.specs import OutputFormat, ShardNames, ShardSpec

# 256 buckets: one is sorted in memory on one worker, N/256 records (55,000 at
# 14 M images, ~35 MB); more buckets mean more, smaller groups to shuffle.
# The shards do not depend on it: records are in key order either way.
BUCKET_BITS = 8


def shuffle_key(seed: int, rel: str) -> int:
    digest = hashlib.blake2b(rel.encode("utf-8", "surrogateescape"), digest_size=8,
                             key=seed.to_bytes(8, "big", signed=True)).digest()
    return int.from_bytes(digest, "big")


def bucket_of(key: int) -> int:
    return key >> (64 - BUCKET_BITS)


# --shard_counts tpu: tensorflow/tpu's ImageNet converter (tools/datasets/imagenet_to_gcs.py) writes 1024
# train and 128 validation shards, and EfficientNet's holdout_shards mode names train-%05d-of-01024 by hand.
# A split of ImageNet's size gets at least those counts: (records at least, shards at least), first match.
# ImageNet-1k: 1,281,167 train images (~140 GB: 934 shards of 150 MB, so 1024) and 50,000 validation
# (~6.4 GB: 43 shards, so 128). A larger split keeps its shards near --shard_size (ImageNet-21k's 14 M
# images at 1024 would be 1.3 GB each).
TPU_FLOORS = ((1_000_000, 1024), (50_000, 128))


def tpu_floor(count: int) -> int:
    """The fewest shards --shard_counts tpu gives a split of `count` records (0: no floor)."""
    return next((n for at_least, n in TPU_FLOORS if count >= at_least), 0)


def num_shards_for(split: str, count: int, total_bytes: int, spec: ShardSpec) -> int:
    """Shards for a split: the requested count, or enough shards of about
    --shard_size (with --shard_counts tpu at least tpu_floor's), rounded up
    to --shard_multiple. An empty split gets none."""
    if count == 0:
        return 0
    n = spec.requested(split)
    if not n:
        n = max(1, math.ceil(total_bytes / spec.shard_bytes))
        n = min(n, count)  # no empty shards unless a multiple asks for them
        if spec.counts == "tpu":
            n = max(n, tpu_floor(count))
    if spec.multiple > 1:
        n = math.ceil(n / spec.multiple) * spec.multiple
    return n


def shard_of(index: int, count: int, num_shards: int) -> int:
    """The shard holding position `index`: the largest k with floor(k*N/S) <= index."""
    return ((index + 1) * num_shards - 1) // count


def shard_name(split: str, index: int, num_shards: int, suffix: str = "", extension: str = "tfrecord",
               template: str = "split", dataset: str = "") -> str:
    """`suffix`: the compression's (.gz); `extension` "": none (train-00000-of-00016);
    template "tfds": TFDS's {DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}."""
    width = max(5, len(str(num_shards)))  # TFDS's _num_digits_needed: the same
    x_of_y = f"{index:0{width}d}-of-{num_shards:0{width}d}"
    if template == "tfds":
        return f"{dataset}-{split}.{extension}-{x_of_y}{suffix}"
    return f"{split}-{x_of_y}" + (f".{extension}" if extension else "") + suffix


def extension_of(names: ShardNames, output_format: OutputFormat) -> str:
    """The shard file's extension ("" for none): the format's, or --shard_suffix's for TFRecord."""
    if OutputFormat(output_format) is not OutputFormat.TFRECORD:
        return OutputFormat(output_format).extension
    return {".tfrecords": "tfrecords", "none": ""}.get(names.suffix, "tfrecord")


def name_of(spec: ShardSpec, split: str, index: int, num_shards: int) -> str:
    """Shard `index` of `num_shards` of `split`, as the run names it."""
    return shard_name(split, index, num_shards, spec.compression.suffix, extension_of(spec.names, spec.output_format),
                      spec.names.template, spec.names.dataset)


def pattern_of(names: ShardNames, output_format: OutputFormat, split: str) -> str:
    """The glob that matches a split's shards and nothing else of the output (the manifest's `pattern`)."""
    if names.template == "tfds":
        return f"{names.dataset}-{split}.{extension_of(names, output_format)}-*"
    return f"{split}-*"


def names_of(options: dict) -> ShardNames:
    """A run's ShardNames from its settings as the manifest records them (options.shards.names)."""
    d = ((options or {}).get("shards") or {}).get("names") or {}
    return ShardNames(**{k: v for k, v in d.items() if k in ShardNames.__dataclass_fields__ and isinstance(v, str)})


class SplitPlan(NamedTuple):
    count: int
    bytes: int
    num_shards: int
    offsets: dict  # bucket -> position of the bucket's first record


def make_plans(bucket_totals: dict, spec: ShardSpec) -> dict:
    """{split: SplitPlan} from {(split, bucket): (count, bytes)}."""
    plans = {}
    for split in sorted({s for s, _ in bucket_totals}):
        buckets = sorted(b for s, b in bucket_totals if s == split)
        offsets, pos, total_bytes = {}, 0, 0
        for b in buckets:
            count, nbytes = bucket_totals[(split, b)]
            offsets[b] = pos
            pos += count
            total_bytes += nbytes
        plans[split] = SplitPlan(pos, total_bytes, num_shards_for(split, pos, total_bytes, spec), offsets)
    return plans


def assign_shards(split: str, bucket: int, recs: list, plan: SplitPlan) -> dict:
    """{shard: [(position, rec), ...]} for one sorted bucket."""
    out: dict = {}
    pos = plan.offsets[bucket]
    for i, rec in enumerate(recs):
        out.setdefault(shard_of(pos + i, plan.count, plan.num_shards), []).append((pos + i, rec))
    return out
