"""Stage CheckQuality: the data-quality figures of the manifest's "quality"
section (transforms/core/quality.py has the logic), from one small row per
written record that the shard writer emits as it writes.

Nothing gathers every record in one place: rows are grouped by the top bits
of their sha256 (exact duplicates) and by a band of their perceptual hash
(near-duplicate candidates); only groups of two or more leave those steps,
and the manifest lists at most quality.MAX_EXAMPLES of each while counting
all. Class counts and size histograms are summed per shard, then combined.
A shard's rows travel as one packed element per group key, not one element
per record, so the checks stay within a few percent of the conversion's cost
(bench/quality.py).

Input:  {"rows": [quality.Row, ...] batches (one per shard),
         "groups": exact-duplicate groups (dicts of quality.dup_group) found
                   before writing (--duplicates keep_one|reject), or absent}
        label_map: singleton LabelMap (for class names)
Output: a singleton dict, the manifest's "quality" section
"""
from __future__ import annotations

import collections
import apache_beam as beam

from transforms.core import quality
from transforms.core.records import Batch, pack
from transforms.core.specs import QualitySpec
from transforms.storage import spill

EXACT, NEAR, DUPS, DUPS_ACC, NEAR_ACC, FIGURES, REMOVED = (
    "exact", "near", "dups", "dups_acc", "near_acc", "figures", "removed")
# Few group keys: a shard's rows travel as one element per key (elements cost the runner ~35 us each),
# and a group holds 1/16 (exact) or 1/48 (near) of the rows, a few MB at a million images.
SHA_BUCKET_CHARS = 1   # 16 groups by the sha256's first hex digit
NEAR_SUB_BITS = 3      # 8 groups per band by the band value's top bits


class _ScatterFn(beam.DoFn):
    """One shard's rows, regrouped by the keys the checks group on:
    (EXACT, sha256 prefix) and (NEAR, band, band value prefix); and the
    shard's class counts and size histograms."""

    def __init__(self, exact: bool, near: bool, spill_dir: str = ""):
        self._exact, self._near, self._spill_dir = exact, near, spill_dir

    def process(self, rows):
        groups = collections.defaultdict(list)
        counts = collections.Counter()
        sizes = quality.empty_sizes()
        for r in rows:
            if self._exact:
                groups[(EXACT, r.sha256[:SHA_BUCKET_CHARS])].append(r)
            if self._near and r.phash >= 0:
                for band, value in quality.bands(r.phash):
                    groups[(NEAR, band, value >> (quality.BAND_WIDTHS[band] - NEAR_SUB_BITS))].append(r)
            if r.label_id is not None:
                counts[(r.split, r.label_id)] += 1
            quality.add_sizes(sizes, r.width, r.height)
        # On a local run the groups wait for the GroupByKey in a spill file, not in the runner.
        writer = spill.SpillWriter(self._spill_dir) if self._spill_dir else None
        put = writer.add if writer else pack
        try:
            for k, rs in sorted(groups.items()):
                yield k, put(rs)
        finally:
            if writer:
                writer.close()
        yield beam.pvalue.TaggedOutput(FIGURES, (FIGURES, (counts, sizes)))


def check_group(key, batches, max_distance: int):
    """The exact-duplicate groups among rows whose sha256 starts alike, or
    the near-duplicate pairs among rows sharing a band's top bits, summed
    here into one partial summary (DUPS_ACC or NEAR_ACC): a dataset with
    many pairs does not pay an element per pair."""
    rows = [r for b in batches for r in spill.load(b)]
    if key[0] == EXACT:
        by_sha = collections.defaultdict(list)
        for r in rows:
            by_sha[r.sha256].append(r)
        acc = quality.DupSummary.empty()
        for sha, rs in sorted(by_sha.items()):
            if len(rs) > 1:
                acc = quality.DupSummary.add(acc, quality.dup_group(sha, rs))
        if acc[0]:
            yield DUPS_ACC, Batch(acc)
        return
    band = key[1]
    by_value = collections.defaultdict(list)
    for r in rows:
        by_value[quality.band_value(r.phash, band)].append(r)
    acc = quality.NearSummary.empty()
    for _, rs in sorted(by_value.items()):
        if len(rs) < 2:
            continue
        pairs, compared = quality.band_pairs(band, rs, max_distance)
        if not compared:
            acc = quality.NearSummary.skip(acc, len(rs))
        for pair in pairs:
            acc = quality.NearSummary.add(acc, pair)
    if acc[0] or acc[2]:
        yield NEAR_ACC, Batch(acc)


