"""The annotation parsers and the box checks, as pure functions: COCO
streamed section by section, VOC XML, YOLO lines and names, the label map
and its pbtxt, and each box reason."""
from __future__ import annotations

import collections
import io
import json
import math

import pytest

from tfrecord_pipelines.transforms.core.annotations import (AnnotationError, BoxReason, ImageAnnotation, Obj,
                                                            boxes, categories, coco, join, source_id, voc, yolo)
from tfrecord_pipelines.transforms.core.records import Reason, Rec, Reject
from tfrecord_pipelines.transforms.core.specs import BadBoxes, DetectionSpec, AnnotationFormat, LabelSource, LabelSpec


def _coco(doc) -> io.BytesIO:
    return io.BytesIO(json.dumps(doc).encode())


DOC = {"images": [{"id": 1, "file_name": "a.jpg", "width": 10, "height": 8}, {"id": "x", "width": 3},
                  {"file_name": "b.jpg"}],
       "annotations": [{"id": 5, "image_id": 1, "category_id": 3, "bbox": [1, 2, 3, 4], "iscrowd": 1, "area": 6.5,
                        "segmentation": {"counts": [0, 2, 78], "size": [8, 10]}},
                       {"id": 6, "image_id": 1, "category_id": 99, "bbox": [0, 0, 1, 1],
                        "segmentation": [[0, 0, 1, 0, 1, 1]]},
                       {"id": 7, "image_id": 1, "category_id": 3, "bbox": [1, 2]}],
       "categories": [{"id": 3, "name": "car"}, {"id": 1, "name": "person"}]}


def test_coco_sections_stream_separately():
    assert coco.read_categories(_coco(DOC), "f") == ((3, "car"), (1, "person"))
    images = list(coco.read_images(_coco(DOC), "f"))
    assert images[0] == (1, "a.jpg", 10, 8, "")
    assert images[1][4] and images[2][4]  # no file name; no id
    anns = list(coco.read_annotations(_coco(DOC), "f", {3: "car", 1: "person"}, masks=True))
    first = Obj._make(anns[0][2])
    assert (first.category, first.x0, first.y0, first.x1, first.y1, first.is_crowd, first.area) == \
        ("car", 1, 2, 4, 6, 1, 6.5)
    assert first.segmentation == ("rle", (0, 2, 78), 8, 10)
    assert Obj._make(anns[1][2]).category == 99  # an id no category names stays an int
    assert Obj._make(anns[2][2]).problem == BoxReason.MALFORMED.value
    assert Obj._make(next(coco.read_annotations(_coco(DOC), "f", {}, masks=False))[2]).segmentation is None


@pytest.mark.parametrize("text,words", [(b'{"categories": [{"id": 1, "name": "a"}, NaN]}', "not valid JSON"),
                                        (b'{"categories": [', "not valid JSON"),
                                        (b'{"images": []}', "no categories"),
                                        (b'{"categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "a"}]}',
                                         "both named")])
def test_coco_errors_are_one_line(text, words):
    with pytest.raises(AnnotationError) as e:
        coco.read_categories(io.BytesIO(text), "instances.json")
    assert words in str(e.value) and "\n" not in str(e.value) and "instances.json" in str(e.value)


def test_voc_parse():
    xml = (b"<annotation><filename>2008_1.jpg</filename><size><width>50</width><height>40</height></size>"
           b"<object><name>cat</name><difficult>1</difficult><bndbox><xmin>1</xmin><ymin>2</ymin><xmax>30</xmax>"
           b"<ymax>20</ymax></bndbox></object><object><name>dog</name></object></annotation>")
    name, ann = voc.parse(xml, "a.xml")
    assert name == "2008_1.jpg" and (ann.width, ann.height) == (50, 40)
    cat, dog = (Obj._make(o) for o in ann.objects)
    assert (cat.category, cat.x0, cat.y1, cat.difficult) == ("cat", 1, 20, 1)
    assert dog.problem == BoxReason.MALFORMED.value
    for bad in (b"<annotation>", b"<doc/>", b"<annotation/>"):
        with pytest.raises(voc.BadXml):
            voc.parse(bad, "a.xml")


