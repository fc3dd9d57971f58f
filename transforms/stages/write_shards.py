"""Stage WriteShards: each shard's records, in shuffle order, read from their
files and streamed into one TFRecord file in the staging folder.

Image bytes are read here, a bounded number ahead of the writing (in order,
transforms/storage/reads.py), and never pass through the runner; a worker holds the
reads in flight and one shard's metadata at a time. The file gets a
unique temporary name; only the publish step gives it its final name, so a
retried or replayed bundle rewrites instead of duplicating, and nothing
partial is ever visible under a final name.

With one read per image (the default where the listing gives every size),
each image is validated here, as it is read (transforms/stages/validate_images.py's
checks), so what is written is exactly the bytes that were checked; shards
whose records are rejected hold fewer records than planned. With two, the
ValidateImages stage checked it before planning, and here it is read again
and held to what was validated (a `changed` reject otherwise).

With --index_files, the shard's index (one line `<offset> <length>` per
record, the format of DALI's tfrecord2idx) is built from the writer's byte
counts as each record is written, and staged and published with the shard.

Input:  ((split, index, num_shards), [packed [(position, Rec), ...], ...])
Output: ShardResult; rejects [Reject]; quality [quality.Row] per shard (with quality_rows)
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import operator
import uuid
from typing import NamedTuple, Union

import apache_beam as beam

from tfrecord_pipelines.transforms.core.features import ExampleEncoder
from tfrecord_pipelines.transforms.core import quality
from tfrecord_pipelines.transforms.core.annotations.boxes import write_objects
from tfrecord_pipelines.transforms.core.images import BadImage, ImagePolicy, configure_pillow, reencode_image, validate_record
from tfrecord_pipelines.transforms.core.records import Batch, Reason, Rec, Reject, ShardResult, fingerprint, reject
from tfrecord_pipelines.transforms.core.sharding import shard_name
from tfrecord_pipelines.transforms.core.specs import QUALITY, REJECTS, STATS, OutputFormat, ReadPolicy
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression
from tfrecord_pipelines.transforms.storage import fsutil, layout, spill
from tfrecord_pipelines.transforms.storage.array_record_io import shard_writer
from tfrecord_pipelines.transforms.storage.gcs import StorageUnavailable
from tfrecord_pipelines.transforms.storage.progress import Progress
from tfrecord_pipelines.transforms.storage.reads import make_pool, read_ahead, read_input, read_record, read_reject

def read_again(rec: Rec, policy: ReadPolicy) -> bytes:
    """The bytes validated, read a second time: on GCS the same object
    generation (a newer one answers 404)."""
    data, _, _ = read_input(rec.path, rec.generation, rec.size, policy)
    return data


def recheck(rec: Rec, policy: ReadPolicy) -> Union[bytes, Reject]:
    """Two reads per image: the file's bytes if they are exactly the ones
    validated (size and CRC32C of every byte), else a `changed` reject."""
    try:
        data = read_again(rec, policy)
    except StorageUnavailable:
        raise
    except Exception as e:  # any filesystem's error (OSError locally; BeamIOError, NotFound on GCS)
        return reject(rec, Reason.CHANGED, f"the file could not be read again: {type(e).__name__}: {e}"[:500])
    if len(data) != rec.size:
        return reject(rec, Reason.CHANGED, f"the file changed since it was validated ({rec.size} -> {len(data)} "
                      "bytes)")
    if rec.crc >= 0 and fingerprint(data) != rec.crc:
        return reject(rec, Reason.CHANGED, f"the file changed since it was validated (same size, {rec.size} "
                      "bytes, other content)")
    return data


class Prepared(NamedTuple):
    rec: Rec
    data: bytes       # what is stored
    sha256_hex: str   # of `data`
    hash_input: object = None  # quality.hash_input of the decode, hashed later in a batch (policy.hash_later)


def prepare(rec: Rec, policy: ImagePolicy, validate: bool) -> Union[Prepared, Reject]:
    """Everything one image needs before it is encoded, on a read-ahead
    thread (reading waits on I/O; Pillow's decoding and hashlib release the
    GIL): read it once and validate it (`validate`), or read it again and
    check it is what was validated; re-encode if asked; hash it."""
    hash_src = None
    if validate:
        try:
            data, rec = read_record(rec, policy.reads)
        except Exception as e:
            return read_reject(rec, e)  # raises StorageUnavailable
        checked = validate_record(rec, data, policy, read_again=False)
        if isinstance(checked, Reject):
            return checked
        rec, hash_src = checked
    else:
        data = recheck(rec, policy.reads)
        if isinstance(data, Reject):
            return data
    original = data
    if rec.reencode_to:
        try:
            data = reencode_image(data, rec.reencode_to, policy, (rec.width, rec.height, rec.channels))
        except BadImage as e:  # one read: resizing is the image's decode (its validation)
            return reject(rec, e.reason, e.detail)
    sha = hashlib.sha256(data).hexdigest()
    if policy.resize.enabled:  # image/original/sha256: of the file as read
        rec = rec._replace(orig_sha256=sha if data is original else hashlib.sha256(original).hexdigest())
    return Prepared(rec, data, sha, hash_src)


def rows_with_hashes(split: str, waiting: list) -> list:
    """The quality rows of written records [(rec, sha256 hex, hash input or None)]."""
    phashes = quality.hashes([src for _, _, src in waiting])
    return [quality.Row(rec.rel, split, rec.label_text, rec.label_id, sha, rec.phash if src is None else ph,
                        rec.width, rec.height) for (rec, sha, src), ph in zip(waiting, phashes)]


class _WriteShardFn(beam.DoFn):
    def __init__(self, staging: str, compression: Compression, policy: ImagePolicy,
                 keys: dict, validate: bool, progress_dir: str = "", index_files: bool = False,
                 output_format: OutputFormat = OutputFormat.TFRECORD, quality_rows: bool = False, detection=None):
        self._staging = staging
        self._detection = detection  # DetectionSpec (--annotations): boxes checked and written here
        self._quality_rows = quality_rows
        self._index_files = index_files
        self._output_format = output_format
        self._compression = compression
        # Validating here, the hashes are computed a batch of records at a time (quality.hashes).
        self._policy = dataclasses.replace(policy, hash_later=True) if validate and quality_rows else policy
        self._keys = keys
        self._validate = validate
        self._progress_dir = progress_dir
        self._records = beam.metrics.Metrics.counter("tfrecords", "records_written")
        self._bytes = beam.metrics.Metrics.counter("tfrecords", "bytes_written")
        self._shards = beam.metrics.Metrics.counter("tfrecords", "shards_written")
        # The counters ValidateImages keeps, when validation happens here.
        self._valid = beam.metrics.Metrics.counter("tfrecords", "images_valid")
        self._rejected = beam.metrics.Metrics.counter(
            "tfrecords", "images_rejected" if validate else "rejected_changed")

    def setup(self):
        if self._validate:
            configure_pillow(self._policy)
        self._progress = Progress(self._progress_dir, "write")
        self._validated = Progress(self._progress_dir if self._validate else "", "validate")
        self._pool = None
        self._encoders: dict = {}  # label kind -> ExampleEncoder (the kind comes with the label map)
        self._lookup_for, self._lookup = None, {}

    def process(self, element, label_map):
        (split, index, num_shards), groups = element
        recs = [rec for _, rec in sorted((it for g in groups for it in spill.load(g)), key=operator.itemgetter(0))]
        name = shard_name(split, index, num_shards, self._compression.suffix, self._output_format.extension)
        temp = fsutil.join(self._staging, f"{name}.{uuid.uuid4().hex}")
        label_counts = collections.Counter()
        index_lines: list = []
        rejects = Batch()
        rows = Batch() if self._quality_rows else None  # for CheckQuality: a small row per record written
        waiting: list = []  # records written whose rows wait for their hashes
        policy, validate = self._policy, self._validate
        in_flight = policy.reads.in_flight_for(recs[0].path) if recs else 1
        encoder = self._encoder(label_map.kind)
        box_stats = collections.Counter()  # --annotations: boxes by outcome (the manifest's detection section)
        if self._detection is not None and self._lookup_for is not label_map:
            self._lookup, self._lookup_for = label_map.as_dict(), label_map
        if self._pool is None and recs:
            self._pool = make_pool(policy.reads, recs[0].path)
        with shard_writer(temp, self._output_format, self._compression) as writer:
            for _, got in read_ahead(recs, lambda r: prepare(r, policy, validate), in_flight, self._pool):
                if got.error is not None:
                    raise got.error  # a bug or a store that stopped answering: the bundle fails
                if isinstance(got.value, Reject):
                    rejects.append(got.value)
                    self._validated.add(0, 0, 1)
                    continue
                rec, data, sha, hash_src = got.value
                if self._detection is not None and rec.annotation:  # transforms/core/annotations/boxes.py
                    rec = write_objects(rec, data, self._lookup, self._detection, policy.apply_orientation, box_stats)
                    if not isinstance(rec, Rec):
                        rejects.append(reject(got.value.rec, *rec))
                        self._validated.add(0, 0, 1)
                        continue
                self._validated.add(1, rec.size)
                if rows is not None:
                    waiting.append((rec, sha, hash_src))
                    if len(waiting) >= quality.HASH_BATCH:
                        rows.extend(rows_with_hashes(split, waiting))
                        waiting = []
                chunks, length = encoder.encode(rec, data, sha)
                before = writer.bytes_written
                writer.write(chunks, length)
                if rec.label_id is not None:
                    label_counts[rec.label_id] += 1
                self._progress.add(1, writer.bytes_written - before)
                if self._index_files:
                    # Uncompressed (parse refuses an index otherwise): the bytes
                    # written are the record's offset and framed length.
                    index_lines.append(b"%d %d\n" % (before, writer.bytes_written - before))
            crc = writer.close()
        if waiting:
            rows.extend(rows_with_hashes(split, waiting))
        index_temp, index_data = "", b""
        if self._index_files:
            index_data = b"".join(index_lines)
            index_temp = fsutil.join(self._staging, f"{layout.index_name(name)}.{uuid.uuid4().hex}")
            with fsutil.open_write(index_temp) as sink:
                sink.write(index_data)
        self._records.inc(writer.records)
        self._bytes.inc(writer.bytes_written)
        self._shards.inc()
        self._rejected.inc(len(rejects))
        if self._validate:
            self._valid.inc(writer.records)
        self._progress.flush()
        self._validated.flush()
        if rejects:
            yield beam.pvalue.TaggedOutput(REJECTS, rejects)
        if rows:
            yield beam.pvalue.TaggedOutput(QUALITY, rows)
        for counted, n in sorted(box_stats.items()):
            yield beam.pvalue.TaggedOutput(STATS, (counted, n))
        yield ShardResult(split, index, num_shards, name, temp, writer.records, writer.bytes_written,
                          crc, tuple(sorted(label_counts.items())), index_temp, len(index_data))

    def _encoder(self, label_kind) -> ExampleEncoder:
        if self._encoders.get(label_kind) is None:
            self._encoders[label_kind] = ExampleEncoder(label_kind, self._keys, self._policy.resize.enabled,
                                                        self._detection is not None and self._detection.masks)
        return self._encoders[label_kind]

    def teardown(self):
        self._progress.flush(force=True)
        self._validated.flush(force=True)

class WriteShards(beam.PTransform):
    """`validate`: the records were not validated yet (one read per image);
    else each file is read again and held to what was validated."""

    def __init__(self, staging: str, compression: Compression, policy: ImagePolicy,
                 keys: dict, label_map, progress_dir: str = "", validate: bool = False,
                 index_files: bool = False, output_format: OutputFormat = OutputFormat.TFRECORD,
                 quality_rows: bool = False, detection=None):
        super().__init__()
        self._quality_rows = quality_rows
        self._detection = detection
        self._args = (staging, compression, policy, keys, validate)
        self._index_files = index_files
        self._output_format = output_format
        self._label_map = label_map
        self._progress_dir = progress_dir

    def expand(self, shard_inputs):
        staging, compression, policy, keys, validate = self._args
        return shard_inputs | "Write" >> beam.ParDo(
            _WriteShardFn(staging, compression, policy, keys, validate, self._progress_dir, self._index_files,
                          self._output_format, self._quality_rows, self._detection),
            beam.pvalue.AsSingleton(self._label_map)).with_outputs(REJECTS, QUALITY, STATS, main="shards")
