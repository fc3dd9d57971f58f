"""`tfrecords spec OUT` prints Python that reads the output: the printed code
is run as it is, in a fresh interpreter, and must yield every record with its
label and its image decoded as TensorFlow decodes the source file."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from conftest import (ROOT, convert, image_bytes, make_tree, manifest, read_examples, run_printed, scalar, sha256_file,
                      write)

# Runs the printed module and prints one JSON line per record of every split,
# read in file order and again as for training (shuffled).
DRIVER = """
import hashlib, json, sys
code = open(sys.argv[1]).read()
ns = {}
exec(compile(code, sys.argv[1], "exec"), ns)
with open(sys.argv[2]) as f:
    splits = list(json.load(f)["splits"])
for split in splits:
    for training in (False, True):
        for item in ns["dataset"](split, training=training):
            image, label = item
            print(json.dumps({"split": split, "training": training, "shape": list(image.shape),
                              "pixels": hashlib.sha256(image.numpy().tobytes()).hexdigest(),
                              "label": label.numpy().item(),
                              "name": ns["CLASS_NAMES"][label.numpy().item()] if "CLASS_NAMES" in ns else None}))
"""


TORCH_DRIVER = """

import hashlib, sys
assert "tensorflow" not in sys.modules
for worker in (0, 1):
    for r in worker_records("train", worker, 2):
        print(json.dumps({"worker": worker, "sha": hashlib.sha256(bytes(r["img"])).hexdigest(),
                          "y": r["y"].tolist()}))
"""


def _spec(out: str) -> str:
    got = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.cli", "spec", out], capture_output=True, text=True,
                         cwd=ROOT)
    assert got.returncode == 0, got.stderr
    return got.stdout


def _run_printed(tmp_path, out: str) -> tuple[str, list]:
    code = _spec(out)
    return code, run_printed(tmp_path, code, DRIVER, os.path.join(out, "manifest.json"))


def _decoded(data: bytes) -> tuple[list, str]:
    import tensorflow as tf
    img = tf.io.decode_image(data, expand_animations=False).numpy()
    return list(img.shape), hashlib.sha256(img.tobytes()).hexdigest()


def _check(out: str, rows: list, root: str, labels: dict, filename_key: str = "image/filename") -> None:
    """Every record once, with the source's decoded pixels and its label;
    the training order holds the same records."""
    m = manifest(out)
    classes = m["label_map"]["classes"]
    for split in m["splits"]:
        ordered = [r for r in rows if r["split"] == split and not r["training"]]
        shuffled = [r for r in rows if r["split"] == split and r["training"]]
        source = {}  # the split's files, by the sha256 of their decoded pixels (each image is distinct noise)
        for r in read_examples(out, split):
            rel = scalar(r, filename_key)
            with open(os.path.join(root, rel), "rb") as f:
                shape, pixels = _decoded(f.read())
            source[pixels] = (rel, shape)
        assert len(source) == m["splits"][split]["records"] > 0
        assert sorted(r["pixels"] for r in ordered) == sorted(source)  # every record once
        for got in ordered:
            rel, shape = source[got["pixels"]]
            assert got["shape"] == shape, rel
            want = labels[rel]
            if isinstance(want, float):
                assert got["label"] == pytest.approx(want, rel=1e-6), rel
            else:
                assert got["label"] == classes[want] and got["name"] == want, rel
        key = lambda r: (r["pixels"], r["label"])  # noqa: E731
        assert sorted(map(key, shuffled)) == sorted(map(key, ordered))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("spec") / "imgs")
    return root, make_tree(root, per_class=4)


def test_default_keys(images, tmp_path):
    root, labels = images
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--split", "train=0.6,validation=0.4", "--num_shards", "2") == 0
    code, rows = _run_printed(tmp_path, out)
    assert "tf.io.parse_single_example" in code and "expand_animations=False" in code
    assert "torch_dataset" not in code  # no index files
    assert "tfds.builder_from_directory(OUT)" in code
    _check(out, rows, root, labels)


def test_renamed_keys_with_index_files(images, tmp_path):
    root, labels = images
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--num_shards", "2", "--index_files", "--feature_keys",
                   "image/encoded=img,image/class/label=y,image/filename=path,image/class/text=") == 0
    code, rows = _run_printed(tmp_path, out)
    assert "ex['img']" in code and "ex['y']" in code and "image/encoded" not in code
    # The PyTorch and DALI readers name the renamed keys and the indexes.
    assert "fn.readers.tfrecord(path=files, index_path=indexes," in code
    assert "indexes = [OUT + '/' + s['index'] for s in" in code
    _check(out, rows, root, labels, filename_key="path")
    # The PyTorch module (after its marker line) runs without TensorFlow; two
    # workers read every record once, by the indexes, with its label.
    torch_part = code[code.index("# ---- PyTorch:"):]
    assert "DESCRIPTION = {'img': 'byte', 'y': 'int'}" in torch_part and "import tensorflow" not in torch_part
    (tmp_path / "torch_reader.py").write_text(torch_part + TORCH_DRIVER)
    got = subprocess.run([sys.executable, str(tmp_path / "torch_reader.py")], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-3000:]
    read = [json.loads(line) for line in got.stdout.splitlines()]
    classes = manifest(out)["label_map"]["classes"]
    by_sha = {sha256_file(os.path.join(root, rel)): rel for rel in labels}
    assert sorted(r["sha"] for r in read) == sorted(by_sha)  # every record once, its bytes unchanged
    assert all(r["y"] == [classes[labels[by_sha[r["sha"]]]]] for r in read)
    assert {r["worker"] for r in read} == {0, 1}


def test_gzip(images, tmp_path):
    root, labels = images
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--num_shards", "3", "--compression", "gzip") == 0
    code, rows = _run_printed(tmp_path, out)
    assert "COMPRESSION = 'GZIP'" in code
    assert "tfds" not in code  # TFDS reads uncompressed shards only
    _check(out, rows, root, labels)


def test_float_targets_and_table_columns(tmp_path):
    root = str(tmp_path / "faces")
    targets = {}
    for i in range(6):
        rel = f"f{i}.png" if i % 2 else f"f{i}.jpg"
        write(os.path.join(root, rel), image_bytes(12 + i, 10, fmt="PNG" if i % 2 else "JPEG", seed=i))
        targets[rel] = 0.5 + i / 3
    table = tmp_path / "scores.csv"
    table.write_text("file,target,note,rank\n" + "".join(
        f"{k},{v!r},{'' if i == 2 else 'n' + str(i)},{i}\n" for i, (k, v) in enumerate(targets.items())))
    out = str(tmp_path / "out")
    assert convert("--label_table", str(table), "--image_root", root, "--output", out, "--num_shards", "2") == 0
    code, rows = _run_printed(tmp_path, out)
    assert "'image/target': tf.io.FixedLenFeature([], tf.float32)" in code
    assert "'note': tf.io.VarLenFeature(tf.string)" in code and "'rank': tf.io.VarLenFeature(tf.int64)" in code
    assert "CLASS_NAMES" not in code
    _check(out, rows, root, targets)


def test_spec_of_a_folder_without_manifest(tmp_path):
    got = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.cli", "spec", str(tmp_path)], capture_output=True,
                         text=True, cwd=ROOT)
    assert got.returncode == 1 and "no manifest.json" in got.stderr
