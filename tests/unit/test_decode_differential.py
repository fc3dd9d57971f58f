"""What we record is what TensorFlow decodes: every variant of the decode
corpus (tests/corpus.py: PNG chunk lists, JPEG coding processes and sizes,
EXIF orientations of every type, formats stored through --reencode) goes
through our validation under each policy and through tf.io.decode_image.

Whatever we write must decode with `tf.io.decode_image(..., expand_animations=
False)` to exactly the height, width and channels (and colorspace) we
recorded; whatever TensorFlow cannot decode must be rejected, with a reason
and never an exception of another type. Variants TensorFlow decodes that we
still reject are listed with -s (they are few, and each is a file libpng or
libjpeg only tolerates)."""
import os

import pytest

import corpus
from tfrecord_pipelines.transforms.core import resize
from tfrecord_pipelines.transforms.core.images import (BadImage, ImagePolicy, Validation, configure_pillow,
                                                       probe_image, reencode_image, tf_size_problem)
from tfrecord_pipelines.transforms.core.records import Reason

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
VARIANTS = corpus.decode_variants()
SHORTER = resize.ResizePolicy(resize.ResizeMode.SHORTER, 20)
LONGEST = resize.ResizePolicy(resize.ResizeMode.LONGEST, 24, png=resize.PngPolicy.JPEG)
POLICIES = {
    "full": ImagePolicy(),
    "header": ImagePolicy(validation=Validation.HEADER),
    "full, --max_pixels 10^10": ImagePolicy(max_pixels=10**10),
    "header, --max_pixels 10^10": ImagePolicy(validation=Validation.HEADER, max_pixels=10**10),
    "reencode jpeg, orientation apply": ImagePolicy(reencode="jpeg", apply_orientation=True),
    "reencode png": ImagePolicy(reencode="png"),
    "resize shorter 20, apply, reencode jpeg": ImagePolicy(reencode="jpeg", apply_orientation=True, resize=SHORTER),
    "resize longest 24, keep, png to jpeg": ImagePolicy(reencode="png", resize=LONGEST),
    "resize, header, one read": ImagePolicy(validation=Validation.HEADER, reencode="jpeg", resize=SHORTER),
}
# Damage inside compressed data: only a decode finds it, and --validate header does not
# decode (docs/faults.md: "Bad records"). Every other variant is held to the rule in both modes.
DATA_DAMAGE = {"png image data short a row", "png image data half", "png zlib stream without its end",
               "png zlib checksum wrong", "png filter type 7", "png 1,000,001 pixels high"}
COLORSPACE = {1: "Grayscale", 2: "GrayscaleAlpha", 3: "RGB", 4: "RGBA"}
# TensorFlow decodes these; we must write them (not only "not write them wrongly").
MUST_WRITE = {
    "png palette": 3, "png palette+tRNS": 4, "png palette+tRNS as long as the palette": 4,
    "png palette tRNS after IDAT": 3, "png palette tRNS empty": 3, "png palette tRNS longer than the palette": 3,
    "png palette tRNS before PLTE": 3, "png palette tRNS twice": 4, "png palette tRNS invalid then valid": 4,
    "png palette 2-bit, 16 entries, tRNS 5": 3, "png palette 2-bit, 16 entries, tRNS 4": 4,
    "png rgb PLTE after IDAT": 3, "png gray PLTE": 1, "png unknown ancillary chunk": 3,
    "png IDAT split in two": 3, "png extra IDAT after tEXt": 3, "png empty IDAT after tEXt": 3,
    "png IEND with data": 3, "png large tEXt (9 MB)": 3, "png 1,000,000 pixels wide": 1,
    "png gray+alpha 16-bit": 2, "png rgba 16-bit": 4, "png image data with a row too many": 3,
    "jpeg arithmetic-coded": 3, "jpeg arithmetic-coded progressive": 3, "jpeg CMYK": 3, "jpeg grayscale": 1,
}


def tf_shape(data: bytes):
    import tensorflow as tf
    try:
        t = tf.io.decode_image(data, expand_animations=False)
    except Exception:  # InvalidArgumentError and others: TensorFlow does not decode it
        return None
    return tuple(t.shape)


_TF_SOURCE = {}


