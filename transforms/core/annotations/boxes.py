"""Each image's boxes held to the image's real size, as the shard writer
reads it (from the header or the decode, never from the annotation), and
turned into the values of the keys detection models read.

A box is checked in pixels of the image as annotated: the file's size, turned
by its EXIF orientation when --exif_orientation apply turns the stored image.
Boxes are then normalized to [0, 1] of that size, so they hold for the stored
image whatever --resize_* did to it. What happens to a box that does not fit
(--bad_boxes): `clip` clips one past the edge and drops one that cannot be
clipped (empty, not finite, wholly outside, of an unknown category); `drop`
drops every bad box; `reject_image` rejects the image (bad_box). Every box
is counted: written (clipped ones too), dropped by BoxReason, or in an image
that was rejected; the manifest's `detection` section sums the counts.
"""
from __future__ import annotations

import collections
import math
from typing import NamedTuple, Optional, Union

from tfrecord_pipelines.transforms.core.annotations import IN_REJECTED, BoxReason, ImageAnnotation, Obj
from tfrecord_pipelines.transforms.core.records import Reason
from tfrecord_pipelines.transforms.core.specs import BadBoxes, DetectionSpec

# Histograms of the manifest's detection section: boxes per image, and box
# size as the square root of its area in pixels of the image as annotated
# (COCO calls a box small below 32, large from 96).
PER_IMAGE_EDGES = (0, 1, 2, 3, 4, 6, 11, 21, 51, 101)
SIZE_EDGES = (0, 8, 16, 32, 64, 96, 128, 256, 512)
TURNED = (5, 6, 7, 8)  # EXIF orientations that swap width and height


class Written(NamedTuple):
    """One image's object features, in the order of its kept objects."""
    source_id: str
    xmin: list
    ymin: list
    xmax: list
    ymax: list
    label: list       # class ids (the label map's)
    text: list        # class names, UTF-8
    is_crowd: list
    area: list        # in pixels of the stored image
    difficult: list
    truncated: list
    masks: list       # PNG bytes per object (--masks png), else []


def bin_label(value: float, edges: tuple, counts: bool = False) -> str:
    """The histogram bin of `value` (bins [lo, hi)): "lo-hi", and "lo+" for the
    last; `counts`: whole numbers, shown "lo" or "lo-(hi-1)"."""
    i = max(0, sum(1 for e in edges if value >= e) - 1)
    lo = edges[i]
    if i == len(edges) - 1:
        return f"{lo}+"
    hi = edges[i + 1]
    if counts:
        return str(lo) if hi - lo == 1 else f"{lo}-{hi - 1}"
    return f"{lo}-{hi}"


def bin_labels(edges: tuple, counts: bool = False) -> list:
    """Every bin's label, in order."""
    return [bin_label(e, edges, counts) for e in edges]


def size_problem(ann: ImageAnnotation, width: int, height: int, stored_turned: bool,
                 orientation: int) -> Optional[tuple]:
    """(Reason, detail) when the annotation's size is not the image's real
    size (width x height as the file holds it), else None. `stored_turned`:
    the stored image is the file turned upright (--exif_orientation apply);
    `orientation`: the file's EXIF orientation."""
    if not ann.width or not ann.height:
        return None  # the source gives no size (YOLO; VOC without <size>)
    real = (height, width) if stored_turned else (width, height)
    if (ann.width, ann.height) == real:
        return None
    if not stored_turned and orientation in TURNED and (ann.width, ann.height) == (height, width):
        return (Reason.EXIF_ROTATED, f"the annotation's size {ann.width}x{ann.height} is the image's "
                f"{width}x{height} turned by its EXIF orientation {orientation}: the boxes were drawn on the image "
                "shown upright, which TensorFlow does not do; use --exif_orientation apply to store it upright")
    return (Reason.SIZE_MISMATCH, f"the annotation says {ann.width}x{ann.height}, the image is {real[0]}x{real[1]} "
            "(as read from the file)")


