"""The feature table (transforms/core/features.py) is what the shards hold:
its newest row, `image/source_format`, the input file's format before any
re-encoding, read back with TensorFlow beside `image/format`, and in the
manifest's schema, schema.pbtxt and the renamed keys like every other row."""
from __future__ import annotations

import os

from conftest import convert, image_bytes, manifest, read_examples, write
from tfrecord_pipelines.transforms.core.features import DEFAULT_KEYS, FEATURES


def test_source_format_is_the_format_before_reencoding(tmp_path):
    root = str(tmp_path / "images")
    write(os.path.join(root, "a", "photo.jpg"), image_bytes(seed=1))
    write(os.path.join(root, "a", "drawing.gif"), image_bytes(seed=2, fmt="GIF", mode="P"))
    write(os.path.join(root, "b", "scan.png"), image_bytes(seed=3, fmt="PNG"))
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--reencode", "jpeg",
                   "--feature_keys", "image/source_format=orig_fmt") == 0
    got = {r["image/filename"][0].decode(): (r["orig_fmt"][0].decode(), r["image/format"][0].decode())
           for r in read_examples(out, "train")}
    assert got == {"a/photo.jpg": ("jpeg", "jpeg"), "a/drawing.gif": ("gif", "jpeg"), "b/scan.png": ("png", "png")}
    m = manifest(out)
    assert m["features"]["orig_fmt"] == "bytes" and m["feature_roles"]["source_format"] == "orig_fmt"
    assert 'name: "orig_fmt"' in open(os.path.join(out, "schema.pbtxt")).read()


def test_every_row_has_a_unique_role_and_key():
    assert len({f.role for f in FEATURES}) == len(FEATURES) == len({f.key for f in FEATURES})
    assert DEFAULT_KEYS["source_format"] == "image/source_format"


def test_a_rename_counts_only_the_keys_the_run_writes(tmp_path, capsys):
    """A classification run writes no image/source_id (a detection key), so the
    label may take that name, as tutorials that read `image/source_id` want; a
    rename onto a key the run does write is refused with how to free it."""
    import tensorflow as tf
    root = str(tmp_path / "images")
    labels = {f"{c}/{k}.jpg": c for c in ("cat", "dog") for k in range(3)}
    for i, rel in enumerate(labels):
        write(os.path.join(root, rel), image_bytes(seed=i))
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--feature_keys", "image/class/label=image/source_id") == 0
    classes = manifest(out)["label_map"]["classes"]
    files = [os.path.join(out, s["name"]) for s in manifest(out)["splits"]["train"]["shards"]]
    spec = {"image/source_id": tf.io.FixedLenFeature([], tf.int64),
            "image/filename": tf.io.FixedLenFeature([], tf.string)}
    got = {r["image/filename"].numpy().decode(): int(r["image/source_id"])
           for r in tf.data.TFRecordDataset(files).map(lambda x: tf.io.parse_single_example(x, spec))}
    assert got == {rel: classes[c] for rel, c in labels.items()}
    capsys.readouterr()
    assert convert("--input", root, "--output", str(tmp_path / "no"), "--feature_keys",
                   "image/class/label=image/filename", in_memory=False) == 2
    err = capsys.readouterr().err
    assert "'image/class/label' and 'image/filename' would both be written as 'image/filename'" in err
    assert "add image/filename= to leave 'image/filename' out, or image/filename=NEW to rename it" in err
    assert convert("--input", root, "--output", str(tmp_path / "freed"), "--feature_keys",
                   "image/class/label=image/filename,image/filename=path") == 0
