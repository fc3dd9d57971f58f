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
