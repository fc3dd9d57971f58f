"""Shard names readers build by hand (--shard_suffix, --shard_template), the
TPU profiles' shard counts (--shard_counts tpu) and image/source_id on
classification records (--source_ids, --for model-garden).

Each reader's convention is applied as its public code applies it, written
here in our own words: EfficientNet's holdout_shards mode opens
train-%05d-of-01024 by name; TFDS names a split's files with its
ShardedFileTemplate; Model Garden's detection decoder requires image/source_id
(a FixedLenFeature string without a default) and its parsers turn it into an
int64. Every one gets every record with its right label, and our own readers
(verify, spec, inspect, load, report, index files, incremental versions)
follow the names the run chose."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import convert, files_of, image_bytes, manifest, settle, write

CLASSES = ("bird", "cat", "dog")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """root/<class>/<k>.jpg (numbered names repeated across classes): {relative path: class}."""
    root = str(tmp_path_factory.mktemp("names") / "imgs")
    labels = {}
    for c, name in enumerate(CLASSES):
        for k in range(5):
            rel = f"{name}/{k}.jpg"
            write(os.path.join(root, rel), image_bytes(20 + k, 14 + c, seed=10 * c + k))
            labels[rel] = name
    settle()
    return root, labels


def _records(files: list) -> dict:
    """{image/filename: image/class/label} of every record of `files`, read in that order."""
    import tensorflow as tf
    spec = {"image/class/label": tf.io.FixedLenFeature([], tf.int64, -1),
            "image/filename": tf.io.FixedLenFeature((), tf.string, "")}
    got = {}
    for r in tf.data.TFRecordDataset(tf.data.Dataset.from_tensor_slices(files)).as_numpy_iterator():
        ex = tf.io.parse_single_example(r, spec)
        name = ex["image/filename"].numpy().decode()
        assert name not in got, f"{name} read twice"
        got[name] = int(ex["image/class/label"])
    return got


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tfrecord_pipelines.cli", *args], capture_output=True, text=True)


def test_efficientnet_holdout_shards_open_every_shard_by_name(tree, tmp_path, capsys):
    """--for tpu-efficientnet: shards without a suffix. Its holdout_shards mode
    builds train-%05d-of-01024 for i in [holdout, 1024) (training) and
    [0, holdout) (evaluation); together they are every record once, and the
    label minus 1 is the class. (1024 train shards: what --shard_counts tpu
    gives a split of 1,000,000 images; given here for a small one.)"""
    root, labels = tree
    out = str(tmp_path / "effnet")
    assert convert("--input", root, "--output", out, "--for", "tpu-efficientnet", "--num_shards", "train=1024") == 0
    assert "--shard_suffix none" in capsys.readouterr().out
    holdout = 10
    training = [os.path.join(out, "train-%05d-of-01024" % i) for i in range(holdout, 1024)]
    evaluation = [os.path.join(out, "train-%05d-of-01024" % i) for i in range(0, holdout)]
    a, b = _records(training), _records(evaluation)
    assert not set(a) & set(b)
    assert {rel: label - 1 for rel, label in {**a, **b}.items()} == {r: CLASSES.index(c) for r, c in labels.items()}
    m = manifest(out)
    assert m["options"]["shards"]["names"]["suffix"] == "none" and m["splits"]["train"]["pattern"] == "train-*"
    import glob
    assert sorted(glob.glob(os.path.join(out, "train-*"))) == sorted(evaluation + training)  # and nothing else
    import tfrecord_pipelines as tfp
    assert tfp.verify(out).records == len(labels)


def test_tpu_profile_shard_count_of_a_small_split_is_a_multiple_of_8(tree, tmp_path):
    """--shard_counts tpu below ImageNet's size: --shard_size's count (one shard here), rounded up to 8 hosts."""
    root, labels = tree
    out = str(tmp_path / "resnet")
    assert convert("--input", root, "--output", out, "--for", "tpu-resnet") == 0
    m = manifest(out)
    assert m["options"]["shards"]["counts"] == "tpu" and m["splits"]["train"]["num_shards"] == 8
    assert len(_records([os.path.join(out, e["name"]) for e in m["splits"]["train"]["shards"]])) == len(labels)


def test_tfds_template_names_files_as_tfds_and_every_reader_follows(tree, tmp_path):
    """--shard_template tfds: TFDS's ShardedFileTemplate for the dataset (the
    folder's name) and split gives exactly our file names; TFDS reads the
    folder; verify, spec, inspect, load, report and the index files follow."""
    import tensorflow_datasets as tfds
    from tensorflow_datasets.core import naming
    import tfrecord_pipelines as tfp
    root, labels = tree
    out = str(tmp_path / "pets")
    assert convert("--input", root, "--output", out, "--shard_template", "tfds", "--num_shards", "3",
                   "--index_files") == 0
    m = manifest(out)
    names = [e["name"] for e in m["splits"]["train"]["shards"]]
    theirs = naming.ShardedFileTemplate(data_dir=out, dataset_name="pets", split="train", filetype_suffix="tfrecord")
    assert [os.path.basename(str(p)) for p in theirs.sharded_filepaths(3)] == names
    assert names[0] == "pets-train.tfrecord-00000-of-00003"
    assert m["splits"]["train"]["pattern"] == "pets-train.tfrecord-*"
    info = json.load(open(os.path.join(out, "dataset_info.json")))
    assert info["name"] == "pets" and info["splits"][0]["filepathTemplate"] == naming.DEFAULT_FILENAME_TEMPLATE
    ds = tfds.builder_from_directory(out).as_dataset(split="train")
    want = {rel: CLASSES.index(c) for rel, c in labels.items()}
    assert {ex["image/filename"].numpy().decode(): int(ex["image/class/label"]) for ex in ds} == want
    assert sorted(os.listdir(os.path.join(out, "index"))) == [n + ".idx" for n in names]
    assert tfp.verify(out).records == len(labels)
    assert sum(1 for _ in tfp.load(out, "train")) == len(labels)
    code = tfp.spec(out)
    assert "glob(f'{OUT}/pets-{split}.tfrecord-*')" in code
    compile(code.split("# ---- PyTorch:")[0], "spec.py", "exec")
    shown = _cli("inspect", out, "-n", "2")
    assert shown.returncode == 0 and "-- record 1" in shown.stdout and "image/filename" in shown.stdout, shown
    assert tfp.report(out).bytes > 0
    # A stale shard under our default name is still seen: verify names it.
    shutil.copy(os.path.join(out, names[0]), os.path.join(out, "train-00000-of-00003.tfrecord"))
    with pytest.raises(tfp.VerificationError, match="train-00000-of-00003.tfrecord: a shard file not in the manifest"):
        tfp.verify(out)


def test_tfds_load_by_name_with_tfds_own_template(tree, tmp_path):
    """--for tfds --shard_template tfds: the dataset root D/NAME names the
    files NAME-train.tfrecord-...; tfds.load(NAME, data_dir=D) reads them."""
    import tensorflow_datasets as tfds
    root, labels = tree
    data_dir = str(tmp_path / "tfds")
    assert convert("--input", root, "--output", os.path.join(data_dir, "pets"), "--for", "tfds",
                   "--shard_template", "tfds") == 0
    assert sorted(os.listdir(os.path.join(data_dir, "pets", "1.0.0"))).count("pets-train.tfrecord-00000-of-00001") == 1
    ds = tfds.load("pets", data_dir=data_dir, split="train")
    want = {rel: CLASSES.index(c) for rel, c in labels.items()}
    assert {ex["image/filename"].numpy().decode(): int(ex["image/class/label"]) for ex in ds} == want


def test_a_suffix_carries_through_versions_indexes_and_verify(tree, tmp_path, capsys):
    """--shard_suffix .tfrecords on a versioned dataset with index files: the
    second version copies the unchanged records from the first's shards and
    is byte-identical to a full conversion with the same names; `train-*`
    reads only shards."""
    import tfrecord_pipelines as tfp
    src, labels = tree
    images = str(tmp_path / "images")
    shutil.copytree(src, images)
    settle()
    opts = ["--shard_suffix", ".tfrecords", "--index_files", "--num_shards", "2"]
    ds = str(tmp_path / "ds")
    assert convert("--input", images, "--output", ds, "--versioned", "--version", "v1", *opts) == 0
    write(os.path.join(images, "cat", "new.jpg"), image_bytes(22, 15, seed=501))
    settle()
    assert convert("--input", images, "--output", ds, "--versioned", "--version", "v2", *opts) == 0
    v2 = os.path.join(ds, "v2")
    m = manifest(v2)
    assert m["made"]["records_copied"] == len(labels), m["made"]
    names = [e["name"] for e in m["splits"]["train"]["shards"]]
    assert names == ["train-00000-of-00002.tfrecords", "train-00001-of-00002.tfrecords"]
    assert [e["index"] for e in m["splits"]["train"]["shards"]] == [f"index/{n}.idx" for n in names]
    import glob
    assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(v2, "train-*"))) == names
    want = {**{r: CLASSES.index(c) for r, c in labels.items()}, "cat/new.jpg": 1}
    assert _records([os.path.join(v2, n) for n in names]) == want
    assert tfp.verify(v2).records == len(want)
    full = str(tmp_path / "full")
    assert convert("--input", images, "--output", full, "--label_map", os.path.join(v2, "label_map.json"), *opts) == 0
    got = files_of(v2)
    assert {n: v for n, v in got.items() if not n.startswith("provenance/")} == files_of(full)


def test_model_garden_detection_decoder_reads_classification_records(tree, tmp_path, capsys):
    """--for model-garden on a classification tree: Model Garden's
    TfExampleDecoder feature spec (image/source_id a FixedLenFeature string
    with no default, so a record without it fails to parse; the boxes VarLen,
    empty here), its source_id as its parsers take it (tf.strings.to_number to
    int64), the same in a second run and one per image."""
    import tensorflow as tf
    root, labels = tree
    spec = {
        "image/encoded": tf.io.FixedLenFeature((), tf.string),
        "image/height": tf.io.FixedLenFeature((), tf.int64, -1),
        "image/width": tf.io.FixedLenFeature((), tf.int64, -1),
        **{f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32) for k in ("xmin", "xmax", "ymin", "ymax")},
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
        "image/object/area": tf.io.VarLenFeature(tf.float32),
        "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
        "image/source_id": tf.io.FixedLenFeature((), tf.string),
    }

    def ids(out: str) -> dict:
        got = {}
        for e in manifest(out)["splits"]["train"]["shards"]:
            for r in tf.data.TFRecordDataset(os.path.join(out, e["name"])):
                ex = tf.io.parse_single_example(r, {**spec, "image/filename": tf.io.FixedLenFeature((), tf.string),
                                                    "image/class/label": tf.io.FixedLenFeature((), tf.int64)})
                image = tf.io.decode_image(ex["image/encoded"], channels=3)
                assert [int(ex["image/height"]), int(ex["image/width"])] == list(image.shape[:2])
                assert tf.sparse.to_dense(ex["image/object/class/label"]).shape == (0,)
                number = int(tf.strings.to_number(ex["image/source_id"], tf.int64))
                got[ex["image/filename"].numpy().decode()] = (number, int(ex["image/class/label"]))
        return got

    first, second = str(tmp_path / "mg1"), str(tmp_path / "mg2")
    for out in (first, second):
        assert convert("--input", root, "--output", out, "--for", "model-garden") == 0
    assert "--source_ids" in capsys.readouterr().out
    got = ids(first)
    assert {rel: label for rel, (_, label) in got.items()} == {r: CLASSES.index(c) for r, c in labels.items()}
    assert len({n for n, _ in got.values()}) == len(labels)  # bird/0.jpg and cat/0.jpg: two ids
    assert ids(second) == got
    assert manifest(first)["features"]["image/source_id"] == "bytes"
    # Without the profile, a classification record has none, and the decoder's spec refuses it.
    plain = str(tmp_path / "plain")
    assert convert("--input", root, "--output", plain) == 0
    with pytest.raises(tf.errors.InvalidArgumentError, match="image/source_id"):
        ids(plain)


@pytest.mark.parametrize("args, said", [
    (["--shard_template", "tfds"], "'my-data' is not a TFDS name"),
    (["--shard_suffix", "none", "--output_format", "array_record"], "--shard_suffix none is for TFRecord shards"),
    (["--shard_template", "tfds", "--shard_suffix", ".tfrecords"], "cannot be used with --shard_template tfds"),
])
def test_a_naming_that_cannot_be_is_one_line(tree, tmp_path, capsys, args, said):
    root, _ = tree
    assert convert("--input", root, "--output", str(tmp_path / "my-data"), *args) != 0
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err, err
    assert not os.path.exists(os.path.join(tmp_path, "my-data", "manifest.json"))


# A conversion in its own process group that stops for good once two files are renamed into FOLDER (audit
# hooks: no product code is patched), so the test can kill it mid-publish.
HELD_PUBLISH = """
import os, sys, time
folder, gate = sys.argv[1], sys.argv[2]
renames = []
def hold(event, a):
    if event in ('os.rename', 'os.replace') and isinstance(a[1], str) and os.path.dirname(os.path.abspath(a[1])) == folder:
        renames.append(a[1])
        if len(renames) >= 2:
            open(gate, 'w').close()
            while True:
                time.sleep(1)
