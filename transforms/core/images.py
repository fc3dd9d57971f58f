"""Probe, validate and (optionally) re-encode one image, as pure functions.

The rule we enforce: every image we write decodes with
`tf.io.decode_image(data, expand_animations=False)` to a 3-D uint8 tensor of the
recorded height, width and channels. TensorFlow itself is too heavy to run in
the workers, so this module reproduces its acceptance rules, which differ from
Pillow's (tests/unit/test_images.py checks each rule against TensorFlow):

* JPEG: TF fails when the stream ends before the end-of-image marker, even if
  all pixels decoded (Pillow accepts a zero-padded file without EOI); TF only
  warns on corrupt entropy-coded data. We walk the markers to the EOI.
* PNG: TF (libpng) fails without IEND or with a bad CRC on a critical chunk
  (Pillow accepts both). We walk the chunks and check those CRCs.
* Decoding (full validation) catches what structure checks cannot, at ~2/3 of
  the cost of a full decode: a JPEG is decoded at 1/8 scale (`draft`), which
  still entropy-decodes the whole stream.
"""
from __future__ import annotations

import dataclasses
import enum
import io
import re
import struct
import warnings
import zlib
from typing import NamedTuple, Optional, Union

from PIL import Image, ImageOps, UnidentifiedImageError

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
    jpeg_quality: int = 95
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
_SOF_DECODABLE = {0xC0, 0xC1, 0xC2}  # baseline, extended sequential, progressive (Huffman)
_SOF_ANY = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_SOF_NAMES = {0xC3: "lossless", 0xC5: "hierarchical", 0xC6: "hierarchical", 0xC7: "hierarchical",
              0xC9: "arithmetic-coded", 0xCA: "arithmetic-coded", 0xCB: "arithmetic-coded lossless",
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
    channels: int
    body: int  # JPEG: offset of the first scan; PNG: unused
    progressive: bool = False


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
    the first scan. Raises BadImage for what TensorFlow cannot decode."""
    sof = None
    progressive = False
    metadata = 0
    for code, pos, seglen in _jpeg_markers(data):
        if code == 0xD9:
            raise BadImage(Reason.CORRUPT, "JPEG ends (EOI) before any image data")
        if code in _SOF_ANY:
            if pos + 10 > len(data):
                break
            if code not in _SOF_DECODABLE:
                raise BadImage(Reason.UNSUPPORTED_FORMAT, f"{_SOF_NAMES.get(code, 'unusual')} JPEG "
                               f"(SOF{code - 0xC0}) does not decode in TensorFlow")
            precision, h, w, comps = data[pos + 4], *struct.unpack_from(">HH", data, pos + 5), data[pos + 9]
            if precision != 8:
                raise BadImage(Reason.UNSUPPORTED_FORMAT, f"{precision}-bit JPEG does not decode in TensorFlow")
            if comps not in _JPEG_CHANNELS:
                raise BadImage(Reason.UNSUPPORTED_FORMAT, f"JPEG with {comps} colour components")
            sof = (w, h, _JPEG_CHANNELS[comps])
            progressive = code == 0xC2
        elif code == 0xDA:
            if sof is None:
                raise BadImage(Reason.CORRUPT, "JPEG scan without a frame header")
            return Header(*sof, pos, progressive)
        elif 0xE0 <= code <= 0xEF or code == 0xFE:  # APPn (Exif, ICC, XMP, ...) and comments
            metadata += seglen
            if metadata > MAX_JPEG_METADATA:
                raise BadImage(Reason.TOO_COMPLEX, f"JPEG metadata segments (Exif, ICC, comments, ...) exceed "
                               f"{MAX_JPEG_METADATA >> 20} MiB before the image data")
        elif code not in _STANDALONE and seglen < 2:
            raise BadImage(Reason.CORRUPT, f"JPEG segment at byte {pos} has length {seglen}")
    raise BadImage(Reason.TRUNCATED, "JPEG ends inside its headers")


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


def png_header(data: bytes) -> Header:
    """Size and channels from IHDR, after checking every chunk: libpng (in
    TensorFlow) fails without IEND or on a bad CRC in a critical chunk, which
    Pillow accepts. A palette with a tRNS chunk decodes to 4 channels."""
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise BadImage(Reason.TRUNCATED if len(data) < 33 else Reason.CORRUPT, "PNG without an IHDR chunk")
    w, h, depth, ctype = struct.unpack_from(">IIBB", data, 16)
    if ctype not in _PNG_CHANNELS or depth not in _PNG_DEPTHS[ctype]:
        raise BadImage(Reason.CORRUPT, f"PNG colour type {ctype} with bit depth {depth} is not valid")
    pos, n, trns = 8, len(data), False
    while pos + 12 <= n:
        (length,) = struct.unpack_from(">I", data, pos)
        ctag = data[pos + 4:pos + 8]
        end = pos + 12 + length
        if end > n:
            raise BadImage(Reason.TRUNCATED, f"PNG chunk {ctag!r} at byte {pos} is cut short")
        if not ctag[0] & 0x20:  # critical chunk
            (crc,) = struct.unpack_from(">I", data, end - 4)
            if zlib.crc32(memoryview(data)[pos + 4:end - 4]) != crc:
                raise BadImage(Reason.CORRUPT, f"PNG CRC mismatch in chunk {ctag.decode('latin-1')!r} at byte {pos}")
        if ctag == b"tRNS":
            trns = True
        elif ctag == b"IEND":
            channels = 4 if ctype == 3 and trns else _PNG_CHANNELS[ctype]
            return Header(w, h, channels, 0)
        pos = end
    raise BadImage(Reason.TRUNCATED, "PNG has no IEND chunk (the file ends early)")


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
        return _reencoded_info(_open(data, fmt), fmt, JPEG, policy)
    phash, later = -1, None
    if policy.validation is Validation.FULL:
        im = _open(data, fmt)
        _decode(im, fmt)
        # From the small decode validation already did: ~11 us, not another decode.
        phash, later = _hash(im, policy)
    return ImageInfo(fmt, head.height, head.width, head.channels, _COLORSPACE[head.channels], fmt, phash=phash,
                     hash_input=later)


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
    w, h = planned.width, planned.height
    if policy.apply_orientation and fmt == JPEG and _orientation(data) in resize.TRANSPOSING:
        w, h = h, w
    return ImageInfo(planned.fmt, h, w, head.channels, _COLORSPACE[head.channels], fmt, planned.fmt, phash,
                     head.height, head.width, later)


def _describe_start(data: bytes) -> str:
    """What the first bytes look like, without quoting them."""
    head = data[:512]
    if all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return "looks like text"
    return "binary data of an unknown kind"


def _orientation(data: bytes) -> int:
    """The EXIF orientation tag (1 when absent), read only when asked for."""
    if b"Exif\x00\x00" not in data[:65536]:
        return 1
    try:
        return int(Image.open(io.BytesIO(data)).getexif().get(0x0112, 1))
    except Exception:  # unreadable EXIF: leave the image as it is
        return 1


def _exif_orientation(im: Image.Image) -> int:
    """The orientation exif_transpose will apply."""
    try:
        return int(im.getexif().get(0x0112, 1))
    except Exception:
        return 1


def _orientation_exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _reencoded_info(im: Image.Image, fmt: str, target: str, policy: ImagePolicy) -> ImageInfo:
    w0, h0 = im.size
    out = prepare_reencode(im, fmt, target, policy)
    channels = _CHANNELS[out.mode]
    w, h = resize.target_size(out.width, out.height, policy.resize) or out.size
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
                     upright: bool = True) -> Image.Image:
    """Decodes the first frame and turns it into a mode the target format can
    store without loss of meaning: EXIF orientation applied (`upright`), 16-bit
    scaled (not clipped) to 8-bit, alpha composited on the background for JPEG."""
    _decode(im, fmt, reduced=False)
    try:
        im.seek(0)
    except EOFError:
        pass
    if upright:
        im = ImageOps.exif_transpose(im)
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
    fmt = sniff_format(data)
    im = _open(data, fmt)
    profile = im.info.get("icc_profile")
    # JPEGs and PNGs are turned upright only by --exif_orientation apply, as when stored as they are.
    keep = fmt in policy.output_formats and not (policy.apply_orientation and fmt == JPEG and _orientation(data) != 1)
    job = resize.start(im, policy.resize, 1 if keep else _exif_orientation(im)) if policy.resize.enabled else None
    im = resize.finish(prepare_reencode(im, fmt, target, policy, upright=not keep), job, policy.resize)
    if expect is not None and expect[2] == 1 and im.mode == "RGB":
        im = im.convert("L")  # a 1-bit PNG (Pillow's mode "1" became RGB): gray, as decode_image gives it
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
