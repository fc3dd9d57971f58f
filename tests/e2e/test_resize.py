"""Resizing at conversion (--resize_longest_side / --resize_shorter_side,
transforms/core/resize.py): the size arithmetic and the draft decode as pure
functions, then conversions read back with TensorFlow: every stored image
decodes to its recorded size, within the bound, aspect kept within a pixel;
small images stay byte-for-byte in smart mode; the original size and sha256
trace each record to its file; the same shards with 1 and 2 workers."""
from __future__ import annotations

import hashlib
import io
import os

import numpy as np
import pytest
from PIL import Image

from conftest import convert, image_bytes, manifest, read_all, scalar, shard_files, write
from gcs_emulator import BUCKET, download_prefix, gcs, upload_tree  # noqa: F401 (fixture)
from tfrecord_pipelines.transforms.core import resize
from tfrecord_pipelines.transforms.core.images import ImagePolicy, probe_image, reencode_image
from tfrecord_pipelines.transforms.core.resize import PngPolicy, ResizeMode, ResizePolicy

LONGEST, SHORTER = ResizeMode.LONGEST, ResizeMode.SHORTER
# What the draft (reduced DCT decode) may change against a full-size decode,
# in levels of 255: docs/resizing.md states this tolerance; bench/resize.py
# measures it on large photos (mean ~0.7-1.3).
DRAFT_MEAN_ABS, DRAFT_MIN_PSNR = 1.5, 40.0


