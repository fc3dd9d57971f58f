"""--output_format array_record: the same Examples as the TFRecord shards, in
ArrayRecord files that Grain (ArrayRecordDataSource, random access by index)
and TFDS (as_data_source) read; verified, inspected, byte-identical whatever
the worker count, and written to a bucket through a local temp file."""
import os
import random

import pytest

from conftest import convert, image_bytes, make_tree, manifest, read_examples, scalar, write
from gcs_emulator import BUCKET, download_prefix, gcs  # noqa: F401 (fixture)

ARGS = ["--split", "train=0.7,validation=0.3", "--num_shards", "train=3,validation=2", "--seed", "7"]


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The same tree and options converted to TFRecord and to ArrayRecord."""
    tmp = tmp_path_factory.mktemp("ar")
    root = str(tmp / "imgs")
    labels = make_tree(root, classes=("cat", "dog", "bird", "emu"), per_class=6)
    write(os.path.join(root, "emu", "gray.png"), image_bytes(9, 7, fmt="PNG", mode="L", seed=9))
    labels["emu/gray.png"] = "emu"
    write(os.path.join(root, "cat", "broken.jpg"), image_bytes()[:100])  # rejected in both
    tf_out, ar_out = str(tmp / "tfrecord"), str(tmp / "array_record")
    assert convert("--input", root, "--output", tf_out, *ARGS) == 0
    assert convert("--input", root, "--output", ar_out, *ARGS, "--output_format", "array_record") == 0
    return root, labels, tf_out, ar_out


def _tfrecords(out: str, split: str) -> list:
    """The split's serialized Examples in shard order, read by tf.data."""
    import tensorflow as tf
    m = manifest(out)
    files = [os.path.join(out, s["name"]) for s in m["splits"][split]["shards"]]
    return [r.numpy() for r in tf.data.TFRecordDataset(files)]


def _shards(out: str, split: str) -> list:
    return [os.path.join(out, s["name"]) for s in manifest(out)["splits"][split]["shards"]]


def test_manifest_and_files_say_array_record(both):
    _, _, tf_out, ar_out = both
    mt, ma = manifest(tf_out), manifest(ar_out)
    assert ma["output_format"] == "array_record" and mt["output_format"] == "tfrecord"
    assert ma["counts"] == mt["counts"] and ma["counts"]["rejected"] == 1
    for split, s in ma["splits"].items():
        assert [e["name"] for e in s["shards"]] == [
            e["name"].replace(".tfrecord", ".array_record") for e in mt["splits"][split]["shards"]]
        assert [e["records"] for e in s["shards"]] == [e["records"] for e in mt["splits"][split]["shards"]]
        assert s["label_counts"] == mt["splits"][split]["label_counts"]
    names = sorted(n for n in os.listdir(ar_out) if "-of-" in n)
    assert names and all(n.endswith(".array_record") for n in names)


def test_grain_random_access_gives_the_tfrecord_records(both):
    """Record i of Grain's ArrayRecordDataSource over the split's shards is
    byte for byte TFRecord record i, read in a random order."""
    import grain
    _, _, tf_out, ar_out = both
    for split in manifest(ar_out)["splits"]:
        want = _tfrecords(tf_out, split)
        source = grain.sources.ArrayRecordDataSource(_shards(ar_out, split))
        assert len(source) == len(want) > 0
        order = list(range(len(want)))
        random.Random(split).shuffle(order)
        for i in order:
            assert source[i] == want[i], (split, i)
        # and per shard: record j of shard k is record j of TFRecord shard k
        for ar, tr in zip(_shards(ar_out, split), _shards(tf_out, split)):
            one = grain.sources.ArrayRecordDataSource([ar])
            import tensorflow as tf
            assert [one[j] for j in range(len(one))] == [r.numpy() for r in tf.data.TFRecordDataset(tr)]


def test_a_grain_global_shuffle_yields_every_example_once_with_its_label(both):
    """A Grain pipeline as a training job would write it: a global shuffle
    over the random-access source, Examples parsed; every source image once,
    with its class."""
    import grain
    import tensorflow as tf
    _, labels, _, ar_out = both
    m = manifest(ar_out)
    classes = m["label_map"]["classes"]
    seen = {}
    for split in m["splits"]:
        ds = (grain.MapDataset.source(grain.sources.ArrayRecordDataSource(_shards(ar_out, split)))
              .shuffle(seed=3)
              .map(lambda b: tf.train.Example.FromString(b).features.feature))
        for f in ds:
            rel = f["image/filename"].bytes_list.value[0].decode()
            assert rel not in seen
            seen[rel] = f["image/class/label"].int64_list.value[0]
    assert seen == {rel: classes[c] for rel, c in labels.items()}


