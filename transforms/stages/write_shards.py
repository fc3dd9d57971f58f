"""Stage WriteShards: each shard's records, in shuffle order, read from their
files and streamed into one TFRecord file in the staging folder.

Image bytes are read here, a bounded number ahead of the writing (in order,
transforms/storage/reads.py), and never pass through the runner; a worker holds the
reads in flight and one shard's metadata at a time. A local shard's bytes
are written by the thread that reads and encodes them, while they are in
the CPU's cache (transforms/storage/shard_file.py). The file gets a
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

Incremental versions (transforms/stages/match_previous.py): a record that
carries Rec.prev is not read. Its framed bytes are copied from the previous
version's shard, records back to back in one piece (provenance.plan_units),
and checked: a run whole by one CRC pass (provenance.run_problem), else each
record on its own (provenance.check_framed); one that fails is read from its
source instead. From a local previous version into a local shard the kernel
copies a run (copy_file_range) and the run is checked as this shard then
holds it, and cut off again if it fails; elsewhere the run is read, checked,
then written. A reject the previous version decided from the file's bytes
is carried. From a local previous version, a shard is copied from only
while it is the file pinned when it was published (transforms/storage/copy_trust.py:
checked on the descriptor after the copy; one that is not is cut off again
and its records read from their sources). With --versioned, each shard's
provenance file (what a later version needs to do the same) is written
beside it.

Resume (transforms/storage/resume.py): shards are staged in the resume area
named after the run's fingerprint, each followed by its done-record once its
files are complete; a shard that has a sound done-record there is not written
again: its result, rejects, quality rows and (--annotations) box statistics
are emitted from the record. The staged files and the done-record are
pinned as written (copy_trust), so a rerun keeps only what this run wrote.

The DoFn checks for a done-record and keeps what a worker holds from shard to
shard (_Worker); each shard is written by a ShardWriter, whose methods are the
steps above.

Input:  ((split, index, num_shards), [packed [(position, Rec), ...], ...]); side inputs: the
        label map, the run's fingerprint
Output: ShardResult; rejects [Reject]; quality [quality.Row] per shard (with quality_rows)
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import operator
import os
import uuid
from typing import NamedTuple, Optional, Union

import apache_beam as beam
import google_crc32c

from tfrecord_pipelines.transforms.core.features import ExampleEncoder
from tfrecord_pipelines.transforms.core import fingerprint as fp
from tfrecord_pipelines.transforms.core import crc_shift, provenance, quality
from tfrecord_pipelines.transforms.core.annotations import IN_REJECTED, boxes_in
from tfrecord_pipelines.transforms.core.annotations.boxes import write_objects
from tfrecord_pipelines.transforms.core.images import BadImage, ImagePolicy, configure_pillow, reencode_image, validate_record
from tfrecord_pipelines.transforms.core.records import Batch, Reason, Rec, Reject, ShardResult, fingerprint, reject
from tfrecord_pipelines.transforms.core.sharding import extension_of, shard_name
from tfrecord_pipelines.transforms.core.specs import QUALITY, REJECTS, STATS, DetectionSpec, OutputFormat, ReadPolicy
from tfrecord_pipelines.transforms.core.specs import ShardNames
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression, crc32c_text
from tfrecord_pipelines.transforms.storage import copy_trust, fsutil, layout, previous, reads, resume, spill
from tfrecord_pipelines.transforms.storage.array_record_io import shard_writer
from tfrecord_pipelines.transforms.storage.gcs import StorageUnavailable
from tfrecord_pipelines.transforms.storage.progress import Progress
from tfrecord_pipelines.transforms.storage.reads import make_pool, read_ahead, read_input, read_record, read_reject

log = logging.getLogger(__name__)


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


def prepare(rec: Rec, policy: ImagePolicy, first_read: bool) -> Union[Prepared, Reject]:
    """Everything one image needs before it is encoded, on a read-ahead
    thread (reading waits on I/O; Pillow's decoding and hashlib release the
    GIL): read it and validate it (`first_read`: no earlier pass checked
    it), or read it again and check it is what ValidateImages validated;
    re-encode if asked; hash it."""
    hash_src = None
    if first_read:
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


class Reuse(NamedTuple):
    """What WriteShards needs beyond the shards themselves (all optional)."""
    resume_parent: str = ""       # resume.area's parent ("": stage in the run's own staging folder)
    tool_version: str = ""
    previous: object = None       # provenance.PreviousVersion whose records may be copied
    provenance: bool = False      # write each shard's provenance file (--versioned, uncompressed TFRecord)


@dataclasses.dataclass(frozen=True)
class WriteSpec:
    """WriteShards' settings. The label map and the run's fingerprint are not
    here: they are PCollections, computed by the run (side inputs)."""
    staging: str                       # the run's staging folder: shards get unique temporary names there
    policy: ImagePolicy = ImagePolicy()  # how images are read, checked and re-encoded
    compression: Compression = Compression.NONE
    output_format: OutputFormat = OutputFormat.TFRECORD
    names: ShardNames = ShardNames()   # --shard_suffix, --shard_template
    feature_keys: tuple = ()           # ((default key, new key or ""), ...): --feature_keys
    source_ids: bool = False           # image/source_id on classification records too (--source_ids)
    # True: this is each image's first read (one read per image), so it is validated here, as it is
    # written. False: ValidateImages checked it before planning; it is read a second time and held to
    # what was validated (a `changed` reject otherwise).
    first_read: bool = True
    index_files: bool = False          # a DALI index beside each shard (--index_files)
    quality_rows: bool = False         # emit a quality.Row per record written, for CheckQuality
    detection: Optional[DetectionSpec] = None  # --annotations: boxes checked and written here
    reuse: Reuse = Reuse()             # resume area, previous version to copy from, provenance files
    progress_dir: str = ""             # a local run's progress files


class _Counters:
    """The stage's Beam counters."""

    def __init__(self, first_read: bool):
        counter = beam.metrics.Metrics.counter
        self.records = counter("tfrecords", "records_written")
        self.bytes = counter("tfrecords", "bytes_written")
        self.shards = counter("tfrecords", "shards_written")
        self.copied = counter("tfrecords", "records_copied")
        self.resumed = counter("tfrecords", "shards_resumed")
        # The counters ValidateImages keeps, when validation happens here.
        self.valid = counter("tfrecords", "images_valid")
        self.rejected = counter("tfrecords", "images_rejected" if first_read else "rejected_changed")


