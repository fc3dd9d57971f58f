"""image/object/mask: one PNG per object at the stored image's size, as the
TensorFlow models repository's create_coco_tf_record.py writes them (values
0 and 1, mode L), drawn with pycocotools (COCO's own polygon and RLE code).

Polygons are in pixels of the image as annotated: they are scaled to the
stored size (--resize_*) before they are drawn, so a resized image gets
masks drawn at its own size, not shrunk. An RLE mask (COCO's crowd regions)
is decoded at its own size and resized with nearest neighbours when the
stored image differs. An object without a segmentation (VOC, YOLO, a COCO
box alone) gets its box as its mask, so there is a mask for every box.
"""
from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image


class MaskError(ValueError):
    """An object's segmentation cannot be drawn (its image is rejected as bad_annotation)."""


def _png(mask: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(mask.astype(np.uint8), "L").save(buf, "PNG", compress_level=6)
    return buf.getvalue()


def render(segmentation, box: tuple, scale: tuple, stored: tuple) -> bytes:
    """The PNG mask of one object. `box`: its box in stored pixels (x0, y0,
    x1, y1); `scale`: (sx, sy) from the annotated image to the stored one;
    `stored`: the stored (width, height)."""
    from pycocotools import mask as cocomask
    w, h = stored
    if segmentation and segmentation[0] == "rle":
        _, counts, rh, rw = segmentation
        rle = (cocomask.frPyObjects({"counts": list(counts), "size": [rh, rw]}, rh, rw)
               if not isinstance(counts, str) else {"counts": counts.encode("ascii"), "size": [rh, rw]})
        m = cocomask.decode(rle)
        if (rw, rh) != (w, h):
            m = np.asarray(Image.fromarray(m).resize((w, h), Image.Resampling.NEAREST))
        return _png(m)
    if segmentation:
        sx, sy = scale
        polys = [[v * (sx if i % 2 == 0 else sy) for i, v in enumerate(p)] for p in segmentation]
        # pycocotools walks every pixel along each edge: a vertex at 1e12 would take hours
        if not all(math.isfinite(v) and -w <= v <= 2 * w if i % 2 == 0 else math.isfinite(v) and -h <= v <= 2 * h
                   for p in polys for i, v in enumerate(p)):
            raise MaskError(f"a polygon has a vertex not finite or far outside the {w}x{h} image")
        return _png(cocomask.decode(cocomask.merge(cocomask.frPyObjects(polys, h, w))))
    m = np.zeros((h, w), np.uint8)
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    m[max(0, y0):max(0, y1), max(0, x0):max(0, x1)] = 1
    return _png(m)
