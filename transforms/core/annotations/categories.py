"""The label map of a detection dataset: the annotations' categories and
their ids, and label_map.pbtxt in the Object Detection API's format.

Ids are the source's own by default: COCO's category ids (1..90 with gaps;
models map them), YOLO's class indexes (from 0). Pascal VOC names its classes
without ids: they get 1..N in name order, as the Object Detection API's
pascal_label_map.pbtxt numbers them. `--category_ids contiguous` numbers the
categories 1..N in the order of the source's ids (0 is the background class
in the Object Detection API). --label_offset is added to every id, and a
frozen --label_map gives the ids instead (a name outside it is an unknown
category, unless --extend_label_map gives it the next id).
"""
from __future__ import annotations

from typing import Iterable

from tfrecord_pipelines.transforms.core.annotations import AnnotationError
from tfrecord_pipelines.transforms.core.labels import LabelMap, nfc
from tfrecord_pipelines.transforms.core.specs import LabelSpec, LabelType


def merge_categories(lists: Iterable[tuple]) -> tuple:
    """One category list from each annotation file's ((id, name), ...): COCO's
    train and val files must agree."""
    by_id: dict = {}
    for cats in lists:
        for cid, name in cats:
            if by_id.setdefault(cid, name) != name:
                raise AnnotationError(f"category {cid} is {by_id[cid]!r} in one annotation file and {name!r} in "
                                      "another; the files must share their categories")
    names: dict = {}
    for cid, name in by_id.items():
        if names.setdefault(name, cid) != cid:
            raise AnnotationError(f"categories {names[name]} and {cid} are both named {name!r}")
    return tuple(sorted(by_id.items()))


def box_label_map(categories: tuple, names_seen: Iterable[str], spec: LabelSpec, contiguous: bool) -> LabelMap:
    """The LabelMap (kind BOXES) of ((source id, name), ...) categories, or
    of the class names met (VOC, which lists none)."""
    offset = spec.offset
    if spec.frozen_map is not None:
        mapping = {nfc(n): i for n, i in spec.frozen_map}
        new: tuple = ()
        if spec.extend_map:
            known = [name for _, name in categories] or sorted(set(names_seen))
            new = tuple(n for n in known if n not in mapping)
            start = max(mapping.values(), default=offset) + 1
            mapping.update({n: start + i for i, n in enumerate(new)})
        return LabelMap(LabelType.BOXES, tuple(sorted(mapping.items(), key=lambda x: (x[1], x[0]))), (), offset, new)
    if categories:
        ordered = sorted(categories)
        ids = [(name, (rank + 1 if contiguous else cid) + offset) for rank, (cid, name) in enumerate(ordered)]
    else:
        ids = [(name, i + 1 + offset) for i, name in enumerate(sorted(set(names_seen)))]
    return LabelMap(LabelType.BOXES, tuple(sorted(ids, key=lambda x: (x[1], x[0]))), (), offset)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def label_map_pbtxt(label_map: LabelMap) -> bytes:
    """The Object Detection API's StringIntLabelMap in text format: one item
    per class (name, id, display_name). The API refuses id 0 unless it is
    named "background" (its background class): give a source whose ids
    start at 0 (YOLO) --category_ids contiguous."""
    items = [f"item {{\n  name: {_quoted(name)}\n  id: {i}\n  display_name: {_quoted(name)}\n}}\n"
             for name, i in label_map.ids]
    return "".join(items).encode("utf-8")
