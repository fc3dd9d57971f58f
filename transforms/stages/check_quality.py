"""Stage CheckQuality: the data-quality figures of the manifest's "quality"
section (transforms/core/quality.py has the logic), from one small row per
written record that the shard writer emits as it writes.

Nothing gathers every record in one place: rows are grouped by the top bits
of their sha256 (exact duplicates) and by a band of their perceptual hash
(near-duplicate candidates); each group is checked with numpy on whole
columns, and the manifest lists at most quality.MAX_EXAMPLES groups or pairs
while counting all. Class counts and size histograms are summed per shard.

The cost is kept within a few percent of the conversion's (bench/quality.py):
a shard's rows travel as one element per group key, as columns (a list of
Rows costs a pickle call per Row); the checks work on whole columns with
numpy; and after the shard writer there are two steps only, one GroupByKey
and the assembly, which takes the (at most 65, capped) partial summaries as
a side input: each further step would be a barrier that costs the local
runner a fixed overhead. The duplicate groups found before writing
(--duplicates keep_one|reject) and the count they removed are side inputs too.

Input:  {"rows": [quality.Row, ...] batches (one per shard),
         "groups": exact-duplicate groups (dicts of quality.dup_group) found
                   before writing (--duplicates keep_one|reject), or absent,
         "removed": singleton count of the copies not written, or absent}
        label_map: singleton LabelMap (for class names)
Output: a singleton dict, the manifest's "quality" section
"""
from __future__ import annotations

import collections

import apache_beam as beam

from tfrecord_pipelines.transforms.core import quality
from tfrecord_pipelines.transforms.core.records import Batch
from tfrecord_pipelines.transforms.core.specs import QualitySpec
from tfrecord_pipelines.transforms.storage import spill
from tfrecord_pipelines.transforms.storage.unsized import Unsized, unwrap

EXACT, NEAR, FIGURES, DUPS_ACC, NEAR_ACC = "exact", "near", "figures", "dups_acc", "near_acc"
# Few group keys: a shard's rows travel as one element per key (elements cost the runner ~35 us each),
# and a group holds 1/16 (exact) or 1/8 of one band (near) of the rows; the exact check reads its group twice
# and keeps 8 bytes a row (quality.dup_summary_of), so its memory stays ~1 MB per million images.
SHA_BUCKET_CHARS = 1   # 16 groups by the sha256's first hex digit
NEAR_SUB_BITS = 3      # 8 groups per band by the band value's top bits


class _ScatterFn(beam.DoFn):
    """One shard's rows, regrouped by the keys the checks group on:
    (EXACT, sha256 prefix) and (NEAR, band, band value prefix); and
    (FIGURES,): the shard's class counts and size histograms."""

    def __init__(self, exact: bool, near: bool, spill_dir: str = ""):
        self._exact, self._near, self._spill_dir = exact, near, spill_dir

    def process(self, rows):
        cols = quality.Columns.of(spill.load(rows))
        counts = collections.Counter((s, i) for s, i in zip(cols.split, cols.label_id) if i is not None)
        yield (FIGURES,), (counts, quality.size_counts(cols.width, cols.height))
        groups = {}
        if self._exact:
            by_prefix = collections.defaultdict(list)
            for i, sha in enumerate(cols.sha256):
                by_prefix[sha[:SHA_BUCKET_CHARS]].append(i)
            groups.update(((EXACT, p), idx) for p, idx in by_prefix.items())
        if self._near:
            groups.update(((NEAR, *k), idx) for k, idx in quality.near_keys(cols, NEAR_SUB_BITS).items())
        # On a local run the groups wait for the GroupByKey in a spill file, not in the runner.
        put = spill.putter(self._spill_dir)
        for k, idx in sorted(groups.items()):
            yield k, put([cols.take(idx)])


