"""Probe, validate and (optionally) re-encode one image, as pure functions.

The rule we enforce: every image we write decodes with
`tf.io.decode_image(data, expand_animations=False)` to a 3-D uint8 tensor of the
recorded height, width and channels. TensorFlow itself is too heavy to run in
the workers, so this module reproduces its acceptance rules, which differ from
Pillow's (tests/unit/test_images.py checks each rule against TensorFlow):

* JPEG: TF fails when the stream ends before the end-of-image marker, even if
  all pixels decoded (Pillow accepts a zero-padded file without EOI); TF only
  warns on corrupt entropy-coded data. We walk the markers to the EOI.
* PNG: TF (libpng 1.6) applies chunk rules Pillow does not: a chunk list
  in the wrong order, a second IHDR or PLTE, an unknown critical chunk, a
  bad CRC on a critical chunk or no IEND fail; a tRNS chunk out of place,
  of a wrong length or with a bad CRC is dropped (a palette image then
  decodes to 3 channels, not 4). `png_header` walks the chunks as libpng
  reads them (a few us: no data is inflated).
* Sizes: TF's decoders refuse images Pillow decodes (`tf_size_problem`).
* EXIF orientation: TF ignores it. We read it once, as a plain value 1-8
  (anything else counts as 1), and turn pixels ourselves.
* Colour models other decoders read differently: a CMYK or YCCK JPEG decodes
  to 3 channels in TensorFlow but 4 in PIL and torchvision; a palette PNG to 3
  (4 with a kept tRNS) in TensorFlow but 1 (the indexes) in PIL. With
  `ImagePolicy.color_convert` they are re-encoded (RGB JPEG at --jpeg_quality;
  RGB or RGBA PNG, lossless) so every decoder gives the recorded channels.
* Decoding (full validation) catches what structure checks cannot, at ~2/3 of
  the cost of a full decode: a JPEG is decoded at 1/8 scale (`draft`), which
  still entropy-decodes the whole stream.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import io
import re
import struct
import warnings
import zlib
from typing import NamedTuple, Optional, Union

from PIL import Image, UnidentifiedImageError

from tfrecord_pipelines.transforms.core import resize
from tfrecord_pipelines.transforms.core.quality import HASH_SIDE, hash_input, perceptual_hash
from tfrecord_pipelines.transforms.core.records import Reason, Rec, Reject, fingerprint, reject
from tfrecord_pipelines.transforms.core.specs import ReadPolicy

JPEG, PNG, GIF, BMP, WEBP, TIFF, HEIC, AVIF = "jpeg", "png", "gif", "bmp", "webp", "tiff", "heic", "avif"
STORABLE_FORMATS = (JPEG, PNG)  # decode_image gives 3-D tensors for these as-is
_PIL_NAME = {JPEG: "JPEG", PNG: "PNG", GIF: "GIF", BMP: "BMP", WEBP: "WEBP", TIFF: "TIFF", AVIF: "AVIF"}
_HEIF_BRANDS = {b"heic": HEIC, b"heix": HEIC, b"hevc": HEIC, b"heim": HEIC, b"heis": HEIC,
                b"mif1": HEIC, b"msf1": HEIC, b"avif": AVIF, b"avis": AVIF}
# channels decode_image returns for a Pillow mode; "P" depends on transparency.
_CHANNELS = {"1": 1, "L": 1, "I;16": 1, "I;16B": 1, "I": 1, "LA": 2, "RGB": 3, "CMYK": 3, "YCbCr": 3, "RGBA": 4}
_COLORSPACE = {1: "Grayscale", 2: "GrayscaleAlpha", 3: "RGB", 4: "RGBA"}


class Validation(str, enum.Enum):
    FULL = "full"      # structure checks and a decode of the whole stream
    HEADER = "header"  # structure checks only (marker/chunk walk, CRCs, end marker)


@dataclasses.dataclass(frozen=True)
class ImagePolicy:
    validation: Validation = Validation.FULL
    output_formats: frozenset = frozenset(STORABLE_FORMATS)
    reencode: str = ""  # "", "jpeg" or "png": what to turn other formats into
    max_pixels: int = 89_478_485
    jpeg_quality: int = 90            # --jpeg_quality (README, resizing: why 90)
    color_convert: bool = True        # --color_convert rgb: CMYK/YCCK JPEGs and palette PNGs re-encoded (above)
    background: tuple = (255, 255, 255)
    apply_orientation: bool = False  # re-encode JPEGs whose EXIF orientation is not 1, upright
    perceptual_hash: bool = False    # hash the decoded image for near-duplicate checks (full validation)
    hash_later: bool = False         # leave the hash's input in ImageInfo.hash_input (quality.hashes, in batches)
    reads: ReadPolicy = ReadPolicy()  # how input files are read (reads in flight, deadline, size cap)
    resize: resize.ResizePolicy = resize.ResizePolicy()  # --resize_*: bound the stored size


class ImageInfo(NamedTuple):
    fmt: str          # format of the bytes that will be stored
    height: int
    width: int
    channels: int
    colorspace: str
    source_fmt: str   # format of the file as found
    reencode_to: str = ""  # "jpeg"/"png" when the stored bytes are a re-encoding
    phash: int = -1        # quality.perceptual_hash of the decode (-1: not decoded, or not asked)
    orig_height: int = 0   # the input file's size as decoded (0: the stored size)
    orig_width: int = 0
    hash_input: Optional[Image.Image] = None  # with ImagePolicy.hash_later: quality.hash_input of the decode


class BadImage(Exception):
    def __init__(self, reason: Reason, detail: str):
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


def sniff_format(data: bytes) -> Optional[str]:
    """The image format from magic numbers, never from the file name."""
    if data[:3] == b"\xff\xd8\xff":
        return JPEG
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return PNG
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return GIF
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return WEBP
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return TIFF
    if data[4:8] == b"ftyp":
        return _HEIF_BRANDS.get(data[8:12])
    if data[:2] == b"BM" and len(data) >= 26:
        return BMP
    return None


# FF followed by a marker code: not a stuffed zero, not RSTn, not fill.
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
# Baseline, extended sequential and progressive, Huffman or arithmetic coded:
# what libjpeg-turbo decodes (TensorFlow's build included: tests/unit/test_images.py).
_SOF_DECODABLE = {0xC0, 0xC1, 0xC2, 0xC9, 0xCA}
_SOF_PROGRESSIVE = {0xC2, 0xCA}
_SOF_ANY = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_SOF_NAMES = {0xC3: "lossless", 0xC5: "hierarchical", 0xC6: "hierarchical", 0xC7: "hierarchical",
              0xCB: "arithmetic-coded lossless",
              0xCD: "hierarchical arithmetic", 0xCE: "hierarchical arithmetic", 0xCF: "hierarchical arithmetic"}
_STANDALONE = {0x01, 0xD8, 0xD9, *range(0xD0, 0xD8)}  # JPEG markers without a segment
_JPEG_CHANNELS = {1: 1, 3: 3, 4: 3}  # TensorFlow turns CMYK/YCCK into RGB
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}


# Work bounds: a hostile JPEG can cost minutes to validate (and every epoch
# of training after it) while staying small: 20,000 progressive scans took
# 71 s to decode, 60 MB of Exif 11 s to parse. Real encoders write about 10
# scans (libjpeg's progressive script) and metadata of a few MB at most (ICC
# profiles, XMP, a thumbnail).
MAX_JPEG_SCANS = 200
MAX_JPEG_METADATA = 16 << 20


class Header(NamedTuple):
    width: int
    height: int
    channels: int      # as tf.io.decode_image returns them
    body: int          # JPEG: offset of the first scan; PNG: unused
    progressive: bool = False
    components: int = 0  # JPEG: colour components in the file (TF's size limit counts them)
    model: str = ""      # "cmyk", "ycck" (JPEG), "palette" (PNG): decoders disagree on its channels


# TensorFlow's decoders refuse images by size whatever --max_pixels allows
# (tests/unit/test_images.py holds each bound against TensorFlow, both sides):
JPEG_MAX_SIDE = 65_500       # libjpeg-turbo's JPEG_MAX_DIMENSION
JPEG_MAX_SAMPLES = 1 << 29   # TF (jpeg_mem.cc): height x width x the file's components must stay below
PNG_MAX_SIDE = 1_000_000     # libpng's default user limits on width and height
PNG_MAX_PIXELS = 1 << 29     # TF (decode_image_op.cc): height x width must stay below


def tf_size_problem(fmt: str, width: int, height: int, components: int) -> str:
    """Why tf.io.decode_image refuses a `fmt` image of this size ("" if it
    does not). `components`: a JPEG's colour components (1, 3, or 4 for CMYK)."""
    if fmt == JPEG:
        if max(width, height) > JPEG_MAX_SIDE:
            return (f"{width}x{height}: TensorFlow's JPEG decoder (libjpeg-turbo) takes at most "
                    f"{JPEG_MAX_SIDE:,} pixels a side")
        if width * height * components >= JPEG_MAX_SAMPLES:
            return (f"{width}x{height} x {components} components = {width * height * components:,} samples: "
                    f"TensorFlow's JPEG decoder refuses {JPEG_MAX_SAMPLES:,} (2^29) or more")
    elif fmt == PNG:
        if max(width, height) > PNG_MAX_SIDE:
            return (f"{width}x{height}: TensorFlow's PNG decoder (libpng) takes at most {PNG_MAX_SIDE:,} "
                    "pixels a side")
        if width * height >= PNG_MAX_PIXELS:
            return (f"{width}x{height} = {width * height:,} pixels: TensorFlow's PNG decoder refuses "
                    f"{PNG_MAX_PIXELS:,} (2^29) or more")
    return ""


