"""Object detection end to end: COCO, Pascal VOC and YOLO annotations
converted on the local runner and read back with TensorFlow (VarLen and
Ragged features), every box, class and mask held to the source."""
from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

from conftest import convert, manifest
from detection_data import make_coco, make_voc, make_yolo

BOX_KEYS = ("image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax", "image/object/bbox/ymax")


def read_detection(out: str, split: str, masks: bool = False) -> dict:
    """{image/filename: parsed features} of a split, parsed with tf.io.parse_example:
    VarLen features for the per-object keys, a RaggedFeature for the class ids."""
    import tensorflow as tf
    m = manifest(out)
    files = [os.path.join(out, s["name"]) for s in m["splits"][split]["shards"]]
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/filename": tf.io.FixedLenFeature([], tf.string),
            "image/source_id": tf.io.FixedLenFeature([], tf.string),
            "image/height": tf.io.FixedLenFeature([], tf.int64),
            "image/width": tf.io.FixedLenFeature([], tf.int64),
            "image/object/class/label": tf.io.RaggedFeature(tf.int64),
            "image/object/class/text": tf.io.VarLenFeature(tf.string),
            "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
            "image/object/area": tf.io.VarLenFeature(tf.float32),
            "image/object/difficult": tf.io.VarLenFeature(tf.int64),
            "image/object/truncated": tf.io.VarLenFeature(tf.int64),
            **{k: tf.io.VarLenFeature(tf.float32) for k in BOX_KEYS}}
    if masks:
        spec["image/object/mask"] = tf.io.VarLenFeature(tf.string)
    rows = {}
    for batch in tf.data.TFRecordDataset(files).batch(16):
        ex = tf.io.parse_example(batch, spec)
        dense = {k: (tf.sparse.to_dense(v, default_value=b"" if v.dtype == tf.string else 0).numpy()
                     if isinstance(v, tf.SparseTensor) else v if isinstance(v, tf.RaggedTensor) else v.numpy())
                 for k, v in ex.items()}
        counts = ex["image/object/class/label"].row_lengths().numpy()
        for i in range(len(counts)):
            n = int(counts[i])
            row = {k: (v[i][:n] if k.startswith("image/object/") and k != "image/object/class/label" else v[i])
                   for k, v in dense.items()}
            row["image/object/class/label"] = ex["image/object/class/label"][i].numpy()
            img = tf.io.decode_image(row["image/encoded"], expand_animations=False)
            assert (img.shape[0], img.shape[1]) == (row["image/height"], row["image/width"])
            rows[row["image/filename"].decode()] = row
    return rows


def source_mask(seg, size, stored=None):
    """The source's mask drawn with pycocotools at its own size (resized as a stored image would be)."""
    from PIL import Image
    from pycocotools import mask as cocomask
    w, h = size
    rle = cocomask.frPyObjects(seg, h, w)
    m = cocomask.decode(cocomask.merge(rle) if isinstance(rle, list) else rle)
    if stored and stored != (w, h):
        m = np.asarray(Image.fromarray(m).resize(stored, Image.Resampling.NEAREST))
    return m


def check_objects(row: dict, want: list, label_ids: dict = None, tol: float = 1e-6) -> None:
    got_boxes = np.stack([row[k] for k in BOX_KEYS], axis=-1) if len(row[BOX_KEYS[0]]) else np.zeros((0, 4))
    assert len(got_boxes) == len(want), (len(got_boxes), len(want))
    for j, o in enumerate(want):
        np.testing.assert_allclose(got_boxes[j], o["box"], atol=tol)
        assert row["image/object/class/text"][j].decode() == o["text"]
        assert row["image/object/class/label"][j] == (label_ids or {}).get(o["text"], o["label"])
        if "is_crowd" in o:
            assert row["image/object/is_crowd"][j] == o["is_crowd"]
        if "area" in o:
            assert row["image/object/area"][j] == pytest.approx(o["area"], rel=1e-6)
        for k in ("difficult", "truncated"):
            if k in o:
                assert row[f"image/object/{k}"][j] == o[k]


