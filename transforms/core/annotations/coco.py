"""COCO instances JSON (`instances_train2017.json`): `images` (id, file_name,
width, height), `annotations` (image_id, category_id, bbox [x, y, w, h] in
pixels, iscrowd, area, polygon or RLE segmentation) and `categories` (id, name).

The file is one JSON document, often hundreds of MB (COCO train2017's is 448
MB; json.load holds several GB of Python objects for it). It is streamed with
ijson (yajl2's C parser), one section per pass, so memory holds one entry at
a time whatever the file's size; a malformed file stops the run with one line
naming it. Annotations are joined to their images by the pipeline's grouping,
not in memory here.
"""
from __future__ import annotations

import numbers
from typing import BinaryIO, Iterator, Optional

import ijson

from tfrecord_pipelines.transforms.core.annotations import AnnotationError, BoxReason, Obj

IMAGES, ANNOTATIONS, CATEGORIES = "images", "annotations", "categories"


def _number(v) -> bool:
    # ijson (use_float) gives int or float; type() is ~10x cheaper than an ABC isinstance, per coordinate.
    return type(v) is float or type(v) is int or (isinstance(v, numbers.Real) and not isinstance(v, bool))


def _items(stream: BinaryIO, section: str, name: str) -> Iterator:
    try:
        yield from ijson.items(stream, f"{section}.item", use_float=True)
    except ijson.JSONError as e:
        first = " ".join(str(e).split())[:160]
        raise AnnotationError(f"--annotations {name}: not valid JSON ({first}); a COCO annotation file is one JSON "
                              "object with images, annotations and categories") from None


def read_categories(stream: BinaryIO, name: str) -> tuple:
    """((id, name), ...) in the file's order. No categories, a category
    without an integer id or a name, or two categories of one name: the run
    stops (boxes could not be given class ids)."""
    out, names = [], {}
    for c in _items(stream, CATEGORIES, name):
        cid = c.get("id") if isinstance(c, dict) else None
        cname = c.get("name") if isinstance(c, dict) else None
        if not isinstance(cid, int) or isinstance(cid, bool) or not isinstance(cname, str) or not cname:
            raise AnnotationError(f"--annotations {name}: category {str(c)[:120]} needs an integer id and a name")
        if cname in names and names[cname] != cid:
            raise AnnotationError(f"--annotations {name}: categories {names[cname]} and {cid} are both named "
                                  f"{cname!r}; class names must be unique")
        names[cname] = cid
        out.append((cid, cname))
    if not out:
        raise AnnotationError(f"--annotations {name}: no categories (a COCO instances file lists them under "
                              "\"categories\")")
    return tuple(out)


def read_images(stream: BinaryIO, name: str) -> Iterator[tuple]:
    """(image id, file name or None, width, height, problem) of each `images`
    entry; `problem` says why an entry cannot be used ("" when it can)."""
    for im in _items(stream, IMAGES, name):
        if not isinstance(im, dict):
            yield None, None, 0, 0, f"an images entry is not an object: {str(im)[:80]}"
            continue
        iid, fname = im.get("id"), im.get("file_name")
        w, h = im.get("width", 0), im.get("height", 0)
        if not isinstance(iid, (int, str)) or isinstance(iid, bool):
            yield None, fname if isinstance(fname, str) else None, 0, 0, f"image id {iid!r} is not an integer"
        elif not isinstance(fname, str) or not fname:
            yield iid, None, 0, 0, f"image {iid} has no file_name"
        elif not (isinstance(w, int) and isinstance(h, int)) or isinstance(w, bool) or w < 0 or h < 0:
            yield iid, fname, 0, 0, f"image {iid} has width {w!r} and height {h!r}, not sizes in pixels"
        else:
            yield iid, fname, w, h, ""


def _segmentation(seg) -> Optional[tuple]:
    """Polygons as tuples of floats, or ("rle", counts, height, width)."""
    if isinstance(seg, list):
        polys = tuple(tuple(float(v) for v in p) for p in seg
                      if isinstance(p, list) and len(p) >= 6 and len(p) % 2 == 0 and all(map(_number, p)))
        return polys or None
    if isinstance(seg, dict):
        counts, size = seg.get("counts"), seg.get("size")
        if (isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) for v in size)
                and (isinstance(counts, str) or (isinstance(counts, list) and all(isinstance(v, int) for v in counts)))):
            return "rle", counts if isinstance(counts, str) else tuple(counts), size[0], size[1]
    return None


def to_object(a: dict, categories: dict, masks: bool) -> Obj:
    """An `annotations` entry as an Obj (a box [x, y, w, h] becomes its corners)."""
    cid = a.get("category_id")
    category = categories.get(cid, cid) if isinstance(cid, int) and not isinstance(cid, bool) else -1
    bbox = a.get("bbox")
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(map(_number, bbox))):
        return Obj(category, 0.0, 0.0, 0.0, 0.0, problem=BoxReason.MALFORMED.value)
    x, y, w, h = (float(v) for v in bbox)
    area = a.get("area")
    return Obj(category, x, y, x + w, y + h, is_crowd=1 if a.get("iscrowd") else 0,
               area=float(area) if _number(area) else -1.0,
               segmentation=_segmentation(a.get("segmentation")) if masks else None)


def read_annotations(stream: BinaryIO, name: str, categories: dict, masks: bool) -> Iterator[tuple]:
    """(image id, position in the file, Obj as a tuple) of each `annotations`
    entry; `categories` is {id: name}. The position keeps each image's
    objects in file order, however the pipeline groups them."""
    for n, a in enumerate(_items(stream, ANNOTATIONS, name)):
        if not isinstance(a, dict):
            yield None, n, tuple(Obj(-1, 0.0, 0.0, 0.0, 0.0, problem=BoxReason.MALFORMED.value))
            continue
        iid = a.get("image_id")
        yield iid if isinstance(iid, (int, str)) and not isinstance(iid, bool) else None, n, \
            tuple(to_object(a, categories, masks))
