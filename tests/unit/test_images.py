"""Image checks: every accept/reject decision is held against TensorFlow's
decoder, and every accepted image decodes to the recorded shape."""
import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from conftest import image_bytes
from tfrecord_pipelines.transforms.core.images import (BadImage, ImagePolicy, Validation, jpeg_eoi_offset, probe_image, reencode_image,
                               sniff_format)
from tfrecord_pipelines.transforms.core.records import Reason

FULL = ImagePolicy()
HEADER = ImagePolicy(validation=Validation.HEADER)


def tf_decode(data: bytes):
    import tensorflow as tf
    try:
        return tuple(tf.io.decode_image(data, expand_animations=False).shape)
    except Exception:
        return None


def outcome(data: bytes, policy=FULL):
    try:
        info = probe_image(data, policy)
        return (info.height, info.width, info.channels)
    except BadImage as e:
        return e.reason


def png_16bit(w=20, h=12) -> bytes:
    arr = (np.random.RandomState(0).rand(h, w) * 65535).astype("uint16")
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


VALID = {
    "jpeg rgb": image_bytes(33, 21),
    "jpeg gray": image_bytes(33, 21, mode="L"),
    "jpeg cmyk": image_bytes(33, 21, mode="CMYK"),
    "jpeg progressive": image_bytes(33, 21, progressive=True),
    "jpeg 4:4:4": image_bytes(33, 21, subsampling=0),
    "jpeg trailing data": image_bytes(33, 21) + b"appended trailer",
    "png rgb": image_bytes(30, 20, fmt="PNG"),
    "png gray": image_bytes(30, 20, fmt="PNG", mode="L"),
    "png gray+alpha": image_bytes(30, 20, fmt="PNG", mode="LA"),
    "png rgba": image_bytes(30, 20, fmt="PNG", mode="RGBA"),
    "png palette": image_bytes(30, 20, fmt="PNG", mode="P"),
    "png palette+tRNS": image_bytes(30, 20, fmt="PNG", mode="P", transparency=0),
    "png gray+tRNS": image_bytes(30, 20, fmt="PNG", mode="L", transparency=3),
    "png 1-bit": image_bytes(30, 20, fmt="PNG", mode="1"),
    "png 16-bit": png_16bit(),
    "png interlaced": image_bytes(30, 20, fmt="PNG", optimize=False),
}


@pytest.mark.parametrize("name", list(VALID))
def test_valid_images_decode_in_tensorflow_to_the_recorded_shape(name):
    data = VALID[name]
    for policy in (FULL, HEADER):
        got = outcome(data, policy)
        assert got == tf_decode(data), (name, policy.validation)


def _cut(data: bytes, n: int) -> bytes:
    return data[:n]


def _png_chunk_flip(data: bytes, ctype: bytes, offset_in_data: int) -> bytes:
    i = data.index(ctype)
    b = bytearray(data)
    b[i + 4 + offset_in_data] ^= 0x01
    return bytes(b)


def _png_insert_bad_ancillary(data: bytes) -> bytes:
    body = b"tEXtk\x00v"
    chunk = struct.pack(">I", 3) + body + struct.pack(">I", (zlib.crc32(body) + 1) & 0xFFFFFFFF)
    i = data.index(b"IEND") - 4
    return data[:i] + chunk + data[i:]


def _jpeg_undefined_huffman_table(data: bytes) -> bytes:
    b = bytearray(data)
    b[b.index(b"\xff\xda") + 6] = 0x33  # the scan names Huffman tables that were never defined
    return bytes(b)


