"""The conversion's graph, one named stage per step (element shapes in the
comments):

    ListInputs | AssignLabels | Split | PlanShards | WriteShards (reading and validating) | Publish

or, with two reads per image (tables without sizes, --max_examples_per_split):

    ListInputs | AssignLabels | Split | ValidateImages | PlanShards | WriteShards | Publish
"""
from __future__ import annotations

import apache_beam as beam

from tfrecord_pipelines import __version__
from tfrecord_pipelines.config import ConvertConfig
from tfrecord_pipelines.transforms.core import fingerprint
from tfrecord_pipelines.transforms.core.fingerprint import FINGERPRINT
from tfrecord_pipelines.transforms.core.images import Validation
from tfrecord_pipelines.transforms.core.specs import QUALITY, RECORDS, REJECTS, STATS, PublishSpec
from tfrecord_pipelines.transforms.stages.assign_labels import AssignLabels
from tfrecord_pipelines.transforms.stages.check_quality import CheckQuality
from tfrecord_pipelines.transforms.stages.check_report import CheckReport, quality_rows
from tfrecord_pipelines.transforms.stages.drop_duplicates import DropDuplicates
from tfrecord_pipelines.transforms.stages.list_annotations import ListAnnotations
from tfrecord_pipelines.transforms.stages.list_inputs import ListInputs
from tfrecord_pipelines.transforms.stages.plan_shards import PlanShards
from tfrecord_pipelines.transforms.stages.publish import Publish
from tfrecord_pipelines.transforms.stages.split import Split
from tfrecord_pipelines.transforms.stages.validate_images import ValidateImages
from tfrecord_pipelines.transforms.stages.write_shards import WriteShards
from tfrecord_pipelines.transforms.storage import layout, spill


