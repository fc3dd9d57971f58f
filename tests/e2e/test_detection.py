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