JPEG = image_bytes(64, 48, seed=3)
PNG = image_bytes(64, 48, fmt="PNG", seed=3)
BROKEN = {
    "jpeg cut in half": (_cut(JPEG, len(JPEG) // 2), Reason.TRUNCATED),
    "jpeg without EOI": (JPEG[:-2], Reason.TRUNCATED),
    "jpeg without EOI, zero padded": (JPEG[:-2] + b"\x00" * 16, Reason.TRUNCATED),
    "jpeg cut in its headers": (JPEG[:150], Reason.TRUNCATED),
    "jpeg undefined huffman table": (_jpeg_undefined_huffman_table(JPEG), Reason.CORRUPT),
    "png cut in IDAT": (PNG[: len(PNG) // 2], Reason.TRUNCATED),
    "png without IEND": (PNG[:-12], Reason.TRUNCATED),
    "png bad IDAT CRC": (_png_chunk_flip(PNG, b"IDAT", 4 + 30), Reason.CORRUPT),
    "png bad IHDR CRC": (_png_chunk_flip(PNG, b"IHDR", 4 + 5), Reason.CORRUPT),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_what_tensorflow_rejects_we_reject(name):
    data, reason = BROKEN[name]
    assert tf_decode(data) is None, "the case must be one TensorFlow fails on"
    assert outcome(data, FULL) == reason


def test_header_mode_misses_only_what_needs_a_decode():
    data, _ = BROKEN["jpeg undefined huffman table"]
    assert outcome(data, HEADER) == (48, 64, 3)  # the documented cost of --validate header
    for name, (data, reason) in BROKEN.items():
        if name != "jpeg undefined huffman table":
            assert outcome(data, HEADER) == reason, name


def test_tolerated_damage_is_accepted_like_tensorflow():
    flipped = bytearray(JPEG)
    flipped[len(JPEG) // 2] ^= 0x5A  # corrupt entropy data: libjpeg warns, TF decodes
    anc = _png_insert_bad_ancillary(PNG)  # libpng drops an ancillary chunk with a bad CRC
    for data in (bytes(flipped), anc):
        assert tf_decode(data) is not None
        assert outcome(data) == tf_decode(data)


def test_small_bad_inputs():
    assert outcome(b"") == Reason.EMPTY
    assert outcome(b"<!DOCTYPE html><html></html>") == Reason.NOT_AN_IMAGE
    assert outcome(b"hello, this is text\n") == Reason.NOT_AN_IMAGE


def _png_claiming(w: int, h: int) -> bytes:
    """A tiny, valid-looking PNG whose header claims w x h (a decompression bomb)."""
    def chunk(t, body):
        return struct.pack(">I", len(body)) + t + body + struct.pack(">I", zlib.crc32(t + body))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _jpeg_claiming(w: int, h: int) -> bytes:
    b = bytearray(image_bytes(16, 16))
    i = b.index(b"\xff\xc0")
    struct.pack_into(">HH", b, i + 5, h, w)
    return bytes(b)


def test_decompression_bombs_are_rejected_from_the_header():
    for data in (_png_claiming(14000, 14000), _jpeg_claiming(60000, 60000)):
        with pytest.raises(BadImage) as e:
            probe_image(data, FULL)
        assert e.value.reason is Reason.TOO_MANY_PIXELS
        assert "pixels" in e.value.detail
    small_limit = ImagePolicy(max_pixels=100)
    assert outcome(image_bytes(11, 10), small_limit) == Reason.TOO_MANY_PIXELS
    assert outcome(image_bytes(10, 10), small_limit) == (10, 10, 3)


OTHER = {
    "gif": image_bytes(20, 10, fmt="GIF", mode="P"),
    "webp": image_bytes(20, 10, fmt="WEBP"),
    "bmp": image_bytes(20, 10, fmt="BMP"),
    "tiff": image_bytes(20, 10, fmt="TIFF"),
}


@pytest.mark.parametrize("fmt", list(OTHER))
def test_other_formats_are_rejected_or_reencoded(fmt):
    data = OTHER[fmt]
    assert sniff_format(data) == fmt
    assert outcome(data) == Reason.UNSUPPORTED_FORMAT
    for target in ("jpeg", "png"):
        policy = ImagePolicy(reencode=target)
        info = probe_image(data, policy)
        out = reencode_image(data, target, policy)
        assert sniff_format(out) == target == info.fmt and info.source_fmt == fmt
        assert (info.height, info.width) == (10, 20)  # full size, not a reduced decode
        assert tf_decode(out) == (info.height, info.width, info.channels)


def test_png_named_jpeg_keeps_its_real_format():
    info = probe_image(VALID["png rgb"], FULL)
    assert info.fmt == "png"


def test_png_only_output_reencodes_jpeg():
    policy = ImagePolicy(output_formats=frozenset({"png"}), reencode="png")
    info = probe_image(JPEG, policy)
    assert (info.fmt, info.source_fmt, info.height, info.width) == ("png", "jpeg", 48, 64)
    assert tf_decode(reencode_image(JPEG, "png", policy)) == (info.height, info.width, info.channels)


def test_eoi_walk_finds_the_main_image_end_despite_a_trailer():
    data = JPEG + image_bytes(8, 8)  # e.g. an appended second image (MPF)
    assert jpeg_eoi_offset(data) == len(JPEG)


def test_reencoding_scales_16_bit_instead_of_clipping():
    import tensorflow as tf
    arr = np.full((8, 8), 61420, dtype="uint16")  # 0.94 of full scale; clipping would give 255
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    policy = ImagePolicy(output_formats=frozenset({"jpeg"}), reencode="png")
    out = reencode_image(buf.getvalue(), "png", policy)
    value = int(tf.io.decode_image(out, expand_animations=False).numpy().mean())
    assert abs(value - 61420 // 257) <= 1  # 239


def test_reencoding_composites_alpha_on_white_for_jpeg():
    import tensorflow as tf
    rgba = Image.new("RGBA", (8, 8), (0, 0, 0, 0))  # fully transparent black
    buf = io.BytesIO()
    rgba.save(buf, "PNG")
    policy = ImagePolicy(output_formats=frozenset({"jpeg"}), reencode="jpeg")
    out = reencode_image(buf.getvalue(), "jpeg", policy)
    assert int(tf.io.decode_image(out).numpy().min()) >= 250  # white, not black


def _with_profile(im, fmt: str, profile: bytes) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, icc_profile=profile)
    return buf.getvalue()


@pytest.mark.parametrize("target", ["jpeg", "png"])
def test_reencoding_keeps_an_icc_profile_of_the_same_colour_space(target):
    """Re-encoded (and resized) pixels keep their values, so they keep the
    profile that says what the values mean; one of another colour space is
    dropped, not misapplied."""
    from PIL import ImageCms
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    colour = Image.fromarray(np.random.default_rng(3).integers(0, 255, (40, 60, 3), dtype=np.uint8))
    policy = ImagePolicy(output_formats=frozenset({target}), reencode=target)
    for src_fmt in ("PNG", "TIFF"):
        out = reencode_image(_with_profile(colour, src_fmt, srgb), target, policy)
        assert Image.open(io.BytesIO(out)).info.get("icc_profile") == srgb, src_fmt
        assert tf_decode(out) == (40, 60, 3)
    grey = _with_profile(colour.convert("L"), "PNG", srgb)  # an RGB profile on grey pixels: it cannot apply
    out = reencode_image(grey, target, policy)
    assert "icc_profile" not in Image.open(io.BytesIO(out)).info
    plain = reencode_image(_with_profile(colour, "PNG", b""), target, policy)
    assert "icc_profile" not in Image.open(io.BytesIO(plain)).info
