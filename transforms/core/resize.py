"""Bounding the stored image size at conversion (--resize_longest_side,
--resize_shorter_side), as pure functions on sizes and Pillow images.

transforms/core/images.py calls these at two points. `plan` decides from the
header's size alone (no decode) whether an image is re-encoded and to what
size and format, so in smart mode an image within the bound is stored
byte-for-byte and never decoded twice. When it is re-encoded, `start` asks a
JPEG's decoder for a reduced decode (libjpeg's DCT-domain scaling, Pillow's
`draft`) to no less than DRAFT_GAP times the final size, and `finish` makes
the final resize with the stated filter, over exactly the area of the
original (the draft's box, turned with the EXIF orientation when that is
applied). Pillow's own `thumbnail` uses the same scheme (its reducing gap).

The size never grows: an image within the bound keeps its size. The longer
(or shorter) side becomes exactly the bound, the other is rounded to the
nearest pixel, half up, in integers, so a side's rounding is the same
whichever way the image is turned.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple, Optional

from PIL import Image, features

# A reduced decode of at least this many times the final size: the final
# filter then sees enough pixels that the result differs from a full-size
# resize by about one level (bench/resize.py measures it); 1.0 would let the
# DCT scaling do nearly all of the reduction, with visibly softer output.
DRAFT_GAP = 2.0

FILTERS = {
    "lanczos": Image.Resampling.LANCZOS,
    "bicubic": Image.Resampling.BICUBIC,
    "hamming": Image.Resampling.HAMMING,
    "bilinear": Image.Resampling.BILINEAR,
    "box": Image.Resampling.BOX,
    "nearest": Image.Resampling.NEAREST,
}

# (x0, y0, x1, y1) of the top-left box (0, 0, bw, bh) of a w x h image
# after exif_transpose's transposition for each EXIF orientation.
_TURNED_BOX = {
    1: lambda w, h, bw, bh: (0, 0, bw, bh),
    2: lambda w, h, bw, bh: (w - bw, 0, w, bh),
    3: lambda w, h, bw, bh: (w - bw, h - bh, w, h),
    4: lambda w, h, bw, bh: (0, h - bh, w, h),
    5: lambda w, h, bw, bh: (0, 0, bh, bw),
    6: lambda w, h, bw, bh: (h - bh, 0, h, bw),
    7: lambda w, h, bw, bh: (h - bh, w - bw, h, w),
    8: lambda w, h, bw, bh: (0, w - bw, bh, w),
}
TRANSPOSING = (5, 6, 7, 8)  # EXIF orientations that swap width and height


class ResizeMode(str, enum.Enum):
    NONE = "none"
    LONGEST = "longest"  # the longer side at most `size`
    SHORTER = "shorter"  # the shorter side at most `size` (ImageNet-style), aspect kept


class PngPolicy(str, enum.Enum):
    KEEP = "keep"  # a resized PNG stays PNG (lossless)
    JPEG = "jpeg"  # a resized PNG without an alpha channel is stored as JPEG


@dataclasses.dataclass(frozen=True)
class ResizePolicy:
    mode: ResizeMode = ResizeMode.NONE
    size: int = 0
    filter: str = "lanczos"            # a FILTERS name
    png: PngPolicy = PngPolicy.KEEP
    smart: bool = True                 # re-encode only images over the bound; others stay byte-for-byte
    draft: bool = True                 # JPEG DCT-domain reduced decode before the final resize

    @property
    def enabled(self) -> bool:
        return self.mode is not ResizeMode.NONE


class Plan(NamedTuple):
    fmt: str     # "jpeg" or "png": what is stored
    width: int   # stored size, in the file's own orientation
    height: int


def _scaled(side: int, num: int, den: int) -> int:
    """side * num / den rounded half up, at least 1."""
    return max(1, (2 * side * num + den) // (2 * den))


def target_size(width: int, height: int, policy: ResizePolicy) -> Optional[tuple[int, int]]:
    """(width, height) after resizing, or None when the image is within the
    bound (never upscaled)."""
    if not policy.enabled:
        return None
    n = policy.size
    if policy.mode is ResizeMode.LONGEST:
        if max(width, height) <= n:
            return None
        return (n, _scaled(height, n, width)) if width >= height else (_scaled(width, n, height), n)
    if min(width, height) <= n:
        return None
    return (n, _scaled(height, n, width)) if width <= height else (_scaled(width, n, height), n)


def plan(fmt: str, width: int, height: int, channels: int, policy: ResizePolicy) -> Optional[Plan]:
    """What a JPEG or PNG of this header size becomes, or None when it is
    stored as it is: resizing off, or within the bound in smart mode. Without
    smart mode every image is re-encoded (resized only when over the bound).
    A PNG goes to JPEG only with PngPolicy.JPEG and no alpha channel."""
    if not policy.enabled:
        return None
    size = target_size(width, height, policy)
    if size is None and policy.smart:
        return None
    w, h = size or (width, height)
    to_jpeg = fmt == "jpeg" or (policy.png is PngPolicy.JPEG and channels in (1, 3))
    return Plan("jpeg" if to_jpeg else "png", w, h)


class Job(NamedTuple):
    size: tuple      # final (width, height), oriented as stored
    box: Optional[tuple]  # the original's area in the decoded (drafted, turned) image; None: all of it


def start(im: Image.Image, policy: ResizePolicy, orientation: int = 1) -> Optional[Job]:
    """Before decoding: the final size of a file image, and for a JPEG the
    reduced decode. `orientation`: the EXIF orientation that will be applied
    (1 when none is). None when it is within the bound."""
    size = target_size(im.width, im.height, policy)
    if size is None:
        return None
    box = None
    if policy.draft and im.format == "JPEG":
        want = (int(size[0] * DRAFT_GAP), int(size[1] * DRAFT_GAP))
        got = im.draft(None, want) if want[0] < im.width and want[1] < im.height else None
        if got is not None:
            (_, (_, _, bw, bh)), (dw, dh) = got, im.size
            box = _TURNED_BOX.get(orientation, _TURNED_BOX[1])(dw, dh, bw, bh)
    if orientation in TRANSPOSING:
        size = (size[1], size[0])
    return Job(size, box)


def finish(im: Image.Image, job: Optional[Job], policy: ResizePolicy) -> Image.Image:
    """The final resize of the decoded (and turned, mode-converted) image."""
    if job is None:
        return im
    return im.resize(job.size, FILTERS[policy.filter], box=job.box)


def enabled_in(options: dict) -> bool:
    """Whether the run's options (the manifest's `options`) resize."""
    resize = (options.get("images") or {}).get("resize") or {}
    return resize.get("mode", "none") != "none"


def library_versions() -> dict:
    """The image libraries whose versions fix the re-encoded bytes: the
    manifest records them (the same versions give byte-identical output)."""
    import PIL
    out = {"pillow": PIL.__version__}
    for name, key in (("libjpeg_turbo", "libjpeg_turbo"), ("jpg", "libjpeg"), ("zlib", "zlib")):
        try:
            v = features.version(name)
        except Exception:  # a build without that feature
            v = None
        if v:
            out[key] = v
    return out
