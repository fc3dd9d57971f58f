"""Annotations joined with the images listed, as pure functions: each
yields records (Rec with its annotation), rejects and counts ("stat", name,
n), for the listing stage (transforms/stages/list_annotations.py) to route.

Every annotated image is counted as listed, once: it becomes a record, or a
reject (missing_image, duplicate, bad_annotation, unsafe_path). Every box
read is counted (boxes/listed) and ends written, dropped by reason, or in a
rejected image (the shard writer counts the ones that reach it).
"""
from __future__ import annotations

from typing import Iterator, Optional

from tfrecord_pipelines.transforms.core import tables
from tfrecord_pipelines.transforms.core.annotations import IN_REJECTED, BoxReason, ImageAnnotation, boxes_in, source_id
from tfrecord_pipelines.transforms.core.records import Reason, Rec, Reject

ENTRY, FILE, BAD, IMAGE, OBJECT = "entry", "file", "bad", "image", "object"


def stat(name: str, n: int = 1) -> tuple:
    return "stat", name, n


def image_rel(file_name: str, root: str, prefix: str) -> str:
    """The image's path relative to the root, from the annotation's name for
    it under its image folder; raises tables.UnsafePath for a name that leaves
    the folder (an absolute path, a URL, `..`)."""
    folder = root.rstrip("/") + ("/" + prefix if prefix else "")
    rel, _ = tables.resolve_path(file_name, folder, False)
    return f"{prefix}/{rel}" if prefix else rel


def coco_image(key: tuple, tagged, root: str, prefix: str) -> Iterator:
    """One COCO image id's images entry and objects, joined: ("entry", rel,
    (split, ImageAnnotation)) for the join with the files, or rejects."""
    split, image_id = key
    images, objects, bad = [], [], []
    for tag, value in tagged:
        (images if tag == IMAGE else objects if tag == OBJECT else bad).append(value)
    objects = tuple(o for _, o in sorted(objects, key=lambda p: p[0]))
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
        rel = image_rel(file_name, root, prefix)
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
    files, entries = [], []
    for tag, value in tagged:
        (files if tag == FILE else entries).append(value)
    files.sort(key=lambda f: f.rel)
    entries.sort(key=lambda e: (e[0], e[1]))
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


def voc_entry(data: bytes, xml_rel: str, split: str, root: str, prefix: str) -> Optional[tuple]:
    """(rel, ("entry", (split, ImageAnnotation))) of one VOC XML file, or a Reject."""
    from tfrecord_pipelines.transforms.core.annotations import voc
    try:
        file_name, ann = voc.parse(data, xml_rel)
        rel = image_rel(file_name, root, prefix)
    except voc.BadXml as e:
        return Reject(xml_rel, Reason.BAD_ANNOTATION.value, str(e)[:500], split)
    except tables.UnsafePath as e:
        return Reject(xml_rel, Reason.UNSAFE_PATH.value, f"its <filename>: {e}", split)
    return rel, (ENTRY, (split, tuple(ann._replace(source_id=source_id(rel)))))
