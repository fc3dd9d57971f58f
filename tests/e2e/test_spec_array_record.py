"""`tfrecords spec OUT` for --output_format array_record prints Grain code: run
as printed, in a fresh interpreter, it yields every record of every split, in
record order and globally shuffled, with the pixels and label of the same
record of a TFRecord conversion of the same input; random access by index and
the printed TFDS line (as_data_source) work too."""
import hashlib
import os
import subprocess
import sys

import pytest

from conftest import ROOT, convert, make_tree, manifest, read_examples, run_printed, scalar

ARGS = ["--split", "train=0.6,validation=0.4", "--num_shards", "2", "--seed", "5"]

DRIVER = """
import hashlib, json, sys
code = open(sys.argv[1]).read()
# the printed TFDS line, uncommented
code = code.replace("# import tensorflow_datasets as tfds", "import tensorflow_datasets as tfds")
code = code.replace("# ds = tfds.builder_from_directory", "tfds_ds = tfds.builder_from_directory")
ns = {}
exec(compile(code, sys.argv[1], "exec"), ns)
assert "tfds_ds" in ns, "no TFDS line was printed"
with open(sys.argv[2]) as f:
    splits = list(json.load(f)["splits"])
for split in splits:
    for training in (False, True):
        for image, label in ns["dataset"](split, training=training):
            print(json.dumps({"split": split, "training": training, "shape": list(image.shape),
                              "pixels": hashlib.sha256(image.tobytes()).hexdigest(), "label": int(label),
                              "name": ns["CLASS_NAMES"][int(label)]}))
    src = ns["source"](split)
    print(json.dumps({"split": split, "len": len(src), "last": hashlib.sha256(src[len(src) - 1]).hexdigest()}))
first = splits[0]
print(json.dumps({"tfds_len": len(ns["tfds_ds"]), "split": first}))
"""


def _decoded_sha(data: bytes) -> tuple[list, str]:
    import tensorflow as tf
    img = tf.io.decode_image(data, expand_animations=False).numpy()
    return list(img.shape), hashlib.sha256(img.tobytes()).hexdigest()


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spec_ar")
    root = str(tmp / "imgs")
    labels = make_tree(root, classes=("ant", "bee", "cow"), per_class=7)
    tf_out, ar_out = str(tmp / "tf"), str(tmp / "ar")
    assert convert("--input", root, "--output", tf_out, *ARGS) == 0
    assert convert("--input", root, "--output", ar_out, *ARGS, "--output_format", "array_record") == 0
    return labels, tf_out, ar_out


def test_printed_grain_code_runs_and_yields_every_record(outputs, tmp_path):
    labels, tf_out, ar_out = outputs
    got = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.cli", "spec", ar_out], capture_output=True, text=True,
                         cwd=ROOT)
    assert got.returncode == 0, got.stderr
    code = got.stdout
    assert "grain.sources.ArrayRecordDataSource" in code and "TFRecordDataset" not in code
    rows = run_printed(tmp_path, code, DRIVER, os.path.join(ar_out, "manifest.json"))
    m = manifest(ar_out)
    for split in m["splits"]:
        want = []
        for r in read_examples(tf_out, split):
            shape, pixels = _decoded_sha(r["image/encoded"][0])
            want.append({"shape": shape, "pixels": pixels, "label": r["image/class/label"][0],
                         "name": labels[scalar(r, "image/filename")]})
        ordered = [{k: r[k] for k in ("shape", "pixels", "label", "name")}
                   for r in rows if r.get("split") == split and r.get("training") is False]
        shuffled = [{k: r[k] for k in ("shape", "pixels", "label", "name")}
                    for r in rows if r.get("split") == split and r.get("training") is True]
        assert ordered == want  # record i is TFRecord record i
        key = lambda r: (r["pixels"], r["label"])  # noqa: E731
        assert sorted(shuffled, key=key) == sorted(want, key=key) and shuffled != want
        info = [r for r in rows if r.get("split") == split and "len" in r]
        assert info[0]["len"] == m["splits"][split]["records"] == len(want)
    tfds_row = [r for r in rows if "tfds_len" in r][0]
    assert tfds_row["tfds_len"] == m["splits"][tfds_row["split"]]["records"]


def test_a_bucket_output_reads_through_a_gcsfuse_mount():
    from tfrecord_pipelines.outputs.reading_code import reading_code
    m = {"output_format": "array_record", "splits": {"train": {"records": 3, "shards": []}},
         "features": {"image/encoded": "bytes"}, "feature_roles": {"encoded": "image/encoded"},
         "label_map": {"kind": "none", "classes": {}}}
    code = reading_code("gs://bkt/data/v1", m)
    assert "OUT = '/gcs/bkt/data/v1'  # gs://bkt/data/v1 mounted with gcsfuse" in code
    compile(code, "spec", "exec")