def _jpeg_markers(data: bytes, pos: int = 2):
    """(marker code, offset, segment length) of each marker from `pos`, as
    libjpeg reads them: extraneous and fill bytes skipped, and after each scan
    header its entropy-coded data. Ends after EOI, or where the data ends."""
    n = len(data)
    while pos + 1 < n:
        if data[pos] != 0xFF or data[pos + 1] in (0x00, 0xFF):
            m = _NEXT_MARKER.search(data, pos)
            if m is None:
                return
            pos = m.start()
        code = data[pos + 1]
        if code in _STANDALONE:
            yield code, pos, 0
            if code == 0xD9:
                return
            pos += 2
            continue
        if pos + 4 > n:
            return
        seglen = (data[pos + 2] << 8) | data[pos + 3]
        yield code, pos, seglen
        pos += 2 + seglen
        if code == 0xDA:
            m = _NEXT_MARKER.search(data, pos)
            if m is None:
                return
            pos = m.start()


def jpeg_header(data: bytes) -> Header:
    """Size and channels from the frame header; the segments are walked up to
    the first scan. Raises BadImage for what TensorFlow cannot decode:
    libjpeg-turbo's own checks of the frame header (one frame, a length that
    matches its components, sampling factors 1-4) are made here so that
    --validate header applies them too."""
    sof = None
    progressive = False
    metadata = 0
    adobe = -1  # the Adobe APP14 segment's colour transform (2: YCCK for 4 components), as libjpeg reads it
    for code, pos, seglen in _jpeg_markers(data):
        if code == 0xD9:
            raise BadImage(Reason.CORRUPT, "JPEG ends (EOI) before any image data")
        if code in _SOF_ANY:
            if pos + 10 > len(data):
                break
            if code not in _SOF_DECODABLE:
                raise BadImage(Reason.UNSUPPORTED_FORMAT, f"{_SOF_NAMES.get(code, 'unusual')} JPEG "
                               f"(SOF{code - 0xC0}) does not decode in TensorFlow")
            if sof is not None:
                raise BadImage(Reason.CORRUPT, "JPEG with two frame headers (SOF markers): libjpeg refuses it")
            precision, h, w, comps = data[pos + 4], *struct.unpack_from(">HH", data, pos + 5), data[pos + 9]
            if precision != 8:
                raise BadImage(Reason.UNSUPPORTED_FORMAT, f"{precision}-bit JPEG does not decode in TensorFlow")
            if comps not in _JPEG_CHANNELS:
                raise BadImage(Reason.UNSUPPORTED_FORMAT, f"JPEG with {comps} colour components")
            if seglen != 8 + 3 * comps:
                raise BadImage(Reason.CORRUPT, f"JPEG frame header of length {seglen} for {comps} components")
            if pos + 2 + seglen > len(data):
                break
            for c in range(comps):
                factors = data[pos + 11 + 3 * c]
                if not (1 <= factors >> 4 <= 4 and 1 <= factors & 15 <= 4):
                    raise BadImage(Reason.CORRUPT, f"JPEG component {c} has sampling factors "
                                   f"{factors >> 4}x{factors & 15} (libjpeg allows 1-4)")
            sof = (w, h, _JPEG_CHANNELS[comps], comps)
            progressive = code in _SOF_PROGRESSIVE
        elif code == 0xDA:
            if sof is None:
                raise BadImage(Reason.CORRUPT, "JPEG scan without a frame header")
            return Header(*sof[:3], pos, progressive, sof[3],
                          ("ycck" if adobe == 2 else "cmyk") if sof[3] == 4 else "")
        elif 0xE0 <= code <= 0xEF or code == 0xFE:  # APPn (Exif, ICC, XMP, ...) and comments
            if code == 0xEE and adobe == -1 and seglen >= 12 and data[pos + 4:pos + 9] == b"Adobe" \
                    and pos + 15 < len(data):
                adobe = data[pos + 15]
            metadata += seglen
            if metadata > MAX_JPEG_METADATA:
                raise BadImage(Reason.TOO_COMPLEX, f"JPEG metadata segments (Exif, ICC, comments, ...) exceed "
                               f"{MAX_JPEG_METADATA >> 20} MiB before the image data")
        elif code not in _STANDALONE and seglen < 2:
            raise BadImage(Reason.CORRUPT, f"JPEG segment at byte {pos} has length {seglen}")
    raise BadImage(Reason.TRUNCATED, "JPEG ends inside its headers")


