"""The conversion's graph, one named stage per step (element shapes in the
comments):

    ListInputs | Records (AssignLabels | Split) | Dataset (PlanShards | WriteShards (reading and validating) | Publish)

or, with two reads per image (tables without sizes, --max_examples_per_split):

    ListInputs | Records (AssignLabels | Split | ValidateImages) | Dataset (PlanShards | WriteShards | Publish)

With --annotations (COCO, Pascal VOC, YOLO), ListAnnotations takes the place
of ListInputs and AssignLabels: each record carries its objects, and the
label map is the annotations' categories.

An incremental version (--versioned, with a previous version to copy from)
matches the records with the previous version's provenance: records whose
file and metadata are those the previous version recorded are copied from
its shards by WriteShards, not read (or validated) again. With one read per
image the match happens in PlanShards' grouping by bucket (match_in_plan);
with two, MatchPrevious after Split, so that validation skips those records.

PrepareRecords and WriteDataset are also what a Beam user applies in a
pipeline of their own (tfrecord_pipelines/ptransforms.py: ToRecords is
ListInputs over the user's rows, then PrepareRecords): one graph, two ways in.
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam

from tfrecord_pipelines._version import __version__
from tfrecord_pipelines.options.config import Compression, ConvertConfig
from tfrecord_pipelines.transforms.core import fingerprint, publishable
from tfrecord_pipelines.transforms.core.fingerprint import FINGERPRINT
from tfrecord_pipelines.transforms.core.images import Validation
from tfrecord_pipelines.transforms.core.specs import (QUALITY, RECORDS, REJECTS, REMOTE_IN_FLIGHT, ROWS_FOLDER_PREFIX,
                                                       STATS, InputKind, OutputFormat, PublishSpec)
from tfrecord_pipelines.transforms.stages.assign_labels import AssignLabels
from tfrecord_pipelines.transforms.stages.check_quality import CheckQuality
from tfrecord_pipelines.transforms.stages.check_report import CheckReport, CheckSpec, quality_rows
from tfrecord_pipelines.transforms.stages.drop_duplicates import DropDuplicates
from tfrecord_pipelines.transforms.stages.list_annotations import ListAnnotations
from tfrecord_pipelines.transforms.stages.list_inputs import ListInputs, ListSpec
from tfrecord_pipelines.transforms.stages.match_previous import MatchPrevious
from tfrecord_pipelines.transforms.storage.previous_entries import MatchSpec
from tfrecord_pipelines.transforms.stages.plan_shards import PlanShards
from tfrecord_pipelines.transforms.stages.publish import Publish
from tfrecord_pipelines.transforms.stages.split import Split
from tfrecord_pipelines.transforms.stages.validate_images import ValidateImages, ValidateSpec
from tfrecord_pipelines.transforms.stages.write_shards import Reuse, WriteShards, WriteSpec
from tfrecord_pipelines.transforms.storage import layout, progress, spill


def build_pipeline(p: beam.Pipeline, cfg: ConvertConfig, progress_dir: str = "", spill_dir: str = "") -> None:
    """`spill_dir`: a local run's folder where record batches wait at the
    barriers instead of in the runner (transforms/storage/spill.py)."""
    listed = list_inputs(p, cfg, spill_dir, progress_dir)
    # [Rec(rel, path, size, raw label/split/extras | annotation)] batches; fingerprint: per-unit digests
    records = listed | "Records" >> PrepareRecords(cfg, progress_dir, spill_dir)
    if cfg.output.check_only:  # `tfrecords check`: report.html and check.json, no shards, no manifest (pipelines/commands/check.py)
        records | "Check" >> CheckDataset(cfg, spill_dir)
    else:
        records | "Dataset" >> WriteDataset(cfg, progress_dir, spill_dir)
        # manifest.json, written last


class PrepareRecords(beam.PTransform):
    """Listed records -> labelled, split (and, with two reads per image,
    validated) records, with everything the manifest counts.

    Input:  ListInputs' outputs: records ([Rec] batches), stats, fingerprint, rejects (tables).
    Output: a dict: "records" ([Rec + label, split, shuffle key] batches), "rejects" (all so far),
            "stats", "label_map" and "fingerprint" (singletons), and with --duplicates keep_one|reject
            DropDuplicates' "groups" and "removed"."""

    def __init__(self, cfg: ConvertConfig, progress_dir: str = "", spill_dir: str = ""):
        super().__init__()
        self._cfg, self._progress_dir, self._spill_dir = cfg, progress_dir, spill_dir

    def expand(self, listed):
        cfg, out, spill_dir = self._cfg, self._cfg.output, self._spill_dir
        labeled = assign_labels(listed[RECORDS], listed, cfg, spill_dir)
        # [Rec + label_id | target, typed extras]; label_map: singleton LabelMap
        split = labeled[RECORDS] | "Split" >> Split(cfg.splits, cfg.shards.seed, cfg.shards.max_per_split, spill_dir)
        # [Rec + split, shuffle key]
        fp = listed[FINGERPRINT] | "Fingerprint" >> RunFingerprint(options_digest(cfg), labeled["label_map"])
        # singleton: (recorded, compared) sha256 of the listing, the options and the label map
        records = split[RECORDS]
        if out.previous_fingerprint and not out.republish:
            # Not spilled first: the runner fuses this step with the split's (its side input, the run's
            # fingerprint, comes from the listing and the label map, never from downstream of the split), so
            # no batch waits in the runner here. Spilled, every record was packed and unpacked once more for
            # nothing: 0.2-0.8 CPU s more at 50,000 images (medians of 2 x 6 alternating incremental runs).
            records = records | "SkipIfUnchanged" >> beam.FlatMap(
                lambda b, run_fp: [] if fingerprint.unchanged(run_fp, out.previous_fingerprint) else [b],
                beam.pvalue.AsSingleton(fp))
        valid_rejects = None
        more_stats = []
        if out.previous is not None and not out.check_only and not match_in_plan(cfg):  # an incremental version
            matched = records | "MatchPrevious" >> MatchPrevious(match_spec(cfg, spill_dir))
            # [Rec, those taken from the previous version with Rec.prev]; stats: unchanged, new, changed, removed
            records = matched[RECORDS]
            more_stats.append(matched[STATS])
        if not read_once(cfg):  # two reads per image: validate, plan from the valid ones, read again to write
            if self._progress_dir:  # the progress bar's total for validation, known before validation starts
                progress_dir = self._progress_dir
                counted = (records | "CountToValidate" >> beam.Map(spill.count)
                           | "SumToValidate" >> beam.CombineGlobally(sum)
                           | "ExpectValidate" >> beam.Map(lambda n: progress.expect(progress_dir, "validate", n)))
                records = records | "AfterCount" >> beam.Map(lambda b, _: b, beam.pvalue.AsSingleton(counted))
            valid = records | "ValidateImages" >> ValidateImages(ValidateSpec(
                workers_images(cfg), digest=cfg.quality.dedup_before_writing or (out.check_only and cfg.quality.enabled),
                progress_dir=self._progress_dir, spill_dir=spill_dir))
            # [Rec + size, format, height, width, channels, crc]
            records, valid_rejects = valid[RECORDS], valid[REJECTS]
            more_stats.append(valid[STATS])  # --annotations: the boxes of the images rejected
            more_stats.append(valid_rejects | "ValidationRejects" >> beam.Map(
                lambda b: ("incremental/validation_rejects", spill.count(b))))
        dedup = {}
        if cfg.quality.dedup_before_writing:  # --duplicates keep_one|reject (two reads: parse.py)
            dedup = records | "DropDuplicates" >> DropDuplicates(cfg.quality.duplicates, spill_dir)
            # [Rec], one per content; rejects (duplicate_content); stats (not_selected); groups; removed
            records = dedup[RECORDS]
        rejects = [pc for pc in (listed.get(REJECTS), labeled[REJECTS], split[REJECTS], valid_rejects,
                                 dedup.get(REJECTS)) if pc is not None]
        stats = [pc for pc in (listed[STATS], split.get(STATS), dedup.get(STATS), *more_stats) if pc is not None]
        return {RECORDS: records, "label_map": labeled["label_map"], "fingerprint": fp,
                REJECTS: ([spill.spilled(pc, f"SpillRejects{i}", spill_dir) for i, pc in enumerate(rejects)]
                          | "AllRejects" >> beam.Flatten()),
                STATS: stats | "AllStats" >> beam.Flatten(),
                **{k: dedup[k] for k in ("groups", "removed") if dedup}}