def test_voc_refuses_entity_bombs():
    bomb = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">'
            b'<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
            b"<annotation><filename>&lol3;</filename></annotation>")
    try:
        name, _ = voc.parse(bomb, "b.xml")
    except voc.BadXml:
        return
    assert len(name) < 10_000  # small entities expand; expat refuses the amplifying ones


def test_yolo_paths_names_and_lines():
    assert yolo.label_rel("images/train/a.jpg") == "labels/train/a.txt"
    assert yolo.label_rel("x/images/images/a.PNG") == "x/images/labels/a.txt"
    assert yolo.label_rel("a.jpg") is None
    assert yolo.names_from_yaml({"names": {0: "a", 1: "b"}}) == ("a", "b")
    assert yolo.names_from_yaml({"names": ["a"]}) == ("a",)
    with pytest.raises(ValueError):
        yolo.names_from_yaml({"names": {1: "b"}})
    ann = yolo.parse("0 0.5 0.5 0.2 0.4\n5 0.5 0.5 0.1 0.1\nbad\n\n1 nan 0 0 0\n", ("a", "b"), "images/12.jpg")
    objs = [Obj._make(o) for o in ann.objects]
    assert ann.normalized and ann.source_id == "12"
    assert (objs[0].category, objs[0].x0, objs[0].y1) == ("a", pytest.approx(0.4), pytest.approx(0.7))
    assert objs[1].category == 5 and objs[2].problem == "malformed" and math.isnan(objs[3].x0)


def test_source_id_is_a_decimal_number():
    assert source_id("x/000123.jpg") == "123"
    sid = source_id("x/2008_000008.jpg")
    assert sid.isdigit() and int(sid) < 2**63 and sid == source_id("x/2008_000008.jpg")


SPEC = DetectionSpec(AnnotationFormat.COCO)


def _check(objs, spec=SPEC, w=100, h=50, normalized=False, stored=None):
    stats = collections.Counter()
    ann = ImageAnnotation("1", w, h, normalized, tuple(tuple(o) for o in objs))
    got = boxes.check(ann, w, h, stored or (w, h), {"car": 3, "dog": 7}, spec, stats)
    return got, stats


def test_box_reasons_and_clipping():
    got, stats = _check([Obj("car", 10, 5, 30, 25, area=100.0), Obj("dog", 90, 40, 120, 60), Obj("car", 101, 0, 110, 5),
                         Obj("car", 5, 5, 4, 9), Obj("cat", 1, 1, 2, 2), Obj("car", math.nan, 1, 2, 2),
                         Obj("car", 0, 0, 0, 0, problem="malformed")])
    assert got.label == [3, 7] and got.text == [b"car", b"dog"]
    assert got.xmin == [0.1, 0.9] and got.xmax == [0.3, 1.0] and got.ymax == [0.5, 1.0]  # the dog clipped
    assert got.area == [100.0, 10 * 10]
    assert stats["boxes/clipped"] == 1 and stats["boxes/written"] == 2
    assert {k: v for k, v in stats.items() if k.startswith("boxes/dropped/")} == {
        "boxes/dropped/outside": 1, "boxes/dropped/empty": 1, "boxes/dropped/unknown_category": 1,
        "boxes/dropped/not_finite": 1, "boxes/dropped/malformed": 1}


def test_drop_and_reject_policies_and_empty_images():
    objs = [Obj("car", 10, 5, 30, 25), Obj("dog", 90, 40, 120, 60)]
    got, stats = _check(objs, DetectionSpec(AnnotationFormat.COCO, bad_boxes=BadBoxes.DROP))
    assert got.label == [3] and stats["boxes/dropped/outside"] == 1
    got, stats = _check(objs, DetectionSpec(AnnotationFormat.COCO, bad_boxes=BadBoxes.REJECT_IMAGE))
    assert got[0] is Reason.BAD_BOX and "1 outside" in got[1] and stats["boxes/in_rejected_images"] == 2
    got, stats = _check([], DetectionSpec(AnnotationFormat.COCO, keep_empty=False))
    assert got[0] is Reason.NO_BOXES
    got, stats = _check([])
    assert got.label == [] and stats["images/without_boxes"] == 1