def source_shape(name: str):
    if name not in _TF_SOURCE:
        _TF_SOURCE[name] = tf_shape(VARIANTS[name])
    return _TF_SOURCE[name]


def ours(data: bytes, policy: ImagePolicy):
    """(stored bytes, (height, width, channels), colorspace), or the Reason."""
    configure_pillow(policy)
    try:
        info = probe_image(data, policy, decode_later=policy.validation is Validation.HEADER)
        stored = data
        if info.reencode_to:
            stored = reencode_image(data, info.reencode_to, policy, (info.width, info.height, info.channels))
    except BadImage as e:
        assert e.detail, "a reject carries its reason's detail"
        return e.reason
    return stored, (info.height, info.width, info.channels), info.colorspace, info


@pytest.mark.parametrize("policy", list(POLICIES))
def test_what_we_write_decodes_in_tensorflow_to_what_we_record(policy, capsys):
    p = POLICIES[policy]
    wrongly_rejected = []
    for name, data in VARIANTS.items():
        got = ours(data, p)
        if isinstance(got, Reason):
            if source_shape(name) is not None and policy in ("full", "header"):
                wrongly_rejected.append(f"{name}: {got.value}")
            continue
        stored, shape, colorspace, info = got
        if p.validation is Validation.HEADER and name in DATA_DAMAGE:
            continue  # the documented cost of --validate header (test_header_mode_misses_only_...)
        if not info.reencode_to:
            assert stored == data, name
        assert tf_shape(stored) == shape, (name, policy, shape)
        assert colorspace == COLORSPACE[shape[2]], name
    if policy in ("full", "header"):
        with capsys.disabled():
            print(f"\n{policy}: TensorFlow decodes, we reject: {wrongly_rejected or 'none'}")


@pytest.mark.parametrize("name", sorted(MUST_WRITE))
def test_what_tensorflow_decodes_we_write(name):
    for policy in ("full", "header"):
        got = ours(VARIANTS[name], POLICIES[policy])
        assert not isinstance(got, Reason), (name, policy, got)
        assert got[1][2] == MUST_WRITE[name] == source_shape(name)[2], (name, policy)


def test_every_variant_tensorflow_cannot_decode_is_rejected_in_full_mode_with_a_reason():
    refused = [n for n in VARIANTS if n.startswith(("png", "jpeg")) and source_shape(n) is None]
    assert len(refused) > 30, "the corpus must hold the classes TensorFlow refuses"
    for name in refused:
        for policy in ("full", "full, --max_pixels 10^10"):
            got = ours(VARIANTS[name], POLICIES[policy])
            assert isinstance(got, Reason), (name, policy, got[1])


def test_header_mode_misses_only_damage_a_decode_finds():
    """--validate header walks the chunks and markers but inflates nothing:
    what it lets through that TensorFlow refuses is damage inside the
    compressed data, never a chunk or marker rule."""
    missed = [n for n in VARIANTS if n.startswith(("png", "jpeg")) and source_shape(n) is None
              and not isinstance(ours(VARIANTS[n], POLICIES["header"]), Reason)]
    assert set(missed) <= DATA_DAMAGE, set(missed) - DATA_DAMAGE


def test_tensorflow_size_limits_are_the_rules():
    """Each bound on both sides, from the header alone (TensorFlow fails
    before decoding; Pillow would decode most of these)."""
    assert tf_size_problem("jpeg", 65_500, 10, 3) == "" and tf_size_problem("jpeg", 65_501, 10, 3)
    assert tf_size_problem("jpeg", 10, 65_501, 1)
    assert tf_size_problem("jpeg", 13_000, 13_765, 3) == ""  # 536,835,000 samples
    assert tf_size_problem("jpeg", 13_000, 13_766, 3)  # 536,874,000 samples: 2^29 is 536,870,912
    assert tf_size_problem("jpeg", 12_000, 12_000, 4) and tf_size_problem("jpeg", 12_000, 12_000, 3) == ""
    assert tf_size_problem("jpeg", 23_170, 23_170, 1) == "" and tf_size_problem("jpeg", 23_171, 23_170, 1)
    assert tf_size_problem("png", 1_000_000, 1, 1) == "" and tf_size_problem("png", 1_000_001, 1, 1)
    assert tf_size_problem("png", 23_170, 23_170, 4) == "" and tf_size_problem("png", 23_171, 23_170, 1)
    big = ImagePolicy(max_pixels=10**10)
    with pytest.raises(BadImage) as e:
        probe_image(VARIANTS["jpeg claiming 13,000 x 14,000"], big)
    assert e.value.reason is Reason.TOO_MANY_PIXELS and "2^29" in e.value.detail


