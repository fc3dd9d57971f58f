"""YOLO text labels: beside `images/.../x.jpg`, a `labels/.../x.txt` with one
line per object, `class cx cy w h`, the class an index into the names
(`classes.txt`, one name a line, or a data YAML's `names`) and the box
normalized to the image's size. An image without a label file has no
objects (a negative); a label file without its image is an annotation whose
image is missing.
"""
from __future__ import annotations

import posixpath
from typing import Optional

from tfrecord_pipelines.transforms.core.annotations import BoxReason, ImageAnnotation, Obj, source_id
from tfrecord_pipelines.transforms.core.tables import IMAGE_EXTENSIONS


def label_rel(image_rel: str) -> Optional[str]:
    """The label file of an image, as Ultralytics finds it: the last `images`
    folder of its path becomes `labels` and its extension `.txt`; None when
    its path has no `images` folder."""
    parts = image_rel.split("/")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            return posixpath.splitext("/".join(parts))[0] + ".txt"
    return None


def is_image(rel: str) -> bool:
    return posixpath.splitext(rel)[1].lower() in IMAGE_EXTENSIONS


# A class name is a word or a few; one longer is no name (a YAML alias bomb makes one of ~300 MB).
MAX_NAME = 1024


def _checked(names: tuple) -> tuple:
    """The names, unique: a name given twice would give two indexes one id,
    and the label map's files would disagree. Raises ValueError."""
    seen: dict = {}
    for i, n in enumerate(names):
        if len(n) > MAX_NAME:
            raise ValueError(f"class {i}'s name is {len(n):,} characters long (at most {MAX_NAME:,})")
        if n in seen:
            raise ValueError(f"classes {seen[n]} and {i} are both named {n[:80]!r}; class names must be unique")
        seen[n] = i
    return names


def names_from_text(text: str) -> tuple:
    """classes.txt: one name a line (blank lines ignored). Raises ValueError (names repeated, too long)."""
    return _checked(tuple(line.strip() for line in text.splitlines() if line.strip()))


def _name(i, v) -> str:
    # a number is a name as YAML wrote it (`names: [1, 2]`); a list or mapping is not a name
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise ValueError(f"class {i}'s name is a {type(v).__name__}, not a string")
    return str(v)


def names_from_yaml(doc) -> tuple:
    """A data YAML's `names`: a list, or {index: name} with indexes 0..N-1."""
    names = doc.get("names") if isinstance(doc, dict) else None
    if isinstance(names, dict) and all(isinstance(k, int) for k in names) and \
            sorted(names) == list(range(len(names))):
        return _checked(tuple(_name(i, names[i]) for i in range(len(names))))
    if isinstance(names, list) and names:
        return _checked(tuple(_name(i, n) for i, n in enumerate(names)))
    raise ValueError("it has no `names` list (or {index: name} map with indexes 0..N-1)")


def parse(text: str, names: tuple, rel: str) -> ImageAnnotation:
    """One label file's objects: an index past the names stays an int (an
    unknown category); a line that is not 5 numbers is malformed."""
    objects = []
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        try:
            if len(fields) != 5:
                raise ValueError
            index = int(fields[0])
            cx, cy, w, h = (float(v) for v in fields[1:])
        except ValueError:
            objects.append(tuple(Obj(-1, 0.0, 0.0, 0.0, 0.0, problem=BoxReason.MALFORMED.value)))
            continue
        category = names[index] if 0 <= index < len(names) else index
        objects.append(tuple(Obj(category, cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)))
    return ImageAnnotation(source_id(rel), 0, 0, True, tuple(objects))
