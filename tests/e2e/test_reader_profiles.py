"""--for NAME: each widely used reader's conventions, applied as its public code
applies them (its file pattern, feature spec, label arithmetic and decoder,
written here in our own words), read our output made with `--for NAME` and no
further flag, and get every record with its right label.

The inputs mix what breaks those readers without the profile: a PNG (JPEG-only
decoders), a CMYK JPEG (4 channels in PIL), class folders named by numbers
(Keras sorts them as strings)."""
import io
import json
import os
import subprocess
import sys

import pytest
from PIL import Image

from conftest import convert, image_bytes, manifest, write

CLASSES = ("bird", "cat", "dog")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """root/<class>/... with JPEGs, a PNG and a CMYK JPEG: {relative path: class}."""
    root = str(tmp_path_factory.mktemp("readers") / "imgs")
    labels = {}
    for c, name in enumerate(CLASSES):
        for k in range(4):
            rel = f"{name}/{k}.jpg"
            write(os.path.join(root, rel), image_bytes(20 + k, 14 + c, seed=10 * c + k))
            labels[rel] = name
    write(os.path.join(root, "cat/drawing.png"), image_bytes(18, 12, fmt="PNG", seed=99))
    write(os.path.join(root, "dog/print.jpg"), image_bytes(19, 13, mode="CMYK", seed=98))
    labels.update({"cat/drawing.png": "cat", "dog/print.jpg": "dog"})
    return root, labels


def _made(tree, tmp_path, name: str, capsys) -> str:
    root, _ = tree
    out = str(tmp_path / name)
    capsys.readouterr()
    assert convert("--input", root, "--output", out, "--for", name) == 0
    said = capsys.readouterr().out
    assert f"for {name}: " in said, said  # the flags it set, in the summary
    return out


def _tf_records(pattern: str, spec: dict) -> list:
    import tensorflow as tf
    files = tf.data.Dataset.list_files(pattern, shuffle=False)
    ds = tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, spec))
    return list(ds.as_numpy_iterator())


@pytest.mark.parametrize("name", ["tpu-resnet", "tpu-efficientnet"])
def test_tensorflow_tpu_imagenet_input(tree, tmp_path, capsys, name):
    """tensorflow/tpu's imagenet_input.py: the files `train-*` of the data dir,
    keys image/encoded and image/class/label (default -1), the JPEG decoded by
    decode_and_crop_jpeg (here: the whole image as crop window), the label
    minus 1 (class 0 is the background), then one-hot over the classes."""
    import tensorflow as tf
    _, labels = tree
    out = _made(tree, tmp_path, name, capsys)
    spec = {"image/encoded": tf.io.FixedLenFeature((), tf.string, ""),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64, -1),
            "image/filename": tf.io.FixedLenFeature((), tf.string, "")}
    rows = _tf_records(os.path.join(out, "train-*"), spec)
    assert len(rows) == len(labels)
    got = {}
    for r in rows:
        shape = tf.io.extract_jpeg_shape(r["image/encoded"])
        image = tf.image.decode_and_crop_jpeg(r["image/encoded"], [0, 0, shape[0], shape[1]], channels=3)
        assert image.shape[2] == 3
        label = int(r["image/class/label"]) - 1
        one_hot = tf.one_hot(label, len(CLASSES)).numpy()
        assert one_hot.sum() == 1  # an all-zero row is a label the reader lost
        got[r["image/filename"].decode()] = label
    assert got == {rel: CLASSES.index(c) for rel, c in labels.items()}
    assert manifest(out)["splits"]["train"]["num_shards"] % 8 == 0


def test_model_garden_classification_decoder(tree, tmp_path, capsys):
    """TF Model Garden's classification input: image/encoded and
    image/class/label, decode_jpeg_only=True (tf.io.decode_jpeg, 3 channels),
    labels as written."""
    import tensorflow as tf
    _, labels = tree
    out = _made(tree, tmp_path, "model-garden", capsys)
    spec = {"image/encoded": tf.io.FixedLenFeature((), tf.string, ""),
            "image/class/label": tf.io.FixedLenFeature((), tf.int64, -1),
            "image/filename": tf.io.FixedLenFeature((), tf.string, "")}
    got = {}
    for r in _tf_records(os.path.join(out, "train*"), spec):
        assert tf.io.decode_jpeg(r["image/encoded"], channels=3).shape[2] == 3
        got[r["image/filename"].decode()] = int(r["image/class/label"])
    assert got == {rel: CLASSES.index(c) for rel, c in labels.items()}


def test_keras_class_order(tmp_path, capsys):
    """keras.utils.image_dataset_from_directory on the folder itself numbers
    the classes in string order (all-number names too: "10" before "9"); our
    records carry the same number for every file."""
    import keras
    import tensorflow as tf
    root = str(tmp_path / "digits")
    for c, name in enumerate(("9", "10", "2", "33")):
        for k in range(2):
            write(os.path.join(root, name, f"{k}.jpg"), image_bytes(16 + k, 12, seed=10 * c + k))
    ds = keras.utils.image_dataset_from_directory(root, shuffle=False, batch_size=None, image_size=(12, 16))
    theirs = {os.path.relpath(p, root): int(y) for p, (_, y) in zip(ds.file_paths, ds.as_numpy_iterator())}
    assert ds.class_names == ["10", "2", "33", "9"]
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--for", "keras") == 0
    spec = {"image/class/label": tf.io.FixedLenFeature((), tf.int64),
            "image/filename": tf.io.FixedLenFeature((), tf.string)}
    ours = {r["image/filename"].decode(): int(r["image/class/label"])
            for r in _tf_records(os.path.join(out, "train-*"), spec)}
    assert ours == theirs


