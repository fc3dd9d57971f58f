"""Stage Split: put each record in a split and give it its shuffle key;
optionally keep only the first N of each split in shuffle order (a trial run).

Ratio splits hash the relative path with a salt, so an image stays in its split
when the dataset grows (as TFX's example_gen does). With --stratify each class
is cut at the fractions in the order of the same hash (quality.stratified_cuts):
exact proportions per class, but an image near a cut may move when its class grows.

Input:  [Rec, ...] batches
Output: records [Rec, ...] with split and key; rejects [Reject, ...] (bad_split);
        stats ("not_selected", n), only when capped
"""
from __future__ import annotations

import hashlib
from typing import Union

import apache_beam as beam

from tfrecord_pipelines.transforms.core.quality import stratified_cuts, stratified_split, unit_hash
from tfrecord_pipelines.transforms.core.records import Batch, Reason, Rec, Reject, reject
from tfrecord_pipelines.transforms.core.sharding import shuffle_key
from tfrecord_pipelines.transforms.core.specs import RECORDS, REJECTS, SPLIT_NAME, STATS, SplitSource, SplitSpec
from tfrecord_pipelines.transforms.storage import spill


def ratio_split(rel: str, ratios: tuple, salt: str) -> str:
    digest = hashlib.sha256(f"{salt}\x00{rel}".encode("utf-8", "surrogateescape")).digest()
    u = int.from_bytes(digest[:8], "big") / 2.0 ** 64
    acc = 0.0
    for name, fraction in ratios:
        acc += fraction
        if u < acc:
            return name
    return ratios[-1][0]  # rounding: fractions sum to 1 within 1e-9


def assign_split(rec: Rec, spec: SplitSpec, seed: int, cuts: dict = None) -> Union[Rec, Reject]:
    if spec.source is SplitSource.SINGLE:
        split = spec.name
    elif spec.source is SplitSource.RATIOS and cuts is not None:  # --stratify
        split = stratified_split(unit_hash(rec.rel, spec.salt), spec.ratios, cuts[stratum(rec)])
    elif spec.source is SplitSource.RATIOS:
        split = ratio_split(rec.rel, spec.ratios, spec.salt)
    elif spec.source is SplitSource.FOLDERS:
        split = rec.rel.split("/", 1)[0] if "/" in rec.rel else ""
    else:
        split = (rec.split or "").strip()
    if not SPLIT_NAME.match(split):
        shown = split or "(empty)"
        return reject(rec._replace(split=None), Reason.BAD_SPLIT,
                      f"split {shown!r} is not allowed: split names are 1-64 letters, digits or '_'")
    return rec._replace(split=split, key=shuffle_key(seed, rec.rel))


def stratum(rec: Rec):
    """What --stratify balances: the class (all records alike without class labels)."""
    return rec.label_id


class _SplitFn(beam.DoFn):
    def __init__(self, spec: SplitSpec, seed: int):
        self._spec, self._seed = spec, seed

    def process(self, batch, cuts=None):
        good, bad = Batch(), Batch()
        for rec in spill.load(batch):
            out = assign_split(rec, self._spec, self._seed, cuts)
            (good if isinstance(out, Rec) else bad).append(out)
        if good:
            yield good
        if bad:
            yield beam.pvalue.TaggedOutput(REJECTS, bad)


def _keep_selected(batch, thresholds):
    batch = spill.load(batch)
    kept = Batch(r for r in batch if (r.key, r.rel) <= thresholds[r.split])
    if kept:
        yield kept
    if len(kept) < len(batch):
        yield beam.pvalue.TaggedOutput(STATS, ("not_selected", len(batch) - len(kept)))


class Split(beam.PTransform):
    """`spill_dir`: a local run's spill folder, where the records wait for the
    cap's thresholds (not in the runner)."""

    def __init__(self, spec: SplitSpec, seed: int, max_per_split: int = 0, spill_dir: str = ""):
        super().__init__()
        self._spec, self._seed, self._cap, self._spill_dir = spec, seed, max_per_split, spill_dir

    def expand(self, batches):
        cuts = []
        if self._spec.stratify:  # each class's cut points, from its records' path hashes (not the records)
            spec = self._spec
            cuts = [beam.pvalue.AsDict(
                batches
                | "Positions" >> beam.FlatMap(lambda b: [(stratum(r), unit_hash(r.rel, spec.salt))
                                                         for r in spill.load(b)])
                | "ByClass" >> spill.GroupByKey(self._spill_dir)  # a local run: in spill files, not the runner
                | "Cuts" >> beam.MapTuple(lambda k, us: (k, stratified_cuts(list(us), spec.ratios))))]
        out = batches | "Assign" >> beam.ParDo(_SplitFn(self._spec, self._seed), *cuts).with_outputs(
            REJECTS, main=RECORDS)
        result = {RECORDS: out[RECORDS], REJECTS: out[REJECTS]}
        if self._cap:
            records = spill.spilled(out[RECORDS], "Spill", self._spill_dir)
            # The cap-th smallest (key, rel) of each split: a combine of size cap.
            thresholds = (records
                          | "Keys" >> beam.FlatMap(lambda b: [(r.split, (r.key, r.rel)) for r in spill.load(b)])
                          | "SmallestKeys" >> beam.combiners.Top.SmallestPerKey(self._cap)
                          | "Threshold" >> beam.MapTuple(lambda split, keys: (split, max(keys))))
            capped = records | "Cap" >> beam.FlatMap(
                _keep_selected, beam.pvalue.AsDict(thresholds)).with_outputs(STATS, main=RECORDS)
            result.update({RECORDS: capped[RECORDS], STATS: capped[STATS]})
        return result
