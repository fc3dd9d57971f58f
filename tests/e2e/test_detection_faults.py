"""Bad annotations give a reason (per box or per image, counted in the
manifest, reconciling) or a one-line error, never a traceback."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from PIL import Image

from conftest import ROOT, convert, image_bytes, manifest, write
from detection_data import make_coco, make_yolo
from test_detection import read_detection


def _rejects(out: str) -> dict:
    with open(os.path.join(out, "rejects.jsonl")) as f:
        return {r["path"]: r for r in map(json.loads, f)}


def _exif_rotated_jpeg(w: int, h: int) -> bytes:
    im = Image.open(io.BytesIO(image_bytes(w, h)))
    exif = Image.Exif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    im.save(buf, "JPEG", exif=exif.tobytes())
    return buf.getvalue()


@pytest.fixture
def damaged(tmp_path):
    """A COCO set with one of each problem: boxes past the edge, of negative width, NaN-free but
    of an unknown category, an annotation of no image, a missing image file, a size that disagrees,
    an EXIF-rotated photo annotated upright, an image without boxes."""
    src = make_coco(str(tmp_path / "coco"), n=12)
    doc = src["doc"]
    images = {im["file_name"]: im for im in doc["images"]}
    first = doc["images"][0]
    anns = doc["annotations"]
    nid = max(a["id"] for a in anns) + 1

    def add(image, bbox, cat=1):
        nonlocal nid
        anns.append({"id": nid, "image_id": image["id"], "category_id": cat, "bbox": bbox, "iscrowd": 0,
                     "area": 10.0, "segmentation": []})
        nid += 1
    w, h = first["width"], first["height"]
    add(first, [w - 5, 2, 20, 6])          # past the right edge: clipped
    add(first, [w + 10, 2, 5, 5])          # wholly outside: dropped, outside
    add(first, [4, 4, -3, 5])              # negative width: empty
    add(first, [4, 4, 5, 5], cat=99)       # unknown category
    anns.append({"id": nid + 1, "image_id": 999999, "category_id": 1, "bbox": [1, 1, 2, 2]})  # no such image
    doc["images"].append({"id": 5001, "file_name": "gone.jpg", "width": 10, "height": 10})
    anns.append({"id": nid + 2, "image_id": 5001, "category_id": 1, "bbox": [1, 1, 2, 2]})
    second = doc["images"][1]
    second["width"] += 7                   # the annotation's size is not the file's
    write(os.path.join(src["images"], "rotated.jpg"), _exif_rotated_jpeg(60, 40))
    doc["images"].append({"id": 5002, "file_name": "rotated.jpg", "width": 40, "height": 60})
    anns.append({"id": nid + 3, "image_id": 5002, "category_id": 3, "bbox": [1, 1, 20, 30]})
    with open(src["json"], "w") as f:
        json.dump(doc, f)
    src["first"], src["second"] = first["file_name"], second["file_name"]
    return src


def test_bad_boxes_and_images_get_their_reasons_and_counts_reconcile(damaged, tmp_path):
    out = str(tmp_path / "out")
    assert convert("--annotations", damaged["json"], "--output", out, "--max_reject_fraction", "1") == 0
    m = manifest(out)
    rejects = _rejects(out)
    assert rejects["gone.jpg"]["reason"] == "missing_image"
    assert rejects[damaged["second"]]["reason"] == "size_mismatch"
    assert rejects["rotated.jpg"]["reason"] == "exif_rotated"
    assert "--exif_orientation apply" in rejects["rotated.jpg"]["detail"]
    assert m["counts"]["listed"] == 14 == m["counts"]["written"] + m["counts"]["rejected"]
    b = m["detection"]["boxes"]
    assert b["dropped"] == {"empty": 1, "no_image": 1, "outside": 1, "unknown_category": 1}
    assert b["clipped"] == 1
    assert b["listed"] == b["written"] + sum(b["dropped"].values()) + b["in_rejected_images"]
    assert m["detection"]["reconciles"]
    rows = read_detection(out, "train")
    first = rows[damaged["first"]]
    assert max(first["image/object/bbox/xmax"]) == 1.0  # the clipped box ends at the edge
    assert damaged["second"] not in rows and "gone.jpg" not in rows


@pytest.mark.parametrize("extra", [[], ["--reads_per_image", "2"], ["--duplicates", "reject"]])
def test_boxes_of_images_rejected_for_their_bytes_are_counted_and_reconcile(tmp_path, extra, capsys):
    """An image that is not an image (rejected as it is read: validated in the
    shard writer, or by the validation stage with two reads) or a copy of
    another (--duplicates reject): its boxes are counted in rejected images,
    so the detection section reconciles and the summary's equation adds up."""
    src = make_coco(str(tmp_path / "coco"), n=16, seed=7)
    names = sorted(src["expected"])
    bad, copy, original = names[2], names[5], names[11]
    write(os.path.join(src["images"], bad), b"\xff\xd8 not a JPEG")
    rejected = {bad}
    if extra[:1] == ["--duplicates"]:  # the same bytes under another name, annotated at their size
        with open(os.path.join(src["images"], original), "rb") as f:
            write(os.path.join(src["images"], copy), f.read())
        doc = src["doc"]
        entries = {im["file_name"]: im for im in doc["images"]}
        entries[copy].update(width=entries[original]["width"], height=entries[original]["height"])
        with open(src["json"], "w") as f:
            json.dump(doc, f)
        rejected.add(max(copy, original))  # the first path of the same bytes is kept
    out = str(tmp_path / "out")
    capsys.readouterr()
    assert convert("--annotations", src["json"], "--output", out, "--max_reject_fraction", "1", *extra) == 0
    printed = capsys.readouterr().out
    assert set(_rejects(out)) == rejected
    lost = sum(len(src["expected"][n]) for n in rejected)
    b = manifest(out)["detection"]["boxes"]
    assert b["in_rejected_images"] == lost > 0
    assert b["listed"] == b["written"] + sum(b["dropped"].values()) + b["in_rejected_images"]
    assert manifest(out)["detection"]["reconciles"]
    assert f"+ in rejected images {lost:,}" in printed
    assert set(read_detection(out, "train")) == set(names) - rejected