def test_coco_boxes_classes_and_masks_read_back(tmp_path):
    src = make_coco(str(tmp_path / "coco"), n=30)
    out = str(tmp_path / "out")
    assert convert("--annotations", src["json"], "--output", out, "--masks", "png", "--num_shards", "2") == 0
    m = manifest(out)
    assert m["label_map"]["kind"] == "boxes"
    assert m["label_map"]["classes"] == {"person": 1, "car": 3, "dog": 7}  # COCO's own ids, gaps kept
    rows = read_detection(out, "train", masks=True)
    assert set(rows) == set(src["expected"])
    import tensorflow as tf
    n_masks = 0
    for rel, row in rows.items():
        want = src["expected"][rel]
        check_objects(row, want)
        assert row["image/source_id"].decode() == str(int(rel.split(".")[0]))
        for j, o in enumerate(want):
            png = row["image/object/mask"][j]
            got = tf.io.decode_png(png, channels=1).numpy()[:, :, 0]
            assert got.shape == (row["image/height"], row["image/width"])
            np.testing.assert_array_equal(got, source_mask(o["segmentation"] if isinstance(o["segmentation"], dict)
                                                           else o["segmentation"], o["size"]))
            n_masks += 1
    assert n_masks == sum(map(len, src["expected"].values())) > 30
    d = m["detection"]
    total = sum(map(len, src["expected"].values()))
    assert d["boxes"] == {"listed": total, "written": total, "clipped": 0, "dropped": {}, "in_rejected_images": 0}
    assert d["reconciles"]
    assert d["images"] == {"with_boxes": 27, "without_boxes": 3}
    assert sum(d["per_image"]["counts"]) == 30 and sum(d["box_sizes"]["counts"]) == total
    assert sum(d["per_class"].values()) == total
    pbtxt = open(os.path.join(out, "label_map.pbtxt")).read()
    assert 'item {\n  name: "car"\n  id: 3\n  display_name: "car"\n}' in pbtxt


def test_voc_boxes_difficult_truncated_read_back(tmp_path):
    src = make_voc(str(tmp_path / "VOC2012"), n=20)
    out = str(tmp_path / "out")
    assert convert("--annotations", src["root"], "--output", out, "--split", "train=0.75,validation=0.25") == 0
    m = manifest(out)
    assert m["label_map"]["classes"] == {"aeroplane": 1, "bicycle": 2, "cat": 3}  # 1..N by name, as the OD API's
    rows = {**read_detection(out, "train"), **read_detection(out, "validation")}
    assert set(rows) == set(src["expected"])
    for rel, row in rows.items():
        check_objects(row, src["expected"][rel])
    assert m["detection"]["reconciles"] and m["counts"]["rejected"] == 0


def test_yolo_split_folders_and_negatives_read_back(tmp_path):
    src = make_yolo(str(tmp_path / "yolo"), n=20)
    out = str(tmp_path / "out")
    assert convert("--annotations", src["root"], "--output", out) == 0
    m = manifest(out)
    assert set(m["splits"]) == {"train", "val"}  # from images/train/ and images/val/
    assert m["label_map"]["classes"] == {"ball": 0, "goal": 1, "player": 2}  # YOLO's indexes
    for split in ("train", "val"):
        rows = read_detection(out, split)
        assert {r for r in src["splits"] if src["splits"][r] == split} == set(rows)
        for rel, row in rows.items():
            check_objects(row, src["expected"][rel], tol=2e-6)
    assert m["detection"]["images"]["without_boxes"] == 1  # frame0005 has no label file: a negative
    assert m["detection"]["reconciles"]


def test_coco_train_and_val_files_are_the_splits_with_contiguous_ids_and_resize(tmp_path):
    train = make_coco(str(tmp_path / "coco"), n=12, seed=3, split_name="train2017")
    val = make_coco(str(tmp_path / "coco"), n=6, seed=4, split_name="val2017")
    out = str(tmp_path / "out")
    assert convert("--annotations", f"train={train['json']},validation={val['json']}", "--output", out,
                   "--category_ids", "contiguous", "--masks", "png", "--resize_longest_side", "40") == 0
    m = manifest(out)
    ids = {"person": 1, "car": 2, "dog": 3}
    assert m["label_map"]["classes"] == ids
    import tensorflow as tf
    for split, src in (("train", train), ("validation", val)):
        rows = read_detection(out, split, masks=True)
        assert set(rows) == {f"{'train2017' if split == 'train' else 'val2017'}/{k}" for k in src["expected"]}
        for rel, row in rows.items():
            want = src["expected"][rel.split("/", 1)[1]]
            assert max(row["image/height"], row["image/width"]) <= 40  # resized: boxes stay normalized
            w, h = want[0]["size"] if want else (0, 0)
            for o in want:
                o["area"] = o["area"] * row["image/width"] * row["image/height"] / (w * h)
            check_objects(row, want, ids, tol=1e-6)
            for j, o in enumerate(want):
                got = tf.io.decode_png(row["image/object/mask"][j], channels=1).numpy()[:, :, 0]
                assert got.shape == (row["image/height"], row["image/width"])  # masks at the stored size
                if isinstance(o["segmentation"], dict):  # RLE: decoded at its size, resized with the image
                    np.testing.assert_array_equal(got, source_mask(o["segmentation"], o["size"],
                                                                   (int(row["image/width"]), int(row["image/height"]))))
                else:  # a polygon drawn at the stored size covers about the scaled area
                    assert got.sum() == pytest.approx(o["area"], rel=0.5, abs=12)


