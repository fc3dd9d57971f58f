"""Every file the annotations name is opened only if it is a regular file
within its bounds, and a malformed annotation is a reject with its file and
reason: a FIFO or /dev/zero named like a VOC XML or a YOLO label file, a
malformed COCO RLE mask, absolute VOC file names under --allow_absolute_paths,
YOLO names given twice. Each run is a child process with a timeout, so a
regression fails instead of hanging the suite."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT, manifest, write
from detection_data import make_coco, make_voc, make_yolo
from test_detection import read_detection


def _run(*args, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "tfrecord_pipelines.convert", *map(str, args), "--progress", "off",
                           "--direct_running_mode", "in_memory", "--max_reject_fraction", "1"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


def _rejects(out: str) -> dict:
    with open(os.path.join(out, "rejects.jsonl")) as f:
        return {r["path"]: r for r in map(json.loads, f)}


def test_a_fifo_or_dev_zero_named_like_an_annotation_file_is_a_reject(tmp_path):
    voc = make_voc(str(tmp_path / "VOC"), n=4)
    os.mkfifo(os.path.join(voc["root"], "Annotations", "pipe.xml"))
    os.symlink("/dev/zero", os.path.join(voc["root"], "Annotations", "zero.xml"))
    out = str(tmp_path / "voc_out")
    got = _run("--annotations", voc["root"], "--output", out)
    assert got.returncode == 0, got.stderr[-2000:]
    rejects = _rejects(out)
    assert rejects["Annotations/pipe.xml"]["reason"] == "bad_annotation"
    assert "FIFO" in rejects["Annotations/pipe.xml"]["detail"]
    assert rejects["Annotations/zero.xml"]["reason"] == "bad_annotation"
    assert "character device" in rejects["Annotations/zero.xml"]["detail"]
    m = manifest(out)
    assert m["counts"]["written"] == 4
    assert m["counts"]["listed"] == 6 == m["counts"]["written"] + m["counts"]["rejected"]

    yolo = make_yolo(str(tmp_path / "yolo"), n=8)
    label = os.path.join(yolo["root"], "labels/train/frame0001.txt")
    os.remove(label)
    os.mkfifo(label)
    zero = os.path.join(yolo["root"], "labels/train/frame0002.txt")
    os.remove(zero)
    os.symlink("/dev/zero", zero)
    out = str(tmp_path / "yolo_out")
    got = _run("--annotations", yolo["root"], "--output", out)
    assert got.returncode == 0, got.stderr[-2000:]
    rejects = _rejects(out)
    # the images they label are rejected with the label file's reason, not written as images without boxes
    assert rejects["images/train/frame0001.png"]["reason"] == "bad_annotation"
    assert "labels/train/frame0001.txt" in rejects["images/train/frame0001.png"]["detail"]
    assert "FIFO" in rejects["images/train/frame0001.png"]["detail"]
    assert "character device" in rejects["images/train/frame0002.png"]["detail"]
    written = read_detection(out, "train")
    assert "images/train/frame0001.png" not in written and "images/train/frame0002.png" not in written
    m = manifest(out)
    assert m["counts"]["listed"] == 8 == m["counts"]["written"] + m["counts"]["rejected"]
    assert m["counts"]["rejected"] == 2


def test_a_malformed_coco_rle_mask_is_a_reject_naming_the_file_and_annotation(tmp_path):
    src = make_coco(str(tmp_path / "coco"), n=6)
    doc = src["doc"]
    bad = {}
    for (im, seg) in zip(doc["images"][:4], [{"counts": "PPZ\u00e9\u00e9", "size": [10, 10]},
                                           {"counts": [-5, 105], "size": [10, 10]},
                                           {"counts": "0", "size": [10, 10]},
                                           {"counts": [1, 2], "size": [-1, 3]}]):
        doc["annotations"].append({"id": 90000 + im["id"], "image_id": im["id"], "category_id": 1,
                                   "bbox": [1, 1, 3, 3], "iscrowd": 1, "area": 9.0, "segmentation": seg})
        bad[im["file_name"]] = 90000 + im["id"]
    with open(src["json"], "w") as f:
        json.dump(doc, f)
    out = str(tmp_path / "out")
    got = _run("--annotations", src["json"], "--output", out, "--masks", "png")
    assert got.returncode == 0, got.stderr[-2000:]
    assert "Traceback" not in got.stderr
    rejects = _rejects(out)
    for name, aid in bad.items():
        assert rejects[name]["reason"] == "bad_annotation", rejects
        assert "instances_train2017.json" in rejects[name]["detail"]
        assert f"(id {aid})" in rejects[name]["detail"]
    assert "RLE" in rejects[next(iter(bad))]["detail"]
    m = manifest(out)
    assert m["counts"]["written"] == 2 and m["counts"]["rejected"] == 4
    assert m["detection"]["reconciles"]


def test_absolute_voc_file_names_are_read_with_allow_absolute_paths(tmp_path):
    voc = make_voc(str(tmp_path / "VOC"), n=3)
    images = os.path.join(voc["root"], "JPEGImages")
    for name in sorted(os.listdir(os.path.join(voc["root"], "Annotations")))[:2]:  # the third stays relative
        path = os.path.join(voc["root"], "Annotations", name)
        with open(path) as f:
            text = f.read()
        stem = name[:-4]
        write(path, text.replace(f"<filename>{stem}.jpg", f"<filename>{images}/{stem}.jpg").encode())
    out = str(tmp_path / "out")
    got = _run("--annotations", voc["root"], "--output", out)
    assert got.returncode == 0, got.stderr[-2000:]
    assert manifest(out)["counts"]["written"] == 1
    assert {r["reason"] for r in _rejects(out).values()} == {"unsafe_path"} and len(_rejects(out)) == 2
    assert "--allow_absolute_paths" in next(iter(_rejects(out).values()))["detail"]
    out = str(tmp_path / "out2")
    got = _run("--annotations", voc["root"], "--output", out, "--allow_absolute_paths")
    assert got.returncode == 0, got.stderr[-2000:]
    m = manifest(out)
    assert m["counts"]["written"] == 3 and m["counts"]["rejected"] == 0
    written = read_detection(out, "train")
    assert sorted(written) == sorted(voc["expected"])
    for name, objs in voc["expected"].items():
        assert [t.decode() for t in written[name]["image/object/class/text"]] == [o["text"] for o in objs]
    # an absolute path outside the image folder is still refused
    path = os.path.join(voc["root"], "Annotations", "2008_000000.xml")
    with open(path) as f:
        text = f.read()
    write(path, text.replace(f"<filename>{images}/2008_000000.jpg", "<filename>/etc/passwd").encode())
    out = str(tmp_path / "out3")
    got = _run("--annotations", voc["root"], "--output", out, "--allow_absolute_paths")
    assert got.returncode == 0, got.stderr[-2000:]
    assert _rejects(out)["Annotations/2008_000000.xml"]["reason"] == "unsafe_path"
    assert "outside the image folder" in _rejects(out)["Annotations/2008_000000.xml"]["detail"]


def test_yolo_names_given_twice_or_an_alias_bomb_are_one_line(tmp_path):
    yolo = make_yolo(str(tmp_path / "yolo"), n=4)
    write(os.path.join(yolo["root"], "classes.txt"), b"ball\ngoal\nball\n")
    got = _run("--annotations", yolo["root"], "--output", tmp_path / "out")
    lines = [line for line in got.stderr.splitlines() if line.startswith("error:")]
    assert got.returncode == 2 and len(lines) == 1 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert "classes 0 and 2 are both named 'ball'" in lines[0]
    os.remove(os.path.join(yolo["root"], "classes.txt"))
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    write(os.path.join(yolo["root"], "data.yaml"), (bomb + "names: [*i]\n").encode())
    got = _run("--annotations", yolo["root"], "--output", tmp_path / "out", timeout=120)
    lines = [line for line in got.stderr.splitlines() if line.startswith("error:")]
    assert got.returncode == 2 and len(lines) == 1 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert "expansion bomb" in lines[0]
