"""A corpus of bad and odd inputs, generated (never downloaded), each case with
its documented outcome. tests/e2e/test_corpus.py converts it and checks every
outcome; tests/e2e/test_corpus.py also checks that README's table says the same.

An outcome is ("written", format, channels) or ("rejected", reason), or for
listing cases ("excluded", why) / ("nothing", why).
"""
from __future__ import annotations

import io
import os
import struct
import unicodedata
import zlib
from typing import NamedTuple

import numpy as np
from PIL import Image

from conftest import image_bytes, write


class Case(NamedTuple):
    name: str       # as in README's table
    path: str       # relative to the corpus root (label folder "c" unless said)
    default: tuple  # outcome with default options
    fixed: tuple    # outcome with --reencode jpeg --exif_orientation apply


def _jpeg(w=48, h=32, seed=0, **kw) -> bytes:
    return image_bytes(w, h, seed=seed, **kw)


def _png_16bit() -> bytes:
    arr = (np.random.RandomState(1).rand(24, 40) * 65535).astype("uint16")
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


GIF_FRAMES = [((30, 20), (255, 0, 0)), ((50, 40), (0, 0, 255)), ((10, 60), (0, 255, 0))]  # (w, h), colour


def _gif_animated() -> bytes:
    """Three frames of different sizes and colours: the first is a 30x20 red one."""
    frames = [Image.new("RGB", size, colour).convert("P") for size, colour in GIF_FRAMES]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return buf.getvalue()


def _exif_rotated() -> bytes:
    """Stored 50x30, black with a white 20x12 block in the stored top-left corner.
    Orientation 6 means: rotate 90 degrees clockwise to display, which moves that
    corner to the top right (counter-clockwise would move it to the bottom left)."""
    arr = np.zeros((30, 50, 3), "uint8")
    arr[:12, :20] = 255
    im = Image.fromarray(arr)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW to display
    buf = io.BytesIO()
    im.save(buf, "JPEG", exif=exif.tobytes())
    return buf.getvalue()


def _heic_like() -> bytes:
    # The start of a real HEIC file: an ftyp box with brand "heic". Nothing
    # here decodes HEIC, so the signature alone decides the outcome.
    return struct.pack(">I", 24) + b"ftypheic" + b"\x00\x00\x00\x00" + b"mif1heic" + b"\x00" * 64


