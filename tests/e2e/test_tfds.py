"""Every output holds TFDS's metadata: tfds.builder_from_directory(OUT) loads it
with class names, split counts and decoded images that match the source; the
files are what TFDS's own writer (tfds.folder_dataset.write_metadata) writes
for the same dataset; outputs TFDS cannot read say why and hold none."""
import json
import os
import shutil

import pytest

from conftest import convert, image_bytes, make_tree, manifest, write


def _builder(out: str):
    import tensorflow_datasets as tfds
    return tfds.builder_from_directory(out)


def _source_image(root: str, rel: str):
    import tensorflow as tf
    with open(os.path.join(root, rel), "rb") as f:
        return tf.io.decode_image(f.read(), channels=3, expand_animations=False).numpy()


def _get(example: dict, key: str):
    """A feature by its Example key: TFDS's features are the keys, flat."""
    return example[key]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tfds")
    root = str(tmp / "imgs")
    labels = make_tree(root, classes=("cat", "dog", "bird", "emu"), per_class=5)
    write(os.path.join(root, "emu", "gray.png"), image_bytes(9, 7, fmt="PNG", mode="L", seed=9))
    labels["emu/gray.png"] = "emu"
    out = str(tmp / "out")
    assert convert("--input", root, "--output", out, "--split", "train=0.7,validation=0.3", "--num_shards", "2") == 0
    return root, labels, out


def _check_loads(out: str, root: str, labels: dict, image_key: str, label_key: str, filename_key: str) -> None:
    import numpy as np
    m = manifest(out)
    b = _builder(out)
    names = sorted(set(labels.values()))
    assert _get(b.info.features, label_key).names == names
    assert {s: b.info.splits[s].num_examples for s in b.info.splits} == {
        s: v["records"] for s, v in m["splits"].items()}
    assert {s: b.info.splits[s].num_bytes for s in b.info.splits} == {s: v["bytes"] for s, v in m["splits"].items()}
    seen = []
    for split in m["splits"]:
        for ex in b.as_dataset(split=split):
            rel = _get(ex, filename_key).numpy().decode()
            seen.append(rel)
            assert np.array_equal(_get(ex, image_key).numpy(), _source_image(root, rel)), rel
            label = int(_get(ex, label_key))
            assert names[label] == labels[rel] and _get(b.info.features, label_key).int2str(label) == labels[rel]
    assert sorted(seen) == sorted(labels)  # every record once


def test_builder_from_directory_loads_the_output(converted):
    root, labels, out = converted
    assert manifest(out)["tfds"]["metadata"] == ["dataset_info.json", "features.json", "image.class.label.labels.txt"]
    _check_loads(out, root, labels, "image/encoded", "image/class/label", "image/filename")


def test_the_metadata_is_what_tfds_own_writer_writes(converted, tmp_path):
    """Our JSON, fed to tfds.folder_dataset.write_metadata as features and
    split infos, is written back unchanged: the same format TFDS writes."""
    import tensorflow_datasets as tfds
    _, _, out = converted
    theirs = str(tmp_path / "theirs")
    os.mkdir(theirs)
    m = manifest(out)
    for s in m["splits"].values():
        for e in s["shards"]:
            shutil.copy(os.path.join(out, e["name"]), theirs)
    # the connectors, class names (from the labels file) included, as TFDS reads them
    features = tfds.features.FeatureConnector.from_config(out)
    with open(os.path.join(out, "dataset_info.json")) as f:
        ours = json.load(f)
    template = tfds.core.ShardedFileTemplate(data_dir=tfds.core.Path(theirs),
                                             template=ours["splits"][0]["filepathTemplate"],
                                             filetype_suffix="tfrecord")
    split_infos = [tfds.core.SplitInfo(name=s["name"], shard_lengths=[int(n) for n in s["shardLengths"]],
                                       num_bytes=int(s["numBytes"]), filename_template=template)
                   for s in ours["splits"]]
    tfds.folder_dataset.write_metadata(data_dir=theirs, features=features, split_infos=split_infos,
                                       filename_template=template, description=ours["description"], check_data=True,
                                       supervised_keys=("image/encoded", "image/class/label"))
    for name in ("dataset_info.json", "features.json"):
        with open(os.path.join(out, name)) as a, open(os.path.join(theirs, name)) as b:
            assert json.load(a) == json.load(b), name
    with open(os.path.join(out, "image.class.label.labels.txt"), "rb") as a, \
            open(os.path.join(theirs, "image.class.label.labels.txt"), "rb") as b:
        assert a.read() == b.read()