class _Worker:
    """What one worker's writing keeps from shard to shard: the settings, the
    read pool, the encoders, the label lookup, whether the kernel may copy,
    the progress files and the counters."""

    def __init__(self, spec: WriteSpec, counters: _Counters):
        self.spec = spec
        # Validating here, the hashes are computed a batch of records at a time (quality.hashes).
        self.policy = dataclasses.replace(spec.policy, hash_later=True) if spec.first_read and spec.quality_rows \
            else spec.policy
        self.keys = dict(spec.feature_keys)
        self.counters = counters
        self.progress = Progress(spec.progress_dir, "write")
        self.validated = Progress(spec.progress_dir if spec.first_read else "", "validate")
        self.pool = None
        self.encoders: dict = {}  # label kind -> ExampleEncoder (the kind comes with the label map)
        self.lookup_for, self.lookup = None, {}
        self.kernel_copy = True  # until the kernel says it cannot copy between these files
        prev = spec.reuse.previous
        # A pinned previous version's shards by name: what each must still be when it is copied from.
        # (-1,): a shard without pins (its records are read, never copied: PreviousEntries) matches nothing.
        self._pins = {s.name: s.trust[0] if s.trust else (-1,)
                      for s in prev.shards} if prev is not None and prev.pinned else {}

    def pinned(self, shard: str) -> tuple:
        """The identity the previous shard must have to be copied from (() where none is checked)."""
        return self._pins.get(shard, ())

    def encoder(self, label_kind) -> ExampleEncoder:
        if self.encoders.get(label_kind) is None:
            detection = self.spec.detection
            self.encoders[label_kind] = ExampleEncoder(label_kind, self.keys, self.policy.resize.enabled,
                                                       detection is not None and detection.masks,
                                                       self.spec.source_ids)
        return self.encoders[label_kind]

    def flush(self, force: bool = False) -> None:
        self.progress.flush(force=force)
        self.validated.flush(force=force)