def _png_claiming(w: int, h: int) -> bytes:
    def chunk(t, body):
        return struct.pack(">I", len(body)) + t + body + struct.pack(">I", zlib.crc32(t + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


def _jpeg_claiming(w: int, h: int) -> bytes:
    b = bytearray(_jpeg(16, 16))
    struct.pack_into(">HH", b, b.index(b"\xff\xc0") + 5, h, w)
    return bytes(b)


W = "written"
R = "rejected"
NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")

FILES = [
    # name, path, bytes, default outcome, outcome with --reencode jpeg --exif_orientation apply
    ("truncated JPEG (header fine, stream cut)", "c/truncated.jpg", _jpeg(64, 48)[:400], (R, "truncated"), (R, "truncated")),
    ("JPEG missing its end marker", "c/no_eoi.jpg", _jpeg(64, 48)[:-2] + b"\0" * 8, (R, "truncated"), (R, "truncated")),
    ("zero-byte file", "c/zero.jpg", b"", (R, "empty"), (R, "empty")),
    ("text named .jpg", "c/notes.jpg", b"just some notes\n", (R, "not_an_image"), (R, "not_an_image")),
    ("HTML named .jpg", "c/page.jpg", b"<!DOCTYPE html><html><body>404</body></html>", (R, "not_an_image"), (R, "not_an_image")),
    ("PNG named .jpg", "c/png_named.jpg", image_bytes(30, 20, fmt="PNG"), (W, "png", 3), (W, "png", 3)),
    ("animated GIF", "c/anim.gif", _gif_animated(), (R, "unsupported_format"), (W, "jpeg", 3)),
    ("WebP", "c/photo.webp", image_bytes(30, 20, fmt="WEBP"), (R, "unsupported_format"), (W, "jpeg", 3)),
    ("BMP", "c/photo.bmp", image_bytes(30, 20, fmt="BMP"), (R, "unsupported_format"), (W, "jpeg", 3)),
    ("TIFF", "c/photo.tiff", image_bytes(30, 20, fmt="TIFF"), (R, "unsupported_format"), (W, "jpeg", 3)),
    ("HEIC", "c/photo.heic", _heic_like(), (R, "unsupported_format"), (R, "unsupported_format")),
    ("AVIF", "c/photo.avif", image_bytes(30, 20, fmt="AVIF"), (R, "unsupported_format"), (W, "jpeg", 3)),
    ("grayscale JPEG", "c/gray.jpg", _jpeg(mode="L"), (W, "jpeg", 1), (W, "jpeg", 1)),
    ("CMYK JPEG", "c/cmyk.jpg", _jpeg(mode="CMYK"), (W, "jpeg", 3), (W, "jpeg", 3)),
    ("16-bit PNG", "c/deep.png", _png_16bit(), (W, "png", 1), (W, "png", 1)),
    ("RGBA PNG", "c/rgba.png", image_bytes(30, 20, fmt="PNG", mode="RGBA"), (W, "png", 4), (W, "png", 4)),
    ("palette PNG with transparency", "c/palette.png", image_bytes(30, 20, fmt="PNG", mode="P", transparency=0),
     (W, "png", 4), (W, "png", 4)),
    ("JPEG with EXIF orientation 6", "c/rotated.jpg", _exif_rotated(), (W, "jpeg", 3), (W, "jpeg", 3)),
    ("PNG claiming 14000x14000 (bomb)", "c/bomb.png", _png_claiming(14000, 14000), (R, "too_many_pixels"),
     (R, "too_many_pixels")),
    ("JPEG header claiming 60000x60000", "c/bomb.jpg", _jpeg_claiming(60000, 60000), (R, "too_many_pixels"),
     (R, "too_many_pixels")),
    ("Korean names", "c/서울 반여3동_039.JPG", _jpeg(seed=11), (W, "jpeg", 3), (W, "jpeg", 3)),
    ("NFC name", f"c/{NFC}.jpg", _jpeg(seed=12), (W, "jpeg", 3), (W, "jpeg", 3)),
    ("NFD name (a different file)", f"c/{NFD}.jpg", _jpeg(seed=13), (W, "jpeg", 3), (W, "jpeg", 3)),
    ("spaces in names", "c/with  two spaces .jpg", _jpeg(seed=14), (W, "jpeg", 3), (W, "jpeg", 3)),
    ("[1] in names", "c/photo [1].jpg", _jpeg(seed=15), (W, "jpeg", 3), (W, "jpeg", 3)),
    ("* in names", "c/star*.jpg", _jpeg(seed=16), (W, "jpeg", 3), (W, "jpeg", 3)),
    ("? in names", "c/what?.jpg", _jpeg(seed=17), (W, "jpeg", 3), (W, "jpeg", 3)),
    ("a link to a missing file", "c/dangling.jpg", None, (R, "missing"), (R, "missing")),
]
LISTING = [
    ("an empty class folder", "empty_class/", ("nothing", "no files, so no records and no class id")),
    ("a hidden file (.DS_Store)", "c/.DS_Store", ("excluded", "hidden")),
    ("a symlink loop", "c/loop -> ..", ("excluded", "symlink_loop")),
]


def build_tree(root: str) -> list[Case]:
    """Writes the folder corpus under root; returns the file cases."""
    cases = []
    for name, rel, data, default, fixed in FILES:
        path = os.path.join(root, rel)
        if data is None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.symlink(os.path.join(root, "nowhere.jpg"), path)
        else:
            write(path, data)
        cases.append(Case(name, rel, default, fixed))
    write(os.path.join(root, "d", "ok.jpg"), _jpeg(seed=30))  # a second class
    os.makedirs(os.path.join(root, "empty_class"), exist_ok=True)
    write(os.path.join(root, "c", ".DS_Store"), b"\x00\x00\x00\x01Bud1\x00")
    os.symlink("..", os.path.join(root, "c", "loop"))
    return cases


TABLE_CASES = [
    # name, outcome; the table below realises them
    ("UTF-8 BOM and CRLF line ends", (W, "jpeg", 3)),
    ("quoted field with a comma and a newline", (W, "jpeg", 3)),
    ("spaces around values", (W, "jpeg", 3)),
    ("duplicate row (same file, same label)", (R, "duplicate")),
    ("two rows giving one file different labels", (R, "conflicting_labels")),
    ("row naming a missing file", (R, "missing")),
    ("empty label", (R, "no_label")),
    ("path escaping the root (../../etc/passwd)", (R, "unsafe_path")),
    ("absolute path (/etc/passwd)", (R, "unsafe_path")),
    ("another bucket (gs://other-bucket/x.jpg)", (R, "unsafe_path")),
    ("label that looks like a path (../../evil)", (W, "jpeg", 3)),
    ("NFC name in the table, NFD name on disk", (W, "jpeg", 3)),
]


def build_table(base: str) -> tuple[str, str, dict]:
    """Writes base/pool/* and base/labels.csv. Returns (table, image root,
    {path cell: (case name, expected outcome)})."""
    pool = os.path.join(base, "pool")
    for i, n in enumerate(["a.jpg", "b.jpg", "c.jpg", "dup.jpg", "conflict.jpg", "nolabel.jpg", "evil.jpg"]):
        write(os.path.join(pool, n), _jpeg(seed=40 + i))
    write(os.path.join(pool, unicodedata.normalize("NFD", "Émile.jpg")), _jpeg(seed=50))
    outcome = dict(TABLE_CASES)
    rows = [
        ("a.jpg", "cat", "plain", "UTF-8 BOM and CRLF line ends"),
        ("b.jpg", "dog", '"a, b\nand c"', "quoted field with a comma and a newline"),
        ("  c.jpg  ", "  cat ", "x", "spaces around values"),
        ("dup.jpg", "dog", "x", None),
        ("dup.jpg", "dog", "x", "duplicate row (same file, same label)"),
        ("conflict.jpg", "cat", "x", None),
        ("conflict.jpg", "dog", "x", "two rows giving one file different labels"),
        ("missing.jpg", "cat", "x", "row naming a missing file"),
        ("nolabel.jpg", "", "x", "empty label"),
        ("../../etc/passwd", "cat", "x", "path escaping the root (../../etc/passwd)"),
        ("/etc/passwd", "cat", "x", "absolute path (/etc/passwd)"),
        ("gs://other-bucket/x.jpg", "cat", "x", "another bucket (gs://other-bucket/x.jpg)"),
        ("evil.jpg", "../../evil", "x", "label that looks like a path (../../evil)"),
        (unicodedata.normalize("NFC", "Émile.jpg"), "dog", "x", "NFC name in the table, NFD name on disk"),
    ]
    text = "filename,label,note\r\n" + "".join(f"{p},{l},{n}\r\n" for p, l, n, _ in rows)
    table = os.path.join(base, "labels.csv")
    with open(table, "wb") as f:
        f.write(b"\xef\xbb\xbf" + text.encode("utf-8"))
    expected = {}
    for p, _, _, case in rows:
        if case:
            expected[p.strip()] = (case, outcome[case])
    expected["dup.jpg"] = ("duplicate row (same file, same label)", (W, "jpeg", 3))  # one row is kept
    return table, pool, expected


# ---- Decode variants: what TensorFlow decodes against what we record ------------------------------
# tests/unit/test_decode_differential.py runs every variant through our validation (each policy) and
# through tf.io.decode_image: what we write must decode in TensorFlow to exactly the recorded
# height, width and channels; what TensorFlow cannot decode must be rejected.

import base64  # noqa: E402

PNG_SIG = b"\x89PNG\r\n\x1a\n"


def png_chunk(tag: bytes, body: bytes, crc_delta: int = 0) -> tuple:
    return tag, body, crc_delta


def build_png(chunks) -> bytes:
    """A PNG from (tag, body[, crc_delta]) chunks, each with its length and CRC
    (a CRC off by crc_delta)."""
    out = [PNG_SIG]
    for c in chunks:
        tag, body = c[0], c[1]
        delta = c[2] if len(c) > 2 else 0
        out.append(struct.pack(">I", len(body)) + tag + body
                   + struct.pack(">I", (zlib.crc32(tag + body) + delta) & 0xFFFFFFFF))
    return b"".join(out)


def ihdr(w: int, h: int, depth: int, ctype: int, interlace: int = 0, compression: int = 0,
         filtering: int = 0) -> tuple:
    return b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, compression, filtering, interlace)


def idat(w: int, h: int, depth: int, ctype: int, rows=None, seed: int = 0) -> tuple:
    """Valid, non-interlaced image data of w x h (or only `rows` rows of it):
    filter type 0, random samples (palette indexes 0-3)."""
    ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ctype]
    n = h if rows is None else rows
    rng = np.random.RandomState(seed)
    if depth < 8:
        top = min((1 << depth) - 1, 3) if ctype == 3 else (1 << depth) - 1
        samples = rng.randint(0, top + 1, size=(n, w * ch)).astype("uint8")
        bits = np.unpackbits(samples[..., None], axis=-1)[..., 8 - depth:].reshape(n, -1)
        body = np.packbits(bits, axis=-1)
    else:
        top = 3 if ctype == 3 else 255
        body = rng.randint(0, top + 1, size=(n, w * ch * depth // 8)).astype("uint8")
    raw = np.concatenate([np.zeros((n, 1), "uint8"), body], axis=1)
    return b"IDAT", zlib.compress(raw.tobytes())


IEND = (b"IEND", b"")


def plte(n: int) -> tuple:
    return b"PLTE", bytes((i * 7 + j * 50) % 256 for i in range(n) for j in range(3))


def trns(n: int) -> tuple:
    return b"tRNS", bytes((i * 40) % 256 for i in range(n))


def _split(chunk: tuple, at: int) -> list:
    return [(chunk[0], chunk[1][:at]), (chunk[0], chunk[1][at:])]


def png_variants() -> dict:
    """PNG chunk lists libpng (TensorFlow) and Pillow read differently, and their valid neighbours."""
    pal = [ihdr(30, 20, 8, 3), plte(16)]
    pal_data = idat(30, 20, 8, 3)
    rgb_data = idat(30, 20, 8, 2)
    gray_data = idat(30, 20, 8, 0)
    text = (b"tEXt", b"Comment\x00hello")
    v = {
        "png palette": pal + [pal_data, IEND],
        "png palette+tRNS": pal + [trns(1), pal_data, IEND],
        "png palette+tRNS as long as the palette": pal + [trns(16), pal_data, IEND],
        "png palette tRNS after IDAT": pal + [pal_data, trns(1), IEND],
        "png palette tRNS empty": pal + [trns(0), pal_data, IEND],
        "png palette tRNS longer than the palette": pal + [trns(17), pal_data, IEND],
        "png palette tRNS longer than 256": pal + [trns(300), pal_data, IEND],
        "png palette tRNS before PLTE": [pal[0], trns(1), pal[1], pal_data, IEND],
        "png palette tRNS twice": pal + [trns(1), trns(2), pal_data, IEND],
        "png palette tRNS invalid then valid": pal + [trns(40), trns(2), pal_data, IEND],
        "png palette tRNS bad CRC": pal + [png_chunk(*trns(1), crc_delta=1), pal_data, IEND],
        "png palette 2-bit, 16 entries, tRNS 5": [ihdr(30, 20, 2, 3), plte(16), trns(5), idat(30, 20, 2, 3), IEND],
        "png palette 2-bit, 16 entries, tRNS 4": [ihdr(30, 20, 2, 3), plte(16), trns(4), idat(30, 20, 2, 3), IEND],
        "png palette 1-bit": [ihdr(30, 20, 1, 3), plte(2), idat(30, 20, 1, 3), IEND],
        "png palette without PLTE": [pal[0], pal_data, IEND],
        "png palette PLTE after IDAT": [pal[0], pal_data, pal[1], IEND],
        "png palette two PLTE": pal + [pal[1], pal_data, IEND],
        "png palette PLTE empty": [pal[0], (b"PLTE", b""), pal_data, IEND],
        "png palette PLTE not a multiple of 3": [pal[0], (b"PLTE", plte(16)[1] + b"\x00"), pal_data, IEND],
        "png palette PLTE of 257 entries": [pal[0], plte(257), pal_data, IEND],
        "png palette PLTE bad CRC": [pal[0], png_chunk(*pal[1], crc_delta=1), pal_data, IEND],
        "png rgb PLTE (suggested palette)": [ihdr(30, 20, 8, 2), plte(16), rgb_data, IEND],
        "png rgb PLTE after IDAT": [ihdr(30, 20, 8, 2), rgb_data, plte(16), IEND],
        "png rgb two PLTE": [ihdr(30, 20, 8, 2), plte(16), plte(16), rgb_data, IEND],
        "png rgb PLTE of 4 bytes": [ihdr(30, 20, 8, 2), (b"PLTE", b"\x01\x02\x03\x04"), rgb_data, IEND],
        "png gray PLTE": [ihdr(30, 20, 8, 0), plte(4), gray_data, IEND],
        "png gray two PLTE": [ihdr(30, 20, 8, 0), plte(4), plte(4), gray_data, IEND],
        "png gray tRNS": [ihdr(30, 20, 8, 0), (b"tRNS", b"\x00\x07"), gray_data, IEND],
        "png gray tRNS wrong length": [ihdr(30, 20, 8, 0), (b"tRNS", b"\x07"), gray_data, IEND],
        "png rgb tRNS wrong length": [ihdr(30, 20, 8, 2), (b"tRNS", b"\x00\x01"), rgb_data, IEND],
        "png rgba tRNS": [ihdr(30, 20, 8, 6), (b"tRNS", b"\x00\x01"), idat(30, 20, 8, 6), IEND],
        "png gray+alpha 8-bit": [ihdr(30, 20, 8, 4), idat(30, 20, 8, 4), IEND],
        "png gray+alpha 16-bit": [ihdr(30, 20, 16, 4), idat(30, 20, 16, 4), IEND],
        "png gray 16-bit": [ihdr(30, 20, 16, 0), idat(30, 20, 16, 0), IEND],
        "png gray 1-bit": [ihdr(30, 20, 1, 0), idat(30, 20, 1, 0), IEND],
        "png rgb 16-bit": [ihdr(30, 20, 16, 2), idat(30, 20, 16, 2), IEND],
        "png rgba 16-bit": [ihdr(30, 20, 16, 6), idat(30, 20, 16, 6), IEND],
        "png unknown critical chunk": [ihdr(30, 20, 8, 2), (b"ABCD", b"x"), rgb_data, IEND],
        "png unknown critical chunk after IDAT": [ihdr(30, 20, 8, 2), rgb_data, (b"XYZW", b""), IEND],
        "png unknown ancillary chunk": [ihdr(30, 20, 8, 2), (b"abCD", b"x"), rgb_data, IEND],
        "png unknown ancillary chunk, bad CRC": [ihdr(30, 20, 8, 2), png_chunk(b"abCD", b"x", 1), rgb_data, IEND],
        "png chunk type not letters": [ihdr(30, 20, 8, 2), (b"ab1D", b"x"), rgb_data, IEND],
        "png second IHDR": [ihdr(30, 20, 8, 2), ihdr(30, 20, 8, 2), rgb_data, IEND],
        "png second IHDR after IDAT": [ihdr(30, 20, 8, 2), rgb_data, ihdr(30, 20, 8, 2), IEND],
        "png IHDR of 14 bytes": [(b"IHDR", ihdr(30, 20, 8, 2)[1] + b"\x00"), rgb_data, IEND],
        "png IHDR interlace 2": [ihdr(30, 20, 8, 2, interlace=2), rgb_data, IEND],
        "png IHDR filter method 1": [ihdr(30, 20, 8, 2, filtering=1), rgb_data, IEND],
        "png IHDR compression method 1": [ihdr(30, 20, 8, 2, compression=1), rgb_data, IEND],
        "png IHDR bad CRC": [png_chunk(*ihdr(30, 20, 8, 2), crc_delta=1), rgb_data, IEND],
        "png IHDR not first (tEXt before)": [text, ihdr(30, 20, 8, 2), rgb_data, IEND],
        "png IDAT split in two": [ihdr(30, 20, 8, 2), *_split(rgb_data, 40), IEND],
        "png IDAT split by tEXt": [ihdr(30, 20, 8, 2), *_split(rgb_data, 40)[:1], text, _split(rgb_data, 40)[1], IEND],
        "png extra IDAT after tEXt": [ihdr(30, 20, 8, 2), rgb_data, text, (b"IDAT", b"xx"), IEND],
        "png empty IDAT after tEXt": [ihdr(30, 20, 8, 2), rgb_data, text, (b"IDAT", b""), IEND],
        "png IDAT bad CRC": [ihdr(30, 20, 8, 2), png_chunk(*rgb_data, crc_delta=1), IEND],
        "png IEND before IDAT": [ihdr(30, 20, 8, 2), IEND, rgb_data, IEND],
        "png IEND with data": [ihdr(30, 20, 8, 2), rgb_data, (b"IEND", b"xx")],
        "png two IEND": [ihdr(30, 20, 8, 2), rgb_data, IEND, IEND],
        "png without IEND": [ihdr(30, 20, 8, 2), rgb_data],
        "png tEXt after IEND": [ihdr(30, 20, 8, 2), rgb_data, IEND, text],
        "png image data short a row": [ihdr(30, 20, 8, 2), idat(30, 20, 8, 2, rows=19), IEND],
        "png image data half": [ihdr(30, 20, 8, 2), idat(30, 20, 8, 2, rows=10), IEND],
        "png image data with a row too many": [ihdr(30, 20, 8, 2), idat(30, 20, 8, 2, rows=21), IEND],
        "png large tEXt (9 MB)": [ihdr(30, 20, 8, 2), (b"tEXt", b"k\x00" + b"v" * 9_000_000), rgb_data, IEND],
        "png iCCP that does not parse": [ihdr(30, 20, 8, 2), (b"iCCP", b"x\x00\x00garbage"), rgb_data, IEND],
        "png 1,000,001 pixels wide": [ihdr(1_000_001, 1, 8, 0), idat(1_000_001, 1, 8, 0), IEND],
        "png 1,000,000 pixels wide": [ihdr(1_000_000, 1, 8, 0), idat(1_000_000, 1, 8, 0), IEND],
        "png 1,000,001 pixels high": [ihdr(1, 1_000_001, 8, 0), idat(1, 1_000_001, 8, 0), IEND],
    }
    out = {k: build_png(c) for k, c in v.items()}
    raw = bytes(b"\x00" + bytes(90)) * 20
    c = zlib.compressobj()
    out["png zlib stream without its end"] = build_png([ihdr(30, 20, 8, 2), (b"IDAT", c.compress(raw) + c.flush(zlib.Z_SYNC_FLUSH)), IEND])
    bad = bytearray(zlib.compress(raw))
    bad[-1] ^= 1
    out["png zlib checksum wrong"] = build_png([ihdr(30, 20, 8, 2), (b"IDAT", bytes(bad)), IEND])
    out["png filter type 7"] = build_png([ihdr(30, 20, 8, 2), (b"IDAT", zlib.compress((b"\x07" + bytes(90)) * 20)), IEND])
    out["png interlaced (Pillow)"] = _pil(Image.fromarray(np.random.RandomState(2).randint(0, 255, (21, 33, 3)).astype("uint8")), "PNG")
    return out


def _pil(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


# Arithmetic-coded JPEGs (Pillow cannot write them): a 32x24 colour gradient through
# `jpegtran -copy none -arithmetic` (and `-progressive`), libjpeg-turbo 2.1.5.
ARITHMETIC_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAYEBQYFBAYGBQYHBwYIChAKCgkJChQODwwQFxQYGBcUFhYaHSUfGhsjHBYWICwgIyYnKSopGR8tMC0o"
    "MCUoKSj/2wBDAQcHBwoIChMKChMoGhYaKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCj/yQARCAAYACAD"
    "ASIAAhEBAxEB/8wACgAQEAUBEBEF/9oADAMBAAIRAxEAPwD/AMXQRyMuk+eil79ZLcWycPJtrp8cYlI0P4TxW/1GNT5u05g0+EQH8uqsjAD7M8h1"
    "zA3S+0KCzMC0tR/YgvxX44Fkd/KM9xIxvKSQzhIWGglHQXD/2Q==")
ARITHMETIC_PROGRESSIVE_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAYEBQYFBAYGBQYHBwYIChAKCgkJChQODwwQFxQYGBcUFhYaHSUfGhsjHBYWICwgIyYnKSopGR8tMC0o"
    "MCUoKSj/2wBDAQcHBwoIChMKChMoGhYaKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCj/ygARCAAYACAD"
    "ASIAAhEBAxEB/8wABgAQARD/2gAMAwEAAhADEAAAAf8Agen7yWB1/QkWdFKSDeYajQ6cDZjN/8wABBAF/9oACAEBAAEFAhgW/wBnLPpT8QbNlID/"
    "zAAEEQX/2gAIAQMBAT8BFWtkzFYnEY88/8wABBEF/9oACAECAQE/AQ/SHhT/zAAEEAX/2gAIAQEABj8CwP/MAAQQBf/aAAgBAQABPyEfVTwHMej/"
    "2gAMAwEAAgADAAAAECj4aP/MAAQRBf/aAAgBAwEBPxCoD4RvYP/MAAQRBf/aAAgBAgEBPxDvxP/MAAQQBf/aAAgBAQABPxDXQWNFI7T/2Q==")


def _sof_claiming(data: bytes, w: int, h: int) -> bytes:
    b = bytearray(data)
    i = b.index(b"\xff\xc0")
    struct.pack_into(">HH", b, i + 5, h, w)
    return bytes(b)


def _jpeg_patch(data: bytes, marker: bytes, offset: int, value: int) -> bytes:
    b = bytearray(data)
    b[b.index(marker) + offset] = value
    return bytes(b)


def exif_block(typ: int, count: int, value: bytes, little: bool = True) -> bytes:
    """An Exif APP1 payload whose IFD0 holds one Orientation entry of any type, count and value."""
    e = "<" if little else ">"
    ifd = struct.pack(e + "HHI", 0x0112, typ, count) + value.ljust(4, b"\x00")
    return (b"Exif\x00\x00" + (b"II*\x00" if little else b"MM\x00*") + struct.pack(e + "I", 8)
            + struct.pack(e + "H", 1) + ifd + struct.pack(e + "I", 0))


ORIENTATION_ENTRIES = {
    "SHORT 6": (3, 1, struct.pack("<H", 6)),
    "SHORT 8": (3, 1, struct.pack("<H", 8)),
    "SHORT 3": (3, 1, struct.pack("<H", 3)),
    "SHORT 0": (3, 1, struct.pack("<H", 0)),
    "SHORT 9": (3, 1, struct.pack("<H", 9)),
    "SHORT 65535": (3, 1, struct.pack("<H", 65535)),
    "SHORT count 2": (3, 2, struct.pack("<HH", 6, 6)),
    "SHORT count 0": (3, 0, b""),
    "LONG 6": (4, 1, struct.pack("<I", 6)),
    "LONG 4294967294": (4, 1, struct.pack("<I", 4294967294)),
    "SSHORT -2": (8, 1, struct.pack("<h", -2)),
    "SSHORT 6": (8, 1, struct.pack("<h", 6)),
    "SLONG -6": (9, 1, struct.pack("<i", -6)),
    "ASCII '6'": (2, 2, b"6\x00"),
    "BYTE 6": (1, 1, b"\x06"),
    "RATIONAL at an offset past the end": (5, 1, struct.pack("<I", 4000)),
    "UNDEFINED 6": (7, 1, b"\x06"),
    "FLOAT 6.0": (11, 1, struct.pack("<f", 6.0)),
    "unknown type 99": (99, 1, struct.pack("<H", 6)),
}


def photo(w: int, h: int, seed: int = 0) -> Image.Image:
    """A smooth colour image with a bright top-left block (orientation shows)."""
    y, x = np.mgrid[0:h, 0:w]
    arr = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), np.full_like(x, 90 + seed)], -1)
    arr[: max(h // 4, 1), : max(w // 4, 1)] = 255
    return Image.fromarray(arr.astype("uint8"))


def jpeg_with_orientation(entry: tuple, w: int = 160, h: int = 96) -> bytes:
    return _pil(photo(w, h), "JPEG", quality=90, exif=exif_block(*entry))


def jpeg_variants() -> dict:
    rgb = _jpeg(48, 32, seed=5)
    out = {
        "jpeg baseline": rgb,
        "jpeg progressive": image_bytes(48, 32, seed=6, progressive=True),
        "jpeg grayscale": _jpeg(48, 32, seed=7, mode="L"),
        "jpeg CMYK": _jpeg(48, 32, seed=8, mode="CMYK"),
        "jpeg 4:4:4": image_bytes(48, 32, seed=9, subsampling=0),
        "jpeg arithmetic-coded": ARITHMETIC_JPEG,
        "jpeg arithmetic-coded progressive": ARITHMETIC_PROGRESSIVE_JPEG,
        "jpeg lossless (SOF3)": _jpeg_patch(rgb, b"\xff\xc0", 1, 0xC3),
        "jpeg hierarchical (SOF5)": _jpeg_patch(rgb, b"\xff\xc0", 1, 0xC5),
        "jpeg 12-bit": _jpeg_patch(rgb, b"\xff\xc0", 4, 12),
        "jpeg two frame headers": rgb[:rgb.index(b"\xff\xc0")] + rgb[rgb.index(b"\xff\xc0"):rgb.index(b"\xff\xc0") + 19]
        + rgb[rgb.index(b"\xff\xc0"):],
        "jpeg sampling factor 0": _jpeg_patch(rgb, b"\xff\xc0", 11, 0x01),
        "jpeg sampling factor 5": _jpeg_patch(rgb, b"\xff\xc0", 11, 0x51),
        "jpeg frame header length wrong": _jpeg_patch(rgb, b"\xff\xc0", 3, 18),
        "jpeg 2 components": _jpeg_patch(rgb, b"\xff\xc0", 9, 2),
        "jpeg with a trailer": rgb + b"trailer",
        "jpeg without EOI": rgb[:-2],
        "jpeg claiming 65,501 wide": _sof_claiming(rgb, 65_501, 10),
        "jpeg claiming 65,501 high": _sof_claiming(rgb, 10, 65_501),
        "jpeg claiming 13,000 x 14,000": _sof_claiming(rgb, 13_000, 14_000),
        "jpeg CMYK claiming 12,000 x 12,000": _sof_claiming(_jpeg(48, 32, seed=8, mode="CMYK"), 12_000, 12_000),
        "jpeg claiming 0 high": _sof_claiming(rgb, 48, 0),
        "jpeg EXIF orientation 6": _exif_rotated(),
    }
    for name, entry in ORIENTATION_ENTRIES.items():
        out[f"jpeg orientation {name}"] = jpeg_with_orientation(entry)
    return out


def other_variants() -> dict:
    """Formats stored only through --reencode, with their quirks."""
    im = photo(40, 30)
    exif6 = Image.Exif()
    exif6[0x0112] = 6
    rgba = im.convert("RGBA")
    rgba.putalpha(128)
    return {
        "gif": _pil(im.convert("P"), "GIF"),
        "gif animated": _gif_animated(),
        "gif transparent": _pil(im.convert("P"), "GIF", transparency=0),
        "bmp 24-bit": _pil(im, "BMP"),
        "bmp 8-bit palette": _pil(im.convert("P"), "BMP"),
        "bmp 1-bit": _pil(im.convert("1"), "BMP"),
        "bmp 32-bit": _pil(rgba, "BMP"),
        "webp lossy": _pil(im, "WEBP", quality=80),
        "webp lossless with alpha": _pil(rgba, "WEBP", lossless=True),
        "webp orientation 6": _pil(im, "WEBP", exif=exif6),
        "tiff orientation 6": _pil(im, "TIFF", exif=exif6),
        "tiff 16-bit gray": _pil(Image.fromarray((np.arange(1200).reshape(30, 40) * 50).astype("uint16")), "TIFF"),
        "png orientation 6 (eXIf)": _pil(im, "PNG", exif=exif6),
    }


def decode_variants() -> dict:
    """{name: bytes} of every variant above."""
    return {**png_variants(), **jpeg_variants(), **other_variants()}
