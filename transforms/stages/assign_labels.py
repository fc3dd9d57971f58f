"""Stage AssignLabels: derive each record's label, build the dataset's label
map from all of them (a global combine over metadata), then apply it.

Input:  [Rec, ...] batches with rel and raw table cells (or their spill references)
Output: records  [Rec, ...] with label_id or target and typed extra features
        rejects  [Reject, ...] (no_label, bad_label, unknown_label)
        label_map  a singleton LabelMap
"""
from __future__ import annotations

import apache_beam as beam

from tfrecord_pipelines.transforms.core import labels
from tfrecord_pipelines.transforms.core.records import Batch, Rec
from tfrecord_pipelines.transforms.core.specs import RECORDS, REJECTS, LabelSpec
from tfrecord_pipelines.transforms.storage import spill


class _StatsFn(beam.CombineFn):
    def __init__(self, spec: LabelSpec):
        self._spec = spec

    def create_accumulator(self):
        return labels.Stats()

    def add_input(self, acc, batch):
        derive = labels.LabelDeriver(self._spec)
        for rec in spill.load(batch):
            text, folder = derive(rec)
            acc.add_label(text, rec.extras, folder)
        return acc

    def merge_accumulators(self, accs):
        accs = iter(accs)
        out = next(accs)
        for a in accs:
            out.merge(a)
        return out

    def extract_output(self, acc):
        return acc


class _AssignFn(beam.DoFn):
    def __init__(self, spec: LabelSpec):
        self._spec = spec
        self._lookup_for = None
        self._lookup = {}

    def process(self, batch, label_map):
        if self._lookup_for is not label_map:
            self._lookup, self._lookup_for = label_map.as_dict(), label_map
        good, bad = Batch(), Batch()
        derive = labels.LabelDeriver(self._spec)
        for rec in spill.load(batch):
            out = labels.assign_label(rec, label_map, self._lookup, derive(rec)[0])
            (good if isinstance(out, Rec) else bad).append(out)
        if good:
            yield good
        if bad:
            yield beam.pvalue.TaggedOutput(REJECTS, bad)


class AssignLabels(beam.PTransform):
    """`spill_dir`: a local run's spill folder, where the listing waits for the label map."""

    def __init__(self, spec: LabelSpec, extra_columns: tuple = (), spill_dir: str = ""):
        super().__init__()
        self._spec = spec
        self._extra_columns = extra_columns
        self._spill_dir = spill_dir

    def expand(self, batches):
        # Each record's label is derived twice, for the map and then to apply
        # it, so what waits for the map is the listing as it came (on a local
        # run, references to spill files), not a second copy. The map's
        # counts are taken from the batches as listed, in the listing's own
        # step, before they are spilled: taken from the spill references,
        # every record would be unpacked once more (a few percent more of
        # that step's CPU).
        spec = self._spec
        label_map = (batches | "LabelStats" >> beam.CombineGlobally(_StatsFn(spec))
                     | "LabelMap" >> beam.Map(labels.build_label_map, spec, self._extra_columns))
        batches = spill.spilled(batches, "Spill", self._spill_dir)
        out = batches | "Assign" >> beam.ParDo(
            _AssignFn(spec), beam.pvalue.AsSingleton(label_map)).with_outputs(REJECTS, main=RECORDS)
        return {RECORDS: out[RECORDS], REJECTS: out[REJECTS], "label_map": label_map}