def photo_like(w: int, h: int, seed: int = 0) -> np.ndarray:
    """A smooth image with edges and some grain, like a photo (pure noise is
    not: it has no content at the scales a resize keeps)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([128 + 90 * np.sin(x / (17 + 5 * c) + y / (23 + 3 * c) + c) for c in range(3)], axis=-1)
    base[(x // 37 + y // 29) % 2 == 0] *= 0.7  # edges
    return np.clip(base + rng.normal(0, 3, base.shape), 0, 255).astype(np.uint8)


def jpeg(arr: np.ndarray, orientation: int = 1, quality: int = 92) -> bytes:
    buf = io.BytesIO()
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    Image.fromarray(arr).save(buf, "JPEG", quality=quality, exif=exif.tobytes())
    return buf.getvalue()


def pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64)


def policy(mode=LONGEST, size=64, **kw) -> ImagePolicy:
    image_kw = {k: kw.pop(k) for k in ("apply_orientation", "jpeg_quality") if k in kw}
    return ImagePolicy(resize=ResizePolicy(mode, size, **kw), **image_kw)


def stored(data: bytes, pol: ImagePolicy) -> tuple:
    """(probe's info, the bytes stored) as the writer makes them."""
    info = probe_image(data, pol, decode_later=True)
    if not info.reencode_to:
        return info, data
    return info, reencode_image(data, info.reencode_to, pol, (info.width, info.height, info.channels))


# ---- the size arithmetic ----

SIZES = [(w, h) for w in (1, 2, 63, 64, 65, 100, 127, 333, 1000, 4032) for h in (1, 3, 64, 65, 99, 250, 3024)]


@pytest.mark.parametrize("mode", [LONGEST, SHORTER])
def test_target_size_meets_the_bound_keeps_aspect_and_never_upscales(mode):
    n = 64
    p = ResizePolicy(mode, n)
    for w, h in SIZES:
        got = resize.target_size(w, h, p)
        side = max(w, h) if mode is LONGEST else min(w, h)
        if side <= n:
            assert got is None, (w, h)
            continue
        tw, th = got
        assert (max(tw, th) if mode is LONGEST else min(tw, th)) == n, (w, h, got)
        assert tw <= w and th <= h, "never larger than the original"
        # Aspect kept within one pixel: the side not at the bound is the bound times the
        # original's aspect, to the nearest pixel (never below 1).
        exact = th * w / h if th == n else tw * h / w
        other = tw if th == n else th
        assert abs(other - exact) <= 0.5 or other == 1 == round(exact + 0.5), (w, h, got)
        assert resize.target_size(h, w, p) == (th, tw), "the same rounding whichever way it is turned"


def test_target_size_rounds_half_up_in_integers():
    p = ResizePolicy(LONGEST, 64)
    assert resize.target_size(300, 200, p) == (64, 43)     # 42.67
    assert resize.target_size(128, 3, p) == (64, 2)        # 1.5 rounds up
    assert resize.target_size(4000, 1, p) == (64, 1)       # never 0
    assert resize.target_size(300, 200, ResizePolicy(SHORTER, 64)) == (96, 64)
    assert resize.target_size(300, 200, ResizePolicy()) is None  # off


def test_plan_smart_png_and_all():
    smart = ResizePolicy(LONGEST, 64)
    assert resize.plan("jpeg", 64, 30, 3, smart) is None              # within: stored as it is
    assert resize.plan("jpeg", 300, 200, 3, smart) == ("jpeg", 64, 43)
    assert resize.plan("png", 300, 200, 4, smart) == ("png", 64, 43)
    to_jpeg = ResizePolicy(LONGEST, 64, png=PngPolicy.JPEG)
    assert resize.plan("png", 300, 200, 3, to_jpeg).fmt == "jpeg"
    assert resize.plan("png", 300, 200, 1, to_jpeg).fmt == "jpeg"
    assert resize.plan("png", 300, 200, 4, to_jpeg).fmt == "png"       # alpha: stays PNG
    assert resize.plan("png", 300, 200, 2, to_jpeg).fmt == "png"
    every = ResizePolicy(LONGEST, 64, smart=False)
    assert resize.plan("jpeg", 50, 40, 3, every) == ("jpeg", 50, 40)  # re-encoded, not resized
    assert resize.plan("jpeg", 300, 200, 3, ResizePolicy()) is None


def test_manifest_options_say_whether_resizing():
    assert resize.enabled_in({"images": {"resize": {"mode": "shorter"}}})
    assert not resize.enabled_in({"images": {"resize": {"mode": "none"}}})
    assert not resize.enabled_in({})
    assert resize.library_versions()["pillow"] == Image.__version__


# ---- one image ----

def test_draft_stays_within_the_stated_tolerance_and_does_reduce():
    data = jpeg(photo_like(1203, 802))
    im = Image.open(io.BytesIO(data))
    job = resize.start(im, ResizePolicy(SHORTER, 96))
    assert im.size == (301, 201), "decoded at 1/4: at least twice the final size"
    assert job.size == (144, 96)
    outs = {}
    for draft in (True, False):
        info, out = stored(data, policy(SHORTER, 96, draft=draft, jpeg_quality=100))
        assert (info.width, info.height) == (144, 96)
        outs[draft] = pixels(out)
    diff = np.abs(outs[True] - outs[False])
    psnr = 10 * np.log10(255 ** 2 / (diff ** 2).mean())
    assert diff.mean() <= DRAFT_MEAN_ABS and psnr >= DRAFT_MIN_PSNR, (diff.mean(), psnr)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_draft_area_follows_exif_orientation(orientation):
    """With --exif_orientation apply, the draft's box (the original's area in
    the reduced decode, 301x201 for 1203x802) is turned with the image: the
    drafted result stays as close to the full decode as unturned."""
    data = jpeg(photo_like(1203, 802, seed=orientation), orientation)
    outs = {}
    for draft in (True, False):
        info, out = stored(data, policy(LONGEST, 100, draft=draft, apply_orientation=True, jpeg_quality=100))
        want = (67, 100) if orientation >= 5 else (100, 67)
        assert (info.width, info.height) == want and Image.open(io.BytesIO(out)).size == want
        outs[draft] = pixels(out)
    assert np.abs(outs[True] - outs[False]).mean() <= DRAFT_MEAN_ABS


def test_orientation_kept_without_apply():
    """Without --exif_orientation apply a resized JPEG holds the file's pixels
    as they are (as a small one stored as-is does) and keeps the tag."""
    data = jpeg(photo_like(300, 200), orientation=6)
    info, out = stored(data, policy())
    im = Image.open(io.BytesIO(out))
    assert (info.width, info.height) == im.size == (64, 43)
    assert im.getexif().get(0x0112) == 6
    info, out = stored(data, policy(apply_orientation=True))
    im = Image.open(io.BytesIO(out))
    assert (info.width, info.height) == im.size == (43, 64)
    assert im.getexif().get(0x0112, 1) == 1


def test_a_resized_photo_keeps_its_icc_profile():
    """A wide-gamut photo resized holds the same kind of pixel values, so it
    keeps the profile that says how to show them."""
    from PIL import ImageCms
    profile = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    buf = io.BytesIO()
    Image.fromarray(photo_like(300, 200)).save(buf, "JPEG", quality=92, icc_profile=profile)
    info, out = stored(buf.getvalue(), policy())
    im = Image.open(io.BytesIO(out))
    assert im.size == (64, 43) and im.info.get("icc_profile") == profile


def test_same_bytes_every_time():
    data = jpeg(photo_like(400, 300))
    pol = policy(SHORTER, 80)
    assert len({stored(data, pol)[1] for _ in range(3)}) == 1


# ---- conversions read back with TensorFlow ----

SOURCES = {
    "a/wide.jpg": lambda: jpeg(photo_like(300, 200, 1)),
    "a/tall.jpg": lambda: jpeg(photo_like(200, 300, 2)),
    "a/square.jpg": lambda: jpeg(photo_like(250, 250, 3)),
    "a/gray.jpg": lambda: image_bytes(300, 120, mode="L", seed=4),
    "a/cmyk.jpg": lambda: image_bytes(130, 300, mode="CMYK", seed=5),
    "a/turned.jpg": lambda: jpeg(photo_like(300, 200, 6), orientation=6),
    "a/small.jpg": lambda: jpeg(photo_like(60, 40, 7)),
    "b/rgba.png": lambda: image_bytes(300, 120, fmt="PNG", mode="RGBA", seed=8),
    "b/rgb.png": lambda: image_bytes(120, 300, fmt="PNG", seed=9),
    "b/palette.png": lambda: image_bytes(300, 100, fmt="PNG", mode="P", seed=10),
    "b/bits.png": lambda: image_bytes(300, 100, fmt="PNG", mode="1", seed=11),
    "b/deep.png": lambda: image_bytes(300, 100, fmt="PNG", mode="I;16", seed=12),
    "b/small.png": lambda: image_bytes(40, 30, fmt="PNG", seed=13),
    "c/anim.gif": lambda: image_bytes(300, 200, fmt="GIF", seed=14),
}
SMALL = {"a/small.jpg", "b/small.png"}


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("resize") / "images")
    files = {rel: make() for rel, make in SOURCES.items()}
    for rel, data in files.items():
        write(os.path.join(root, rel), data)
    return root, files


