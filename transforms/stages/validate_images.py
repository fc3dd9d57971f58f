"""Stage ValidateImages: read each file once, check it (see transforms/core/images.py)
and record what will be stored; bad files become rejects with their reason.
Reads run ahead of the checks on a bounded pool (transforms/storage/reads.py), in
order, so a bucket's latency overlaps the decoding.

This is the CPU-heavy stage (a decode per image in full mode), so its input is
spread over the workers first. Only metadata leaves it: the bytes are read
again, from the page cache or the bucket, by the shard writer.

Input:  [Rec, ...] batches
Output: records [Rec, ...] with size, format, height, width, channels, crc;
        rejects [Reject, ...]; stats (--annotations): ("boxes/in_rejected_images", n)
"""
from __future__ import annotations

import dataclasses
import hashlib

import apache_beam as beam

from tfrecord_pipelines.transforms.core import provenance, quality
from tfrecord_pipelines.transforms.core.annotations import IN_REJECTED, boxes_in
from tfrecord_pipelines.transforms.core.images import ImagePolicy, configure_pillow, validate_record
from tfrecord_pipelines.transforms.core.records import Batch, Reject, pack
from tfrecord_pipelines.transforms.core.specs import RECORDS, REJECTS, STATS
from tfrecord_pipelines.transforms.storage import spill
from tfrecord_pipelines.transforms.storage.progress import Progress
from tfrecord_pipelines.transforms.storage.reads import in_flight, make_pool, read_ahead, read_record, read_reject


def _add_hashes(good: list, waiting: list) -> None:
    for (i, _), h in zip(waiting, quality.hashes([src for _, src in waiting])):
        good[i] = good[i]._replace(phash=h)


class _ValidateFn(beam.DoFn):
    def __init__(self, policy: ImagePolicy, progress_dir: str = "", digest: bool = False):
        # Perceptual hashes are computed a batch of records at a time (quality.hashes).
        self._policy = dataclasses.replace(policy, hash_later=True) if policy.perceptual_hash else policy
        self._progress_dir = progress_dir
        self._digest = digest
        self._ok = beam.metrics.Metrics.counter("tfrecords", "images_valid")
        self._bad = beam.metrics.Metrics.counter("tfrecords", "images_rejected")
        self._bytes = beam.metrics.Metrics.counter("tfrecords", "bytes_validated")

    def setup(self):
        configure_pillow(self._policy)
        self._progress = Progress(self._progress_dir, "validate")
        self._pool = None

    def process(self, packed: bytes):
        good, bad = Batch(), Batch()
        nbytes = 0
        recs = spill.load(packed)
        if not recs:
            return
        reads = self._policy.reads
        if self._pool is None:
            self._pool = make_pool(reads, recs[0].path)
        waiting: list = []  # (index in good, hash input)
        boxes = 0  # --annotations: the boxes of the images rejected here
        kept = [r for r in recs if r.prev]  # to be taken from the previous version (match_previous.py): not read
        for rec in kept:
            if rec.prev.kind == provenance.COPY:
                good.append(rec)
            else:
                bad.append(Reject(rec.rel, rec.prev.reason, rec.prev.detail, rec.split or ""))
        recs = [r for r in recs if not r.prev] if kept else recs
        for rec, got in read_ahead(recs, lambda r: read_record(r, reads), in_flight(reads, recs[0].path) if recs else 1,
                                   self._pool):
            out = read_reject(rec, got.error) if got.error else validate_record(got.value[1], got.value[0],
                                                                                  self._policy)
            if not isinstance(out, Reject):
                out, src = out
                if self._digest:  # for DropDuplicates (--duplicates keep_one|reject)
                    out = out._replace(sha256=hashlib.sha256(got.value[0]).hexdigest())
                good.append(out)
                nbytes += out.size
                if src is not None:
                    waiting.append((len(good) - 1, src))
                    if len(waiting) >= quality.HASH_BATCH:
                        _add_hashes(good, waiting)
                        waiting = []
            else:
                bad.append(out)
                boxes += boxes_in(rec.annotation)
        _add_hashes(good, waiting)
        self._ok.inc(len(good))
        self._bad.inc(len(bad))
        self._bytes.inc(nbytes)
        self._progress.add(len(good), nbytes, len(bad))
        if good:
            yield good
        if bad:
            yield beam.pvalue.TaggedOutput(REJECTS, bad)
        if boxes:
            yield beam.pvalue.TaggedOutput(STATS, (IN_REJECTED, boxes))

    def finish_bundle(self):
        self._progress.flush(force=True)


@dataclasses.dataclass(frozen=True)
class ValidateSpec:
    """ValidateImages' settings."""
    policy: ImagePolicy = ImagePolicy()  # how images are read and checked
    digest: bool = False   # each valid record's sha256, for DropDuplicates (--duplicates keep_one|reject)
    progress_dir: str = ""  # a local run's progress files
    spill_dir: str = ""     # a local run's spill folder: batches cross the reshuffle as file references


class ValidateImages(beam.PTransform):
    def __init__(self, spec: ValidateSpec):
        super().__init__()
        self._spec = spec

    def expand(self, batches):
        spec = self._spec
        spill_dir = spec.spill_dir
        return (batches
                | "Pack" >> beam.Map(lambda b: spill.spill(b, spill_dir) if spill_dir else pack(spill.load(b)))
                | "Spread" >> beam.Reshuffle()
                | "Validate" >> beam.ParDo(_ValidateFn(spec.policy, spec.progress_dir, spec.digest))
                .with_outputs(REJECTS, STATS, main=RECORDS))