class ShardWriter:
    """One shard written into a temporary file in `where`: its records, in
    order, copied from the previous version (copy_from_previous) or read and
    validated (read_and_validate) and encoded (encode); then its index
    (index_file), its provenance file (provenance_file), its quality rows
    (flush_rows) and its done-record (done_record). `write` runs the steps
    and yields the stage's outputs."""

    def __init__(self, worker: _Worker, shard: tuple, name: str, where: str, label_map):
        self._w = worker
        self._split, self._index, self._num_shards = shard
        self._name, self._where = name, where
        self._temp = fsutil.join(where, f"{name}.{uuid.uuid4().hex}")
        spec = worker.spec
        self._label_counts = collections.Counter()
        self._index_lines: list = []
        self._rejects = Batch()
        self._rows = Batch() if spec.quality_rows else None  # for CheckQuality: a small row per record written
        self._entries = [] if spec.reuse.provenance else None
        self._reject_entries: list = []
        self._waiting: list = []  # records written whose rows and provenance wait for their hashes
        self._counts = collections.Counter()
        self._box_stats = collections.Counter()  # --annotations: boxes by outcome (the manifest's detection section)
        self._cums = self._entries is not None  # the new shard's running CRC at each record: for the provenance
        self._encoder = worker.encoder(label_map.kind)
        if spec.detection is not None and worker.lookup_for is not label_map:
            worker.lookup, worker.lookup_for = label_map.as_dict(), label_map
        prev = spec.reuse.previous
        # A local previous version: a gap costs a read of its own nothing, so copy units are runs of records back
        # to back; and each is copied on this thread (by the kernel where it can: _copy_in_kernel), the read-ahead
        # threads reading and validating new images meanwhile.
        self._copy_here = prev is not None and fsutil.is_local(prev.folder)
        self._kernel_copy = self._copy_here and worker.kernel_copy and fsutil.is_local(self._temp) \
            and spec.output_format is OutputFormat.TFRECORD and spec.compression is Compression.NONE
        self._writer = None

    def write(self, recs: list):
        w, spec = self._w, self._w.spec
        in_flight = reads.in_flight(w.policy.reads, recs[0].path) if recs else 1
        if w.pool is None and recs:
            w.pool = make_pool(w.policy.reads, recs[0].path)
        units = provenance.plan_units(recs, max_gap=0 if self._copy_here else provenance.MAX_GAP)
        with shard_writer(self._temp, spec.output_format, spec.compression) as writer:
            self._writer = writer
            for _, got in read_ahead(units, self._fetch, in_flight, w.pool):
                if got.error is not None:
                    raise got.error  # a bug or a store that stopped answering: the bundle fails
                items = got.value
                if items and items[0][0] == "later":
                    unit = items[0][2]
                    items = (self._kernel_copy and self._copy_in_kernel(unit)) or self.copy_from_previous(unit)
                for how, rec, item in items:
                    if how in ("run", "placed"):  # records copied whole, checked by one CRC pass
                        self._add_copied(item if how == "placed" else _write_run(writer, item, self._cums))
                        continue
                    self._counts[how] += 1
                    if isinstance(item, Reject):
                        self._add_reject(how, rec, item)
                    elif how == "copy":
                        self._add_framed(rec, item)
                    else:
                        self.encode(item)
            crc = writer.close()
        self.flush_rows()
        index_temp, index_data = self.index_file()
        prov_temp, prov_data = self.provenance_file()
        counts = self._counts
        copied, read = counts["copy"], counts["read"] + counts["repair"]
        self._count(copied)
        result = ShardResult(self._split, self._index, self._num_shards, self._name, self._temp, writer.records,
                             writer.bytes_written, crc, tuple(sorted(self._label_counts.items())), index_temp,
                             len(index_data), prov_temp, len(prov_data),
                             crc32c_text(google_crc32c.value(prov_data)) if prov_temp else "",
                             copied, read, counts["repair"])
        # What publish moves (and a rerun resumes) only as this run wrote it: transforms/storage/copy_trust.py.
        for path in (self._temp, index_temp, prov_temp) if spec.reuse.resume_parent or spec.reuse.provenance else ():
            if path:
                copy_trust.pin(path)
        if spec.reuse.resume_parent:  # after every file of the shard is complete
            self.done_record(result, crc32c_text(google_crc32c.value(index_data)) if index_temp else "")
        if self._rejects:
            yield beam.pvalue.TaggedOutput(REJECTS, self._rejects)
        if self._rows:
            yield beam.pvalue.TaggedOutput(QUALITY, self._rows)
        for counted, n in sorted(self._box_stats.items()):
            yield beam.pvalue.TaggedOutput(STATS, (counted, n))
        yield result

    # ---- reading, on the read-ahead threads ----

    def _fetch(self, unit: provenance.Unit) -> list:
        """[(how, record, result)] for one unit of work, on a read-ahead
        thread: how is "read" (a Prepared or Reject), "carried" (the
        previous version's reject), "run" ((records, their framed bytes back
        to back), checked whole), "copy" ((framed bytes, stored sha256): a
        record checked on its own), "repair" (read because the previous
        version's copy is damaged), or "later" (the unit, for the writer's
        thread to copy)."""
        rec = unit.recs[0]
        if unit.kind == provenance.READ:
            return [("read", rec, self.read_and_validate(rec, self._w.spec.first_read))]
        if unit.kind == provenance.REJECT:
            return [("carried", rec, Reject(rec.rel, rec.prev.reason, rec.prev.detail, rec.split or ""))]
        if self._copy_here:
            return [("later", None, unit)]  # the writer's thread copies it (write)
        return self.copy_from_previous(unit)

    def read_and_validate(self, rec: Rec, first_read: bool) -> Union[Prepared, Reject]:
        """The image read from its source and validated (`first_read`), or
        read again and held to what ValidateImages validated (prepare)."""
        return prepare(rec, self._w.policy, first_read)

    # ---- copying from the previous version ----

    def copy_from_previous(self, unit: provenance.Unit) -> list:
        """A COPY unit's records: runs checked whole ("run"), or one by one
        where a run fails its check ("copy", or "repair": read from the source)."""
        prev = self._w.spec.reuse.previous
        try:
            data = previous.read_range(prev.folder, unit.shard, unit.start, unit.end, self._w.policy.reads.timeout,
                                       self._w.pinned(unit.shard))
        except StorageUnavailable:
            raise
        except Exception as e:  # gone or unreadable: its records are read from their sources
            log.warning("version %s: %s cannot be read (%s: %s); its records are read from their sources",
                        prev.version, unit.shard, type(e).__name__, str(e)[:200])
            data = b""
        out = []
        keys = self._w.keys
        for piece in _pieces(unit.recs):  # each a run back to back in the previous shard
            start = piece[0].prev.offset - unit.start
            end = piece[-1].prev.offset + piece[-1].prev.length - unit.start
            # A run wholly present (not cut short) is copied as it is, if one CRC pass says it is the bytes recorded.
            part = data if (start, end) == (0, len(data)) else data[start:end]
            if data and not provenance.run_problem(part, piece, [provenance.filename_needle(keys, r.rel)
                                                                 for r in piece]):
                out.append(("run", None, (piece, part)))
            else:
                out += self._one_by_one(piece, data, unit.start, prev)
        return out

    def _copy_in_kernel(self, unit: provenance.Unit) -> list:
        """A COPY unit (records back to back in a local previous shard) put
        into this shard by the kernel (copy_file_range: the bytes never pass
        through this process, nor through a second page of memory), then read
        back from this shard and checked like a run read first
        (provenance.run_problem): what is checked is what this shard holds.
        [("placed", None, [(record, where)])] if whole and sound; [] where it
        is not (this shard is cut back to before it, and the unit goes the
        read-and-check way, record by record where needed) or where the
        kernel cannot copy (from then on, nothing is copied this way)."""
        prev = self._w.spec.reuse.previous
        writer = self._writer
        sink = writer.sink
        sink.flush()  # a buffered sink's writes come first
        fd, at, crc = sink.fileno(), writer.bytes_written, writer.crc
        try:
            copied = previous.copy_range(prev.folder, unit.shard, unit.start, unit.end, fd, self._w.pinned(unit.shard))
        except previous.CopyUnsupported:
            self._w.kernel_copy = False
            return []
        except OSError:
            copied = -1  # gone or unreadable: copy_from_previous says so and reads the records from their sources
        # Record by record rather than provenance.run_problem over the whole run: each record is checksummed while
        # it is in the cache, and its running CRC (for the provenance) comes from its bytes. The whole run read back
        # at once and checked by run_problem, with the CRCs derived by shifts, takes as long and costs about a tenth
        # more of the write stage's CPU.
        placed, pos, problem = [], at, copied != unit.end - unit.start
        for rec in () if problem else unit.recs:
            length = rec.prev.length
            data = os.pread(fd, length, pos)
            needle = provenance.filename_needle(self._w.keys, rec.rel)
            if len(data) != length or (needle and data.rfind(needle, 12, length - 4) < 0):
                problem = True
                break
            before, crc = crc, google_crc32c.extend(crc, data)
            placed.append((rec, (pos, length, rec.prev.crc, before, crc)))
            pos += length
        first, last = unit.recs[0].prev, unit.recs[-1].prev
        # The bytes took this shard's CRC from `at`'s to `crc` exactly when they take the previous shard's from
        # first.crc_before to last.crc_after (crc_shift: the difference of two starts moves by a shift).
        if problem or crc != last.crc_after ^ crc_shift.shift(writer.crc ^ first.crc_before, pos - at):
            os.ftruncate(fd, at)
            os.lseek(fd, at, os.SEEK_SET)
            return []
        writer.absorb(pos - at, len(placed), crc)
        return [("placed", None, placed)]

    def _one_by_one(self, recs: tuple, data: bytes, data_start: int, prev) -> list:
        """Records of a run that failed its check (or could not be read), each
        checked on its own: copied if sound, else read from its source."""
        out = []
        for rec in recs:
            offset, length = rec.prev.offset - data_start, rec.prev.length
            framed = data[offset:offset + length]
            why = provenance.check_framed(framed, rec, provenance.filename_needle(self._w.keys, rec.rel))
            if why:
                if data:
                    log.warning("version %s: the record of %r in %s is damaged (%s); it is read from its source",
                                prev.version, rec.rel, rec.prev.shard, why)
                clean = rec._replace(prev=())
                out.append(("repair", clean, self.read_and_validate(clean, first_read=True)))
            else:
                out.append(("copy", rec, (framed, rec.prev.sha256)))
        return out

    # ---- writing, on the shard's thread ----

    def _add_copied(self, placed: list) -> None:
        """Records copied whole (a run written, or placed by the kernel)."""
        self._counts["copy"] += len(placed)
        for rec, spot in placed:
            self._waiting.append(provenance.Written(rec, rec.prev.sha256, None, spot, rec.prev.digest))
            if rec.label_id is not None:
                self._label_counts[rec.label_id] += 1
            self._index_line(spot[0], spot[1])
        self._w.progress.add(len(placed), sum(spot[1] for _, spot in placed))
        if len(self._waiting) >= quality.HASH_BATCH:
            self.flush_rows()

    def _add_reject(self, how: str, rec: Rec, item: Reject) -> None:
        self._rejects.append(item)
        if how != "carried":
            self._w.validated.add(0, 0, 1)
        if rec.annotation:  # the detection section reconciles: its boxes are in a rejected image
            self._box_stats[IN_REJECTED] += boxes_in(rec.annotation)
        e = provenance.reject_entry(rec, item) if self._entries is not None else None
        if e is not None:
            self._reject_entries.append(e)

    def _add_framed(self, rec: Rec, item: tuple) -> None:
        """A record copied on its own, checked (framed bytes, stored sha256)."""
        writer = self._writer
        before, crc_before = writer.bytes_written, writer.crc if self._cums else 0
        framed, sha = item
        writer.write_framed(framed)
        self._written(rec, sha, None, before, crc_before, rec.prev.crc, rec.prev.digest)

    def encode(self, item: Prepared) -> None:
        """An image read: its boxes checked (--annotations), its Example
        encoded and written."""
        writer, w = self._writer, self._w
        before, crc_before = writer.bytes_written, writer.crc if self._cums else 0
        rec, data, sha, hash_src = item
        if w.spec.detection is not None and rec.annotation:  # transforms/core/annotations/boxes.py
            boxed = write_objects(rec, data, w.lookup, w.spec.detection, w.policy.apply_orientation, self._box_stats)
            if not isinstance(boxed, Rec):
                self._rejects.append(reject(rec, *boxed))
                w.validated.add(0, 0, 1)
                return
            rec = boxed
        w.validated.add(1, rec.size)
        chunks, length = self._encoder.encode(rec, data, sha)
        crc = writer.write(chunks, length)
        self._written(rec, sha, hash_src, before, crc_before, crc, "")

    def _written(self, rec: Rec, sha: str, hash_src, before: int, crc_before: int, crc: int, digest: str) -> None:
        """A record just written (from `before`): its rows wait for the hashes; its label, progress and index line."""
        writer = self._writer
        self._waiting.append(provenance.Written(rec, sha, hash_src, (before, writer.bytes_written - before, crc,
                                                                     crc_before, writer.crc if self._cums else 0),
                                                digest))
        if len(self._waiting) >= quality.HASH_BATCH:
            self.flush_rows()
        if rec.label_id is not None:
            self._label_counts[rec.label_id] += 1
        self._w.progress.add(1, writer.bytes_written - before)
        # Uncompressed (parse refuses an index otherwise): the bytes
        # written are the record's offset and framed length.
        self._index_line(before, writer.bytes_written - before)

    # ---- what is written beside the shard ----

    def flush_rows(self) -> None:
        """The quality rows and provenance entries of the records waiting, their perceptual hashes computed."""
        provenance.flush_written(self._split, self._waiting, self._rows, self._entries)
        self._waiting = []

    def _index_line(self, offset: int, length: int) -> None:
        if self._w.spec.index_files:
            self._index_lines.append(b"%d %d\n" % (offset, length))

    def index_file(self) -> tuple:
        """(staged path, bytes) of the shard's index (--index_files), else ("", b"")."""
        if not self._w.spec.index_files:
            return "", b""
        return self._side_file(f"{self._name}.idx", b"".join(self._index_lines))  # staged flat; published in index/

    def provenance_file(self) -> tuple:
        """(staged path, bytes) of the shard's provenance file (--versioned), else ("", b"")."""
        if self._entries is None:
            return "", b""
        return self._side_file(f"{self._name}.prov",
                               b"".join(map(provenance.encode_entry, self._entries + self._reject_entries)))

    def _side_file(self, name: str, data: bytes) -> tuple:
        """(staged path, bytes) of a file staged beside a shard (its index, its provenance)."""
        temp = fsutil.join(self._where, f"{name}.{uuid.uuid4().hex}")
        with fsutil.open_write(temp) as sink:
            sink.write(data)
        return temp, data

    def done_record(self, result: ShardResult, index_crc: str) -> None:
        """The shard's done-record in the resume area, after every file of the shard is complete."""
        resume.write_done(self._where, result, self._rejects, self._rows or [], index_crc,
                          tuple(sorted(self._box_stats.items())))
        copy_trust.pin(fsutil.join(self._where, self._name + resume.DONE_SUFFIX))

    def _count(self, copied: int) -> None:
        writer, c, counts = self._writer, self._w.counters, self._counts
        c.records.inc(writer.records)
        c.bytes.inc(writer.bytes_written)
        c.shards.inc()
        c.copied.inc(copied)
        c.rejected.inc(len(self._rejects) - counts["carried"])
        if self._w.spec.first_read:
            c.valid.inc(writer.records - copied)
        self._w.progress.flush()
        self._w.validated.flush()


