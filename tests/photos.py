"""Photo-like test images for perceptual hashing: smooth colour waves, blurred
shapes and sensor noise, so that resized, recompressed and cropped copies
behave as real photos do (flat colours would all hash alike)."""
from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def photo(seed: int, w: int = 320, h: int = 240) -> Image.Image:
    """A photo-like image: smooth colour waves, a few blurred shapes, sensor noise."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w] / max(w, h)
    base = np.zeros((h, w, 3))
    for c in range(3):
        a, b, ph = rng.uniform(-2, 2, 3)
        base[..., c] = 128 + 60 * np.sin(3 * a * x + 3 * b * y + 6 * ph)
    im = Image.fromarray(base.clip(0, 255).astype("uint8"))
    draw = ImageDraw.Draw(im)
    for _ in range(rng.randint(4, 10)):
        x0, y0 = rng.randint(0, w), rng.randint(0, h)
        box = (x0, y0, x0 + rng.randint(20, w // 2), y0 + rng.randint(20, h // 2))
        fill = tuple(int(v) for v in rng.randint(0, 256, 3))
        (draw.ellipse if rng.randint(2) else draw.rectangle)(box, fill=fill)
    im = im.filter(ImageFilter.GaussianBlur(1))
    arr = np.asarray(im).astype(np.float32) + rng.normal(0, 8, (h, w, 3))
    return Image.fromarray(arr.clip(0, 255).astype("uint8"))


def jpeg(im: Image.Image, q: int = 90) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=q)
    return buf.getvalue()