class WriteDataset(beam.PTransform):
    """PrepareRecords' outputs -> shards planned and written (reading and,
    with one read per image, validating each image), the quality checks,
    and the publish step: the output folder with its manifest, written last.
    Output: the manifest (a singleton)."""

    def __init__(self, cfg: ConvertConfig, progress_dir: str = "", spill_dir: str = ""):
        super().__init__()
        self._cfg, self._progress_dir, self._spill_dir = cfg, progress_dir, spill_dir

    def expand(self, prepared):
        cfg, out, spill_dir = self._cfg, self._cfg.output, self._spill_dir
        staging = layout.staging_dir(out.output, out.run_id)
        planned = prepared[RECORDS] | "PlanShards" >> PlanShards(
            cfg.shards, spill_dir, match_spec(cfg, spill_dir) if match_in_plan(cfg) else None)
        if self._progress_dir:  # the progress bar's total: what the plans will write
            progress_dir = self._progress_dir
            _ = planned["plans"] | "ExpectWrite" >> beam.Map(
                lambda plans: progress.expect(progress_dir, "write", sum(p.count for p in plans.values())))
        # ((split, index, num_shards), [[(position, Rec)]]); plans: singleton {split: SplitPlan}
        written = planned["shards"] | "WriteShards" >> WriteShards(
            write_spec(cfg, staging, self._progress_dir), prepared["label_map"], prepared["fingerprint"])
        # ShardResult(name, temp path, records, bytes, crc32c); rejects (validation's, with one read);
        # stats: box counts (--annotations)
        rejects = ((prepared[REJECTS], spill.spilled(written[REJECTS], "SpillWriteRejects", spill_dir))
                   | "AllRejects" >> beam.Flatten())
        spec = PublishSpec(out, staging, cfg.shards.compression, cfg.describe(), options_digest(cfg), __version__,
                           cfg.max_reject_fraction, allow_empty=cfg.allow_empty, allow_shrink=cfg.allow_shrink,
                           shard_options=cfg.fingerprint_options(), remove_at_end=_scratch_table(cfg))
        stats = prepared[STATS]
        if STATS in planned:  # match_in_plan: unchanged, new, changed, removed
            stats = (stats, planned[STATS]) | "MatchStats" >> beam.Flatten()
        if cfg.detection is not None:
            stats = (stats, written[STATS]) | "BoxStats" >> beam.Flatten()
        results = {"shards": written["shards"], "rejects": rejects, "stats": stats,
                   "label_map": prepared["label_map"], "plans": planned["plans"],
                   "fingerprint": prepared["fingerprint"]}
        if cfg.quality.enabled:
            checks = {"rows": written[QUALITY], **{k: prepared[k] for k in ("groups", "removed") if k in prepared}}
            results["quality"] = checks | "CheckQuality" >> CheckQuality(cfg.quality, prepared["label_map"],
                                                                         why_not_near(cfg), spill_dir)
            # singleton: the manifest's "quality" section
        return results | "Publish" >> Publish(spec)


