"""--color_convert: one image, one meaning, in every decoder.

A CMYK or YCCK JPEG decodes to 3 channels in TensorFlow but 4 in PIL and
torchvision; a palette PNG to 3 (4 with its tRNS) in TensorFlow but 1 (the
palette indexes) in PIL and torchvision's `decode_image` (ImageReadMode.UNCHANGED
keeps libpng's channels of the file as stored). By default (rgb) such files are
re-encoded, RGB JPEG and RGB/RGBA PNG, and image/source_format records the
colour model; every other file is stored byte for byte. `keep` stores them as
found.

torchvision itself is not installed by the test extra: from PyPI on Linux it
brings torch with its CUDA libraries (gigabytes) for one decode. The test
applies its documented rule instead (`torchvision_channels`, below): with
ImageReadMode.UNCHANGED, a JPEG gives its frame's components (libjpeg's CMYK
output for 4) and a PNG libpng's channels of its colour type (palette: 1).
"""
import io
import os
import struct

import numpy as np
import pytest
from PIL import Image

from conftest import convert, image_bytes, manifest, read_all, scalar, write


def _ycck(cmyk_jpeg: bytes) -> bytes:
    """The same file with the Adobe segment's colour transform set to 2: libjpeg
    (TensorFlow, PIL, torchvision) then reads its components as YCCK."""
    at = cmyk_jpeg.index(b"\xff\xee")
    assert cmyk_jpeg[at + 4:at + 9] == b"Adobe" and cmyk_jpeg[at + 15] == 0
    return cmyk_jpeg[:at + 15] + b"\x02" + cmyk_jpeg[at + 16:]


def _png16(w: int, h: int, mode: str) -> bytes:
    arr = (np.random.RandomState(w).rand(h, w) * 65535).astype(np.uint16)
    buf = io.BytesIO()
    if mode == "I;16":
        Image.fromarray(arr).save(buf, "PNG")
    else:  # 16-bit RGB: Pillow writes it from raw bytes
        Image.frombytes("RGB", (w, h), np.stack([arr] * 3, -1).astype(">u2").tobytes(), "raw", "RGB;16B").save(
            buf, "PNG")
    return buf.getvalue()


CMYK = image_bytes(33, 21, mode="CMYK", seed=1)
FILES = {  # relative path: (bytes, the source format recorded, converted)
    "a/cmyk.jpg": (CMYK, "jpeg-cmyk", True),
    "a/ycck.jpg": (_ycck(image_bytes(31, 17, mode="CMYK", seed=2)), "jpeg-ycck", True),
    "a/gray.jpg": (image_bytes(20, 14, mode="L", seed=3), "jpeg", False),
    "a/rgb.jpg": (image_bytes(22, 15, seed=4), "jpeg", False),
    "b/rgb.png": (image_bytes(18, 13, fmt="PNG", seed=5), "png", False),
    "b/gray.png": (image_bytes(18, 13, fmt="PNG", mode="L", seed=6), "png", False),
    "b/gray_alpha.png": (image_bytes(18, 13, fmt="PNG", mode="LA", seed=7), "png", False),
    "b/palette.png": (image_bytes(30, 20, fmt="PNG", mode="P", seed=8), "png-palette", True),
    "b/palette_trns.png": (image_bytes(30, 20, fmt="PNG", mode="P", seed=9, transparency=0), "png-palette", True),
    "b/gray16.png": (_png16(19, 11, "I;16"), "png", False),
    "b/rgb16.png": (_png16(17, 12, "RGB"), "png", False),
}
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # libpng's png_get_channels by colour type, before any expansion


def torchvision_channels(data: bytes) -> int:
    """Channels of torchvision.io.decode_image(data) (mode UNCHANGED): a JPEG's
    frame components, a PNG's channels by its IHDR colour type."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return _PNG_CHANNELS[data[25]]
    pos = 2
    while True:
        marker, length = data[pos + 1], struct.unpack(">H", data[pos + 2:pos + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            return data[pos + 9]
        pos += 2 + length


def pil_channels(data: bytes) -> tuple:
    im = Image.open(io.BytesIO(data))  # no convert: the mode as a PIL user gets it
    return im.height, im.width, len(im.getbands())


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    base = tmp_path_factory.mktemp("colour")
    root = str(base / "imgs")
    for rel, (data, _, _) in FILES.items():
        write(os.path.join(root, rel), data)
    return base, root


def _decoded(out: str) -> dict:
    """{filename: (row, (height, width, channels) recorded)}; read_all holds
    each record to tf.io.decode_image's shape."""
    rows, _ = read_all(out)
    return {rel: (r, tuple(scalar(r, f"image/{k}") for k in ("height", "width", "channels")))
            for rel, r in rows.items()}


