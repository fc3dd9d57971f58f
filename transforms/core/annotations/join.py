"""Annotations joined with the images listed, as pure functions: each
yields records (Rec with its annotation), rejects and counts ("stat", name,
n), for the listing stage (transforms/stages/list_annotations.py) to route.

Every annotated image is counted as listed, once: it becomes a record, or a
reject (missing_image, duplicate, bad_annotation, unsafe_path). Every box
read is counted (boxes/listed) and ends written, dropped by reason, or in a
rejected image (the shard writer counts the ones that reach it).
"""
from __future__ import annotations

import os
from typing import Iterator, Optional

from tfrecord_pipelines.transforms.core import tables
from tfrecord_pipelines.transforms.core.annotations import (IN_REJECTED, BoxReason, ImageAnnotation, Obj, boxes_in,
                                                            source_id)
from tfrecord_pipelines.transforms.core.records import Reason, Rec, Reject

ENTRY, FILE, BAD, IMAGE, OBJECT, BAD_OBJECT = "entry", "file", "bad", "image", "object", "bad_object"


def stat(name: str, n: int = 1) -> tuple:
    return "stat", name, n


def image_rel(file_name: str, root: str, prefix: str, allow_absolute: bool = False) -> str:
    """The image's path relative to the root, from the annotation's name for
    it under its image folder; raises tables.UnsafePath for a name that leaves
    the folder (a URL, `..`, an absolute path unless `allow_absolute`, which
    takes an absolute path that names a file inside the image folder)."""
    folder = root.rstrip("/") + ("/" + prefix if prefix else "")
    if allow_absolute and (file_name.startswith("/") or "://" in file_name):
        inside = _inside(file_name, folder)
        if inside is None:
            raise tables.UnsafePath(f"{file_name!r} is outside the image folder {folder}: an absolute path "
                                    "(--allow_absolute_paths) must name a file under it, where the images are listed")
        file_name = inside
    rel, _ = tables.resolve_path(file_name, folder, False)
    return f"{prefix}/{rel}" if prefix else rel


def _inside(path: str, folder: str) -> Optional[str]:
    """`path` relative to `folder` when it names something under it (by its
    text, or locally by the real paths of both), else None."""
    if "://" in path or "://" in folder:
        base = folder.rstrip("/") + "/"
        return path[len(base):] if path.startswith(base) and len(path) > len(base) else None
    if "\x00" in path:
        return None
    for p, f in ((os.path.normpath(path), os.path.normpath(folder)),
                 (os.path.realpath(path), os.path.realpath(folder))):
        if p.startswith(f.rstrip("/") + "/"):
            return p[len(f.rstrip("/")) + 1:]
    return None


def coco_image(key: tuple, tagged, root: str, prefix: str, allow_absolute: bool = False) -> Iterator:
    """One COCO image id's images entry and objects, joined: ("entry", rel,
    (split, ImageAnnotation)) for the join with the files, or rejects. An
    object that could not be read (a malformed mask) rejects its image."""
    split, image_id = key
    images, objects, bad, bad_objects = [], [], [], []
    for tag, value in tagged:
        (images if tag == IMAGE else objects if tag == OBJECT else bad_objects if tag == BAD_OBJECT
         else bad).append(value)
    objects = tuple(o for _, o in sorted(objects, key=lambda p: p[0]))
    if bad_objects and len(images) == 1 and not bad:
        bad_objects.sort()
        n = len(objects) + len(bad_objects)
        yield stat("listed")
        yield stat("boxes/listed", n)
        yield stat(IN_REJECTED, n)
        more = f" (and {len(bad_objects) - 1} more)" if len(bad_objects) > 1 else ""
        yield Reject(images[0][0], Reason.BAD_ANNOTATION.value, bad_objects[0][1] + more, split)
        return
    objects = objects + tuple(tuple(Obj(-1, 0.0, 0.0, 0.0, 0.0, problem=BoxReason.MALFORMED.value))
                              for _ in bad_objects)
    if not images and not bad:  # annotations of an image id that no images entry names
        yield stat("boxes/listed", len(objects))
        yield stat(f"boxes/dropped/{BoxReason.NO_IMAGE.value}", len(objects))
        return
    if bad or len(images) > 1:
        yield stat("boxes/listed", len(objects))
        yield stat("listed", len(images) + len(bad))
        yield stat(IN_REJECTED, len(objects))
        for b in bad:
            yield Reject(b[0], Reason.BAD_ANNOTATION.value, b[1], split)
        for (file_name, _, _) in images:
            yield Reject(file_name, Reason.BAD_ANNOTATION.value,
                         f"image id {image_id} appears {len(images) + len(bad)} times in images", split)
        return
    file_name, w, h = images[0]
    try:
        rel = image_rel(file_name, root, prefix, allow_absolute)
    except tables.UnsafePath as e:
        yield stat("listed")
        yield stat("boxes/listed", len(objects))
        yield stat(IN_REJECTED, len(objects))
        yield Reject(file_name, Reason.UNSAFE_PATH.value, str(e), split)
        return
    yield ENTRY, rel, (split, tuple(ImageAnnotation(str(image_id), w, h, False, objects)))