def test_verify_passes_and_finds_damage(both, tmp_path, capsys):
    import shutil

    from tfrecord_pipelines.commands.verify import main
    from tfrecord_pipelines.outputs.verification import verify_output
    _, _, _, ar_out = both
    report = verify_output(ar_out, decode=True)
    assert report.ok, report.errors
    assert report.records == manifest(ar_out)["counts"]["written"]
    bad = str(tmp_path / "bad")
    shutil.copytree(ar_out, bad)
    shard = _shards(bad, "train")[0]
    data = bytearray(open(shard, "rb").read())
    data[100] ^= 0xFF  # inside the first record's chunk
    open(shard, "wb").write(bytes(data))
    assert main([bad, "--quiet"]) == 1
    err = capsys.readouterr().err
    name = os.path.basename(shard)
    assert f"{name}: crc32c" in err
    assert f"ERROR {name}: record 0" in err or f"ERROR {name}: not a readable ArrayRecord file" in err
    open(shard, "wb").write(bytes(data[:len(data) // 2]))  # cut: the footer is gone
    assert main([bad, "--quiet"]) == 1
    assert f"ERROR {name}: not a readable ArrayRecord file" in capsys.readouterr().err


def test_inspect_reads_array_record(both, capsys):
    from tfrecord_pipelines.commands.inspect import main
    ar_out = both[3]
    assert main([ar_out, "--split", "train", "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("-- record") == 2
    first = manifest(ar_out)
    import grain
    import tensorflow as tf
    rec0 = tf.train.Example.FromString(grain.sources.ArrayRecordDataSource(_shards(ar_out, "train"))[0])
    assert repr(rec0.features.feature["image/filename"].bytes_list.value[0].decode()) in out
    assert first["splits"]["train"]["records"] > 2


def test_tfds_as_data_source_reads_it(both):
    """TFDS metadata says array_record; tfds.builder_from_directory(OUT).as_data_source
    gives every record, decoded, equal to the TFRecord output's records."""
    import numpy as np
    import tensorflow_datasets as tfds
    from PIL import Image
    root, labels, tf_out, ar_out = both
    import json
    info = json.load(open(os.path.join(ar_out, "dataset_info.json")))
    assert info["fileFormat"] == "array_record"
    b = tfds.builder_from_directory(ar_out)
    names = b.info.features["image/class/label"].names
    for split in manifest(ar_out)["splits"]:
        source = b.as_data_source(split=split)
        rows = read_examples(tf_out, split)
        assert len(source) == len(rows)
        for i in random.Random(1).sample(range(len(rows)), len(rows)):
            ex = source[i]
            rel = ex["image/filename"].decode()
            assert rel == scalar(rows[i], "image/filename")
            assert names[ex["image/class/label"]] == labels[rel]
            # TFDS's data source decodes with PIL (without OpenCV), not TensorFlow
            with Image.open(os.path.join(root, rel)) as im:
                want = np.asarray(im.convert("RGB"))
            assert np.array_equal(ex["image/encoded"], want), rel


def test_same_bytes_with_one_and_two_workers(tmp_path):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=8)
    got = {}
    for workers in ("1", "2"):
        out = str(tmp_path / f"w{workers}")
        mode = (["--direct_running_mode", "in_memory"] if workers == "1" else
                ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"])
        assert convert("--input", root, "--output", out, *ARGS, "--output_format", "array_record", *mode,
                       in_memory=False) == 0
        got[workers] = {os.path.basename(p): open(p, "rb").read()
                        for s in manifest(out)["splits"] for p in _shards(out, s)}
    assert len(got["1"]) == 5
    assert got["1"] == got["2"]


@pytest.mark.parametrize("flag", [["--compression", "gzip"], ["--index_files"]])
def test_flags_that_make_no_sense_are_refused(tmp_path, capsys, flag):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=1)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--output_format", "array_record", *flag,
                   in_memory=False) == 2
    err = capsys.readouterr().err
    assert f"{' '.join(flag)} cannot be used with --output_format array_record" in err
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def test_gcs_round_trip(gcs, both, tmp_path):  # noqa: F811 (fixture)
    """Written to a bucket (a local temp file uploaded), verified there, and the
    same bytes as the local output."""
    from tfrecord_pipelines.outputs.verification import verify_output
    root, _, _, ar_out = both
    prefix = "ar/out"
    assert convert("--input", root, "--output", f"gs://{BUCKET}/{prefix}", *ARGS,
                   "--output_format", "array_record") == 0
    report = verify_output(f"gs://{BUCKET}/{prefix}")
    assert report.ok, report.errors
    local = str(tmp_path / "down")
    names = download_prefix(prefix, local)
    shards = [n for n in names if n.endswith(".array_record")]
    assert len(shards) == 5
    for n in shards:
        assert open(os.path.join(local, n), "rb").read() == open(os.path.join(ar_out, n), "rb").read(), n