def decode_cost_problem(data: bytes, max_scan_pixels: int = 0) -> str:
    """Why decoding these bytes would cost far more than any real photo ("" if
    it would not), from the markers alone: a JPEG with more than
    MAX_JPEG_SCANS progressive scans or MAX_JPEG_METADATA of metadata (as
    validation's `too_complex`), or, with `max_scan_pixels`, one whose scans
    times pixels exceed it (each scan is a pass over the whole image: 200
    scans of 1600x1200 took 18 s). For whoever decodes bytes in bounded time
    (the report's thumbnails)."""
    if sniff_format(data) != JPEG:
        return ""
    try:
        head = jpeg_header(data)
    except BadImage as e:
        return e.detail if e.reason is Reason.TOO_COMPLEX else ""
    if not head.progressive:
        return ""
    scans = jpeg_scans(data, head.body)[0]
    if scans > MAX_JPEG_SCANS:
        return f"progressive JPEG with more than {MAX_JPEG_SCANS} scans"
    if max_scan_pixels and scans * head.width * head.height > max_scan_pixels:
        return f"progressive JPEG of {scans} scans of {head.width}x{head.height} pixels"
    return ""


def jpeg_has_eoi(data: bytes, scan: int) -> bool:
    """Whether the stream reaches an end-of-image marker, as libjpeg requires
    (it fails with "premature end" otherwise, even when every pixel decoded).
    A file ending in FF D9 does: entropy-coded data never contains FF D9."""
    return data.endswith(b"\xff\xd9") or jpeg_eoi_offset(data, scan) is not None


