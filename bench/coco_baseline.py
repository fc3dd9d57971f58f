"""The baseline bench/detection.py times us against: the single-process loop
of the TensorFlow models repository's create_coco_tf_record.py (research/
object_detection/dataset_tools), rewritten here with its shape and its
steps, not imported (that package does not install against our TensorFlow):

    json.load the whole annotation file; index annotations by image id;
    for each image, in the file's order: read it (tf.io.gfile), PIL.Image.open
    it (header only), sha256 it, normalize each box by the annotation's width
    and height (skipping, uncounted by reason, boxes of no size or past the
    edge), masks with pycocotools when asked (frPyObjects, decode, PNG),
    build a tf.train.Example through tf.train.Feature wrappers, write it to
    shard idx % num_shards (open_sharded_output_tfrecords).

    python -m bench.coco_baseline --annotations X.json --image_dir DIR --output OUT [--shards 8] [--masks]

Prints one JSON line: {"images": n, "bytes": b, "boxes_skipped": k}.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys


def create_tf_example(image: dict, annotations: list, image_dir: str, category_index: dict, include_masks: bool):
    import numpy as np
    import PIL.Image
    import tensorflow as tf

    def int64_list(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

    def bytes_list(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=v))

    def float_list(v):
        return tf.train.Feature(float_list=tf.train.FloatList(value=v))

    height, width, filename, image_id = image["height"], image["width"], image["file_name"], image["id"]
    with tf.io.gfile.GFile(os.path.join(image_dir, filename), "rb") as fid:
        encoded_jpg = fid.read()
    PIL.Image.open(io.BytesIO(encoded_jpg))
    key = hashlib.sha256(encoded_jpg).hexdigest()
    xmin, xmax, ymin, ymax, is_crowd, category_ids, category_names, area, masks = ([] for _ in range(9))
    skipped = 0
    for a in annotations:
        x, y, w, h = tuple(a["bbox"])
        if w <= 0 or h <= 0 or x + w > width or y + h > height:
            skipped += 1
            continue
        xmin.append(float(x) / width)
        xmax.append(float(x + w) / width)
        ymin.append(float(y) / height)
        ymax.append(float(y + h) / height)
        is_crowd.append(a["iscrowd"])
        category_ids.append(int(a["category_id"]))
        category_names.append(category_index[int(a["category_id"])]["name"].encode("utf8"))
        area.append(a["area"])
        if include_masks:
            from pycocotools import mask
            rle = mask.frPyObjects(a["segmentation"], height, width)
            binary = mask.decode(rle)
            if not a["iscrowd"]:
                binary = np.amax(binary, axis=2)
            out = io.BytesIO()
            PIL.Image.fromarray(binary).save(out, format="PNG")
            masks.append(out.getvalue())
    feature = {
        "image/height": int64_list([height]), "image/width": int64_list([width]),
        "image/filename": bytes_list([filename.encode("utf8")]),
        "image/source_id": bytes_list([str(image_id).encode("utf8")]),
        "image/key/sha256": bytes_list([key.encode("utf8")]), "image/encoded": bytes_list([encoded_jpg]),
        "image/format": bytes_list([b"jpeg"]),
        "image/object/bbox/xmin": float_list(xmin), "image/object/bbox/xmax": float_list(xmax),
        "image/object/bbox/ymin": float_list(ymin), "image/object/bbox/ymax": float_list(ymax),
        "image/object/class/text": bytes_list(category_names), "image/object/class/label": int64_list(category_ids),
        "image/object/is_crowd": int64_list(is_crowd), "image/object/area": float_list(area),
    }
    if include_masks:
        feature["image/object/mask"] = bytes_list(masks)
    return tf.train.Example(features=tf.train.Features(feature=feature)), len(encoded_jpg), skipped


def convert(annotations_file: str, image_dir: str, output: str, shards: int, include_masks: bool) -> dict:
    import tensorflow as tf
    with tf.io.gfile.GFile(annotations_file, "r") as fid:
        data = json.load(fid)
    category_index = {c["id"]: c for c in data["categories"]}
    index: dict = {}
    for a in data.get("annotations", []):
        index.setdefault(a["image_id"], []).append(a)
    os.makedirs(output, exist_ok=True)
    writers = [tf.io.TFRecordWriter(os.path.join(output, f"coco_train.record-{i:05d}-of-{shards:05d}"))
               for i in range(shards)]
    total = skipped = 0
    try:
        for idx, image in enumerate(data["images"]):
            example, n, k = create_tf_example(image, index.get(image["id"], []), image_dir, category_index,
                                              include_masks)
            writers[idx % shards].write(example.SerializeToString())
            total += n
            skipped += k
    finally:
        for w in writers:
            w.close()
    return {"images": len(data["images"]), "bytes": total, "boxes_skipped": skipped}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--annotations", required=True)
    ap.add_argument("--image_dir", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--masks", action="store_true")
    a = ap.parse_args(argv)
    print(json.dumps(convert(a.annotations, a.image_dir, a.output, a.shards, a.masks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
