"""Pascal VOC XML: one file per image (`Annotations/2008_000008.xml`) naming
its image (`filename`), its size and its objects (`name`, `bndbox` with
xmin, ymin, xmax, ymax in pixels, `difficult`, `truncated`).

Coordinates are divided by the image's width and height as the TensorFlow
models repository's create_pascal_tf_record.py does (VOC's 1-based pixel
numbers are not shifted). Python's expat refuses entity expansion bombs
(billion laughs) and ElementTree resolves no external entities; files are
bounded by --max_annotation_bytes before they are parsed.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from tfrecord_pipelines.transforms.core.annotations import BoxReason, ImageAnnotation, Obj, source_id


class BadXml(ValueError):
    """The file is not a VOC annotation (its image is rejected as bad_annotation)."""


def _text(node, path: str) -> str:
    found = node.find(path)
    return (found.text or "").strip() if found is not None else ""


def _flag(node, path: str) -> int:
    return 1 if _text(node, path) in ("1", "true", "True") else 0


def _coord(text: str) -> float:
    return float(text) if text else math.nan


def parse(data: bytes, xml_name: str) -> tuple:
    """(image file name, ImageAnnotation) of one VOC XML file; raises BadXml."""
    try:
        root = ET.fromstring(data)
    except (ET.ParseError, ValueError) as e:
        raise BadXml(f"{xml_name} is not well-formed XML: {e}") from None
    if root.tag != "annotation":
        raise BadXml(f"{xml_name}: the root element is <{root.tag[:40]}>, not <annotation>")
    filename = _text(root, "filename")
    if not filename:
        raise BadXml(f"{xml_name} has no <filename> naming its image")
    try:
        w, h = int(_text(root, "size/width") or 0), int(_text(root, "size/height") or 0)
    except ValueError:
        raise BadXml(f"{xml_name}: <size> is not whole numbers of pixels") from None
    objects = []
    for o in root.iter("object"):
        name = _text(o, "name")
        box = o.find("bndbox")
        try:
            if box is None or not name:
                raise ValueError
            x0, y0, x1, y1 = (_coord(_text(box, k)) for k in ("xmin", "ymin", "xmax", "ymax"))
        except ValueError:
            objects.append(tuple(Obj(name or -1, 0.0, 0.0, 0.0, 0.0, problem=BoxReason.MALFORMED.value)))
            continue
        objects.append(tuple(Obj(name, x0, y0, x1, y1, difficult=_flag(o, "difficult"),
                                 truncated=_flag(o, "truncated"))))
    return filename, ImageAnnotation(source_id(filename), max(w, 0), max(h, 0), False, tuple(objects))