def _scratch_table(cfg: ConvertConfig) -> str:
    """The folder of the table written for rows from Python (pipelines/api/rows.py)
    when a remote job ends its own run: the job removes it, as the launcher
    may be gone (--detach). "" otherwise: the launcher removes it."""
    table = cfg.inputs.table
    if not (cfg.output.job_ends_run and cfg.inputs.source and table):
        return ""
    folder = table.rsplit("/", 1)[0] if "/" in table else ""
    return folder if folder.rsplit("/", 1)[-1].startswith(ROWS_FOLDER_PREFIX) else ""


class CheckDataset(beam.PTransform):
    """`tfrecords check`, in place of WriteDataset: PrepareRecords' outputs ->
    the quality checks and the check's report (pipelines/commands/check.py)."""

    def __init__(self, cfg: ConvertConfig, spill_dir: str = ""):
        super().__init__()
        self._cfg, self._spill_dir = cfg, spill_dir

    def expand(self, prepared):
        cfg = self._cfg
        inputs = {k: prepared[k] for k in (RECORDS, REJECTS, STATS, "label_map")}
        if cfg.quality.enabled:
            checks = {"rows": prepared[RECORDS] | "QualityRows" >> beam.Map(quality_rows),
                      **{k: prepared[k] for k in ("groups", "removed") if k in prepared}}
            inputs["quality"] = checks | "CheckQuality" >> CheckQuality(cfg.quality, prepared["label_map"],
                                                                        why_not_near(cfg), self._spill_dir)
        guards = publishable.Guards(cfg.allow_empty, cfg.allow_shrink, cfg.max_reject_fraction)
        return inputs | "CheckReport" >> CheckReport(CheckSpec(cfg.output, cfg.describe(), guards, __version__,
                                                                   _scratch_table(cfg)))


