"""Stage ValidateImages: read each file once, check it (see transforms/images.py)
and record what will be stored; bad files become rejects with their reason.
Reads run ahead of the checks on a bounded pool (transforms/reads.py), in
order, so a bucket's latency overlaps the decoding.

This is the CPU-heavy stage (a decode per image in full mode), so its input is
spread over the workers first. Only metadata leaves it: the bytes are read
again, from the page cache or the bucket, by the shard writer.

Input:  [Rec, ...] batches
Output: records [Rec, ...] with size, format, height, width, channels, crc;
        rejects [Reject, ...]
"""
from __future__ import annotations

import warnings
from typing import Union

import apache_beam as beam
from PIL import Image

from transforms import fsutil
from transforms.gcs import StorageUnavailable
from transforms.images import BadImage, ImagePolicy, probe_image
from transforms.list_inputs import RECORDS, REJECTS
from transforms.progress import Progress
from transforms.reads import NotAFile, ReadPolicy, TooLarge, make_pool, read_ahead, read_input
from transforms.records import Batch, Reason, Rec, Reject, fingerprint, pack, reject, unpack


def read_record(rec: Rec, policy: ReadPolicy) -> tuple[bytes, Rec]:
    """The record's bytes, and the record updated with where and which
    version they came from."""
    data, path, generation = read_input(rec.path, rec.generation, rec.size, policy)
    return data, rec._replace(path=path, generation=generation or rec.generation)


def read_reject(rec: Rec, e: Exception) -> Reject:
    """The reject for a read that failed on this one file. A store that does
    not answer at all is no reason to reject a file: that error is raised."""
    if isinstance(e, StorageUnavailable):
        raise e
    if isinstance(e, NotAFile):
        return reject(rec, Reason.NOT_A_FILE, str(e))
    if isinstance(e, TooLarge):
        return reject(rec, Reason.TOO_LARGE, str(e))
    # any filesystem's error: FileNotFoundError, BeamIOError, 404s ...
    return reject(rec, Reason(fsutil.error_reason(e)), f"{type(e).__name__}: {e}"[:500])


def check_record(rec: Rec, data: bytes, policy: ImagePolicy, read_again: bool = True) -> Union[Rec, Reject]:
    """The record with what will be stored, or its Reject. `read_again`: the
    writer will read the file a second time, and hold it to a CRC32C of
    these bytes."""
    try:
        info = probe_image(data, policy)
    except BadImage as e:
        return reject(rec._replace(size=len(data)), e.reason, e.detail)
    return rec._replace(size=len(data), fmt=info.fmt, height=info.height, width=info.width,
                        channels=info.channels, colorspace=info.colorspace, source_fmt=info.source_fmt,
                        reencode_to=info.reencode_to, crc=fingerprint(data) if read_again else -1)


def configure_pillow(policy: ImagePolicy) -> None:
    # Our own pixel check runs before any decode; make Pillow's bomb guard agree.
    Image.MAX_IMAGE_PIXELS = policy.max_pixels
    warnings.simplefilter("ignore", Image.DecompressionBombWarning)


class _ValidateFn(beam.DoFn):
    def __init__(self, policy: ImagePolicy, progress_dir: str = ""):
        self._policy = policy
        self._progress_dir = progress_dir
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
        recs = unpack(packed)
        if not recs:
            return
        reads = self._policy.reads
        if self._pool is None:
            self._pool = make_pool(reads, recs[0].path)
        for rec, got in read_ahead(recs, lambda r: read_record(r, reads), reads.in_flight_for(recs[0].path),
                                   self._pool):
            out = read_reject(rec, got.error) if got.error else check_record(got.value[1], got.value[0],
                                                                               self._policy)
            if isinstance(out, Rec):
                good.append(out)
                nbytes += out.size
            else:
                bad.append(out)
        self._ok.inc(len(good))
        self._bad.inc(len(bad))
        self._bytes.inc(nbytes)
        self._progress.add(len(good), nbytes, len(bad))
        if good:
            yield good
        if bad:
            yield beam.pvalue.TaggedOutput(REJECTS, bad)

    def finish_bundle(self):
        self._progress.flush(force=True)


class ValidateImages(beam.PTransform):
    def __init__(self, policy: ImagePolicy, progress_dir: str = ""):
        super().__init__()
        self._policy = policy
        self._progress_dir = progress_dir

    def expand(self, batches):
        return (batches
                | "Pack" >> beam.Map(pack)
                | "Spread" >> beam.Reshuffle()
                | "Validate" >> beam.ParDo(_ValidateFn(self._policy, self._progress_dir))
                .with_outputs(REJECTS, main=RECORDS))
