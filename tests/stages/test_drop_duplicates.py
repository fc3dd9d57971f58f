"""DropDuplicates on its own, on Beam's TestPipeline: of records with the same
content (sha256), the smallest path is kept on every policy; the others are
not selected (keep_one: counted) or rejected with the copy kept named
(reject); the groups and the removed count go to CheckQuality; counts
reconcile, whatever batches the records came in."""
from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from tfrecord_pipelines.transforms.core.records import Batch, Reason, Rec
from tfrecord_pipelines.transforms.core.specs import RECORDS, REJECTS, STATS, DuplicatePolicy
from tfrecord_pipelines.transforms.stages.drop_duplicates import GROUPS, REMOVED, DropDuplicates
from tfrecord_pipelines.transforms.storage import spill

SHA_A, SHA_B, SHA_C = "aa" + "1" * 62, "aa" + "2" * 62, "c3" + "3" * 62  # A and B share a bucket


def _rec(rel, sha):
    return Rec(rel=rel, path="/nowhere/" + rel, split="train", label_text="cat", label_id=0, sha256=sha,
               width=8, height=8)


# A: three copies (across batches), B: one file in A's bucket, C: two copies.
BATCHES = [Batch([_rec("z/a3.jpg", SHA_A), _rec("b.jpg", SHA_B), _rec("c2.jpg", SHA_C)]),
           Batch([_rec("a1.jpg", SHA_A), _rec("m/a2.jpg", SHA_A), _rec("c1.jpg", SHA_C)])]


def _apply(policy, spill_dir="", batches=BATCHES, expect=None):
    with TestPipeline() as p:
        out = p | beam.Create(batches) | DropDuplicates(policy, spill_dir)
        expect(out)


def _kept(out):
    assert_that(out[RECORDS] | "Kept" >> beam.FlatMap(lambda b: [r.rel for r in spill.load(b)]),
                equal_to(["a1.jpg", "b.jpg", "c1.jpg"]), label="kept")
    assert_that(out[GROUPS] | "Groups" >> beam.Map(lambda g: [f["path"] for f in g["files"]]),
                equal_to([["a1.jpg", "m/a2.jpg", "z/a3.jpg"], ["c1.jpg", "c2.jpg"]]), label="groups")
    assert_that(out[REMOVED], equal_to([3]), label="removed")


@pytest.mark.parametrize("spilled", [False, True])
def test_keep_one_keeps_the_smallest_path_and_counts_the_others_not_selected(tmp_path, spilled):
    def expect(out):
        _kept(out)
        assert_that(out[STATS] | beam.CombinePerKey(sum), equal_to([("not_selected", 3)]), label="stats")
        assert_that(out[REJECTS], equal_to([]), label="rejects")
    _apply(DuplicatePolicy.KEEP_ONE, str(tmp_path) if spilled else "", expect=expect)
    if spilled:
        assert list(tmp_path.iterdir())  # the groups waited in spill files


def test_reject_rejects_each_extra_copy_naming_the_one_kept():
    def expect(out):
        _kept(out)
        assert_that(out[REJECTS] | beam.FlatMap(lambda b: [(r.rel, r.reason, r.detail.rsplit(" as ", 1)[1])
                                                           for r in b]),
                    equal_to([("m/a2.jpg", Reason.DUPLICATE_CONTENT.value, "'a1.jpg', which is kept"),
                              ("z/a3.jpg", Reason.DUPLICATE_CONTENT.value, "'a1.jpg', which is kept"),
                              ("c2.jpg", Reason.DUPLICATE_CONTENT.value, "'c1.jpg', which is kept")]),
                    label="rejects")
        assert_that(out[STATS], equal_to([]), label="stats")
    _apply(DuplicatePolicy.REJECT, expect=expect)


def test_no_duplicates_passes_every_record_and_removes_none():
    def expect(out):
        assert_that(out[RECORDS] | beam.FlatMap(lambda b: [r.rel for r in b]), equal_to(["b.jpg", "c1.jpg"]))
        assert_that(out[GROUPS], equal_to([]), label="groups")
        assert_that(out[REMOVED], equal_to([0]), label="removed")
    _apply(DuplicatePolicy.KEEP_ONE, batches=[Batch([_rec("b.jpg", SHA_B)]), Batch([_rec("c1.jpg", SHA_C)])],
           expect=expect)
