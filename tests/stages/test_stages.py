"""Each stage on its own, on Beam's TestPipeline with assert_that, its counters
read with MetricsFilter: what it emits, what it rejects and why, whether its
records are inline or spilled. The end-to-end tests run them together."""
from __future__ import annotations

import os

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from conftest import image_bytes, write
from tfrecord_pipelines.transforms.core.images import ImagePolicy
from tfrecord_pipelines.transforms.core.records import Batch, Rec, Reason
from tfrecord_pipelines.transforms.core.sharding import shuffle_key
from tfrecord_pipelines.transforms.core.specs import RECORDS, REJECTS, LabelSource, LabelSpec, ShardSpec, SplitSource, SplitSpec
from tfrecord_pipelines.transforms.stages.assign_labels import AssignLabels
from tfrecord_pipelines.transforms.stages.plan_shards import PlanShards
from tfrecord_pipelines.transforms.stages.split import Split
from tfrecord_pipelines.transforms.stages.validate_images import ValidateImages, ValidateSpec
from tfrecord_pipelines.transforms.storage import spill


def _recs(*rels, **kw):
    return [Rec(rel=r, path="/nowhere/" + r, **kw) for r in rels]


def test_assign_labels_builds_the_map_from_every_batch_and_applies_it():
    batches = [Batch(_recs("dog/1.jpg", "cat/2.jpg")), Batch(_recs("bird/3.jpg", "x.jpg"))]
    with TestPipeline() as p:
        out = (p | beam.Create(batches) | AssignLabels(LabelSpec(LabelSource.FOLDER)))
        ids = out[RECORDS] | "Ids" >> beam.FlatMap(lambda b: [(r.rel, r.label_text, r.label_id) for r in b])
        assert_that(ids, equal_to([("bird/3.jpg", "bird", 0), ("cat/2.jpg", "cat", 1), ("dog/1.jpg", "dog", 2)]))
        bad = out[REJECTS] | "Bad" >> beam.FlatMap(lambda b: [(r.rel, r.reason) for r in b])
        assert_that(bad, equal_to([("x.jpg", Reason.NO_LABEL.value)]), label="rejects")
        classes = out["label_map"] | beam.Map(lambda lm: sorted(lm.as_dict()))
        assert_that(classes, equal_to([["bird", "cat", "dog"]]), label="map")


def test_assign_labels_reads_spilled_batches(tmp_path):
    refs = [spill.spill(_recs("dog/1.jpg", "cat/2.jpg"), str(tmp_path))]
    with TestPipeline() as p:
        out = p | beam.Create(refs) | AssignLabels(LabelSpec(LabelSource.FOLDER))
        ids = out[RECORDS] | beam.FlatMap(lambda b: [(r.rel, r.label_id) for r in b])
        assert_that(ids, equal_to([("cat/2.jpg", 0), ("dog/1.jpg", 1)]))


def test_split_by_folder_rejects_a_bad_split_name_and_keys_every_record():
    recs = _recs("train/a.jpg", "validation/b.jpg", "bad-name/c.jpg")
    with TestPipeline() as p:
        out = p | beam.Create([Batch(recs)]) | Split(SplitSpec(SplitSource.FOLDERS), seed=7)
        got = out[RECORDS] | "Got" >> beam.FlatMap(lambda b: [(r.rel, r.split, r.key) for r in b])
        assert_that(got, equal_to([("train/a.jpg", "train", shuffle_key(7, "train/a.jpg")),
                                   ("validation/b.jpg", "validation", shuffle_key(7, "validation/b.jpg"))]))
        bad = out[REJECTS] | "Bad" >> beam.FlatMap(lambda b: [(r.rel, r.reason) for r in b])
        assert_that(bad, equal_to([("bad-name/c.jpg", Reason.BAD_SPLIT.value)]), label="rejects")


def _planned(spill_dir: str):
    recs = [r._replace(split="train", key=shuffle_key(0, r.rel), size=10) for r in _recs(*[f"{i}.jpg" for i in range(50)])]
    with TestPipeline() as p:
        out = p | beam.Create([Batch(recs[:20]), Batch(recs[20:])]) | PlanShards(
            ShardSpec(num_shards=(("*", 4),)), spill_dir)
        shards = out["shards"] | beam.MapTuple(
            lambda k, groups: (k, [(pos, r.rel) for g in groups for pos, r in spill.load(g)]))
        got = shards | beam.MapTuple(lambda k, items: (k, sorted(items)))
        order = sorted(recs, key=lambda r: (r.key, r.rel))
        want = [(("train", s, 4), [(i, order[i].rel) for i in range(s * 50 // 4, (s + 1) * 50 // 4)]) for s in range(4)]
        assert_that(got, equal_to(want))


def test_plan_shards_gives_each_position_one_shard_inline_and_spilled(tmp_path):
    _planned("")
    _planned(str(tmp_path / "spill"))
    assert os.listdir(tmp_path / "spill")  # the spilled plan did go through files


def test_validate_images_counts_what_it_passes_and_rejects(tmp_path):
    good = write(str(tmp_path / "a" / "ok.jpg"), image_bytes(seed=1))
    bad = write(str(tmp_path / "a" / "bad.jpg"), b"<html>")
    recs = [Rec(rel="a/ok.jpg", path=good), Rec(rel="a/bad.jpg", path=bad), Rec(rel="a/gone.jpg", path=good + "x")]
    p = TestPipeline()
    out = p | beam.Create([Batch(recs)]) | ValidateImages(ValidateSpec(ImagePolicy()))
    assert_that(out[RECORDS] | "Ok" >> beam.FlatMap(lambda b: [(r.rel, r.fmt, r.width, r.height) for r in b]),
                equal_to([("a/ok.jpg", "jpeg", 24, 16)]))
    assert_that(out[REJECTS] | "Bad" >> beam.FlatMap(lambda b: [(r.rel, r.reason) for r in b]),
                equal_to([("a/bad.jpg", Reason.NOT_AN_IMAGE.value), ("a/gone.jpg", Reason.MISSING.value)]),
                label="rejects")
    result = p.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace("tfrecords"))["counters"]}
    assert counters["images_valid"] == 1 and counters["images_rejected"] == 2
    assert counters["bytes_validated"] == len(image_bytes(seed=1))