@pytest.fixture(scope="module")
def coco_out(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("det")
    src = make_coco(str(tmp / "coco"), n=16, seed=5)
    out = str(tmp / "out")
    assert convert("--annotations", src["json"], "--output", out, "--masks", "png", "--num_shards", "2") == 0
    return src, out


def model_garden_decode(serialized):
    """Model Garden's detection decoder (official/vision/dataloaders/tf_example_decoder.py,
    TfExampleDecoder(include_mask=True)) as its source reads our records: its keys_to_features
    and its decode steps. tf-models-official does not install against the pinned TensorFlow
    2.21 (2.20.0 requires tensorflow~=2.20.0; pip falls back to 2.7.2, whose
    official.vision.beta package does not import on Python 3.11), so the parse is written here."""
    import tensorflow as tf
    keys_to_features = {
        "image/encoded": tf.io.FixedLenFeature((), tf.string),
        "image/height": tf.io.FixedLenFeature((), tf.int64),
        "image/width": tf.io.FixedLenFeature((), tf.int64),
        "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/xmax": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymin": tf.io.VarLenFeature(tf.float32),
        "image/object/bbox/ymax": tf.io.VarLenFeature(tf.float32),
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
        "image/object/area": tf.io.VarLenFeature(tf.float32),
        "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
        "image/object/mask": tf.io.VarLenFeature(tf.string),
        "image/source_id": tf.io.FixedLenFeature((), tf.string),
    }
    p = tf.io.parse_single_example(serialized=serialized, features=keys_to_features)
    for k in p:
        if isinstance(p[k], tf.SparseTensor):
            p[k] = tf.sparse.to_dense(p[k], default_value="" if p[k].dtype == tf.string else 0)
    image = tf.io.decode_image(p["image/encoded"], channels=3)
    image.set_shape([None, None, 3])
    boxes = tf.stack([p["image/object/bbox/ymin"], p["image/object/bbox/xmin"],
                      p["image/object/bbox/ymax"], p["image/object/bbox/xmax"]], axis=-1)
    masks = tf.cond(tf.greater(tf.size(p["image/object/mask"]), 0),
                    lambda: tf.map_fn(lambda b: tf.cast(tf.squeeze(tf.io.decode_png(b, channels=1), -1), tf.float32),
                                      p["image/object/mask"], dtype=tf.float32),
                    lambda: tf.zeros([0, p["image/height"], p["image/width"]], tf.float32))
    return {"source_id": tf.strings.to_number(p["image/source_id"], tf.int64),  # as its parsers convert it
            "image": image, "groundtruth_classes": p["image/object/class/label"],
            "groundtruth_is_crowd": tf.cast(p["image/object/is_crowd"], tf.bool),
            "groundtruth_area": p["image/object/area"], "groundtruth_boxes": boxes,
            "groundtruth_instance_masks": masks}


def test_model_garden_decoder_reads_every_record(coco_out):
    import tensorflow as tf
    src, out = coco_out
    m = manifest(out)
    files = [os.path.join(out, s["name"]) for s in m["splits"]["train"]["shards"]]
    by_id = {int(im["id"]): im["file_name"] for im in src["doc"]["images"]}
    seen = 0
    for d in tf.data.TFRecordDataset(files).map(model_garden_decode):
        want = src["expected"][by_id[int(d["source_id"])]]
        assert d["groundtruth_boxes"].shape == (len(want), 4)
        for j, o in enumerate(want):
            x0, y0, x1, y1 = o["box"]
            np.testing.assert_allclose(d["groundtruth_boxes"][j].numpy(), [y0, x0, y1, x1], atol=1e-6)
            assert int(d["groundtruth_classes"][j]) == o["label"]
            assert bool(d["groundtruth_is_crowd"][j]) == bool(o["is_crowd"])
        assert d["groundtruth_instance_masks"].shape[0] == len(want)
        assert tuple(d["groundtruth_instance_masks"].shape[1:]) == tuple(d["image"].shape[:2]) or not want
        seen += 1
    assert seen == 16


def test_spec_prints_code_that_reads_boxes_and_masks(coco_out, tmp_path):
    from conftest import run_printed
    from tfrecord_pipelines.outputs.reading_code import reading_code
    src, out = coco_out
    code = reading_code(out, manifest(out), True)
    assert "tf.io.VarLenFeature(tf.float32),  # one value per object" in code
    driver = ("import importlib.util, json, sys\n"
              "spec = importlib.util.spec_from_file_location('reader', sys.argv[1]); r = importlib.util.module_from_spec(spec)\n"
              "spec.loader.exec_module(r)\n"
              "for record in r.dataset('train', training=False).take(100):\n"
              "    image, boxes, classes, masks = record\n"
              "    print(json.dumps({'shape': list(image.shape), 'boxes': boxes.numpy().tolist(),\n"
              "                      'classes': [r.CLASS_NAMES[int(c)] for c in classes], 'masks': list(masks.shape)}))\n")
    rows = run_printed(tmp_path, code, driver, os.path.join(out, "manifest.json"))
    assert len(rows) == 16
    want = {tuple(tuple(round(v, 5) for v in (o["box"][1], o["box"][0], o["box"][3], o["box"][2])) for o in objs)
            for objs in src["expected"].values()}
    got = {tuple(tuple(round(v, 5) for v in b) for b in r["boxes"]) for r in rows}
    assert got == want
    for r in rows:
        assert r["masks"][0] == len(r["boxes"]) and (not r["boxes"] or r["masks"][1:] == r["shape"][:2])


def test_tfds_loads_the_sequence_of_objects(coco_out):
    import tensorflow_datasets as tfds
    src, out = coco_out
    builder = tfds.builder_from_directory(out)
    obj = builder.info.features["image/object"]  # every other key a top-level feature too (supervised keys)
    assert type(obj).__name__ == "Sequence"
    n = 0
    for ex in builder.as_dataset(split="train"):
        objs = ex["image/object"]
        k = int(objs["class"]["label"].shape[0])
        assert objs["bbox"]["xmin"].shape == (k,) and objs["mask"].shape[0] == k
        assert [t.decode() for t in objs["class"]["text"].numpy()] == \
            [dict((c, nm) for c, nm in [(1, "person"), (3, "car"), (7, "dog")])[int(c)] for c in objs["class"]["label"]]
        n += 1
    assert n == 16


def test_shards_are_byte_identical_across_runners_and_a_rerun_is_unchanged(tmp_path):
    """The same annotations give the same shards in one process and on two worker
    processes; a --versioned rerun of unchanged inputs publishes nothing."""
    src = make_coco(str(tmp_path / "coco"), n=24, seed=9)
    outs = []
    for name, extra in (("one", ["--direct_running_mode", "in_memory"]), ("two", ["--direct_num_workers", "2"])):
        out = str(tmp_path / name)
        assert convert("--annotations", src["json"], "--output", out, "--masks", "png", "--num_shards", "3",
                       *extra, in_memory=False) == 0
        outs.append(out)
    for s in manifest(outs[0])["splits"]["train"]["shards"]:
        with open(os.path.join(outs[0], s["name"]), "rb") as a, open(os.path.join(outs[1], s["name"]), "rb") as b:
            assert a.read() == b.read(), s["name"]
    root = str(tmp_path / "versions")
    assert convert("--annotations", src["json"], "--output", root, "--versioned", "--version", "v1") == 0
    assert convert("--annotations", src["json"], "--output", root, "--versioned", "--version", "v2") == 0
    assert not os.path.exists(os.path.join(root, "v2", "manifest.json"))  # unchanged: nothing published
    with open(os.path.join(root, "LATEST")) as f:
        assert f.read().strip() == "v1"


def test_verify_holds_object_classes_to_the_label_map(coco_out, tmp_path):
    import shutil
    from tfrecord_pipelines.outputs.verification import verify_output
    _, out = coco_out
    assert verify_output(out, decode=True).ok
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    m = manifest(copy)
    del m["label_map"]["classes"]["car"]
    with open(os.path.join(copy, "manifest.json"), "w") as f:
        json.dump(m, f)
    errors = verify_output(copy).errors
    assert errors and all("object class ids [3] are not in the manifest's label map" in e for e in errors)


def test_the_report_counts_boxes_and_draws_them_on_thumbnails(coco_out):
    """report.html's Boxes section holds the manifest's counts and both
    charts, and each thumbnail of a record is that record's image with its
    own boxes drawn (the page's JPEG is the one thumbnail() makes from the
    record's bytes and boxes, and not the one without them)."""
    import base64

    from test_report_html import elements
    from tfrecord_pipelines.transforms.core import report_html
    _, out = coco_out
    m = manifest(out)
    page = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    assert "<h2>Boxes</h2>" in page
    d = m["detection"]
    assert (f"Images written with boxes: <b>{d['images']['with_boxes']:,}</b>, without: "
            f"<b>{d['images']['without_boxes']:,}</b>") in page
    assert f"<tr><td>listed</td><td>{d['boxes']['listed']:,}</td></tr>" in page
    assert f"<tr><td>written</td><td>{d['boxes']['written']:,}</td></tr>" in page
    charts = {dict(a).get("alt") for t, a in elements(page) if t == "img" and dict(a).get("class") != "thumb"}
    assert {"boxes per class", "boxes per image and box sizes"} <= charts, charts
    rows = read_detection(out, "train")
    thumbs = {dict(a)["alt"]: dict(a)["src"] for t, a in elements(page) if t == "img" and dict(a).get("class") == "thumb"}
    with_boxes = [rel for rel in thumbs if rel in rows and len(rows[rel]["image/object/class/label"])]
    assert with_boxes, sorted(thumbs)
    for rel in with_boxes:
        row = rows[rel]
        boxes = list(zip(*(row[k].tolist() for k in BOX_KEYS)))
        shown = base64.b64decode(thumbs[rel].split(",", 1)[1])
        assert shown == report_html.thumbnail(row["image/encoded"], report_html.THUMB_BOXES_PX, boxes=boxes), rel
        assert shown != report_html.thumbnail(row["image/encoded"], report_html.THUMB_BOXES_PX), rel


def test_a_yolo_data_yaml_gives_the_folders_records_and_says_what_it_found(tmp_path, capsys):
    """The same YOLO tree given as its folder (names from classes.txt) and as
    an Ultralytics data YAML elsewhere (path, train, val, names as a map):
    the format found is said, and the shards are the same bytes."""
    src = make_yolo(str(tmp_path / "yolo"), n=12)
    by_folder, by_yaml = str(tmp_path / "a"), str(tmp_path / "b")
    assert convert("--annotations", src["root"], "--output", by_folder) == 0
    assert "annotations: a YOLO folder (images/ and labels/)" in capsys.readouterr().err
    os.remove(os.path.join(src["root"], "classes.txt"))  # the names now come from the YAML alone
    cfg = tmp_path / "cfg" / "data.yaml"
    cfg.parent.mkdir()
    cfg.write_text("path: ../yolo\ntrain: images/train\nval: images/val\nnames:\n"
                   + "".join(f"  {i}: {n}\n" for i, n in enumerate(src["names"])))
    assert convert("--annotations", str(cfg), "--output", by_yaml) == 0
    assert "annotations: a YOLO data YAML" in capsys.readouterr().err
    a, b = manifest(by_folder), manifest(by_yaml)
    assert a["label_map"]["classes"] == b["label_map"]["classes"] == {"ball": 0, "goal": 1, "player": 2}
    for split in ("train", "val"):
        names = [s["name"] for s in a["splits"][split]["shards"]]
        assert names == [s["name"] for s in b["splits"][split]["shards"]]
        for name in names:
            with open(os.path.join(by_folder, name), "rb") as f1, open(os.path.join(by_yaml, name), "rb") as f2:
                assert f1.read() == f2.read(), name
        for rel, row in read_detection(by_yaml, split).items():
            check_objects(row, src["expected"][rel], tol=2e-6)