sys.addaudithook(hold)
from tfrecord_pipelines.commands.convert import run
sys.exit(run(sys.argv[3:]))
"""


def test_a_run_killed_while_publishing_resumes_under_the_chosen_names(tree, tmp_path, capsys):
    """--shard_template tfds: a run killed with some shards under their final
    names resumes (its journal and resume area name the shards as the run
    does) and ends byte-identical to an uninterrupted run."""
    import signal
    import time
    root, _ = tree
    opts = ["--input", root, "--shard_template", "tfds", "--num_shards", "3", "--index_files", "--progress", "off",
            "--direct_running_mode", "in_memory"]
    clean = str(tmp_path / "clean" / "pets")
    assert convert(*opts, "--output", clean) == 0
    out = str(tmp_path / "killed" / "pets")
    gate = str(tmp_path / "gate")
    proc = subprocess.Popen([sys.executable, "-c", HELD_PUBLISH, out, gate, *opts, "--output", out],
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while not os.path.exists(gate):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert [n for n in os.listdir(out) if n.startswith("pets-train.tfrecord-")]  # one published before the kill
    capsys.readouterr()
    assert convert(*opts, "--output", out) == 0
    assert "resumed: 3 shards" in capsys.readouterr().out
    assert files_of(out) == files_of(clean)
