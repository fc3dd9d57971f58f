"""ListAnnotations on its own, on Beam's TestPipeline: generated COCO and
Pascal VOC datasets (tests/detection_data.py) read and joined with the
listing of their images: each record with its objects, rejects with their
reasons (missing_image, bad_annotation), the counts that reconcile (listed =
records + rejects), the label map of the categories or of the names met."""
from __future__ import annotations

import os

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from conftest import image_bytes, write
from detection_data import CATEGORIES, make_coco, make_voc
from tfrecord_pipelines.transforms.core.annotations import annotation_of
from tfrecord_pipelines.transforms.core.fingerprint import FINGERPRINT
from tfrecord_pipelines.transforms.core.records import Reason
from tfrecord_pipelines.transforms.core.specs import (RECORDS, REJECTS, STATS, AnnotationFormat, DetectionSpec,
                                                      InputKind, InputSpec, LabelSource, LabelSpec)
from tfrecord_pipelines.transforms.stages.list_annotations import ListAnnotations


def _objects(out):
    """(rel, split, source id, [(category, box)]) of each record."""
    def rows(batch):
        for r in batch:
            ann = annotation_of(r.annotation)
            yield r.rel, r.split, r.size, ann.source_id, [(o[0], tuple(round(v, 6) for v in o[1:5]))
                                                          for o in ann.objects]
    return out[RECORDS] | "Objects" >> beam.FlatMap(lambda b: list(rows(b)))


def _listed(out):
    return (out[STATS] | "Listed" >> beam.Filter(lambda kv: not kv[0].startswith("boxes/"))
            | beam.CombinePerKey(sum))


def test_coco_records_carry_their_objects_and_a_missing_image_is_a_reject(tmp_path):
    root = str(tmp_path / "coco")
    data = make_coco(root, n=6)
    os.remove(os.path.join(root, "train2017", "000000001002.jpg"))
    write(os.path.join(root, "train2017", "extra.jpg"), image_bytes())  # a file no annotation names
    doc = data["doc"]
    sizes = {n: os.path.getsize(os.path.join(root, "train2017", n)) for n in data["expected"] if "1002" not in n}
    by_image: dict = {}
    for a in sorted(doc["annotations"], key=lambda a: a["id"]):
        x, y, w, h = a["bbox"]
        # Objects carry their category's name (the label map gives the id), corners in pixels.
        by_image.setdefault(a["image_id"], []).append((dict(CATEGORIES)[a["category_id"]],
                                                       tuple(map(float, (x, y, x + w, y + h)))))
    want = sorted((f"train2017/{im['file_name']}", "train", sizes[im["file_name"]], str(im["id"]),
                   sorted(by_image.get(im["id"], [])))
                  for im in doc["images"] if im["id"] != 1002)
    spec = DetectionSpec(AnnotationFormat.COCO, sources=(("train", data["json"], "train2017"),))
    with TestPipeline() as p:
        out = p | ListAnnotations(InputSpec(InputKind.ANNOTATIONS, root, include=("*.jpg",)), spec,
                                  LabelSpec(LabelSource.NONE))
        assert_that(_objects(out) | beam.MapTuple(lambda *row: (*row[:4], sorted(row[4]))), equal_to(want))
        assert_that(out[REJECTS] | "Why" >> beam.FlatMap(lambda b: [(r.rel, r.reason, r.split) for r in b]),
                    equal_to([("train2017/000000001002.jpg", Reason.MISSING_IMAGE.value, "train")]), label="rejects")
        assert_that(_listed(out), equal_to([("listed", 6), ("excluded/not_annotated", 1)]), label="listed")
        assert_that(out["label_map"] | beam.Map(lambda lm: lm.ids),
                    equal_to([tuple((name, cid) for cid, name in CATEGORIES)]), label="label_map")
        assert_that(out[FINGERPRINT] | beam.Map(lambda kv: kv[0].split("/")[0]) | beam.Distinct(),
                    equal_to(["Images", "annotations"]), label="fingerprint")


def test_voc_names_its_classes_from_the_names_met_and_refuses_an_unreadable_xml(tmp_path):
    root = str(tmp_path / "voc")
    data = make_voc(root, n=4)
    write(os.path.join(root, "Annotations", "broken.xml"), b"<annotation><object>")
    spec = DetectionSpec(AnnotationFormat.VOC, sources=(("", os.path.join(root, "Annotations"), "JPEGImages"),))
    with TestPipeline() as p:
        out = p | ListAnnotations(InputSpec(InputKind.ANNOTATIONS, root, include=("*.jpg",)), spec,
                                  LabelSpec(LabelSource.NONE))
        assert_that(_objects(out) | beam.MapTuple(lambda rel, split, size, sid, objs: (rel, [c for c, _ in objs])),
                    equal_to([(f"JPEGImages/{name}", [o["text"] for o in objs])
                              for name, objs in data["expected"].items()]))
        assert_that(out[REJECTS] | "Why" >> beam.FlatMap(lambda b: [(r.rel, r.reason) for r in b]),
                    equal_to([("Annotations/broken.xml", Reason.BAD_ANNOTATION.value)]), label="rejects")
        assert_that(_listed(out), equal_to([("listed", 5)]), label="listed")
        assert_that(out["label_map"] | beam.Map(lambda lm: lm.ids),
                    equal_to([(("aeroplane", 1), ("bicycle", 2), ("cat", 3))]), label="label_map")
