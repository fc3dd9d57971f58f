"""What the images a run would read, and the records it would copy, cost
in CPU: the --dry_run line that lets a user price a job (a Dataflow bill is
vCPU-hours) before launching it.

The rates are the whole process tree's CPU measured on ImageNet-like photos
(~117 KB JPEGs, warm page cache; docs/performance.md, "A per-vCPU figure for
a Dataflow bill"): header checks ~495 µs per image, full validation ~2,160
µs per image. Whole runs, start-up included (2-4 CPU s), so
the figures lean high. The synthetic images of `make bench` cost less (171
and 1,248 µs for ~105 KB), so photos are the basis. The cost grows with the
bytes read (full validation of 2.37 MB photos cost 30.1 ms, 12.7 µs per KB:
docs/resizing.md), so the rates are per KB, which leans high for photos
larger than ~117 KB, and low for much smaller images, whose per-record
costs (the stages every record passes) weigh more. An incremental
version's copies are priced from bench.incremental's runs (US_PER_KB_COPIED).
Images read from a bucket add the storage client's request and download,
~1.9 ms of CPU each whatever the mode (bench.gcs: header mode 1.9 ms for
10-25 KB images, full mode 3.1 ms for ~100 KB, each ~1.9 ms above the local
figure). Not counted: a job's start-up and scaling (minutes of every
worker's vCPUs), the shuffle, the publish step, and re-encoding without a
resize (--reencode, upright orientation), which costs about what a resize
does for the images it touches.
"""
from __future__ import annotations

import dataclasses

from tfrecord_pipelines.transforms.core.images import Validation
from tfrecord_pipelines.transforms.core.units import human_bytes

# µs of CPU per KB read (1 KB = 1,000 bytes), by what is done to each image.
_PHOTOS_KB = 5.882e6            # the measured photos (the module's docstring)
_FULL = 109.12e6 / _PHOTOS_KB   # 18.55: full validation, 109.12 CPU s
US_PER_KB = {
    "header": 24.95e6 / _PHOTOS_KB,  # 4.24
    "full": _FULL,
    # 30.2: full validation's rate x 49.0 / 30.1 (bench.resize, 2.37 MB photos: resized to a shorter side of 256 at
    # quality 90, against stored as they are, docs/resizing.md)
    "resize": _FULL * 49.0 / 30.1,
}
# An incremental version's records copied from the previous one, per KB copied, the stages over every record
# included (bench.incremental (a): a run that read 550 images, 64.1 MB, and copied 49,950 records, 5.82 GB, took
# 22.8 CPU s, of which the reads and checks ~1.2 s at the rate above): ~3.7 µs per KB.
US_PER_KB_COPIED = (22.8e6 - 64.1e3 * _FULL) / 5.82e6
US_PER_REMOTE_IMAGE = 1_900   # a bucket's request and download, on top (bench.gcs at 30 ms per request)
KB_WHEN_UNSIZED = 117         # a listing without sizes (a table's rows): the measured photos' size


@dataclasses.dataclass(frozen=True)
class Estimate:
    images: int
    kb: float            # KB to read (KB_WHEN_UNSIZED each when the listing had no sizes)
    sized: bool
    work: str            # "header", "full" or "resize"
    local_s: float       # CPU seconds read from a local disk
    bucket_s: float      # CPU seconds read from a bucket
    copied: int = 0      # records copied from the previous version (an incremental version)
    copied_kb: float = 0.0

    @property
    def vcpu_hours(self) -> float:
        return self.bucket_s / 3600


def estimate(images: int, nbytes: int, validation: Validation, resized: bool, copied: int = 0,
             copied_bytes: int = 0) -> Estimate:
    """The CPU of converting `images` images of `nbytes` bytes in all (0:
    not known) with this validation, resized or not, and of copying
    `copied` records of `copied_bytes` from a previous version."""
    sized = nbytes > 0 or images == 0
    kb = nbytes / 1000 if sized else images * KB_WHEN_UNSIZED
    copied_kb = copied_bytes / 1000 if copied_bytes > 0 else copied * KB_WHEN_UNSIZED
    work = "resize" if resized else validation.value
    # A bucket's copies are ranged reads of whole runs of records (a few requests per shard): priced as local ones.
    local = (kb * US_PER_KB[work] + copied_kb * US_PER_KB_COPIED) / 1e6
    return Estimate(images, kb, sized, work, local, local + images * US_PER_REMOTE_IMAGE / 1e6, copied, copied_kb)


def describe(e: Estimate, remote_input: bool) -> list:
    """The dry run's line for an estimate."""
    if not e.images and not e.copied:
        return ["estimated CPU: none (no image to read)"]
    what = {"header": "header checks", "full": "full validation", "resize": "resized"}[e.work]
    size = human_bytes(e.kb * 1000) if e.sized else f"no sizes listed: ~{KB_WHEN_UNSIZED} KB each"
    work = ([f"the {e.images:,} images to read ({size}, {what})"] if e.images else []) + \
        ([f"the {e.copied:,} records to copy ({human_bytes(e.copied_kb * 1000)})"] if e.copied else [])
    here = "" if remote_input else f"{_cpu(e.local_s)} from a local disk, "
    return [f"estimated CPU for {' and '.join(work)}: {here}{_cpu(e.bucket_s)} from a bucket (as on Dataflow, plus "
            "the job's start-up); the measured rates: docs/performance.md"]


def _cpu(s: float) -> str:
    return f"{s:.2f} CPU s" if s < 10 else f"{s:,.0f} CPU s" if s < 600 else f"{s / 3600:,.2f} vCPU-h"