def build_pipeline(p: beam.Pipeline, cfg: ConvertConfig, progress_dir: str = "", spill_dir: str = "") -> None:
    """`spill_dir`: a local run's folder where record batches wait at the
    barriers instead of in the runner (transforms/storage/spill.py)."""
    out = cfg.output
    staging = layout.staging_dir(out.output, out.run_id)
    if cfg.detection is None:
        listed = p | "ListInputs" >> ListInputs(cfg.inputs, spill_dir)
        # [Rec(rel, path, size, raw label/split/extras)] batches; fingerprint: per-unit digests
        listing = _spilled(listed[RECORDS], "SpillListing", spill_dir)
        labeled = listing | "AssignLabels" >> AssignLabels(cfg.labels, cfg.inputs.extra_columns)
        # [Rec + label_id | target, typed extras]; label_map: singleton LabelMap
    else:  # --annotations: the label map is the categories (transforms/core/annotations/categories.py)
        listed = p | "ListAnnotations" >> ListAnnotations(cfg.inputs, cfg.detection, cfg.labels, spill_dir)
        # [Rec + annotation] batches; label_map: singleton LabelMap of kind boxes
        labeled = {RECORDS: _spilled(listed[RECORDS], "SpillListing", spill_dir), "label_map": listed["label_map"],
                   REJECTS: p | "NoLabelRejects" >> beam.Create([])}
    split = labeled[RECORDS] | "Split" >> Split(cfg.splits, cfg.shards.seed, cfg.shards.max_per_split, spill_dir)
    # [Rec + split, shuffle key]
    options_digest = fingerprint.options_digest(cfg.fingerprint_options())
    fp = listed[FINGERPRINT] | "Fingerprint" >> RunFingerprint(options_digest, labeled["label_map"])
    # singleton: sha256 of the listing, the options and the label map
    records = split[RECORDS]
    if out.previous_fingerprint and not out.republish:
        records = _spilled(records, "SpillSplit", spill_dir) | "SkipIfUnchanged" >> beam.FlatMap(
            lambda b, run_fp: [] if fingerprint.unchanged(run_fp, out.previous_fingerprint) else [b],
            beam.pvalue.AsSingleton(fp))
    read_once = cfg.images.reads.once and not out.check_only  # a check validates first, like two reads
    valid_rejects = None
    if not read_once:  # two reads per image: validate, plan from the valid ones, read again to write
        valid = records | "ValidateImages" >> ValidateImages(cfg.images, progress_dir, spill_dir,
                                                             digest=cfg.quality.dedup_before_writing
                                                             or (out.check_only and cfg.quality.enabled))
        # [Rec + size, format, height, width, channels, crc]
        records, valid_rejects = valid[RECORDS], valid[REJECTS]
    dedup = {}
    if cfg.quality.dedup_before_writing:  # --duplicates keep_one|reject (two reads: parse.py)
        dedup = records | "DropDuplicates" >> DropDuplicates(cfg.quality.duplicates, spill_dir)
        # [Rec], one per content; rejects (duplicate_content); stats (not_selected); groups; removed
        records = dedup[RECORDS]
    if out.check_only:  # `tfrecords check`: report.html and check.json, no shards, no manifest (pipelines/check.py)
        pcs = {"rejects": (listed.get(REJECTS), labeled[REJECTS], split[REJECTS], valid_rejects, dedup.get(REJECTS)),
               "stats": (listed[STATS], split.get(STATS), dedup.get(STATS))}
        inputs = {k: [pc for pc in v if pc is not None] | f"Check{k.title()}" >> beam.Flatten() for k, v in pcs.items()}
        inputs.update(records=records, label_map=labeled["label_map"])
        if cfg.quality.enabled:
            checks = {"rows": records | "QualityRows" >> beam.Map(quality_rows),
                      **{k: dedup[k] for k in ("groups", "removed") if dedup}}
            inputs["quality"] = checks | "CheckQuality" >> CheckQuality(cfg.quality, labeled["label_map"],
                                                                        why_not_near(cfg), spill_dir)
        inputs | "CheckReport" >> CheckReport(cfg, __version__)
        return
    planned = records | "PlanShards" >> PlanShards(cfg.shards, spill_dir)
    # ((split, index, num_shards), [[(position, Rec)]]); plans: singleton {split: SplitPlan}
    written = planned["shards"] | "WriteShards" >> WriteShards(
        staging, cfg.shards.compression, cfg.images, dict(out.feature_keys), labeled["label_map"], progress_dir,
        validate=read_once, index_files=cfg.shards.index_files, output_format=cfg.shards.output_format,
        quality_rows=cfg.quality.enabled, detection=cfg.detection)
    # ShardResult(name, temp path, records, bytes, crc32c); rejects (validation's, with one read);
    # stats: box counts (--annotations)
    rejects = ([_spilled(pc, f"SpillRejects{i}", spill_dir)
                for i, pc in enumerate((listed.get(REJECTS), labeled[REJECTS], split[REJECTS], valid_rejects,
                                        written[REJECTS], dedup.get(REJECTS))) if pc is not None]
               | "AllRejects" >> beam.Flatten())
    stats = ([pc for pc in (listed[STATS], split.get(STATS), dedup.get(STATS),
                            written[STATS] if cfg.detection is not None else None) if pc is not None]
             | "AllStats" >> beam.Flatten())
    spec = PublishSpec(out, staging, cfg.shards.compression, cfg.describe(), options_digest, __version__,
                       cfg.max_reject_fraction)
    results = {"shards": written["shards"], "rejects": rejects, "stats": stats,
               "label_map": labeled["label_map"], "plans": planned["plans"], "fingerprint": fp}
    if cfg.quality.enabled:
        checks = {"rows": written[QUALITY], **{k: dedup[k] for k in ("groups", "removed") if dedup}}
        results["quality"] = checks | "CheckQuality" >> CheckQuality(cfg.quality, labeled["label_map"],
                                                                     why_not_near(cfg), spill_dir)
        # singleton: the manifest's "quality" section
    results | "Publish" >> Publish(spec)
    # manifest.json, written last


def _spilled(batches, label: str, spill_dir: str):
    """The batches as spill references where a barrier follows (local runs)."""
    return batches | label >> beam.Map(spill.spill, spill_dir) if spill_dir else batches


def why_not_near(cfg: ConvertConfig) -> str:
    """Why near duplicates are not looked for ("" when they are)."""
    if not cfg.quality.max_distance:
        return "turned off (--near_duplicates 0)"
    if cfg.images.validation is not Validation.FULL:
        return "images are not decoded with --validate header; the perceptual hash needs full validation"
    return ""


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