def check_bounded(out: str, files: dict, mode: ResizeMode, n: int) -> dict:
    """Every record read back (read_all decodes each with TensorFlow and holds
    it to its recorded height, width, channels) is within the bound, keeps the
    aspect of its original within a pixel, and names its original's size and
    sha256."""
    rows, _ = read_all(out)
    assert set(rows) == set(files)
    for rel, r in rows.items():
        h, w = scalar(r, "image/height"), scalar(r, "image/width")
        oh, ow = scalar(r, "image/original/height"), scalar(r, "image/original/width")
        src = Image.open(io.BytesIO(files[rel]))
        assert (ow, oh) == src.size, rel
        assert scalar(r, "image/original/sha256") == hashlib.sha256(files[rel]).hexdigest(), rel
        assert scalar(r, "image/key/sha256") == hashlib.sha256(r["image/encoded"][0]).hexdigest(), rel
        assert (max(h, w) if mode is LONGEST else min(h, w)) <= n, rel
        if {h, w} != {oh, ow}:  # resized (a turn alone swaps them)
            assert (max(h, w) if mode is LONGEST else min(h, w)) == n, rel
            a, b = (w, h) if (w >= h) == (ow >= oh) else (h, w)
            assert abs(a - b * ow / oh) <= 1 and abs(b - a * oh / ow) <= 1, (rel, w, h, ow, oh)
    return rows