class _WriteShardFn(beam.DoFn):
    def __init__(self, spec: WriteSpec):
        self._spec = spec
        self._counters = _Counters(spec.first_read)

    def setup(self):
        self._worker = _Worker(self._spec, self._counters)
        # Also with two reads: a damaged record of the previous version is read and validated here.
        configure_pillow(self._worker.policy)
        self._done = None  # the resume area's done-records, when first needed

    def _where(self, fingerprint: str) -> str:
        r = self._spec.reuse
        return resume.area(r.resume_parent, fp.compared(fingerprint), r.tool_version) if r.resume_parent \
            else self._spec.staging

    def process(self, element, label_map, fingerprint=""):
        (split, index, num_shards), groups = element
        recs = [rec for _, rec in sorted((it for g in groups for it in spill.load(g)), key=operator.itemgetter(0))]
        spec = self._spec
        name = shard_name(split, index, num_shards, spec.compression.suffix,
                          extension_of(spec.names, spec.output_format), spec.names.template, spec.names.dataset)
        where = self._where(fingerprint)
        if spec.reuse.resume_parent and self._done_names(where) and name + resume.DONE_SUFFIX in self._done:
            done = resume.load_done(where, name, split, index, num_shards)
            if done is not None:  # a killed run of these inputs completed it: kept
                result, rejects, rows, boxes = done
                self._counters.resumed.inc()
                if rejects:
                    yield beam.pvalue.TaggedOutput(REJECTS, Batch(rejects))
                if rows and spec.quality_rows:
                    yield beam.pvalue.TaggedOutput(QUALITY, Batch(quality.Row(*r) for r in rows))
                for counted, n in boxes:
                    yield beam.pvalue.TaggedOutput(STATS, (counted, n))
                yield result
                return
        yield from ShardWriter(self._worker, (split, index, num_shards), name, where, label_map).write(recs)

    def _done_names(self, where: str) -> bool:
        """Whether the resume area holds done-records, listed once per
        instance (a shard completed since is written again: the same bytes)."""
        if self._done is None:
            self._done = {n for n in fsutil.list_dir(where) if n.endswith(resume.DONE_SUFFIX)}
        return bool(self._done)

    def teardown(self):
        self._worker.flush(force=True)


