"""The annotation parsers' bounds, without Beam: COCO JSON bounded in depth
and token size before yajl sees it, RLE masks checked before pycocotools
draws them, YOLO names that cannot disagree with the label map, YAML aliases
bounded, and absolute annotation paths under --allow_absolute_paths."""
from __future__ import annotations

import io
import random
import time

import pytest

from tfrecord_pipelines.options.annotation_input import AnnotationUsageError, _yaml
from tfrecord_pipelines.transforms.core import tables
from tfrecord_pipelines.transforms.core.annotations import AnnotationError, coco, join, yolo

from conftest import within




def test_coco_nested_100000_deep_is_one_error_at_once():
    data = b'{"images": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert len(data) < 201_000  # 197 KB
    with pytest.raises(AnnotationError, match="nested more than 64 levels deep") as e:
        within(10, lambda: list(coco.read_images(io.BytesIO(data), "deep.json")))
    assert "deep.json" in str(e.value)


def test_coco_token_past_its_bound_is_one_error_in_seconds():
    for token, what in [(b'"' + b"a" * (9 << 20) + b'"', "a string of more than 8,388,608 bytes"),
                        (b"1" * (1 << 20), "a number or word of more than 4,096 bytes")]:
        data = b'{"images": [{"id": 1, "file_name": ' + token + b', "width": 1, "height": 1}]}'
        with pytest.raises(AnnotationError, match=what):
            within(20, lambda: list(coco.read_images(io.BytesIO(data), "long.json")))


def test_coco_within_bounds_reads_as_before():
    data = (b'{"images": [{"id": 1, "file_name": "a\\"[[[[.jpg", "width": 4, "height": 3}, '
            b'{"id": 2, "file_name": "b\\\\.jpg", "width": 5, "height": 6}]}')
    assert list(coco.read_images(io.BytesIO(data), "x.json")) == [(1, 'a"[[[[.jpg', 4, 3, ""), (2, "b\\.jpg", 5, 6, "")]
    # brackets inside strings are no nesting, and a file of 5 levels passes at a bound of 5
    b = coco.Bounded(io.BytesIO(b'{"a": [{"s": [[1, "]]]]{{{{", 2]]}]}'), "x", max_depth=5)
    while b.read(7):
        pass


def _reference(data: bytes):
    """(depth, longest string, longest word) by a plain loop over the characters; None for a backslash
    outside a string (not JSON: the parser stops there)."""
    depth = deepest = token = string = word = 0
    in_string = escape = False
    for ch in data.decode("latin-1"):
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string, token = False, 0
                continue
            token += 1
            string = max(string, token)
            continue
        if ch == "\\":
            return None
        if ch == '"':
            in_string, token = True, 0
            continue
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
        if ch in " \t\r\n[]{},:":
            token = 0
        else:
            token += 1
            word = max(word, token)
    return deepest, string, word


def test_the_bound_scanner_agrees_with_a_plain_loop_whatever_the_reads():
    rng = random.Random(7)
    pieces = ["[", "]", "{", "}", '"', "\\", "a", "1", ",", ":", " ", '\\"', '"\\\\"']
    checked = 0
    for _ in range(5000):
        data = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60))).encode()
        ref = _reference(data)
        if ref is None:
            continue
        depth, token, word = rng.randint(1, 6), rng.randint(1, 8), rng.randint(1, 8)
        src = io.BytesIO(data)

        class Reads:
            def read(self, n=-1):
                return src.read(rng.randint(1, 9))
        b = coco.Bounded(Reads(), "x", depth, token, word)
        try:
            while b.read(100):
                pass
            raised = False
        except AnnotationError:
            raised = True
        assert raised == (ref[0] > depth or ref[1] > token or ref[2] > word), (data, ref, depth, token, word)
        checked += 1
    assert checked > 500


@pytest.mark.parametrize("seg, why", [
    ({"counts": "PPZ\u00e9", "size": [7, 9]}, "not a character of COCO's compressed RLE"),
    ({"counts": [-1, 64], "size": [7, 9]}, "negative run length"),
    ({"counts": [3, 4], "size": [7, 9]}, "cover 7 pixels, its size 7x9 is 63"),
    ({"counts": "0", "size": [7, 9]}, "cover 0 pixels"),
    ({"counts": "g0340000", "size": [-3, 9]}, "is not 1 to"),
    ({"counts": "g", "size": [7, 9]}, "ends inside a number"),
    ({"counts": "g03400000<", "size": [7, "9"]}, "is not [height, width]"),
    ({"counts": {"a": 1}, "size": [7, 9]}, "neither a string nor a list"),
])
def test_a_malformed_rle_mask_is_a_bad_segmentation_naming_the_file_and_entry(seg, why):
    a = {"id": 41, "image_id": 3, "category_id": 1, "bbox": [1, 1, 2, 2], "segmentation": seg}
    data = ('{"annotations": [' + __import__("json").dumps(a) + "]}").encode()
    got = list(coco.read_annotations(io.BytesIO(data), "instances.json", {1: "cat"}, True))
    assert len(got) == 1 and got[0][:2] == (3, 0)
    assert isinstance(got[0][2], str) and why in got[0][2], got
    assert got[0][2].startswith("instances.json: annotation 0 (id 41): ")
    # without --masks the segmentation is not read: the box is kept
    assert not isinstance(list(coco.read_annotations(io.BytesIO(data), "instances.json", {1: "cat"}, False))[0][2],
                          str)


