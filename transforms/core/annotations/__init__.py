"""Object annotations (boxes, classes, crowd regions, masks) read from COCO
JSON, Pascal VOC XML and YOLO text, as pure functions: each source gives, per
image, an `ImageAnnotation` of `Obj`s in its own coordinates. They travel on
the image's Rec (`Rec.annotation`, plain tuples: cheap to pickle in batches)
through the metadata stages; the shard writer checks them against the image's
real size and writes the keys detection models read (boxes.py).
"""
from __future__ import annotations

import enum
from typing import NamedTuple, Optional, Union

from tfrecord_pipelines.transforms.core.errors import ConversionError


class AnnotationError(ConversionError, ValueError):
    """An annotation source that cannot be read at all (malformed JSON, no
    categories): the run stops with this one line."""


class BoxReason(str, enum.Enum):
    """Why a box was not written (its image may still be). Documented in the README."""
    OUTSIDE = "outside"                    # past the image's edge (--bad_boxes drop), or wholly outside it
    EMPTY = "empty"                        # zero or negative width or height
    NOT_FINITE = "not_finite"              # a coordinate that is NaN or infinite
    UNKNOWN_CATEGORY = "unknown_category"  # a category not in the source's list (or in --label_map)
    MALFORMED = "malformed"                # an entry or line that cannot be read as a box
    NO_IMAGE = "no_image"                  # a COCO annotation whose image_id names no image


class Obj(NamedTuple):
    """One object as its source gives it. Stored on a Rec as a plain tuple."""
    category: Union[str, int]  # the category's name; an id the source's list does not name stays an int
    x0: float                  # box corners, in pixels of the annotated image (or normalized: ImageAnnotation)
    y0: float
    x1: float
    y1: float
    is_crowd: int = 0
    area: float = -1.0         # the source's area in pixels (COCO: the segment's); -1: none given
    difficult: int = 0
    truncated: int = 0
    segmentation: object = None  # with masks: ((x, y, x, y, ...), ...) polygons, or ("rle", counts, h, w)
    problem: str = ""          # a BoxReason value when the entry could not be read (counted, never written)


class ImageAnnotation(NamedTuple):
    """One image's annotation. Stored on a Rec as a plain tuple."""
    source_id: str             # image/source_id: COCO's image id; else a number from the file name (source_id())
    width: int                 # the size the annotation claims (0: not given, as in YOLO)
    height: int
    normalized: bool           # coordinates in [0, 1] of the image (YOLO), not pixels
    objects: tuple             # (Obj as a plain tuple, ...) in the source's order


IN_REJECTED = "boxes/in_rejected_images"  # the count of boxes whose image was rejected (boxes.section)


def boxes_in(value: tuple) -> int:
    """How many objects a Rec's annotation field lists (0 for an image of another input)."""
    return len(value[4]) if value else 0


def annotation_of(value: tuple) -> Optional[ImageAnnotation]:
    """A Rec's annotation field as an ImageAnnotation (None for an image of another input)."""
    return ImageAnnotation._make(value) if value else None


def source_id(rel: str) -> str:
    """image/source_id for a source without image ids (VOC, YOLO): the file
    name's stem when it is a number (2008_000008 is not; 000123 is), else a
    63-bit number from the path's hash. Model Garden's parsers read it as an
    int64 (tf.strings.to_number), so it must be a decimal number."""
    stem = rel.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    if stem.isascii() and stem.isdigit() and len(stem) <= 18:
        return str(int(stem))
    return path_id(rel)


def path_id(rel: str) -> str:
    """A 63-bit decimal number from the hash of a relative path: the same path
    gives the same id in every run. image/source_id of classification records
    (--source_ids), where class folders often repeat numbered names (cat/1.jpg,
    dog/1.jpg), so the stem is not used."""
    import hashlib
    digest = hashlib.sha256(rel.encode("utf-8", "surrogateescape")).digest()
    return str(int.from_bytes(digest[:8], "big") >> 1)