def test_exif_rotated_photo_is_written_upright_with_apply(damaged, tmp_path):
    out = str(tmp_path / "out")
    assert convert("--annotations", damaged["json"], "--output", out, "--max_reject_fraction", "1",
                   "--exif_orientation", "apply") == 0
    rows = read_detection(out, "train")
    row = rows["rotated.jpg"]
    assert (row["image/width"], row["image/height"]) == (40, 60)
    assert list(row["image/object/bbox/xmax"]) == pytest.approx([21 / 40])


@pytest.mark.parametrize("policy,reason", [("drop", None), ("reject_image", "bad_box")])
def test_bad_box_policies(damaged, tmp_path, policy, reason):
    out = str(tmp_path / "out")
    assert convert("--annotations", damaged["json"], "--output", out, "--max_reject_fraction", "1",
                   "--bad_boxes", policy, "--images_without_boxes", "drop") == 0
    m = manifest(out)
    rejects = _rejects(out)
    if reason:
        assert rejects[damaged["first"]]["reason"] == reason
        assert "do not fit" in rejects[damaged["first"]]["detail"]
    else:
        assert m["detection"]["boxes"]["dropped"]["outside"] == 2 and m["detection"]["boxes"]["clipped"] == 0
    assert {r["reason"] for r in rejects.values()} >= {"no_boxes"}  # images without boxes dropped, with a reason
    assert m["detection"]["reconciles"]
    assert m["detection"]["images"]["without_boxes"] == 0


def test_yolo_nan_malformed_unknown_class_and_orphan_label(tmp_path):
    src = make_yolo(str(tmp_path / "yolo"), n=8)
    root = src["root"]
    write(os.path.join(root, "labels/train/frame0001.txt"),
          b"0 nan 0.5 0.1 0.1\n7 0.5 0.5 0.1 0.1\n1 0.5 0.5\n2 0.5 0.5 0.2 0.2\n")
    write(os.path.join(root, "labels/train/ghost.txt"), b"0 0.5 0.5 0.1 0.1\n")
    out = str(tmp_path / "out")
    assert convert("--annotations", root, "--output", out, "--max_reject_fraction", "1") == 0
    m = manifest(out)
    assert m["detection"]["boxes"]["dropped"] == {"malformed": 1, "not_finite": 1, "unknown_category": 1}
    assert _rejects(out)["labels/train/ghost.txt"]["reason"] == "missing_image"
    assert m["detection"]["reconciles"]
    assert list(read_detection(out, "train")["images/train/frame0001.png"]["image/object/class/text"]) == [b"player"]


def test_bad_voc_xml_is_a_reject(tmp_path):
    from detection_data import make_voc
    src = make_voc(str(tmp_path / "VOC"), n=4)
    write(os.path.join(src["root"], "Annotations", "broken.xml"), b"<annotation><filename>x.jpg</filename>")
    out = str(tmp_path / "out")
    assert convert("--annotations", src["root"], "--output", out, "--max_reject_fraction", "1") == 0
    assert _rejects(out)["Annotations/broken.xml"]["reason"] == "bad_annotation"


def _cli(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "tfrecord_pipelines.convert", *map(str, args), "--progress", "off",
                           "--direct_running_mode", "in_memory"], capture_output=True, text=True, env=env, cwd=ROOT)


def _one_line_error(got: subprocess.CompletedProcess, *words) -> None:
    assert got.returncode != 0
    lines = [line for line in got.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, got.stderr[-2000:]
    assert "Traceback" not in got.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_malformed_json_is_one_line(tmp_path):
    src = make_coco(str(tmp_path / "coco"), n=3)
    with open(src["json"], "r+") as f:
        text = f.read()
        f.seek(0)
        f.write(text[: len(text) // 2].replace('"bbox": [', '"bbox": [NaN, ', 1))
        f.truncate()
    _one_line_error(_cli("--annotations", src["json"], "--output", tmp_path / "out"), "not valid JSON",
                    "instances_train2017.json")


def test_a_1gb_annotation_file_is_one_line_without_reading_it_all(tmp_path):
    src = make_coco(str(tmp_path / "coco"), n=2)
    big = str(tmp_path / "coco" / "annotations" / "instances_big.json")
    with open(big, "wb") as f:  # sparse: 1 GB that costs no disk
        f.write(b'{"images": [')
        f.truncate(1 << 30)
    got = _cli("--annotations", big, "--image_root", src["images"], "--output", tmp_path / "out")
    _one_line_error(got, "not valid JSON", "instances_big.json")
    zeros = str(tmp_path / "zeros.json")
    with open(zeros, "wb") as f:
        f.truncate(1 << 30)
    _one_line_error(_cli("--annotations", zeros, "--image_root", src["images"], "--output", tmp_path / "out2"),
                    "binary data")