def _pieces(recs: tuple) -> list:
    """A copy unit's records as runs lying back to back in their previous shard."""
    out, run = [], [recs[0]]
    for a, b in zip(recs, recs[1:]):
        if a.prev.offset + a.prev.length == b.prev.offset:
            run.append(b)
        else:
            out.append(tuple(run))
            run = [b]
    out.append(tuple(run))
    return out


def _write_run(writer, run: tuple, cums: bool) -> list:
    """Writes records copied whole (run: (records, their bytes back to back),
    checked) and returns [(record, (offset, framed length, masked data CRC,
    shard CRC before, after))] for each, in this shard. The running CRCs
    (`cums`: for the provenance) follow from the previous shard's by a shift:
    at a position p of the run, old(p) XOR L_(p - start)(new(start) XOR old(start))."""
    recs, data = run
    first = recs[0].prev
    at, delta = writer.bytes_written, writer.crc ^ first.crc_before
    writer.write_run(data, len(recs), first.crc_before, recs[-1].prev.crc_after)
    out = []
    before = None
    for rec in recs:
        p = rec.prev
        pos = p.offset - first.offset
        if cums:
            before = p.crc_before ^ crc_shift.shift(delta, pos) if before is None else before
            after = p.crc_after ^ crc_shift.shift(delta, pos + p.length)
            out.append((rec, (at + pos, p.length, p.crc, before, after)))
            before = after
        else:
            out.append((rec, (at + pos, p.length, p.crc, 0, 0)))
    return out


class WriteShards(beam.PTransform):
    """`label_map`: the run's (a singleton); `fingerprint`: the run's (a
    singleton), which names the resume area (WriteSpec.reuse)."""

    def __init__(self, spec: WriteSpec, label_map, fingerprint=None):
        super().__init__()
        self._spec = spec
        self._label_map = label_map
        self._fingerprint = fingerprint

    def expand(self, shard_inputs):
        sides = [beam.pvalue.AsSingleton(self._label_map)]
        if self._fingerprint is not None:
            sides.append(beam.pvalue.AsSingleton(self._fingerprint))
        return shard_inputs | "Write" >> beam.ParDo(_WriteShardFn(self._spec), *sides).with_outputs(
            REJECTS, QUALITY, STATS, main="shards")
