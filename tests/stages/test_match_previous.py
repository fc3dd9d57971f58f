"""MatchPrevious on its own, on Beam's TestPipeline: records joined with a
previous version's provenance files (written here, as a --versioned run
leaves them): an unchanged record carries where its bytes are, a carried
reject its reason; changed, new and removed are counted; a damaged
provenance file gives no entries, only a count, and its records are read.
The same match inside PlanShards' grouping (PreviousEntries joining the
records' buckets) gives the same records and counts."""
from __future__ import annotations

import os

import apache_beam as beam
import google_crc32c
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tfrecord_pipelines.transforms.core import provenance, sharding
from tfrecord_pipelines.transforms.core.records import Batch, Reason, Rec
from tfrecord_pipelines.transforms.core.sharding import shuffle_key
from tfrecord_pipelines.transforms.core.specs import RECORDS, STATS, ShardSpec
from tfrecord_pipelines.transforms.core.tfrecord_io import crc32c_text
from tfrecord_pipelines.transforms.stages.match_previous import MatchPrevious
from tfrecord_pipelines.transforms.storage.previous_entries import MatchSpec, PreviousEntries, entries_of
from tfrecord_pipelines.transforms.stages.plan_shards import PlanShards
from tfrecord_pipelines.transforms.storage import spill

SEED = 5
SHA = "ab" * 32


def _rec(rel, stamp, label="cat", split="train"):
    return Rec(rel=rel, path="/src/" + rel, size=stamp[1], label_text=label, label_id=0, split=split,
               key=shuffle_key(SEED, rel), stamp=stamp)


def _stamp(size, t=1):
    return provenance.mtime_stamp(size, t)


def _shard(folder, name, entries, damage=False) -> provenance.PrevShard:
    """Writes `name`'s provenance file; returns its PrevShard as the manifest lists it."""
    data = b"".join(map(provenance.encode_entry, entries))
    path = os.path.join(folder, provenance.provenance_name(name))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data[:-5] + b"xxxx\n" if damage else data)
    records = [e for e in entries if e.offset >= 0]
    return provenance.PrevShard("train", name, sum(e.length for e in records), len(records), len(data),
                                crc32c_text(google_crc32c.value(data)), records[-1].crc_after if records else 0)