def with_files(rel: str, tagged, negatives: bool = False) -> Iterator:
    """Annotation entries and the files listed for one image path (YOLO: one
    label file's path), joined: the Rec, or rejects (missing_image; duplicate
    for an image annotated twice, the first split in order kept).
    `negatives` (YOLO): a file without an annotation is an image without
    boxes; else such a file is not listed (excluded as not_annotated)."""
    files, entries, bad = [], [], []
    for tag, value in tagged:
        (files if tag == FILE else bad if tag == BAD else entries).append(value)
    files.sort(key=lambda f: f.rel)
    entries.sort(key=lambda e: (e[0], e[1]))
    if bad:  # YOLO: a label file that could not be read rejects the images it labels, with its reason
        split, detail = min(bad)
        yield stat("listed", len(files) or 1)
        for f in files:
            yield Reject(f.rel, Reason.BAD_ANNOTATION.value, detail, f.split or split)
        if not files:
            yield Reject(rel, Reason.BAD_ANNOTATION.value, detail, split)
        return
    if not entries:
        if negatives:
            yield stat("listed", len(files))
            for f in files:
                yield f._replace(annotation=tuple(ImageAnnotation(source_id(f.rel), 0, 0, True, ())))
        else:
            yield stat("excluded/not_annotated", len(files))
        return
    if not files:
        yield stat("listed", len(entries))
        for split, ann in entries:
            yield stat("boxes/listed", boxes_in(ann))
            yield stat(IN_REJECTED, boxes_in(ann))
            yield Reject(rel, Reason.MISSING_IMAGE.value, "the annotation names this image, and there is no such "
                         "file" + (f" under {rel.rsplit('/', 1)[0]}/" if "/" in rel else ""), split)
        return
    (split, ann), rest = entries[0], entries[1:]
    if not negatives:
        yield stat("listed", len(entries))
        for s, a in entries:
            yield stat("boxes/listed", boxes_in(a))
        for s, a in rest:
            yield stat(IN_REJECTED, boxes_in(a))
            yield Reject(rel, Reason.DUPLICATE.value, f"the annotations name this image {len(entries)} times; the "
                         f"one of split {split or '(none)'!r} is kept", s)
        for f in files:
            yield f._replace(split=split or None, annotation=ann)
        return
    yield stat("listed", len(files))  # YOLO: each image of the label file's name has its objects
    for f in files:
        yield stat("boxes/listed", boxes_in(ann))
        a = ImageAnnotation._make(ann)._replace(source_id=source_id(f.rel))
        yield f._replace(annotation=tuple(a))


def yolo_file(rec: Rec, split: str) -> tuple:
    """(join key, ("file", rec)) of a listed image: its label file's path."""
    from tfrecord_pipelines.transforms.core.annotations import yolo
    return yolo.label_rel(rec.rel) or rec.rel, (FILE, rec._replace(split=split or None))


def voc_entry(data: bytes, xml_rel: str, split: str, root: str, prefix: str,
              allow_absolute: bool = False) -> Optional[tuple]:
    """(rel, ("entry", (split, ImageAnnotation))) of one VOC XML file, or a Reject."""
    from tfrecord_pipelines.transforms.core.annotations import voc
    try:
        file_name, ann = voc.parse(data, xml_rel)
        rel = image_rel(file_name, root, prefix, allow_absolute)
    except voc.BadXml as e:
        return Reject(xml_rel, Reason.BAD_ANNOTATION.value, str(e)[:500], split)
    except tables.UnsafePath as e:
        return Reject(xml_rel, Reason.UNSAFE_PATH.value, f"its <filename>: {e}", split)
    return rel, (ENTRY, (split, tuple(ann._replace(source_id=source_id(rel)))))