def jpeg_scans(data: bytes, pos: int) -> tuple[int, bool]:
    """(scans, whether the end-of-image marker follows them) from the first
    scan at `pos`, counting at most MAX_JPEG_SCANS + 1."""
    scans = 0
    for code, _, _ in _jpeg_markers(data, pos):
        if code == 0xD9:
            return scans, True
        if code == 0xDA:
            scans += 1
            if scans > MAX_JPEG_SCANS:
                return scans, False
    return scans, False


def jpeg_eoi_offset(data: bytes, pos: int = 2) -> Optional[int]:
    """Offset just past the EOI that ends the main image, or None when the
    stream ends first."""
    for code, at, _ in _jpeg_markers(data, pos):
        if code == 0xD9:
            return at + 2
    return None


_PNG_KNOWN_CRITICAL = {b"IHDR", b"PLTE", b"IDAT", b"IEND"}


def _png_chunk_name_ok(tag: bytes) -> bool:
    return all(65 <= c <= 90 or 97 <= c <= 122 for c in tag)


def png_header(data: bytes) -> Header:
    """Size and channels from IHDR, after walking every chunk to IEND as
    libpng (TensorFlow's decoder) reads them. What libpng treats as an error
    is a BadImage; what it drops with a warning (a misplaced, duplicate,
    wrongly sized or damaged tRNS) is dropped here too, so a palette image
    has 4 channels only when libpng keeps its tRNS. Pillow is more lenient
    on all of these. No image data is inflated, except the first IDAT run
    when another chunk splits the IDATs (rare)."""
    n = len(data)
    if n < 33:
        raise BadImage(Reason.TRUNCATED, "PNG ends inside its header")
    if data[12:16] != b"IHDR":
        raise BadImage(Reason.CORRUPT, "PNG whose first chunk is not IHDR")
    pos = 8
    ihdr = None
    palette = -1          # PLTE entries libpng keeps (-1: no PLTE read)
    trns = False          # a tRNS chunk libpng keeps
    idat_runs = 0         # runs of consecutive IDAT chunks
    first_run = None      # (start, end) offsets of the first IDAT run
    body = 0
    previous = b""
    while True:
        if pos + 8 > n:
            raise BadImage(Reason.TRUNCATED, "PNG has no IEND chunk (the file ends early)")
        length, tag = struct.unpack_from(">I", data, pos)[0], bytes(data[pos + 4:pos + 8])
        shown = tag.decode("latin-1")
        if length > 0x7FFFFFFF:
            raise BadImage(Reason.CORRUPT, f"PNG chunk {shown!r} at byte {pos} claims {length:,} bytes")
        if not _png_chunk_name_ok(tag):
            raise BadImage(Reason.CORRUPT, f"PNG chunk type {tag!r} at byte {pos} is not four letters")
        end = pos + 12 + length
        if end > n:
            raise BadImage(Reason.TRUNCATED, f"PNG chunk {shown!r} at byte {pos} is cut short")
        critical = not tag[0] & 0x20
        crc_ok = zlib.crc32(memoryview(data)[pos + 4:end - 4]) == struct.unpack_from(">I", data, end - 4)[0]
        if critical and not crc_ok:
            raise BadImage(Reason.CORRUPT, f"PNG CRC mismatch in chunk {shown!r} at byte {pos}")
        if tag == b"IHDR":
            if ihdr is not None:
                raise BadImage(Reason.CORRUPT, f"PNG with a second IHDR chunk at byte {pos}")
            ihdr = _png_ihdr(data, pos, length)
        elif tag == b"PLTE":
            if palette != -1:
                raise BadImage(Reason.CORRUPT, f"PNG with a second PLTE chunk at byte {pos}")
            if idat_runs == 0:  # libpng ignores a PLTE after the image data (only in a non-palette image)
                if ihdr[3] == 3 and (length == 0 or length % 3 or length > 768):
                    raise BadImage(Reason.CORRUPT, f"PNG palette (PLTE) of {length} bytes: not 1-256 "
                                   "entries of 3 bytes")
                palette = min(length // 3, 1 << ihdr[2])  # libpng drops entries the bit depth cannot index
        elif tag == b"IDAT":
            if ihdr[3] == 3 and palette == -1:
                raise BadImage(Reason.CORRUPT, "palette PNG without a PLTE chunk before its image data")
            if previous != b"IDAT":
                idat_runs += 1
                if idat_runs == 1:
                    first_run = [pos, end]
                    body = pos
                elif length and not _zlib_ends(data, first_run):
                    raise BadImage(Reason.CORRUPT, f"PNG image data (IDAT) split by another chunk before byte "
                                   f"{pos}: libpng stops there")
            elif idat_runs == 1:
                first_run[1] = end
        elif tag == b"IEND":
            if not idat_runs:
                raise BadImage(Reason.CORRUPT, "PNG reaches IEND without image data (IDAT)")
            w, h, _, ctype = ihdr
            channels = 4 if ctype == 3 and trns else _PNG_CHANNELS[ctype]
            return Header(w, h, channels, body, model="palette" if ctype == 3 else "")
        elif tag == b"tRNS":
            # libpng keeps the first valid tRNS before the image data, of 1 to (palette entries) bytes
            # after PLTE, and drops any other with a warning.
            if crc_ok and not trns and idat_runs == 0 and ihdr[3] == 3:
                trns = palette > 0 and 1 <= length <= palette
        elif critical:
            raise BadImage(Reason.CORRUPT, f"PNG with an unknown critical chunk {shown!r} at byte {pos}: "
                           "libpng refuses it")
        previous = tag
        pos = end


def _png_ihdr(data: bytes, pos: int, length: int) -> tuple:
    """(width, height, bit depth, colour type) of an IHDR chunk, checked as libpng checks it."""
    if length != 13:
        raise BadImage(Reason.CORRUPT, f"PNG IHDR chunk of {length} bytes (13 expected)")
    w, h, depth, ctype, compression, filtering, interlace = struct.unpack_from(">IIBBBBB", data, pos + 8)
    if ctype not in _PNG_CHANNELS or depth not in _PNG_DEPTHS[ctype]:
        raise BadImage(Reason.CORRUPT, f"PNG colour type {ctype} with bit depth {depth} is not valid")
    if compression or filtering or interlace > 1:
        raise BadImage(Reason.CORRUPT, f"PNG IHDR with compression {compression}, filter {filtering}, interlace "
                       f"{interlace} (libpng knows 0, 0 and 0-1)")
    if w > 0x7FFFFFFF or h > 0x7FFFFFFF:
        raise BadImage(Reason.CORRUPT, f"PNG claims size {w}x{h}")
    return w, h, depth, ctype


_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def png_raw_size(width: int, height: int, depth: int, ctype: int, interlace: int) -> int:
    """Bytes of filtered image data (a filter byte before each row) that libpng
    reads: every row of every Adam7 pass of an interlaced image."""
    bits = depth * {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
    if not interlace:
        return height * (1 + (width * bits + 7) // 8)
    total = 0
    for x0, y0, dx, dy in _ADAM7:
        w, h = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        if w > 0 and h > 0:
            total += h * (1 + (w * bits + 7) // 8)
    return total


def png_data_problem(data: bytes, body: int) -> str:
    """Why libpng (TensorFlow) fails on a PNG's image data, "" if it does not:
    the zlib stream of the IDAT run at `body` must end (checksum included)
    within the run and hold every row. Pillow decodes a stream that ends
    early without a word (its missing rows are black); libpng fails ("Not
    enough image data"). One inflate, the output counted, not kept."""
    w, h, depth, ctype, _, _, interlace = struct.unpack_from(">IIBBBBB", data, 16)
    want = png_raw_size(w, h, depth, ctype, interlace)
    d = zlib.decompressobj()
    got, pos = 0, body
    try:
        while pos + 8 <= len(data) and data[pos + 4:pos + 8] == b"IDAT" and not d.eof:
            (length,) = struct.unpack_from(">I", data, pos)
            chunk = data[pos + 8:pos + 8 + length]
            while chunk and not d.eof:
                got += len(d.decompress(chunk, 1 << 20))
                chunk = d.unconsumed_tail
            pos += 12 + length
    except zlib.error as e:
        return f"PNG image data does not inflate: {e}"
    if not d.eof:
        return "PNG image data (zlib stream) does not end within its IDAT chunks"
    if got < want:
        return f"PNG image data holds {got:,} of the {want:,} bytes its {w}x{h} rows need"
    return ""


def _zlib_ends(data: bytes, run: list) -> bool:
    """Whether the image data's zlib stream ends within the IDAT chunks
    data[run[0]:run[1]] (libpng fails when it needs data past them)."""
    d = zlib.decompressobj()
    pos, end = run
    try:
        while pos < end and not d.eof:
            (length,) = struct.unpack_from(">I", data, pos)
            d.decompress(data[pos + 8:pos + 8 + length], 1 << 16)
            while d.unconsumed_tail and not d.eof:
                d.decompress(d.unconsumed_tail, 1 << 16)
            pos += 12 + length
    except zlib.error:
        return False
    return d.eof


def _open(data: bytes, fmt: str) -> Image.Image:
    try:
        return Image.open(io.BytesIO(data), formats=[_PIL_NAME[fmt]])
    except Image.DecompressionBombError as e:
        raise BadImage(Reason.TOO_MANY_PIXELS, str(e)) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, struct.error) as e:
        raise BadImage(Reason.CORRUPT, f"{fmt} header cannot be parsed: {e}") from None


def _decode(im: Image.Image, fmt: str, reduced: bool = True) -> None:
    """Decodes the whole stream; a JPEG in grey at the smallest scale (1/8 to
    1/1) that keeps HASH_SIDE pixels a side, unless `reduced` is off. The
    entropy-coded data of every component is decoded in full either way (that
    is what validation needs); a small grey output skips most of the IDCT and
    the colour planes' upsampling and conversion (2-3% of the decode), and is
    what the perceptual hash reads (an 8x6 decode of a small image would
    hash poorly)."""
    if fmt == JPEG and reduced:
        w, h = im.size
        im.draft("L", (min(w, max(w // 8, HASH_SIDE)), min(h, max(h // 8, HASH_SIDE))))
    try:
        im.load()
    except Image.DecompressionBombError as e:
        raise BadImage(Reason.TOO_MANY_PIXELS, str(e)) from None
    except (OSError, SyntaxError, ValueError, struct.error, EOFError, zlib.error) as e:
        msg = str(e)
        reason = Reason.TRUNCATED if "truncated" in msg else Reason.CORRUPT
        raise BadImage(reason, f"{fmt} does not decode: {msg}") from None


def probe_image(data: bytes, policy: ImagePolicy, decode_later: bool = False) -> ImageInfo:
    """Checks one file's bytes and returns what will be stored, or raises BadImage.
    `decode_later`: an image to resize is decoded whole by its re-encoding
    right after (one read per image), which is its validation."""
    with _pillow_errors("cannot be read"):
        return _probe_image(data, policy, decode_later)


@contextlib.contextmanager
def _pillow_errors(what: str):
    """Whatever Pillow raises on a hostile file (its plugins raise many types)
    becomes a reject with the reason, never a crash of the run."""
    try:
        yield
    except BadImage:
        raise
    except Image.DecompressionBombError as e:
        raise BadImage(Reason.TOO_MANY_PIXELS, str(e)) from None
    except (OSError, SyntaxError, ValueError, struct.error, EOFError, zlib.error, IndexError, KeyError, TypeError,
            ZeroDivisionError, OverflowError) as e:
        raise BadImage(Reason.CORRUPT, f"image {what}: {type(e).__name__}: {str(e)[:200]}") from None


def _check_png_data(data: bytes, head: Header) -> None:
    problem = png_data_problem(data, head.body)
    if problem:
        raise BadImage(Reason.TRUNCATED if "holds" in problem or "does not end" in problem else Reason.CORRUPT,
                       problem)


def _check_tf_size(fmt: str, width: int, height: int, components: int) -> None:
    problem = tf_size_problem(fmt, width, height, components)
    if problem:
        raise BadImage(Reason.TOO_MANY_PIXELS, problem)


def _probe_image(data: bytes, policy: ImagePolicy, decode_later: bool) -> ImageInfo:
    if not data:
        raise BadImage(Reason.EMPTY, "the file has zero bytes")
    fmt = sniff_format(data)
    if fmt is None:
        # Never the bytes themselves: a link may reach a file that is not ours to copy.
        raise BadImage(Reason.NOT_AN_IMAGE, f"no known image signature ({_describe_start(data)})")
    if fmt not in policy.output_formats:
        return _probe_for_reencode(data, fmt, policy)
    head = jpeg_header(data) if fmt == JPEG else png_header(data)
    pixels = head.width * head.height
    if pixels > policy.max_pixels:
        raise BadImage(Reason.TOO_MANY_PIXELS, f"{head.width}x{head.height} = {pixels:,} pixels > --max_pixels "
                       f"{policy.max_pixels:,}")
    if pixels == 0:
        raise BadImage(Reason.CORRUPT, f"image claims size {head.width}x{head.height}")
    if fmt == JPEG and head.progressive:
        # Each scan is a pass over the whole image: count them before any decode.
        scans, eoi = jpeg_scans(data, head.body)
        if scans > MAX_JPEG_SCANS:
            raise BadImage(Reason.TOO_COMPLEX, f"progressive JPEG with more than {MAX_JPEG_SCANS} scans (real "
                           "encoders write about 10); decoding it would cost each pass over the image again")
        if not eoi and not data.endswith(b"\xff\xd9"):
            raise BadImage(Reason.TRUNCATED, "JPEG stream ends before its end-of-image marker")
    elif fmt == JPEG and not jpeg_has_eoi(data, head.body):
        raise BadImage(Reason.TRUNCATED, "JPEG stream ends before its end-of-image marker")
    planned = resize.plan(fmt, head.width, head.height, head.channels, policy.resize)
    if planned is not None:
        return _resize_info(data, fmt, head, planned, policy, decode_later)
    if policy.apply_orientation and fmt == JPEG and _orientation(data) != 1:
        return _reencoded_info(_open(data, fmt), fmt, JPEG, policy)._replace(source_fmt=_source(fmt, head))
    _check_tf_size(fmt, head.width, head.height, head.components)
    phash, later = -1, None
    if policy.validation is Validation.FULL:
        im = _open(data, fmt)
        _decode(im, fmt)
        if fmt == PNG:
            _check_png_data(data, head)
        # From the small decode validation already did: ~11 us, not another decode.
        phash, later = _hash(im, policy)
    convert = policy.color_convert and bool(head.model)  # re-encoded in its own format by the writer
    return ImageInfo(fmt, head.height, head.width, head.channels, _COLORSPACE[head.channels],
                     _source(fmt, head) if convert else fmt, fmt if convert else "", phash=phash, hash_input=later)


def _source(fmt: str, head: Header) -> str:
    """image/source_format of a file whose stored bytes are a re-encoding: its format, and its colour
    model when that was converted ("jpeg-cmyk", "jpeg-ycck", "png-palette")."""
    return f"{fmt}-{head.model}" if head.model else fmt


def _hash(im: Image.Image, policy: ImagePolicy) -> tuple:
    """(perceptual hash or -1, None), or with policy.hash_later (-1, its input)."""
    if not policy.perceptual_hash:
        return -1, None
    return (-1, hash_input(im)) if policy.hash_later else (perceptual_hash(im), None)


def _resize_info(data: bytes, fmt: str, head: Header, planned: resize.Plan, policy: ImagePolicy,
                 decode_later: bool) -> ImageInfo:
    """A JPEG or PNG that --resize_* re-encodes: the stored size from the
    header alone (turned when --exif_orientation apply turns it)."""
    phash, later = -1, None
    if policy.validation is Validation.FULL and (not decode_later or policy.perceptual_hash):
        im = _open(data, fmt)
        _decode(im, fmt)
        phash, later = _hash(im, policy)
    if policy.validation is Validation.FULL and fmt == PNG:
        _check_png_data(data, head)
    w, h = planned.width, planned.height
    if policy.apply_orientation and fmt == JPEG and _orientation(data) in resize.TRANSPOSING:
        w, h = h, w
    _check_tf_size(planned.fmt, w, h, 1 if head.channels == 1 else 3)
    return ImageInfo(planned.fmt, h, w, head.channels, _COLORSPACE[head.channels], _source(fmt, head), planned.fmt,
                     phash, head.height, head.width, later)


def _describe_start(data: bytes) -> str:
    """What the first bytes look like, without quoting them."""
    head = data[:512]
    if all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return "looks like text"
    return "binary data of an unknown kind"


def _orientation(data: bytes) -> int:
    """The file's EXIF orientation (`exif_orientation`), read only when asked for."""
    if b"Exif\x00\x00" not in data[:65536]:
        return 1
    try:
        return exif_orientation(Image.open(io.BytesIO(data)))
    except Exception:  # unreadable EXIF: leave the image as it is
        return 1


def exif_orientation(im: Image.Image) -> int:
    """The EXIF orientation to apply to a Pillow image, 1-8, read from the
    file's EXIF bytes (Pillow's own parser takes the first of several
    values, and reads XMP too). Only a single
    SHORT or LONG of 1-8 counts: anything else (a LONG 4294967294, a
    negative SSHORT, 0, 9, the text "6", a rational, two values, an EXIF
    block that does not parse) is 1, the pixels as stored, which is how
    TensorFlow decodes them."""
    if im.format == "TIFF":
        # Pillow's TIFF reader turns a TIFF itself: its size is upright from the header on, and
        # loading turns the pixels to match (both by the directory's tag 0x0112). Nothing is left to turn.
        return 1
    raw = im.info.get("exif")
    if isinstance(raw, bytes):
        return _orientation_in_exif(raw[6:] if raw.startswith(b"Exif\x00\x00") else raw)
    return 1


def _orientation_in_exif(tiff: bytes) -> int:
    """The Orientation entry (0x0112) of a TIFF-structured EXIF block's first
    directory: one SHORT or LONG of 1-8, else 1."""
    if tiff[:4] == b"II*\x00":
        order = "<"
    elif tiff[:4] == b"MM\x00*":
        order = ">"
    else:
        return 1
    try:
        (ifd,) = struct.unpack_from(order + "I", tiff, 4)
        (entries,) = struct.unpack_from(order + "H", tiff, ifd)
        for i in range(min(entries, 1000)):
            tag, kind, count = struct.unpack_from(order + "HHI", tiff, ifd + 2 + 12 * i)
            if tag == 0x0112:
                if count != 1 or kind not in (3, 4):
                    return 1
                (value,) = struct.unpack_from(order + ("H" if kind == 3 else "I"), tiff, ifd + 10 + 12 * i)
                return value if 1 <= value <= 8 else 1
    except struct.error:  # the block ends inside its directory
        return 1
    return 1


# Pillow's transposition for each EXIF orientation, as ImageOps.exif_transpose applies it.
_TURN = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
         5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
         8: Image.Transpose.ROTATE_90}


def _orientation_exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _reencoded_info(im: Image.Image, fmt: str, target: str, policy: ImagePolicy) -> ImageInfo:
    w0, h0 = im.size
    out = prepare_reencode(im, fmt, target, policy, exif_orientation(im))
    channels = _CHANNELS[out.mode]
    w, h = resize.target_size(out.width, out.height, policy.resize) or out.size
    _check_tf_size(target, w, h, 1 if channels == 1 else 3)
    phash, later = _hash(out, policy)
    return ImageInfo(target, h, w, channels, _COLORSPACE[channels], fmt, target, phash, h0, w0, later)


def _probe_for_reencode(data: bytes, fmt: str, policy: ImagePolicy) -> ImageInfo:
    if not policy.reencode:
        raise BadImage(Reason.UNSUPPORTED_FORMAT,
                       f"{fmt} is not stored as-is (--output_formats {','.join(sorted(policy.output_formats))}); "
                       "use --reencode jpeg|png to convert it")
    if fmt == HEIC:
        raise BadImage(Reason.UNSUPPORTED_FORMAT, "heic cannot be decoded here (no HEIF decoder installed)")
    im = _open(data, fmt)
    w, h = im.size
    if w * h > policy.max_pixels:
        raise BadImage(Reason.TOO_MANY_PIXELS, f"{w}x{h} = {w * h:,} pixels > --max_pixels {policy.max_pixels:,}")
    if w * h == 0:
        raise BadImage(Reason.CORRUPT, f"image claims size {w}x{h}")
    return _reencoded_info(im, fmt, policy.reencode, policy)


def prepare_reencode(im: Image.Image, fmt: str, target: str, policy: ImagePolicy,
                     orientation: int = 1) -> Image.Image:
    """Decodes the first frame and turns it into a mode the target format can
    store without loss of meaning: turned by the EXIF `orientation` (1-8, as
    `exif_orientation` read it before the decode), 16-bit scaled (not
    clipped) to 8-bit, alpha composited on the background for JPEG."""
    _decode(im, fmt, reduced=False)
    try:
        im.seek(0)
    except EOFError:
        pass
    if orientation in _TURN:
        im = im.transpose(_TURN[orientation])
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        im = im.point(lambda v: v / 257).convert("L")
    elif im.mode == "F":
        im = im.convert("L")
    has_alpha = im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info)
    if target == JPEG:
        if has_alpha:
            rgba = im.convert("RGBA")
            base = Image.new("RGB", rgba.size, policy.background)
            base.paste(rgba, mask=rgba.getchannel("A"))
            return base
        return im if im.mode in ("L", "RGB") else im.convert("RGB")
    if has_alpha:
        return im if im.mode in ("RGBA", "LA") else im.convert("RGBA")
    return im if im.mode in ("L", "RGB") else im.convert("RGB")


def reencode_image(data: bytes, target: str, policy: ImagePolicy, expect: Optional[tuple] = None) -> bytes:
    """The stored bytes for an image that `probe_image` marked for re-encoding
    to `target`, within the --resize_* bound (transforms/core/resize.py).
    `expect`: the (width, height, channels) recorded; an image that does not
    come out so raises BadImage. Deterministic for a given Pillow build."""
    with _pillow_errors("cannot be re-encoded"):
        return _reencode(data, target, policy, expect)


def _reencode(data: bytes, target: str, policy: ImagePolicy, expect: Optional[tuple]) -> bytes:
    fmt = sniff_format(data)
    im = _open(data, fmt)
    profile = im.info.get("icc_profile")
    # JPEGs and PNGs are turned upright only by --exif_orientation apply, as when stored as they are.
    keep = fmt in policy.output_formats and not (policy.apply_orientation and fmt == JPEG and _orientation(data) != 1)
    orientation = 1 if keep else exif_orientation(im)
    job = resize.start(im, policy.resize, orientation) if policy.resize.enabled else None
    im = resize.finish(prepare_reencode(im, fmt, target, policy, orientation), job, policy.resize)
    if expect is not None and expect[2] == 1 and im.mode == "RGB":
        im = im.convert("L")  # a 1-bit PNG (Pillow's mode "1" became RGB): gray, as decode_image gives it
    elif expect is not None and expect[2] == 3 and im.mode == "RGBA" and fmt == PNG:
        im = im.convert("RGB")  # a palette's tRNS that libpng drops (png_header) and Pillow keeps
    if expect is not None and (im.width, im.height, _CHANNELS[im.mode]) != tuple(expect):
        raise BadImage(Reason.CORRUPT, f"re-encoded to {im.width}x{im.height}x{_CHANNELS[im.mode]}, not the "
                       f"{expect[0]}x{expect[1]}x{expect[2]} its header gave (EXIF orientation out of reach?)")
    buf = io.BytesIO()
    icc = icc_kept(profile, im.mode)
    if target == JPEG:
        orientation = _orientation(data) if keep and fmt == JPEG else 1
        # Pixels kept as the file holds them keep the tag that says how to show them.
        exif = {"exif": _orientation_exif(orientation)} if orientation != 1 else {}
        im.save(buf, "JPEG", quality=policy.jpeg_quality, optimize=False, icc_profile=icc, **exif)
    else:
        im.save(buf, "PNG", compress_level=6, icc_profile=icc)  # None: not the one in im.info either
    return buf.getvalue()


_ICC_SPACES = {"L": b"GRAY", "LA": b"GRAY", "RGB": b"RGB ", "RGBA": b"RGB "}


def icc_kept(profile: Optional[bytes], mode: str) -> Optional[bytes]:
    """The source's ICC profile, to store with the re-encoded image when it
    describes the re-encoded pixels' colour space (its header's bytes 16-20).
    Re-encoding keeps the pixel values, so it keeps the profile that says what
    they mean (a Display P3 or Adobe RGB photo would otherwise be shown as
    sRGB); a profile of another space (CMYK turned RGB, RGB turned grey) no
    longer applies and is dropped. TensorFlow's decoders ignore it either way."""
    if not profile or len(profile) < 20 or profile[16:20] != _ICC_SPACES.get(mode):
        return None
    return profile


def validate_record(rec: Rec, data: bytes, policy: ImagePolicy, read_again: bool = True) -> Union[tuple, Reject]:
    """(the record with what will be stored, its perceptual hash's input or
    None), or its Reject. The input is set with policy.hash_later (the hash
    is then -1 until quality.hashes). `read_again`: the writer will read the
    file a second time, and hold it to a CRC32C of these bytes."""
    try:
        info = probe_image(data, policy, decode_later=not read_again)
    except BadImage as e:
        return reject(rec._replace(size=len(data)), e.reason, e.detail)
    return rec._replace(size=len(data), fmt=info.fmt, height=info.height, width=info.width,
                        channels=info.channels, colorspace=info.colorspace, source_fmt=info.source_fmt,
                        reencode_to=info.reencode_to, crc=fingerprint(data) if read_again else -1,
                        phash=info.phash, orig_height=info.orig_height or info.height,
                        orig_width=info.orig_width or info.width), info.hash_input


def configure_pillow(policy: ImagePolicy) -> None:
    # Our own pixel check runs before any decode; make Pillow's bomb guard agree.
    Image.MAX_IMAGE_PIXELS = policy.max_pixels
    warnings.simplefilter("ignore", Image.DecompressionBombWarning)
