"""Stage DropDuplicates (--duplicates keep_one|reject): of the validated
files with the same content (sha256 of their bytes, computed by
ValidateImages), keep one, the smallest relative path (the same choice on
every runner), before shards are planned. The others are not selected
(keep_one: counted in the manifest's counts.not_selected) or rejected as
duplicate_content (reject: listed in rejects.jsonl with the copy kept).

Records are grouped by the first hex digits of their sha256, a shard-like
batch per group key, so no step holds them all at once and the groups leave
as batches, ready for PlanShards.

Input:  [Rec, ...] batches with sha256
Output: records [Rec, ...]; rejects [Reject, ...]; stats ("not_selected", n; with --annotations
        "boxes/in_rejected_images", n);
        groups (quality.dup_group dicts, for CheckQuality); removed (singleton count)
"""
from __future__ import annotations

import collections

import apache_beam as beam

from tfrecord_pipelines.transforms.core import quality
from tfrecord_pipelines.transforms.core.annotations import IN_REJECTED, boxes_in
from tfrecord_pipelines.transforms.core.records import Batch, Reason, reject
from tfrecord_pipelines.transforms.core.specs import RECORDS, REJECTS, STATS, DuplicatePolicy
from tfrecord_pipelines.transforms.storage import spill

GROUPS, REMOVED = "groups", "removed"
BUCKET_CHARS = 2


def _by_bucket(batch, spill_dir: str = ""):
    groups = collections.defaultdict(list)
    for rec in spill.load(batch):
        groups[rec.sha256[:BUCKET_CHARS]].append(rec)
    put = spill.putter(spill_dir)  # a local run: the groups wait in a spill file, not in the runner
    return [(k, put(v)) for k, v in sorted(groups.items())]


def as_row(rec) -> quality.Row:
    return quality.Row(rec.rel, rec.split or "", rec.label_text, rec.label_id, rec.sha256, rec.phash,
                       rec.width, rec.height)


def decide(recs: list, policy: DuplicatePolicy):
    """(kept records, rejects, not selected, duplicate groups) of records
    whose sha256 share a bucket."""
    by_sha = collections.defaultdict(list)
    for rec in recs:
        by_sha[rec.sha256].append(rec)
    kept, rejects, dropped, groups = Batch(), Batch(), 0, []
    for sha, same in sorted(by_sha.items()):
        same.sort(key=lambda r: r.rel)
        kept.append(same[0])
        if len(same) == 1:
            continue
        groups.append(quality.dup_group(sha, [as_row(r) for r in same]))
        for extra in same[1:]:
            if policy is DuplicatePolicy.REJECT:
                rejects.append(reject(extra, Reason.DUPLICATE_CONTENT,
                                      f"the same bytes (sha256 {sha[:16]}...) as {same[0].rel!r}, which is kept"))
            else:
                dropped += 1
    return kept, rejects, dropped, groups


class _DecideFn(beam.DoFn):
    def __init__(self, policy: DuplicatePolicy):
        self._policy = policy

    def process(self, element):
        _, packed = element
        recs = [r for b in packed for r in spill.load(b)]
        kept, rejects, dropped, groups = decide(recs, self._policy)
        if kept:
            yield kept
        if rejects:
            yield beam.pvalue.TaggedOutput(REJECTS, rejects)
            rejected = {r.rel for r in rejects}
            boxes = sum(boxes_in(r.annotation) for r in recs if r.rel in rejected)
            if boxes:  # --annotations: the detection section reconciles
                yield beam.pvalue.TaggedOutput(STATS, (IN_REJECTED, boxes))
        if dropped:
            yield beam.pvalue.TaggedOutput(STATS, ("not_selected", dropped))
        for g in groups:
            yield beam.pvalue.TaggedOutput(GROUPS, g)
        yield beam.pvalue.TaggedOutput(REMOVED, len(rejects) + dropped)


class DropDuplicates(beam.PTransform):
    def __init__(self, policy: DuplicatePolicy, spill_dir: str = ""):
        super().__init__()
        self._policy = policy
        self._spill_dir = spill_dir

    def expand(self, batches):
        out = (batches
               | "BySha" >> beam.FlatMap(_by_bucket, self._spill_dir)
               | "Group" >> beam.GroupByKey()
               | "Decide" >> beam.ParDo(_DecideFn(self._policy)).with_outputs(REJECTS, STATS, GROUPS, REMOVED,
                                                                               main=RECORDS))
        removed = out[REMOVED] | "Removed" >> beam.CombineGlobally(sum)
        return {RECORDS: out[RECORDS], REJECTS: out[REJECTS], STATS: out[STATS], GROUPS: out[GROUPS],
                REMOVED: removed}