def _entry(rec, offset, length=100):
    """A record's entry; running CRCs made up, chained as a writer records them (offset // 100 -> offset // 100 + 1)."""
    return provenance.Entry(rec.rel, rec.stamp, provenance.record_digest(rec), offset, length, 7, SHA, 42, 24, 16,
                            crc_before=offset // 100, crc_after=offset // 100 + 1)


def _scenario(tmp_path) -> tuple:
    """(previous version, the records listed now, the previous shards): one
    record of each kind (unchanged, relabelled, touched, a carried reject,
    new, in a damaged provenance file) and one removed."""
    folder = str(tmp_path / "v1")
    same = _rec("cat/same.jpg", _stamp(100))
    relabelled = _rec("cat/relabelled.jpg", _stamp(200))
    touched = _rec("cat/touched.jpg", _stamp(300))
    refused = _rec("cat/refused.jpg", _stamp(50))
    gone = _rec("cat/gone.jpg", _stamp(400))
    entries = [_entry(same, 0), _entry(relabelled, 100), _entry(touched, 200), _entry(gone, 300),
               provenance.Entry(refused.rel, refused.stamp, provenance.record_digest(refused),
                                reason=Reason.NOT_AN_IMAGE.value, detail="not an image file")]
    in_damaged = _rec("dog/in_damaged.jpg", _stamp(100), "dog")
    shards = (_shard(folder, "train-00000-of-00002.tfrecord", entries),
              _shard(folder, "train-00001-of-00002.tfrecord", [_entry(in_damaged, 0)], damage=True))
    prev = provenance.PreviousVersion("v1", folder, listed_at_ns=10**18, shards=shards)
    now = [same, relabelled._replace(label_text="dog", label_id=1), touched._replace(stamp=_stamp(300, 2)),
           refused, _rec("cat/new.jpg", _stamp(10)), in_damaged]
    return prev, now, shards


def _expected_prev(shards) -> list:
    same = _rec("cat/same.jpg", _stamp(100))
    return [("cat/same.jpg", (provenance.COPY, shards[0].name, 0, 100, 7, SHA, 0, 1, provenance.record_digest(same))),
            ("cat/relabelled.jpg", ()), ("cat/touched.jpg", ()),
            ("cat/refused.jpg", (provenance.REJECT, Reason.NOT_AN_IMAGE.value, "not an image file")),
            ("cat/new.jpg", ()), ("dog/in_damaged.jpg", ())]


EXPECTED_STATS = [("incremental/unchanged", 2), ("incremental/changed", 2), ("incremental/new", 2),
                  ("incremental/removed", 1), ("incremental/damaged", 1)]


def test_unchanged_records_carry_the_previous_copy_and_the_rest_are_counted(tmp_path):
    prev, now, shards = _scenario(tmp_path)
    with TestPipeline() as p:
        out = p | beam.Create([Batch(now[:3]), Batch(now[3:])]) | MatchPrevious(MatchSpec(prev, SEED))
        assert_that(out[RECORDS] | "Prev" >> beam.FlatMap(lambda b: [(r.rel, r.prev) for r in b]),
                    equal_to(_expected_prev(shards)))
        # What planning and the quality checks need of a copied record comes from the provenance.
        assert_that(out[RECORDS] | "Copied" >> beam.FlatMap(
            lambda b: [(r.size, r.width, r.height, r.phash) for r in b if r.prev and r.prev[0] == provenance.COPY]),
            equal_to([(100, 24, 16, 42)]), label="copied")
        assert_that(out[STATS] | beam.CombinePerKey(sum), equal_to(EXPECTED_STATS), label="stats")


def test_previous_entries_are_keyed_like_the_records_and_a_damaged_file_is_counted(tmp_path):
    prev, now, shards = _scenario(tmp_path)
    with TestPipeline() as p:
        out = p | PreviousEntries(MatchSpec(prev, SEED))
        # One value per (split, bucket) group of a shard; the damaged file gives none, and counts its records.
        got = out["e"] | beam.MapTuple(lambda key, v: sorted((key, row[0], row[1]) for row in entries_of([v])))
        want = [((shards[0].split, sharding.bucket_of(shuffle_key(SEED, rel))), shards[0].name, rel)
                for rel in ("cat/same.jpg", "cat/relabelled.jpg", "cat/touched.jpg", "cat/gone.jpg",
                            "cat/refused.jpg")]
        assert_that(got | beam.FlatMap(lambda rows: rows), equal_to(want))
        assert_that(out[STATS], equal_to([("incremental/damaged", 1)]), label="stats")


def test_plan_shards_matches_with_the_previous_version_as_match_previous_does(tmp_path):
    """PlanShards with `previous` (pipelines/run/pipeline.py match_in_plan): the
    records it plans carry what MatchPrevious would have given them, and the
    counts are the same; the plan itself is the one of the records alone."""
    prev, now, shards = _scenario(tmp_path)
    for spill_dir in ("", str(tmp_path / "spill")):
        with TestPipeline() as p:
            out = p | beam.Create([Batch(now[:3]), Batch(now[3:])]) | PlanShards(
                ShardSpec(num_shards=(("*", 2),)), spill_dir, MatchSpec(prev, SEED, spill_dir=spill_dir))
            planned = out["shards"] | beam.FlatMapTuple(
                lambda k, groups: [(r.rel, r.prev) for g in groups for _, r in spill.load(g)])
            assert_that(planned, equal_to(_expected_prev(shards)))
            assert_that(out[STATS] | beam.CombinePerKey(sum), equal_to(EXPECTED_STATS), label="stats")
            assert_that(out["plans"] | beam.Map(lambda plans: plans["train"].count), equal_to([len(now)]),
                        label="plan")