def check(ann: ImageAnnotation, width: int, height: int, stored: tuple, lookup: dict, spec: DetectionSpec,
          stats: collections.Counter, render=None) -> Union[Written, tuple]:
    """The features of one image's objects, or (Reason, detail) when the image
    is rejected. `width`, `height`: the image as annotated (the file's size,
    turned when the stored image is); `stored`: the stored (width, height);
    `lookup`: {class name: id}; `render(obj, box in stored pixels)`: an
    object's PNG mask (--masks). Adds the box counts to `stats`."""
    out = Written(ann.source_id, [], [], [], [], [], [], [], [], [], [], [])
    dropped: collections.Counter = collections.Counter()
    clipped = 0
    sizes = []
    sx, sy = stored[0] / width, stored[1] / height
    for raw in ann.objects:
        o = Obj._make(raw)
        if ann.normalized:  # YOLO: in pixels of the image as read
            o = o._replace(x0=o.x0 * width, y0=o.y0 * height, x1=o.x1 * width, y1=o.y1 * height)
        why, box = _box(o, width, height, lookup, spec.bad_boxes)
        if why is not None:
            dropped[why] += 1
            continue
        if box != (o.x0, o.y0, o.x1, o.y1):
            clipped += 1
        x0, y0, x1, y1 = box
        out.xmin.append(x0 / width)
        out.ymin.append(y0 / height)
        out.xmax.append(x1 / width)
        out.ymax.append(y1 / height)
        out.label.append(lookup[o.category])
        out.text.append(o.category.encode("utf-8"))
        out.is_crowd.append(o.is_crowd)
        out.area.append((o.area if o.area >= 0 else (x1 - x0) * (y1 - y0)) * sx * sy)
        out.difficult.append(o.difficult)
        out.truncated.append(o.truncated)
        if render is not None:
            out.masks.append(render(o, (x0 * sx, y0 * sy, x1 * sx, y1 * sy)))
        sizes.append(math.sqrt((x1 - x0) * (y1 - y0)))
    if dropped and spec.bad_boxes is BadBoxes.REJECT_IMAGE:
        stats[IN_REJECTED] += len(ann.objects)
        shown = ", ".join(f"{n} {r}" for r, n in sorted(dropped.items()))
        return Reason.BAD_BOX, f"{sum(dropped.values())} of {len(ann.objects)} boxes do not fit the image " \
                               f"{width}x{height}: {shown} (--bad_boxes reject_image)"
    if not out.label and not spec.keep_empty:
        stats[IN_REJECTED] += len(ann.objects) - sum(dropped.values())
        for r, n in dropped.items():
            stats[f"boxes/dropped/{r}"] += n
        return Reason.NO_BOXES, ("the annotation has no boxes" if not ann.objects else
                                 f"none of its {len(ann.objects)} boxes is left to write") + \
            " (--images_without_boxes drop)"
    for r, n in dropped.items():
        stats[f"boxes/dropped/{r}"] += n
    stats["boxes/written"] += len(out.label)
    if clipped:
        stats["boxes/clipped"] += clipped
    stats["images/with_boxes" if out.label else "images/without_boxes"] += 1
    stats["boxes/per_image/" + bin_label(len(out.label), PER_IMAGE_EDGES, counts=True)] += 1
    for text in out.text:
        stats["boxes/class/" + text.decode("utf-8")] += 1
    for s in sizes:
        stats["boxes/size/" + bin_label(s, SIZE_EDGES)] += 1
    return out


def _box(o: Obj, width: int, height: int, lookup: dict, policy: BadBoxes) -> tuple:
    """(None, box in pixels) for a box to write, clipped if the policy clips;
    (BoxReason value, None) for one to drop."""
    if o.problem:
        return o.problem, None
    if not isinstance(o.category, str) or o.category not in lookup:
        return BoxReason.UNKNOWN_CATEGORY.value, None
    coords = (o.x0, o.y0, o.x1, o.y1)
    if not all(math.isfinite(v) for v in coords):
        return BoxReason.NOT_FINITE.value, None
    return _fit(*coords, width, height, policy)


def _fit(x0: float, y0: float, x1: float, y1: float, width: int, height: int, policy: BadBoxes) -> tuple:
    if x1 <= x0 or y1 <= y0:
        return BoxReason.EMPTY.value, None
    inside = x0 >= 0 and y0 >= 0 and x1 <= width and y1 <= height
    if inside:
        return None, (x0, y0, x1, y1)
    if policy is not BadBoxes.CLIP:
        return BoxReason.OUTSIDE.value, None
    cx0, cy0, cx1, cy1 = max(x0, 0.0), max(y0, 0.0), min(x1, float(width)), min(y1, float(height))
    if cx1 <= cx0 or cy1 <= cy0:
        return BoxReason.OUTSIDE.value, None
    return None, (cx0, cy0, cx1, cy1)