def test_as_supervised_gives_image_and_label(converted):
    """tfds.builder_from_directory(OUT).as_dataset(as_supervised=True): (decoded
    image, class id) pairs, as for a TFDS catalogue dataset."""
    import numpy as np
    import tensorflow_datasets as tfds
    root, labels, out = converted
    b = tfds.builder_from_directory(out)
    assert b.info.supervised_keys == ("image/encoded", "image/class/label")
    names = b.info.features["image/class/label"].names
    images = {rel: _source_image(root, rel) for rel in labels}
    seen = 0
    for split in manifest(out)["splits"]:
        for image, label in b.as_dataset(split=split, as_supervised=True):
            match = [rel for rel, want in images.items() if want.shape == image.shape and np.array_equal(want, image)]
            assert match and labels[match[0]] == names[int(label)]
            seen += 1
    assert seen == len(labels)


def test_renamed_keys(converted, tmp_path):
    root, labels, _ = converted
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--num_shards", "2", "--feature_keys",
                   "image/encoded=img,image/class/label=label,image/filename=meta/path") == 0
    assert "label.labels.txt" in os.listdir(out)
    _check_loads(out, root, labels, "img", "label", "meta/path")


def test_float_targets_and_table_columns(tmp_path):
    import numpy as np
    root = str(tmp_path / "faces")
    targets = {}
    for i in range(5):
        rel = f"f{i}.jpg"
        write(os.path.join(root, rel), image_bytes(12 + i, 10, seed=i))
        targets[rel] = 0.25 + i
    table = tmp_path / "scores.csv"
    table.write_text("file,target,note\n" + "".join(f"{k},{v!r},{'' if i == 1 else 'n' + str(i)}\n"
                                                    for i, (k, v) in enumerate(targets.items())))
    out = str(tmp_path / "out")
    assert convert("--label_table", str(table), "--image_root", root, "--output", out, "--num_shards", "1") == 0
    assert not [n for n in os.listdir(out) if n.endswith(".labels.txt")]
    seen = {}
    for ex in _builder(out).as_dataset(split="train"):
        rel = ex["image/filename"].numpy().decode()
        seen[rel] = float(ex["image/target"])
        assert np.array_equal(ex["image/encoded"].numpy(), _source_image(root, rel))
        i = int(rel[1])
        assert [v.decode() for v in ex["note"].numpy()] == ([] if i == 1 else [f"n{i}"])
    assert seen == pytest.approx(targets)
    got = sorted(float(t) for _, t in _builder(out).as_dataset(split="train", as_supervised=True))
    assert got == pytest.approx(sorted(targets.values()))


@pytest.mark.parametrize("args, why", [
    (["--compression", "gzip"], "TFDS reads uncompressed TFRecord shards only (these are gzip)"),
    (["--feature_keys", "image/encoded="], "the image feature was dropped (--feature_keys)"),
])
def test_no_metadata_where_tfds_cannot_read_and_stale_files_go(converted, tmp_path, args, why):
    _, _, good = converted
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=2)
    out = str(tmp_path / "out")
    shutil.copytree(good, out)  # an earlier output with TFDS metadata
    assert convert("--input", root, "--output", out, "--overwrite", *args) == 0
    m = manifest(out)
    assert m["tfds"] == {"metadata": [], "why_not": why}
    assert not [n for n in os.listdir(out) if n in ("dataset_info.json", "features.json") or n.endswith(".labels.txt")]
