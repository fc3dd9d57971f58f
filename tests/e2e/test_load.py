"""tfrecord_pipelines.load(): an output as a tf.data.Dataset, parsed with its
own features from the manifest, held against the source files."""
from __future__ import annotations

import os

import numpy as np
import pytest

import tfrecord_pipelines as tfp
from conftest import convert, image_bytes, make_tree, manifest, write


def _decoded(root: str, rel: str, channels: int = 0):
    import tensorflow as tf
    with open(os.path.join(root, rel), "rb") as f:
        return tf.io.decode_image(f.read(), channels=channels, expand_animations=False).numpy()


@pytest.fixture(scope="module")
def output(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load")
    root = str(tmp / "imgs")
    labels = make_tree(root, per_class=4)
    write(os.path.join(root, "dog", "gray.png"), image_bytes(9, 7, fmt="PNG", mode="L", seed=3))
    labels["dog/gray.png"] = "dog"
    out = str(tmp / "out")
    assert convert("--input", root, "--output", out, "--num_shards", "3", "--split", "train=0.7,validation=0.3",
                   "--feature_keys", "image/encoded=jpeg,image/class/label=y") == 0
    return root, labels, out


def test_records_decode_to_their_source_images(output):
    root, labels, out = output
    m = manifest(out)
    names = {i: n for n, i in m["label_map"]["classes"].items()}
    seen = []
    for split in m["splits"]:
        for ex in tfp.load(out, split=split):
            rel = ex["image/filename"].numpy().decode()
            assert np.array_equal(ex["jpeg"].numpy(), _decoded(root, rel)), rel
            assert names[int(ex["y"])] == labels[rel] == ex["image/class/text"].numpy().decode()
            assert list(ex["jpeg"].shape) == [int(ex["image/height"]), int(ex["image/width"]),
                                              int(ex["image/channels"])]
            seen.append(rel)
    assert sorted(seen) == sorted(labels)


def test_supervised_pairs_undecoded_bytes_and_channels(output):
    root, labels, out = output
    m = manifest(out)
    names = {i: n for n, i in m["label_map"]["classes"].items()}
    pairs = list(tfp.load(out, split="train", as_supervised=True, channels=3))
    assert len(pairs) == m["splits"]["train"]["records"]
    by_image = {}
    for rel in labels:
        by_image.setdefault(_decoded(root, rel, 3).tobytes(), []).append(labels[rel])
    for image, label in pairs:
        assert image.shape[2] == 3 and image.dtype.name == "uint8"
        assert names[int(label)] in by_image[image.numpy().tobytes()]
    raw = {ex["image/filename"].numpy().decode(): ex["jpeg"].numpy()
           for ex in tfp.load(out, split="validation", decode=False)}
    for rel, data in raw.items():
        with open(os.path.join(root, rel), "rb") as f:
            assert data == f.read(), rel
    # the shards' own order, whatever the interleave
    order = [ex["image/filename"].numpy() for ex in tfp.load(out, split="train", decode=False)]
    assert order == [ex["image/filename"].numpy() for ex in tfp.load(out, split="train", decode=False)]


def test_batches_of_images_made_alike(output):
    import tensorflow as tf
    _, _, out = output
    ds = tfp.load(out, split="train", as_supervised=True, channels=3, shuffle_files=True)
    ds = ds.map(lambda image, label: (tf.image.resize(image, [8, 8]), label)).batch(4)
    images, labels = next(iter(ds))
    assert images.shape == (4, 8, 8, 3) and labels.shape == (4,)


def test_a_versioned_root_reads_latest_and_table_columns_and_targets(tmp_path):
    root = str(tmp_path / "faces")
    rows = []
    for i in range(4):
        write(os.path.join(root, f"f{i}.jpg"), image_bytes(10 + i, 9, seed=i))
        rows.append(f"f{i}.jpg,{0.5 + i},{'' if i == 1 else 'note' + str(i)}\n")
    table = tmp_path / "t.csv"
    table.write_text("file,target,note\n" + "".join(rows))
    out = str(tmp_path / "ds")
    assert convert("--label_table", table, "--image_root", root, "--output", out, "--versioned", "--version",
                   "v1") == 0
    got = {}
    for ex in tfp.load(out):
        rel = ex["image/filename"].numpy().decode()
        got[rel] = (float(ex["image/target"]), [v.decode() for v in tf_values(ex["note"])])
    assert got == {f"f{i}.jpg": (pytest.approx(0.5 + i), [] if i == 1 else [f"note{i}"]) for i in range(4)}
    targets = sorted(float(t) for _, t in tfp.load(out, as_supervised=True))
    assert targets == pytest.approx([0.5, 1.5, 2.5, 3.5])


def tf_values(sparse):
    return sparse.values.numpy().tolist()


def test_what_cannot_be_loaded_says_why(output, tmp_path):
    _, _, out = output
    with pytest.raises(tfp.UsageError, match="split 'test' is not in .*: its splits are train, validation"):
        tfp.load(out, split="test")
    with pytest.raises(tfp.OutputError, match="no manifest.json"):
        tfp.load(str(tmp_path))
    with pytest.raises(tfp.UsageError, match="channels=2"):
        tfp.load(out, channels=2)
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=1)
    unlabelled = str(tmp_path / "u")
    assert convert("--input", root, "--output", unlabelled, "--label_from", "none") == 0
    with pytest.raises(tfp.UsageError, match="as_supervised=True: .* has no labels"):
        tfp.load(unlabelled, as_supervised=True)
    assert len(list(tfp.load(unlabelled))) == 3
