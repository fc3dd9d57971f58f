"""The conversion's graph, one named stage per step (element shapes in the
comments):

    ListInputs | AssignLabels | Split | PlanShards | WriteShards (reading and validating) | Publish

or, with two reads per image (tables without sizes, --max_examples_per_split):

    ListInputs | AssignLabels | Split | ValidateImages | PlanShards | WriteShards | Publish
"""
from __future__ import annotations

import apache_beam as beam

from pipelines import __version__
from pipelines.config import ConvertConfig
from transforms.core import fingerprint
from transforms.core.fingerprint import FINGERPRINT
from transforms.core.specs import RECORDS, REJECTS, STATS, PublishSpec
from transforms.stages.assign_labels import AssignLabels
from transforms.stages.list_inputs import ListInputs
from transforms.stages.plan_shards import PlanShards
from transforms.stages.publish import Publish
from transforms.stages.split import Split
from transforms.stages.validate_images import ValidateImages
from transforms.stages.write_shards import WriteShards
from transforms.storage import layout


def build_pipeline(p: beam.Pipeline, cfg: ConvertConfig, progress_dir: str = "") -> None:
    out = cfg.output
    staging = layout.staging_dir(out.output, out.run_id)
    listed = p | "ListInputs" >> ListInputs(cfg.inputs)
    # [Rec(rel, path, size, raw label/split/extras)] batches; fingerprint: per-unit digests
    labeled = listed[RECORDS] | "AssignLabels" >> AssignLabels(cfg.labels, cfg.inputs.extra_columns)
    # [Rec + label_id | target, typed extras]; label_map: singleton LabelMap
    split = labeled[RECORDS] | "Split" >> Split(cfg.splits, cfg.shards.seed, cfg.shards.max_per_split)
    # [Rec + split, shuffle key]
    options_digest = fingerprint.options_digest(cfg.fingerprint_options())
    fp = listed[FINGERPRINT] | "Fingerprint" >> RunFingerprint(options_digest, labeled["label_map"])
    # singleton: sha256 of the listing, the options and the label map
    records = split[RECORDS]
    if out.previous_fingerprint and not out.republish:
        records = records | "SkipIfUnchanged" >> beam.FlatMap(
            lambda b, run_fp: [] if fingerprint.unchanged(run_fp, out.previous_fingerprint) else [b],
            beam.pvalue.AsSingleton(fp))
    read_once = cfg.images.reads.once
    valid_rejects = None
    if not read_once:  # two reads per image: validate, plan from the valid ones, read again to write
        valid = records | "ValidateImages" >> ValidateImages(cfg.images, progress_dir)
        # [Rec + size, format, height, width, channels, crc]
        records, valid_rejects = valid[RECORDS], valid[REJECTS]
    planned = records | "PlanShards" >> PlanShards(cfg.shards)
    # ((split, index, num_shards), [[(position, Rec)]]); plans: singleton {split: SplitPlan}
    written = planned["shards"] | "WriteShards" >> WriteShards(
        staging, cfg.shards.compression, cfg.images, dict(out.feature_keys), labeled["label_map"], progress_dir,
        validate=read_once, index_files=cfg.shards.index_files)
    # ShardResult(name, temp path, records, bytes, crc32c); rejects (validation's, with one read)
    rejects = ([pc for pc in (listed.get(REJECTS), labeled[REJECTS], split[REJECTS], valid_rejects,
                              written[REJECTS]) if pc is not None]
               | "AllRejects" >> beam.Flatten())
    stats = [pc for pc in (listed[STATS], split.get(STATS)) if pc is not None] | "AllStats" >> beam.Flatten()
    spec = PublishSpec(out, staging, cfg.shards.compression, cfg.describe(), options_digest, __version__,
                       cfg.max_reject_fraction)
    ({"shards": written["shards"], "rejects": rejects, "stats": stats,
      "label_map": labeled["label_map"], "plans": planned["plans"], "fingerprint": fp}
     | "Publish" >> Publish(spec))
    # manifest.json, written last


class RunFingerprint(beam.PTransform):
    """The run's fingerprint from the listing's per-unit digests, the
    options' digest and the label map that resulted."""

    def __init__(self, options_digest: str, label_map):
        super().__init__()
        self._options_digest = options_digest
        self._label_map = label_map

    def expand(self, digests):
        options_digest = self._options_digest
        return (digests
                | "All" >> beam.combiners.ToList()
                | "Combine" >> beam.Map(
                    lambda ds, lm: fingerprint.combine(
                        ds + [("label_map", fingerprint.options_digest(lm.to_json()))], options_digest),
                    beam.pvalue.AsSingleton(self._label_map)))