def test_every_record_decodes_alike_in_tensorflow_pil_and_torchvision(mix):
    import tensorflow as tf
    base, root = mix
    out = str(base / "out")
    assert convert("--input", root, "--output", out, "--num_shards", "1") == 0
    assert manifest(out)["counts"]["written"] == len(FILES)
    for rel, (r, (h, w, c)) in _decoded(out).items():
        data, source, converted = FILES[rel]
        encoded = r["image/encoded"][0]
        assert tf.io.decode_image(encoded, expand_animations=False).shape == (h, w, c), rel
        assert pil_channels(encoded) == (h, w, c), rel
        assert torchvision_channels(encoded) == c, rel
        assert scalar(r, "image/source_format") == source, rel
        assert (encoded != data) == converted, rel  # only the converted ones are re-encoded
        assert scalar(r, "image/format") == ("jpeg" if rel.endswith(".jpg") else "png"), rel
        if converted and rel.endswith(".png"):
            # Lossless: the pixels TensorFlow decodes from the original palette file.
            assert np.array_equal(tf.io.decode_image(data, expand_animations=False).numpy(),
                                  tf.io.decode_image(encoded, expand_animations=False).numpy()), rel
    # The original's size and channel count as TensorFlow reads it are what was recorded.
    assert _decoded(out)["a/cmyk.jpg"][1] == (21, 33, 3)
    assert _decoded(out)["b/palette_trns.png"][1] == (20, 30, 4)


def test_keep_stores_the_files_as_found(mix):
    """The disagreement the default removes: PIL and torchvision give 4
    channels for the CMYK and YCCK files and 1 for a palette, TensorFlow 3."""
    base, root = mix
    out = str(base / "keep")
    assert convert("--input", root, "--output", out, "--num_shards", "1", "--color_convert", "keep") == 0
    for rel, (r, (h, w, c)) in _decoded(out).items():
        data, _, converted = FILES[rel]
        assert r["image/encoded"][0] == data, rel
        assert scalar(r, "image/source_format") == ("jpeg" if rel.endswith(".jpg") else "png"), rel
        assert (pil_channels(data)[2] != c) == converted, rel
        assert (torchvision_channels(data) != c) == converted, rel


def test_same_bytes_on_a_rerun_and_a_new_rule_is_a_full_conversion(mix):
    """Re-encoded CMYK records are byte-identical from run to run (and across
    worker counts); a --versioned run with the default rule after a `keep`
    version copies none of the kept CMYK or palette records: the option is in
    the fingerprint, so the version is converted in full."""
    base, root = mix
    a, b = str(base / "again1"), str(base / "again2")
    assert convert("--input", root, "--output", a, "--num_shards", "2") == 0
    assert convert("--input", root, "--output", b, "--num_shards", "2", "--direct_num_workers", "2",
                   "--direct_running_mode", "multi_processing", in_memory=False) == 0
    for s in manifest(a)["splits"]["train"]["shards"]:
        with open(os.path.join(a, s["name"]), "rb") as fa, open(os.path.join(b, s["name"]), "rb") as fb:
            assert fa.read() == fb.read(), s["name"]
    versions = str(base / "versions")
    assert convert("--input", root, "--output", versions, "--versioned", "--version", "v1", "--num_shards", "1",
                   "--color_convert", "keep") == 0
    assert convert("--input", root, "--output", versions, "--versioned", "--version", "v2", "--num_shards", "1") == 0
    made = manifest(os.path.join(versions, "v2"))["made"]
    assert made["records_copied"] == 0 and "images.color_convert" in made["full_because"], made
    rows = _decoded(os.path.join(versions, "v2"))
    assert scalar(rows["a/cmyk.jpg"][0], "image/source_format") == "jpeg-cmyk"
    assert pil_channels(rows["a/cmyk.jpg"][0]["image/encoded"][0])[2] == 3