class _AllCombine(beam.CombineFn):
    """Every figure in one accumulator, so the whole check ends in one
    combine: (duplicate summary, near summary, class counts, sizes, removed).
    Accumulators and partial summaries travel as a Batch: Beam's coder
    pickles it in one call, where a tuple of tuples of Rows costs a pickle
    call per Row (measured: ~0.3 ms per image on the bench's 66k pairs)."""

    def create_accumulator(self):
        return Batch([quality.DupSummary.empty(), quality.NearSummary.empty(), collections.Counter(),
                      quality.empty_sizes(), -1])

    def add_input(self, acc, part):
        kind, value = part
        if kind == DUPS:
            acc[0] = quality.DupSummary.add(acc[0], value)
        elif kind == DUPS_ACC:
            acc[0] = quality.DupSummary.merge([acc[0], value])
        elif kind == NEAR_ACC:
            acc[1] = quality.NearSummary.merge([acc[1], value])
        elif kind == FIGURES:
            acc[2].update(value[0])
            acc[3] = quality.merge_sizes([acc[3], value[1]])
        elif kind == REMOVED:
            acc[4] = max(acc[4], 0) + value
        return acc

    def merge_accumulators(self, accs):
        accs = list(accs)
        counts = collections.Counter()
        for a in accs:
            counts.update(a[2])
        removed = [a[4] for a in accs if a[4] >= 0]
        return Batch([quality.DupSummary.merge(a[0] for a in accs), quality.NearSummary.merge(a[1] for a in accs),
                      counts, quality.merge_sizes(a[3] for a in accs), sum(removed) if removed else -1])

    def extract_output(self, acc):
        return acc


def assemble(acc, label_map, spec: QualitySpec, why_not_near: str) -> dict:
    dups, near, counts, sizes, removed = acc
    names = {i: n for n, i in label_map.ids}
    named = collections.Counter()
    for (split, label_id), n in counts.items():
        named[(split, names.get(label_id, str(label_id)))] += n
    duplicates = quality.DupSummary.output(dups, spec.duplicates.value)
    if removed >= 0:
        duplicates["removed"] = removed  # extras not written (keep_one: not selected; reject: rejected)
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
        # Few steps on purpose: each costs the local runner a fixed overhead per worker,
        # which on a small dataset outweighs the checks themselves.
        spec, why_not = self._spec, self._why_not_near
        found = inputs.get("groups")
        scatter = _ScatterFn(found is None, not why_not, self._spill_dir)
        parts = inputs["rows"] | "Scatter" >> beam.ParDo(scatter).with_outputs(FIGURES, main="groups")
        max_distance = spec.max_distance
        checked = (parts["groups"]
                   | "Group" >> beam.GroupByKey()
                   | "Check" >> beam.FlatMap(lambda kv: check_group(*kv, max_distance)))
        found_parts = [] if found is None else [found | "Found" >> beam.Map(lambda g: (DUPS, g))]
        removed = inputs.get("removed")
        removed_parts = [] if removed is None else [removed | "Removed" >> beam.Map(lambda n: (REMOVED, n))]
        start = inputs["rows"].pipeline | "Start" >> beam.Create([(FIGURES, (collections.Counter(),
                                                                              quality.empty_sizes()))])
        return ([start, checked, parts[FIGURES], *found_parts, *removed_parts]
                | "AllParts" >> beam.Flatten()
                | "Combine" >> beam.CombineGlobally(_AllCombine()).without_defaults()
                | "Assemble" >> beam.Map(assemble, beam.pvalue.AsSingleton(self._label_map), spec, why_not))
