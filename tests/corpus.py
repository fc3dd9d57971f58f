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