# The PyTorch `tfrecord` package in a process of its own (its Example protos clash with TensorFlow's), each
# shard split across two DataLoader-like workers by its index (the layout docs/reading.md gives:
# OUT/index/<shard>.idx); the image decoded as a PIL user does, without convert.
TORCH_READER = """
import glob, io, json, os, sys
from PIL import Image
from tfrecord.reader import tfrecord_loader
out = sys.argv[1]
description = {"image/encoded": "byte", "image/class/label": "int", "image/filename": "byte"}
for path in sorted(glob.glob(os.path.join(out, "train-*"))):
    index = os.path.join(out, "index", os.path.basename(path) + ".idx")
    for worker in (0, 1):
        for r in tfrecord_loader(path, index, description, shard=(worker, 2)):
            im = Image.open(io.BytesIO(bytes(r["image/encoded"])))
            print(json.dumps([bytes(r["image/filename"]).decode(), int(r["image/class/label"][0]), im.format,
                              len(im.getbands())]))
"""


def test_pytorch_tfrecord_package(tree, tmp_path, capsys):
    _, labels = tree
    out = _made(tree, tmp_path, "pytorch", capsys)
    got = subprocess.run([sys.executable, "-c", TORCH_READER, out], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    rows = [json.loads(line) for line in got.stdout.splitlines()]
    assert sorted(r[0] for r in rows) == sorted(labels)  # every record once
    assert {r[0]: r[1] for r in rows} == {rel: CLASSES.index(c) for rel, c in labels.items()}
    assert {(r[2], r[3]) for r in rows} == {("JPEG", 3)}  # RGB JPEG everywhere


def test_dali_tfrecord_reader(tree, tmp_path, capsys):
    """DALI's fn.readers.tfrecord(path=shards, index_path=indexes): each record
    read at the offset and length its index line gives (DALI seeks so, and
    checks nothing else), then parsed; its image decoder is given JPEG bytes."""
    import tensorflow as tf
    _, labels = tree
    out = _made(tree, tmp_path, "dali", capsys)
    spec = {"image/encoded": tf.io.FixedLenFeature((), tf.string),
            "image/class/label": tf.io.FixedLenFeature((), tf.int64),
            "image/filename": tf.io.FixedLenFeature((), tf.string)}
    got = {}
    for e in manifest(out)["splits"]["train"]["shards"]:
        with open(os.path.join(out, e["name"]), "rb") as f:
            shard = f.read()
        with open(os.path.join(out, "index", e["name"] + ".idx")) as f:
            for line in f:
                offset, length = map(int, line.split())
                framed = shard[offset:offset + length]
                payload = framed[12:-4]  # length, its CRC, the Example, its CRC
                assert int.from_bytes(framed[:8], "little") == len(payload)
                r = tf.io.parse_single_example(payload, spec)
                assert Image.open(io.BytesIO(r["image/encoded"].numpy())).format == "JPEG"
                got[r["image/filename"].numpy().decode()] = int(r["image/class/label"])
    assert got == {rel: CLASSES.index(c) for rel, c in labels.items()}


def test_a_flag_given_wins_over_the_profile(tree, tmp_path, capsys):
    root, labels = tree
    out = str(tmp_path / "mine")
    assert convert("--input", root, "--output", out, "--for", "tpu-resnet", "--label_offset", "5",
                   "--output_formats", "jpeg,png") == 0
    said = capsys.readouterr().out
    assert "for tpu-resnet: --reencode jpeg --shard_multiple 8 --shard_counts tpu (a flag you give wins)" in said, said
    m = manifest(out)
    assert m["label_map"]["offset"] == 5 and m["label_map"]["classes"]["bird"] == 5
    assert m["options"]["images"]["output_formats"] == ["jpeg", "png"]


@pytest.mark.parametrize("name", ["tpu-resnet", "pytorch"])
def test_spec_says_how_the_reader_reads_it(tree, tmp_path, capsys, name):
    """`tfrecords spec` of an output made --for NAME: the reader's notes, and code that still runs."""
    out = _made(tree, tmp_path, name, capsys)
    got = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.cli", "spec", out], capture_output=True,
                         text=True)
    assert got.returncode == 0, got.stderr
    assert f"# Made --for {name}: " in got.stdout
    code = got.stdout.split("# ---- PyTorch:")[0]
    compile(code, "spec.py", "exec")
    if name == "pytorch":
        assert "worker_records" in got.stdout and "OUT + '/' + s['index']" in got.stdout


def test_tfds_load_by_name(tree, tmp_path, capsys):
    """tfds.load(NAME, data_dir=D) finds --output D/NAME made --for tfds (versions
    1.0.0, then 1.0.1: TFDS reads the newest), every record with its label."""
    import tensorflow_datasets as tfds
    root, labels = tree
    data_dir = str(tmp_path / "tfds")
    out = os.path.join(data_dir, "pets")
    assert convert("--input", root, "--output", out, "--for", "tfds") == 0
    assert "for tfds: --versioned --version 1.0.0 (a flag you give wins)" in capsys.readouterr().out
    def loaded():
        ds = tfds.load("pets", data_dir=data_dir, split="train")
        return {ex["image/filename"].numpy().decode(): int(ex["image/class/label"]) for ex in ds}
    assert loaded() == {rel: CLASSES.index(c) for rel, c in labels.items()}
    extra = str(tmp_path / "more")
    import shutil
    shutil.copytree(root, extra)
    write(os.path.join(extra, "bird", "new.jpg"), image_bytes(21, 15, seed=77))
    assert convert("--input", extra, "--output", out, "--for", "tfds") == 0
    assert sorted(os.listdir(out)) == ["1.0.0", "1.0.1", "LATEST"]
    assert loaded() == {**{rel: CLASSES.index(c) for rel, c in labels.items()}, "bird/new.jpg": 0}