def check_group(key, values, max_distance: int):
    """One partial summary per group: the shards' figures summed, or the
    exact-duplicate groups among rows whose sha256 starts alike (DUPS_ACC),
    or the near-duplicate pairs among rows sharing a band's top bits
    (NEAR_ACC): a dataset with many pairs does not pay an element per pair."""
    if key[0] == FIGURES:
        values, counts = list(values), collections.Counter()
        for c, _ in values:
            counts.update(c)
        yield FIGURES, (counts, quality.merge_sizes(s for _, s in values))
        return
    if key[0] == EXACT:
        values = list(values) if iter(values) is values else values  # read twice
        acc = quality.dup_summary_of(lambda: (c for v in values for c in spill.load(v)))
        if acc[0]:
            yield DUPS_ACC, Batch(acc)
        return
    cols = quality.Columns.concat(c for v in values for c in spill.load(v))
    acc = quality.near_summary(cols, key[1], max_distance)
    if acc[0] or acc[2]:
        yield NEAR_ACC, Batch(acc)


def combine(parts) -> tuple:
    """(duplicate summary, near summary, class counts, sizes) from check_group's parts."""
    dups, near, counts, sizes = [], [], collections.Counter(), []
    for kind, value in unwrap(parts):
        if kind == DUPS_ACC:
            dups.append(value)
        elif kind == NEAR_ACC:
            near.append(value)
        elif kind == FIGURES:
            counts.update(value[0])
            sizes.append(value[1])
    return (quality.DupSummary.merge(dups) if dups else quality.DupSummary.empty(),
            quality.NearSummary.merge(near) if near else quality.NearSummary.empty(),
            counts, quality.merge_sizes(sizes))


def assemble(_, parts, label_map, spec: QualitySpec, why_not_near: str, found=None, removed=None) -> dict:
    """The section from check_group's parts; `found`: the duplicate groups
    found before writing, `removed`: [count of the copies not written]."""
    dups, near, counts, sizes = combine(parts)
    if found is not None:
        for g in found:
            dups = quality.DupSummary.add(dups, g)
    names = {i: n for n, i in label_map.ids}
    named = collections.Counter()
    for (split, label_id), n in counts.items():
        named[(split, names.get(label_id, str(label_id)))] += n
    duplicates = quality.DupSummary.output(dups, spec.duplicates.value)
    if removed:
        duplicates["removed"] = sum(removed)  # extras not written (keep_one: not selected; reject: rejected)
    if why_not_near:
        near_out = {"hash": None, "why_not": why_not_near}
    else:
        near_out = quality.NearSummary.output(near, spec.max_distance)
    return {"duplicates": duplicates, "near_duplicates": near_out,
            "balance": quality.balance(dict(named), spec.min_class_count),
            "sizes": quality.sizes_output(sizes)}


class CheckQuality(beam.PTransform):
    """`why_not_near`: why near duplicates are not computed ("" when they are);
    `spill_dir`: a local run's spill folder (transforms/storage/spill.py)."""

    def __init__(self, spec: QualitySpec, label_map, why_not_near: str = "", spill_dir: str = ""):
        super().__init__()
        self._spill_dir = spill_dir
        self._spec = spec
        self._label_map = label_map
        self._why_not_near = why_not_near

    def expand(self, inputs):
        spec, why_not, max_distance = self._spec, self._why_not_near, self._spec.max_distance
        found, removed = inputs.get("groups"), inputs.get("removed")
        parts = (inputs["rows"]
                 | "Scatter" >> beam.ParDo(_ScatterFn(found is None, not why_not, self._spill_dir))
                 | "Group" >> beam.GroupByKey()
                 | "Check" >> beam.FlatMap(lambda kv: map(Unsized, check_group(*kv, max_distance))))
        # At most one part per group key (65), each capped: they meet as a side input, without a
        # combine's barrier; the one element of Once makes a section even when nothing was written.
        side = {"found": beam.pvalue.AsList(found)} if found is not None else {}
        if removed is not None:
            side["removed"] = beam.pvalue.AsList(removed)
        return (inputs["rows"].pipeline
                | "Once" >> beam.Create([None])
                | "Assemble" >> beam.Map(assemble, beam.pvalue.AsList(parts), beam.pvalue.AsSingleton(self._label_map),
                                         spec, why_not, **side))