def test_normalized_boxes_and_area_of_a_resized_image():
    got, _ = _check([Obj("car", 0.1, 0.2, 0.5, 0.6)], normalized=True, stored=(50, 25))
    assert got.xmin == [pytest.approx(0.1)] and got.ymax == [pytest.approx(0.6)]
    assert got.area == [pytest.approx(40 * 20 / 4)]  # in pixels of the stored image


def test_size_problems():
    ann = ImageAnnotation("1", 40, 60, False, ())
    assert boxes.size_problem(ann, 40, 60, False, 1) is None
    assert boxes.size_problem(ann, 60, 40, False, 6)[0] is Reason.EXIF_ROTATED
    assert boxes.size_problem(ann, 60, 40, True, 1) is None  # stored upright: the annotation's frame
    assert boxes.size_problem(ann, 41, 60, False, 1)[0] is Reason.SIZE_MISMATCH
    assert boxes.size_problem(ImageAnnotation("1", 0, 0, True, ()), 41, 60, False, 1) is None


def test_section_reconciles():
    stats = {"boxes/listed": 10, "boxes/written": 6, "boxes/dropped/empty": 1, "boxes/in_rejected_images": 3,
             "boxes/class/car": 6, "boxes/per_image/2": 3, "boxes/size/8-16": 6, "images/with_boxes": 3}
    s = boxes.section(stats, {"car": 3, "dog": 7})
    assert s["reconciles"] and s["per_class"] == {"car": 6, "dog": 0}
    assert s["per_image"]["counts"][2] == 3 and s["box_sizes"]["counts"][1] == 6
    assert not boxes.section(dict(stats, **{"boxes/listed": 11}), {})["reconciles"]


def test_label_maps_and_pbtxt():
    spec = LabelSpec(LabelSource.TABLE)
    cats = ((3, "car"), (1, "person"))
    assert categories.box_label_map(cats, (), spec, False).ids == (("person", 1), ("car", 3))
    assert categories.box_label_map(cats, (), spec, True).ids == (("person", 1), ("car", 2))
    assert categories.box_label_map((), {"b", "a"}, spec, False).ids == (("a", 1), ("b", 2))
    frozen = LabelSpec(LabelSource.TABLE, frozen_map=(("car", 10),), extend_map=True)
    assert categories.box_label_map(cats, (), frozen, False).ids == (("car", 10), ("person", 11))
    with pytest.raises(AnnotationError):
        categories.merge_categories([((1, "a"),), ((1, "b"),)])
    lm = categories.box_label_map(((1, 'say "hi"'),), (), spec, False)
    assert categories.label_map_pbtxt(lm).decode() == 'item {\n  name: "say \\"hi\\""\n  id: 1\n  display_name: ' \
                                                     '"say \\"hi\\""\n}\n'


def test_joins_count_every_image_and_box():
    rec = Rec("a.jpg", "/r/a.jpg", 10)
    ann = tuple(ImageAnnotation("1", 4, 4, False, ((tuple(Obj("car", 0, 0, 1, 1))),)))
    out = list(join.with_files("a.jpg", [(join.FILE, rec), (join.ENTRY, ("train", ann)),
                                         (join.ENTRY, ("val", ann))]))
    recs = [o for o in out if isinstance(o, Rec)]
    rejects = [o for o in out if isinstance(o, Reject)]
    stats = collections.Counter()
    for o in out:
        if isinstance(o, tuple) and o and o[0] == "stat":
            stats[o[1]] += o[2]
    assert recs[0].split == "train" and rejects[0].reason == "duplicate" and stats["listed"] == 2
    assert stats["boxes/listed"] == 2 and stats["boxes/in_rejected_images"] == 1
    out = list(join.with_files("b.jpg", [(join.ENTRY, ("", ann))]))
    assert any(isinstance(o, Reject) and o.reason == "missing_image" for o in out)
    out = list(join.coco_image(("", 5), [(join.OBJECT, (1, tuple(Obj("car", 0, 0, 1, 1))))], "/r", ""))
    assert ("stat", "boxes/dropped/no_image", 1) in out
    out = list(join.coco_image(("", 5), [(join.IMAGE, ("../x.jpg", 4, 4))], "/r", ""))
    assert any(isinstance(o, Reject) and o.reason == "unsafe_path" for o in out)