def test_longest_side_bound_end_to_end(photos, tmp_path):
    root, files = photos
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--resize_longest_side", "64", "--reencode", "jpeg") == 0
    rows = check_bounded(out, files, LONGEST, 64)
    for rel in SMALL:  # smart mode: within the bound, stored byte-for-byte
        assert rows[rel]["image/encoded"][0] == files[rel], rel
    assert scalar(rows["a/turned.jpg"], "image/width") == 64  # not turned without --exif_orientation apply
    assert scalar(rows["b/rgba.png"], "image/format") == "png" and scalar(rows["b/rgba.png"], "image/channels") == 4
    assert scalar(rows["b/bits.png"], "image/channels") == 1
    assert scalar(rows["c/anim.gif"], "image/format") == "jpeg"
    assert scalar(rows["c/anim.gif"], "image/source_format") == "gif"
    m = manifest(out)
    assert {"image/original/height", "image/original/width", "image/original/sha256"} <= set(m["features"])
    assert m["feature_roles"]["original_sha256"] == "image/original/sha256"
    assert m["options"]["images"]["resize"] == {"mode": "longest", "size": 64, "filter": "lanczos", "png": "keep",
                                                 "smart": True, "draft": True}
    assert m["image_library"]["pillow"] == Image.__version__
    assert m["counts"]["written"] == len(files)


def test_shorter_side_png_to_jpeg_and_orientation(photos, tmp_path):
    root, files = photos
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--resize_shorter_side", "48", "--resize_png", "jpeg",
                   "--exif_orientation", "apply", "--reencode", "png", "--resize_filter", "bicubic",
                   "--jpeg_quality", "85") == 0
    rows = check_bounded(out, files, SHORTER, 48)
    fmt = {rel: scalar(r, "image/format") for rel, r in rows.items()}
    assert fmt["b/rgb.png"] == fmt["b/palette.png"] == fmt["b/bits.png"] == fmt["b/deep.png"] == "jpeg"
    assert fmt["b/rgba.png"] == "png"  # alpha: stays PNG
    assert fmt["b/small.png"] == "png" and rows["b/small.png"]["image/encoded"][0] == files["b/small.png"]
    assert fmt["c/anim.gif"] == "png"  # --reencode decides other formats
    turned = rows["a/turned.jpg"]
    assert (scalar(turned, "image/width"), scalar(turned, "image/height")) == (48, 72)  # upright
    assert (scalar(turned, "image/original/width"), scalar(turned, "image/original/height")) == (300, 200)


def test_smart_off_reencodes_every_image(photos, tmp_path):
    root, files = photos
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--resize_longest_side", "64", "--resize_smart", "off",
                   "--reencode", "jpeg") == 0
    rows = check_bounded(out, files, LONGEST, 64)
    assert rows["a/small.jpg"]["image/encoded"][0] != files["a/small.jpg"]  # re-encoded at --jpeg_quality
    # A PNG re-encodes losslessly (here to the very bytes: the fixture is Pillow's own PNG).
    assert (pixels(rows["b/small.png"]["image/encoded"][0]) == pixels(files["b/small.png"])).all()
    for rel in SMALL:
        assert scalar(rows[rel], "image/original/sha256") == hashlib.sha256(files[rel]).hexdigest()


def test_without_resizing_no_original_features(photos, tmp_path):
    root, files = photos
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--reencode", "jpeg") == 0
    m = manifest(out)
    assert not any(k.startswith("image/original/") for k in m["features"])
    rows, _ = read_all(out)
    assert not any(k.startswith("image/original/") for r in rows.values() for k in r)
    assert rows["a/wide.jpg"]["image/encoded"][0] == files["a/wide.jpg"]


def test_same_shards_with_one_and_two_workers_and_two_reads(photos, tmp_path):
    root, _ = photos
    args = ["--input", root, "--resize_shorter_side", "40", "--num_shards", "3", "--reencode", "jpeg"]
    got = {}
    for name, extra, in_memory in (("one", [], True),
                                   ("two", ["--direct_num_workers", "2"], False),
                                   ("two_reads", ["--reads_per_image", "2"], True)):
        out = str(tmp_path / name)
        assert convert(*args, "--output", out, *extra, in_memory=in_memory) == 0
        got[name] = [open(f, "rb").read() for f in shard_files(out)]
    assert len(got["one"]) == 3
    assert got["one"] == got["two"] == got["two_reads"]


