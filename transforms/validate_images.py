"""Stage ValidateImages: read each file once, check it (see transforms/images.py)
and record what will be stored; bad files become rejects with their reason.

This is the CPU-heavy stage (a decode per image in full mode), so its input is
spread over the workers first. Only metadata leaves it: the bytes are read
again, from the page cache or the bucket, by the shard writer.

Input:  [Rec, ...] batches
Output: records [Rec, ...] with size, format, height, width, channels, crc;
        rejects [Reject, ...]
"""
from __future__ import annotations

import unicodedata
import warnings
from typing import Union

import apache_beam as beam
from PIL import Image

from transforms import fsutil
from transforms.images import BadImage, ImagePolicy, probe_image
from transforms.list_inputs import RECORDS, REJECTS
from transforms.progress import Progress
from transforms.records import Batch, Reason, Rec, Reject, fingerprint, pack, reject, unpack


def _read(rec: Rec) -> tuple[bytes, str]:
    """The bytes and the path they came from. A name in the other Unicode
    normal form (NFC/NFD: macOS writes NFD, most tables hold NFC) is tried when
    the name as given does not exist."""
    try:
        return fsutil.read_bytes(rec.path), rec.path
    except FileNotFoundError:
        if not fsutil.is_local(rec.path):
            raise
        for form in ("NFC", "NFD"):
            alt = unicodedata.normalize(form, rec.path)
            if alt != rec.path:
                try:
                    return fsutil.read_bytes(alt), alt
                except FileNotFoundError:
                    pass
        raise


def validate_record(rec: Rec, policy: ImagePolicy) -> Union[Rec, Reject]:
    try:
        data, path = _read(rec)
    except IsADirectoryError:
        return reject(rec, Reason.NOT_AN_IMAGE, "the path names a folder")
    except Exception as e:  # any filesystem's error: FileNotFoundError, BeamIOError, 404s ...
        reason = Reason(fsutil.error_reason(e))
        return reject(rec, reason, f"{type(e).__name__}: {e}"[:500])
    try:
        info = probe_image(data, policy)
    except BadImage as e:
        return reject(rec._replace(size=len(data)), e.reason, e.detail)
    return rec._replace(path=path, size=len(data), fmt=info.fmt, height=info.height, width=info.width,
                        channels=info.channels, colorspace=info.colorspace, source_fmt=info.source_fmt, reencode_to=info.reencode_to,
                        crc=fingerprint(data))


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

    def process(self, packed: bytes):
        good, bad = Batch(), Batch()
        nbytes = 0
        for rec in unpack(packed):
            out = validate_record(rec, self._policy)
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