def read_once(cfg: ConvertConfig) -> bool:
    """Each image read once, validated as its shard is written (a check
    validates first, like two reads)."""
    return cfg.images.reads.once and not cfg.output.check_only


def match_in_plan(cfg: ConvertConfig) -> bool:
    """An incremental version's records matched with the previous version's
    inside PlanShards' grouping by bucket, where nothing between the split
    and the plan needs the match: not with two reads (validation skips the
    records to copy) nor with --duplicates keep_one|reject (which takes a
    copied record's file hash from the provenance)."""
    out = cfg.output
    return out.previous is not None and not out.check_only and read_once(cfg) \
        and not cfg.quality.dedup_before_writing


def options_digest(cfg: ConvertConfig) -> str:
    return fingerprint.options_digest(cfg.fingerprint_options())


def build_preview(p: beam.Pipeline, cfg: ConvertConfig, spill_dir: str, result_path: str) -> None:
    """--dry_run on a local run: what a run would do, found before any image
    is read (the listing, labels, splits and, for an incremental version, the
    match with the previous version's provenance), written as JSON to
    `result_path` (a local file) for the launcher to print (report.print_preview)."""
    out = cfg.output
    listed = list_inputs(p, cfg, spill_dir)
    labeled = assign_labels(listed[RECORDS], listed, cfg, spill_dir)
    split = labeled[RECORDS] | "Split" >> Split(cfg.splits, cfg.shards.seed, cfg.shards.max_per_split, spill_dir)
    fp = listed[FINGERPRINT] | "Fingerprint" >> RunFingerprint(
        fingerprint.options_digest(cfg.fingerprint_options()), labeled["label_map"])
    records = split[RECORDS]
    stats = [pc for pc in (listed[STATS], split.get(STATS)) if pc is not None]
    if out.previous is not None:
        matched = records | "MatchPrevious" >> MatchPrevious(match_spec(cfg, spill_dir))
        records = matched[RECORDS]
        stats.append(matched[STATS])
    rejected = ([pc for pc in (listed.get(REJECTS), labeled[REJECTS], split[REJECTS]) if pc is not None]
                | "Rejects" >> beam.Flatten() | "CountRejects" >> beam.Map(lambda b: ("rejected", spill.count(b))))
    totals = (records | "SplitTotals" >> beam.FlatMap(_split_totals)
              | "SumTotals" >> beam.CombinePerKey(_sum_totals))
    all_stats = (*stats, rejected) | "AllStats" >> beam.Flatten() | "SumStats" >> beam.CombinePerKey(sum)
    side = beam.pvalue
    (p | "Once" >> beam.Create([None])
     | "Preview" >> beam.Map(_write_preview, result_path, side.AsDict(all_stats), side.AsDict(totals),
                             side.AsSingleton(fp), side.AsSingleton(labeled["label_map"])))


def _split_totals(batch) -> list:
    """[(split, (records, bytes listed, records to read, bytes to read))] of a batch."""
    sums: dict = {}
    for r in spill.load(batch):
        c, b, n, nb = sums.get(r.split, (0, 0, 0, 0))
        size = max(r.size, 0)
        sums[r.split] = (c + 1, b + size, n + (0 if r.prev else 1), nb + (0 if r.prev else size))
    return sorted(sums.items())


def _sum_totals(values) -> tuple:
    return tuple(map(sum, zip(*values))) or (0, 0, 0, 0)


def _write_preview(_, path: str, stats: dict, totals: dict, run_fp: tuple, label_map) -> None:
    import json
    body = {"stats": stats, "splits": {k: list(v) for k, v in sorted(totals.items())},
            "fingerprint": fingerprint.compared(run_fp),
            "classes": len(label_map.ids), "new_classes": list(label_map.new_names)}
    with open(path, "w") as f:
        json.dump(body, f)