def test_tensorflow_refuses_just_past_each_size_limit():
    """TensorFlow itself, at each bound: past it the decoder fails on the size
    (its message names it, or it fails before reading any data); at it, it
    gets as far as the data. Headers only: nothing large is decoded."""
    import tensorflow as tf

    def error(data):
        try:
            tf.io.decode_image(data, expand_animations=False)
        except Exception as e:
            return str(e)
        return ""
    png = corpus.build_png
    over = error(png([corpus.ihdr(23_171, 23_170, 8, 0), corpus.idat(1, 1, 8, 0), corpus.IEND]))
    at = error(png([corpus.ihdr(23_170, 23_170, 8, 0), corpus.idat(1, 1, 8, 0), corpus.IEND]))
    assert "PNG size too large" in over and at and "PNG size too large" not in at
    wide = error(png([corpus.ihdr(1_000_001, 1, 8, 0), corpus.idat(1, 1, 8, 0), corpus.IEND]))
    assert "Failed to initialize decoder" in wide  # libpng's user limit, in its header
    assert tf_shape(VARIANTS["png 1,000,000 pixels wide"]) == (1, 1_000_000, 1)
    gray = corpus._jpeg(16, 16, mode="L")
    for w, h in ((65_501, 8), (23_171, 23_170)):
        assert error(corpus._sof_claiming(gray, w, h)), (w, h)
    cmyk = corpus._jpeg(16, 16, mode="CMYK")
    assert error(corpus._sof_claiming(cmyk, 12_000, 12_000))  # 576 M samples: CMYK counts 4 per pixel


@pytest.mark.parametrize("entry", sorted(corpus.ORIENTATION_ENTRIES))
def test_any_exif_orientation_is_a_value_or_ignored_never_a_crash(entry):
    """An orientation of any type, count and value: a valid one (1-8, SHORT or
    LONG) turns the image with --exif_orientation apply; anything else is
    treated as 1, never a crash, whatever resizing and re-encoding do."""
    typ, count, value = corpus.ORIENTATION_ENTRIES[entry]
    valid = entry in ("SHORT 6", "SHORT 8", "SHORT 3", "LONG 6")  # one SHORT or LONG of 1-8
    turned = valid and entry != "SHORT 3"
    data = corpus.jpeg_with_orientation(corpus.ORIENTATION_ENTRIES[entry], 400, 240)
    for apply in (False, True):
        for rp in (resize.ResizePolicy(), resize.ResizePolicy(resize.ResizeMode.SHORTER, 60),
                   resize.ResizePolicy(resize.ResizeMode.LONGEST, 100, draft=False),
                   resize.ResizePolicy(resize.ResizeMode.SHORTER, 60, smart=False)):
            p = ImagePolicy(apply_orientation=apply, resize=rp, reencode="jpeg")
            got = ours(data, p)
            assert not isinstance(got, Reason), (entry, apply, rp, got)
            stored, shape, _, _ = got
            assert tf_shape(stored) == shape
            h, w = shape[:2]
            assert (h > w) == (apply and turned), (entry, apply, rp, shape)


@pytest.mark.parametrize("name", ["tiff orientation 6", "webp orientation 6"])
def test_other_formats_turned_by_their_orientation_when_reencoded_and_resized(name):
    """A valid TIFF (or WebP) with orientation 6 under --reencode jpeg, with
    or without resizing, comes out upright (30 wide, 40 high), as recorded."""
    for rp in (resize.ResizePolicy(), resize.ResizePolicy(resize.ResizeMode.SHORTER, 15),
               resize.ResizePolicy(resize.ResizeMode.LONGEST, 20)):
        got = ours(VARIANTS[name], ImagePolicy(reencode="jpeg", resize=rp))
        assert not isinstance(got, Reason), (name, rp, got)
        stored, shape, _, _ = got
        assert tf_shape(stored) == shape and shape[0] > shape[1], (name, rp, shape)