def _orientation(data: bytes) -> int:
    """The EXIF orientation of stored JPEG bytes (1 when there is none)."""
    if data[:3] != b"\xff\xd8\xff" or b"Exif\x00\x00" not in data[:65536]:
        return 1
    import io

    from PIL import Image
    try:
        return int(Image.open(io.BytesIO(data)).getexif().get(0x0112, 1))
    except Exception:  # unreadable EXIF: as TensorFlow, which ignores it
        return 1


def write_objects(rec, data: bytes, lookup: dict, spec: DetectionSpec, apply_orientation: bool,
                  stats: collections.Counter):
    """The shard writer's step for an annotated image, after the image was
    read and validated: the record with its boxes.Written (what the feature
    table encodes), or (Reason, detail) to reject it. The image as annotated
    is the file's size as decoded (Rec.orig_*), turned when the stored image
    was turned upright (--exif_orientation apply)."""
    from tfrecord_pipelines.transforms.core.annotations import ImageAnnotation, masks
    ann = ImageAnnotation._make(rec.annotation)
    fw, fh = rec.orig_width or rec.width, rec.orig_height or rec.height
    turned = apply_orientation and fw != fh and (rec.width > rec.height) != (fw > fh)
    problem = size_problem(ann, fw, fh, turned, 1 if turned else _orientation(data))
    if problem is not None:
        stats[IN_REJECTED] += len(ann.objects)
        return problem
    width, height = (fh, fw) if turned else (fw, fh)
    stored = (rec.width, rec.height)
    scale = (stored[0] / width, stored[1] / height)
    def render(o, box):
        try:
            return masks.render(o.segmentation, box, scale, stored)
        except Exception as e:  # pycocotools' and our own refusals of a segmentation it cannot draw
            raise masks.MaskError(f"the mask of one of its objects cannot be drawn: "
                                  f"{type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    try:
        got = check(ann, width, height, stored, lookup, spec, stats, render if spec.masks else None)
    except masks.MaskError as e:
        stats[IN_REJECTED] += len(ann.objects)
        return Reason.BAD_ANNOTATION, str(e)
    return rec._replace(annotation=got) if isinstance(got, Written) else got


def section(stats: dict, names: dict, not_selected: int = 0) -> dict:
    """The manifest's `detection` section from the run's summed counts
    ("boxes/...", "images/..."): boxes by outcome (they reconcile: listed =
    written + dropped + in rejected images, and the boxes of images not
    selected by --max_examples_per_split), boxes per class, per image, and by
    size. `names`: {class name: id} of the label map."""
    def under(prefix: str) -> dict:
        return {k[len(prefix):]: v for k, v in sorted(stats.items()) if k.startswith(prefix)}
    listed, written = stats.get("boxes/listed", 0), stats.get("boxes/written", 0)
    dropped = under("boxes/dropped/")
    rejected = stats.get(IN_REJECTED, 0)
    rest = listed - written - sum(dropped.values()) - rejected
    boxes = {"listed": listed, "written": written, "clipped": stats.get("boxes/clipped", 0),
             "dropped": dropped, "in_rejected_images": rejected}
    if not_selected:
        boxes["in_images_not_selected"] = rest
    per_class = under("boxes/class/")
    per_image = under("boxes/per_image/")
    sizes = under("boxes/size/")
    return {
        "images": {"with_boxes": stats.get("images/with_boxes", 0),
                   "without_boxes": stats.get("images/without_boxes", 0)},
        "boxes": boxes,
        "reconciles": rest == 0 or bool(not_selected),
        "per_class": {n: per_class.get(n, 0) for n, _ in sorted(names.items(), key=lambda p: (p[1], p[0]))},
        "per_image": {"bins": bin_labels(PER_IMAGE_EDGES, counts=True),
                      "counts": [per_image.get(b, 0) for b in bin_labels(PER_IMAGE_EDGES, counts=True)]},
        "box_sizes": {"measure": "sqrt of the box's area in pixels of the image as annotated",
                      "edges": list(SIZE_EDGES), "bins": bin_labels(SIZE_EDGES),
                      "counts": [sizes.get(b, 0) for b in bin_labels(SIZE_EDGES)]},
    }


def masks_in(options: dict) -> bool:
    """Whether the run's options (the manifest's `options`) write masks."""
    return bool((options.get("detection") or {}).get("masks"))
