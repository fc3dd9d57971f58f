"""CheckQuality on its own, on Beam's TestPipeline: the manifest's "quality"
section from rows spread over several shards, with the groups inline or
spilled; with nothing written; with the groups found before writing."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that

from tfrecord_pipelines.transforms.core import quality
from tfrecord_pipelines.transforms.core.labels import LabelMap
from tfrecord_pipelines.transforms.core.records import Batch
from tfrecord_pipelines.transforms.core.specs import DuplicatePolicy, LabelType, QualitySpec
from tfrecord_pipelines.transforms.stages.check_quality import CheckQuality

LABELS = LabelMap(LabelType.CLASS, (("cat", 0), ("dog", 1)))
BASE = 0x0123456789ABCDEF


def row(rel, split="train", label_id=0, sha=None, phash=-1, w=500, h=375):
    return quality.Row(rel, split, ["cat", "dog"][label_id], label_id, sha or rel, phash, w, h)


# Three shards: an exact copy across splits, a near pair (3 bits apart) across shards, a far image,
# one image not decoded (no hash).
SHARDS = [
    [row("train/cat/a.jpg", sha="s1", phash=BASE), row("train/cat/far.jpg", phash=BASE ^ ((1 << 40) - 1))],
    [row("validation/dog/a_copy.jpg", "validation", 1, sha="s1", phash=BASE),
     row("train/dog/b.jpg", label_id=1, phash=BASE ^ 0b10101 << 30, w=64, h=48)],
    [row("train/cat/png.png", w=31, h=1000)],
]


def section_of(shards, spec=QualitySpec(), spill_dir="", extra=None, check=None) -> None:
    """Runs CheckQuality on the shards' rows; `check(section)` asserts on the one section it makes."""
    def matcher(got):
        assert len(got) == 1, got
        check(got[0])
    with TestPipeline() as p:
        # Made by a Map: Create would encode the dataclass with a schema coder Beam infers, and fail.
        label_map = p | "Once" >> beam.Create([None]) | "LabelMap" >> beam.Map(lambda _: LABELS)
        inputs = {"rows": p | beam.Create([Batch(s) for s in shards]),
                  **{k: p | f"Create{k}" >> beam.Create(v) for k, v in (extra or {}).items()}}
        assert_that(inputs | CheckQuality(spec, label_map, "", spill_dir), matcher)


def planted_section(section):
    d, nd = section["duplicates"], section["near_duplicates"]
    assert (d["groups"], d["extra_copies"], d["across_splits"], d["conflicting_labels"]) == (1, 1, 1, 1)
    assert [f["path"] for f in d["examples"][0]["files"]] == ["train/cat/a.jpg", "validation/dog/a_copy.jpg"]
    # b is 3 bits from a and from its copy; the copies themselves are exact duplicates, not a near pair.
    assert (nd["pairs"], nd["across_splits"], nd["skipped_records"]) == (2, 1, 0)
    assert [(e["distance"], e["a"]["path"], e["b"]["path"]) for e in nd["examples"]] == [
        (3, "train/dog/b.jpg", "validation/dog/a_copy.jpg"), (3, "train/cat/a.jpg", "train/dog/b.jpg")]
    assert section["balance"]["per_split"] == {"train": {"cat": 3, "dog": 1}, "validation": {"dog": 1}}
    assert sum(section["sizes"]["width"]["counts"]) == 5
    assert section["sizes"]["width"]["counts"][0] == 1  # 31 px wide: the first bin


def test_the_section_from_rows_of_several_shards_inline_and_spilled(tmp_path):
    section_of(SHARDS, check=planted_section)
    section_of(SHARDS, spill_dir=str(tmp_path), check=planted_section)
    assert list(tmp_path.iterdir())  # the groups waited in spill files


def empty_section(section):
    assert section["duplicates"]["groups"] == 0 and section["near_duplicates"]["pairs"] == 0
    assert section["balance"]["per_split"] == {} and sum(section["sizes"]["width"]["counts"]) == 0


def test_nothing_written_still_gives_a_section():
    section_of([], check=empty_section)


FOUND = quality.dup_group("s9", [row("train/cat/x.jpg"), row("train/cat/y.jpg")])


def found_section(section):
    d = section["duplicates"]
    assert (d["policy"], d["groups"], d["extra_copies"], d["removed"]) == ("keep_one", 1, 1, 1)
    assert d["examples"] == [FOUND]


def test_groups_found_before_writing_and_the_removed_count_join_the_section():
    section_of([[row("train/cat/x.jpg")]], QualitySpec(duplicates=DuplicatePolicy.KEEP_ONE),
               extra={"groups": [FOUND], "removed": [1]}, check=found_section)