def test_gcs_in_and_out(gcs, photos, tmp_path):  # noqa: F811 (the emulator fixture)
    root, files = photos
    upload_tree(root, "resize-in")
    out = f"gs://{BUCKET}/resize-out"
    assert convert("--input", f"gs://{BUCKET}/resize-in", "--output", out, "--resize_longest_side", "64",
                   "--reencode", "jpeg") == 0
    local = str(tmp_path / "dl")
    download_prefix("resize-out", local)
    rows = check_bounded(local, files, LONGEST, 64)
    assert rows["a/small.jpg"]["image/encoded"][0] == files["a/small.jpg"]


def test_the_benchmark_runs(tmp_path):
    """bench/resize.py end to end on a few small photos (no timing asserted)."""
    import json
    import subprocess
    import sys

    from conftest import ROOT
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "bench.resize", "--images", "4", "--min-side", "1100", "--max-side",
                        "1200", "--repeats", "1", "--read-repeats", "1", "--read-seconds", "2", "--num-shards", "1",
                        "--variants", "shorter_256,shorter_256_nodraft", "--data-dir", str(tmp_path),
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["complete"] and set(doc["results"]) == {"shorter_256", "shorter_256_nodraft"}
    for r in doc["results"].values():
        assert r["read"]["images_per_s"] > 0 and 0 < r["bytes_out"] < doc["dataset"]["bytes"]
    assert doc["draft"]["shorter_256 vs shorter_256_nodraft"]["images"] == 4


def test_a_corrupt_large_image_is_rejected_as_validation_would(tmp_path):
    """With one read per image a large image is decoded only by its resize:
    its failure is the image's reject, the same as validation gives without
    resizing and with two reads."""
    root = str(tmp_path / "images")
    good = jpeg(photo_like(300, 200))
    body = bytearray(good)
    scan = good.index(b"\xff\xda")
    body[scan + 200:scan + 1200] = b"\xff\xc9" * 500  # garbage markers inside the entropy-coded data
    write(os.path.join(root, "a", "good.jpg"), good)
    write(os.path.join(root, "a", "bad.jpg"), bytes(body))
    for name, extra in (("plain", []), ("one_read", ["--resize_longest_side", "64"]),
                        ("two_reads", ["--resize_longest_side", "64", "--reads_per_image", "2"])):
        out = str(tmp_path / name)
        assert convert("--input", root, "--output", out, "--max_reject_fraction", "1", *extra) == 0, name
        assert manifest(out)["counts"]["written"] == 1 and manifest(out)["rejects_by_reason"] == {"corrupt": 1}
        with open(os.path.join(out, "rejects.jsonl")) as f:
            assert '"path": "a/bad.jpg"' in f.read()
        read_all(out)


@pytest.mark.parametrize("args,message", [
    (["--resize_shorter_side", "0"], "--resize_shorter_side 0 must be a positive number of pixels"),
    (["--resize_longest_side", "-5"], "--resize_longest_side -5 must be a positive number of pixels"),
    (["--resize_longest_side", "64", "--resize_shorter_side", "64"], "exclude each other"),
    # argparse's own words for a value outside the choices --help lists (its quoting varies by Python).
    (["--resize_longest_side", "64", "--resize_filter", "cubic"], "--resize_filter: invalid choice: 'cubic'"),
    (["--resize_longest_side", "64", "--resize_png", "webp"], "--resize_png: invalid choice: 'webp'"),
    (["--resize_longest_side", "64", "--resize_smart", "yes"], "--resize_smart: invalid choice: 'yes'"),
    (["--resize_filter", "bicubic"], "--resize_filter need a bound: --resize_longest_side N or"),
])
def test_bad_resize_options_fail_at_once(tmp_path, capsys, args, message):
    root = str(tmp_path / "imgs")
    write(os.path.join(root, "a", "x.jpg"), image_bytes())
    assert convert("--input", root, "--output", str(tmp_path / "out"), *args, in_memory=False) == 2
    assert message in capsys.readouterr().err
    assert not os.path.exists(os.path.join(tmp_path, "out", "manifest.json"))
