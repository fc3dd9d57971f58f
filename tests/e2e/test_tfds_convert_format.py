"""TFDS's own tools work on our output: `tfds convert_format` turns our TFRecord
shards into ArrayRecord (in place, beside them, as its --dataset_version_dir
without --out_dir does), and TFDS then reads them with as_data_source: record
i is our TFRecord record i, byte for byte the record our own
--output_format array_record writes.

The `tfds` command itself imports mlcroissant (for `tfds croissant`), which is
not a dependency here; the test calls the function its convert_format
command runs, tensorflow_datasets.scripts.cli.convert_format_utils.convert_dataset.
"""
import os
import shutil

import pytest

from conftest import convert, make_tree, manifest

ARGS = ["--split", "train=0.7,validation=0.3", "--num_shards", "train=2,validation=1", "--seed", "3"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tfds_convert")
    root = str(tmp / "imgs")
    labels = make_tree(root, classes=("ant", "bee", "cow"), per_class=6)
    out, ours = str(tmp / "out"), str(tmp / "ours")
    assert convert("--input", root, "--output", out, *ARGS) == 0
    assert convert("--input", root, "--output", ours, *ARGS, "--output_format", "array_record") == 0
    tfds_dir = str(tmp / "tfds")
    shutil.copytree(out, tfds_dir)
    from etils import epath
    from tensorflow_datasets.scripts.cli import convert_format_utils
    convert_format_utils.convert_dataset(out_dir=None, out_file_format="array_record",
                                         dataset_version_dir=[epath.Path(tfds_dir)], num_workers=1)
    return labels, out, ours, tfds_dir


def _records(files: list) -> list:
    import tensorflow as tf
    return [r.numpy() for r in tf.data.TFRecordDataset(files)]


def test_convert_format_output_reads_as_a_data_source(converted):
    import tensorflow_datasets as tfds
    labels, out, _, tfds_dir = converted
    m = manifest(out)
    b = tfds.builder_from_directory(tfds_dir)
    names = b.info.features["image/class/label"].names
    import tensorflow as tf
    for split, s in m["splits"].items():
        source = b.as_data_source(split=split)
        ours = _records([os.path.join(out, e["name"]) for e in s["shards"]])
        assert len(source) == len(ours) == s["records"]
        for i, raw in enumerate(ours):
            ex = source[i]
            want = tf.train.Example.FromString(raw).features.feature
            rel = ex["image/filename"].decode()
            assert rel == want["image/filename"].bytes_list.value[0].decode()
            assert names[ex["image/class/label"]] == labels[rel]


def test_converted_shards_hold_our_records_as_our_array_record_output_does(converted):
    import grain
    _, out, ours, tfds_dir = converted
    m = manifest(out)
    for split, s in m["splits"].items():
        tfrecords = _records([os.path.join(out, e["name"]) for e in s["shards"]])
        converted_files = [os.path.join(tfds_dir, e["name"].replace(".tfrecord", ".array_record"))
                           for e in s["shards"]]
        ours_files = [os.path.join(ours, e["name"]) for e in manifest(ours)["splits"][split]["shards"]]
        theirs, mine = (grain.sources.ArrayRecordDataSource(converted_files),
                        grain.sources.ArrayRecordDataSource(ours_files))
        assert [theirs[i] for i in range(len(theirs))] == tfrecords == [mine[i] for i in range(len(mine))]