def test_rle_counts_match_pycocotools():
    import numpy as np
    from pycocotools import mask as cocomask
    rng = np.random.default_rng(0)
    for _ in range(50):
        h, w = rng.integers(1, 40, 2)
        m = np.asfortranarray((rng.random((h, w)) < rng.random()).astype(np.uint8))
        rle = cocomask.encode(m)
        counts = coco.rle_counts(rle["counts"].decode("ascii"))
        assert sum(counts) == h * w
        assert coco._segmentation({"counts": rle["counts"].decode("ascii"), "size": [int(h), int(w)]})[0] == "rle"
        back = cocomask.decode(cocomask.frPyObjects({"counts": counts, "size": [int(h), int(w)]}, int(h), int(w)))
        assert (back == m).all()


def test_a_malformed_rle_rejects_its_image_with_the_reason():
    from tfrecord_pipelines.transforms.core.records import Reject
    tagged = [(join.IMAGE, ("x.jpg", 9, 7)), (join.OBJECT, (0, ("cat", 1.0, 1.0, 2.0, 2.0))),
              (join.BAD_OBJECT, (1, "i.json: annotation 1 (id 8): an RLE mask has a negative run length"))]
    out = list(join.coco_image(("train", 3), tagged, "/r", ""))
    rejects = [o for o in out if isinstance(o, Reject)]
    assert rejects == [Reject("x.jpg", "bad_annotation", "i.json: annotation 1 (id 8): an RLE mask has a negative "
                                                          "run length", "train")]
    stats = {o[1]: o[2] for o in out if not isinstance(o, Reject)}
    assert stats == {"listed": 1, "boxes/listed": 2, "boxes/in_rejected_images": 2}


def test_a_polygon_far_outside_its_image_is_refused_before_drawing():
    from tfrecord_pipelines.transforms.core.annotations import masks
    with pytest.raises(masks.MaskError, match="far outside"):
        within(5, lambda: masks.render(((0.0, 0.0, 1e12, 0.0, 5.0, 5.0),), (0, 0, 5, 5), (1.0, 1.0), (10, 10)))


def test_yolo_names_repeated_long_or_not_strings_are_refused():
    with pytest.raises(ValueError, match="classes 0 and 2 are both named 'cat'"):
        yolo.names_from_text("cat\ndog\ncat\n")
    with pytest.raises(ValueError, match="classes 0 and 1 are both named 'a'"):
        yolo.names_from_yaml({"names": ["a", "a"]})
    with pytest.raises(ValueError, match="is a list, not a string"):
        yolo.names_from_yaml({"names": [["x"] * 3]})
    with pytest.raises(ValueError, match="characters long"):
        yolo.names_from_yaml({"names": {0: "x" * 5000}})
    assert yolo.names_from_yaml({"names": {0: "cat", 1: 7}}) == ("cat", "7")


def test_a_yaml_alias_bomb_is_refused_at_once():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    bomb += "names: [*i]\n"
    assert len(bomb) < 500
    t = time.monotonic()
    with pytest.raises(AnnotationUsageError, match="expand it to 1,749,445,668 nodes"):
        within(10, lambda: _yaml("data.yaml", bomb.encode()))
    assert time.monotonic() - t < 5
    assert _yaml("data.yaml", b"x: &x [a]\ny: *x\nnames: [a, b]\n")["y"] == ["a"]
    with pytest.raises(AnnotationUsageError, match="nested too deep"):
        within(10, lambda: _yaml("data.yaml", b"[" * 100_000))


def test_absolute_annotation_paths_with_allow_absolute_paths(tmp_path):
    folder = tmp_path / "voc" / "JPEGImages"
    folder.mkdir(parents=True)
    (folder / "a.jpg").write_bytes(b"x")
    root = str(tmp_path / "voc")
    with pytest.raises(tables.UnsafePath, match="--allow_absolute_paths"):
        join.image_rel(str(folder / "a.jpg"), root, "JPEGImages")
    assert join.image_rel(str(folder / "a.jpg"), root, "JPEGImages", True) == "JPEGImages/a.jpg"
    with pytest.raises(tables.UnsafePath, match="outside the image folder"):
        join.image_rel("/etc/passwd", root, "JPEGImages", True)
    with pytest.raises(tables.UnsafePath, match="outside the image folder"):
        join.image_rel(str(folder / ".." / ".." / "x.jpg"), root, "JPEGImages", True)
    assert join.image_rel("gs://b/imgs/x/a.jpg", "gs://b", "imgs", True) == "imgs/x/a.jpg"
    with pytest.raises(tables.UnsafePath):
        join.image_rel("gs://other/imgs/a.jpg", "gs://b", "imgs", True)