def write_spec(cfg: ConvertConfig, staging: str, progress_dir: str = "") -> WriteSpec:
    """WriteShards' settings, from the run's."""
    return WriteSpec(staging, workers_images(cfg), cfg.shards.compression, cfg.shards.output_format,
                     names=cfg.shards.names, feature_keys=cfg.output.feature_keys, source_ids=cfg.output.source_ids,
                     first_read=read_once(cfg),
                     index_files=cfg.shards.index_files, quality_rows=cfg.quality.enabled,
                     detection=cfg.detection, reuse=_reuse(cfg), progress_dir=progress_dir)


def workers_images(cfg: ConvertConfig):
    """The image settings the stages get. A job launched for a remote runner
    (job_ends_run; a Beam user's own pipeline, ROWS, may run anywhere) reads
    local paths, which its workers see only on a shared filesystem, with a
    bucket's reads in flight: one read at a time per worker suits a worker per
    core on the page cache, not a network disk nor a runner's one SDK worker
    doing every step (a resize run on one portable worker: see
    bench/remote_reads.py). Not recorded in the manifest: the shards do not
    depend on it."""
    reads = cfg.images.reads
    if reads.in_flight or not cfg.output.job_ends_run or cfg.inputs.kind is InputKind.ROWS:
        return cfg.images
    return dataclasses.replace(cfg.images, reads=dataclasses.replace(reads, in_flight=REMOTE_IN_FLIGHT))


def match_spec(cfg: ConvertConfig, spill_dir: str) -> MatchSpec:
    return MatchSpec(cfg.output.previous, cfg.shards.seed, cfg.images.reads.timeout, spill_dir)


def _reuse(cfg: ConvertConfig) -> Reuse:
    """Where shards are staged for a rerun to resume, which version's records
    may be copied, and whether each shard's provenance is written (a
    --versioned run of uncompressed TFRecord shards: what a later one copies from)."""
    out = cfg.output
    copyable = cfg.shards.compression is Compression.NONE and cfg.shards.output_format is OutputFormat.TFRECORD
    return Reuse(out.resume_parent, __version__, out.previous, provenance=bool(out.root) and copyable)


def list_inputs(p: beam.Pipeline, cfg: ConvertConfig, spill_dir: str, progress_dir: str = ""):
    """ListInputs, or with --annotations ListAnnotations (each Rec with its
    objects, and the label map of the annotations' categories)."""
    if cfg.detection is None:
        return p | "ListInputs" >> ListInputs(ListSpec(cfg.inputs, cfg.output.racy_after_ns, spill_dir, progress_dir,
                                                          cfg.images.reads.timeout))
    return p | "ListAnnotations" >> ListAnnotations(cfg.inputs, cfg.detection, cfg.labels, spill_dir)


def assign_labels(listing, listed, cfg: ConvertConfig, spill_dir: str = ""):
    """AssignLabels (the listing waits for the label map in `spill_dir`); with
    --annotations the records are labelled already (their boxes' classes) and
    the label map is ListAnnotations' (categories.py)."""
    if cfg.detection is not None:
        return {RECORDS: spill.spilled(listing, "SpillListing", spill_dir), "label_map": listed["label_map"],
                REJECTS: None}
    return listing | "AssignLabels" >> AssignLabels(cfg.labels, cfg.inputs.extra_columns, spill_dir)


def why_not_near(cfg: ConvertConfig) -> str:
    """Why near duplicates are not looked for ("" when they are)."""
    if not cfg.quality.max_distance:
        return "turned off (--near_duplicates 0)"
    if cfg.images.validation is not Validation.FULL:
        return "images are not decoded with --validate header; the perceptual hash needs full validation"
    return ""


def _ids(label_map) -> dict:
    """The label map as the fingerprint covers it: not which classes this run
    added, so the run after an extension finds the same map unchanged."""
    d = label_map.to_json()
    d.pop("extended_with", None)
    return d


class RunFingerprint(beam.PTransform):
    """The run's fingerprints (fingerprint.combine_run: the one recorded,
    the one compared) from the listing's per-unit digests, the options'
    digest and the label map that resulted."""

    def __init__(self, options_digest: str, label_map):
        super().__init__()
        self._options_digest = options_digest
        self._label_map = label_map

    def expand(self, digests):
        options_digest = self._options_digest
        return (digests
                | "All" >> beam.combiners.ToList()
                | "Combine" >> beam.Map(
                    lambda ds, lm: fingerprint.combine_run(
                        ds + [("label_map", fingerprint.options_digest(_ids(lm)))], options_digest),
                    beam.pvalue.AsSingleton(self._label_map)))
