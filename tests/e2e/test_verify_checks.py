"""Verify: label counts, label ids against their text, duplicate
records, --decode, a versioned root, and a malformed manifest."""
import hashlib
import json
import os

import pytest

from conftest import convert, converted, make_tree
from tfrecord_pipelines.commands.verify import main as verify_main

SHARD = "train-00000-of-00001.tfrecord"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return converted(tmp_path_factory.mktemp("hverify"), per_class=3, num_shards=1)


def run_verify(capsys, *args):
    code = verify_main([*args, "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def load(out):
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def save(out, m):
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(m, f)


def rewrite_shard(out, records, added=0):
    """Writes `records` (serialized Examples) as the only train shard, with
    TensorFlow's writer, and makes the manifest agree about the shard."""
    import tensorflow as tf
    path = os.path.join(out, SHARD)
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    data = open(path, "rb").read()
    m = load(out)
    entry = m["splits"]["train"]["shards"][0]
    entry.update(records=len(records), bytes=len(data))
    if "crc32c" in entry:
        import google_crc32c
        from tfrecord_pipelines.transforms.core.tfrecord_io import crc32c_text
        entry["crc32c"] = crc32c_text(google_crc32c.value(data))
    else:  # a manifest written before 0.3
        entry["sha256"] = hashlib.sha256(data).hexdigest()
    m["splits"]["train"]["records"] = len(records)
    m["counts"]["written"] += added
    m["counts"]["listed"] += added
    save(out, m)


def examples(out):
    import tensorflow as tf
    return [r.numpy() for r in tf.data.TFRecordDataset([os.path.join(out, SHARD)])]


def test_good_output_verifies_with_decode(good, capsys):
    code, text = run_verify(capsys, good, "--decode")
    assert code == 0 and "OK: 1 shard, 9 records" in text


def test_label_counts_are_checked_against_the_manifest(copy, capsys):
    m = load(copy)
    m["splits"]["train"]["label_counts"] = {"bird": 4, "cat": 2, "dog": 3}
    save(copy, m)
    code, text = run_verify(capsys, copy)
    assert code == 1 and "label counts differ from the manifest's" in text
    assert "'bird': 3 read, 4 in the manifest" in text and "'cat': 3 read, 2 in the manifest" in text


def test_label_id_must_match_its_text(copy, capsys):
    m = load(copy)
    m["label_map"]["classes"] = {"bird": 1, "cat": 0, "dog": 2}
    save(copy, m)
    code, text = run_verify(capsys, copy)
    assert code == 1 and "label id 1 does not match its text 'cat'" in text


def test_duplicate_records(copy, capsys):
    import tensorflow as tf
    recs = examples(copy)
    ex = tf.train.Example.FromString(recs[0])
    first_label = ex.features.feature["image/class/text"].bytes_list.value[0].decode()
    rewrite_shard(copy, recs + [recs[0]], added=1)
    m = load(copy)
    m["splits"]["train"]["label_counts"][first_label] += 1
    save(copy, m)
    code, text = run_verify(capsys, copy)
    assert code == 1 and "record 9 at byte offset" in text and "a duplicate of" in text
    assert "same image/filename" in text and "label counts" not in text


def test_decode_catches_an_image_that_only_decoding_finds(copy, capsys):
    import tensorflow as tf
    recs = examples(copy)
    ex = tf.train.Example.FromString(recs[0])
    bad = ex.features.feature["image/encoded"].bytes_list.value[0][:40]  # a cut JPEG, sha256 kept consistent
    ex.features.feature["image/encoded"].bytes_list.value[0] = bad
    ex.features.feature["image/key/sha256"].bytes_list.value[0] = hashlib.sha256(bad).hexdigest().encode()
    rewrite_shard(copy, [ex.SerializeToString()] + recs[1:])
    assert run_verify(capsys, copy)[0] == 0  # structure, checksums and counts all agree
    code, text = run_verify(capsys, copy, "--decode")
    assert code == 1 and "record 0 at byte offset 0: TensorFlow cannot decode the image" in text


def test_versioned_root_is_verified_at_the_version_latest_names(tmp_path, capsys):
    root, out = str(tmp_path / "imgs"), str(tmp_path / "ds")
    make_tree(root, per_class=1)
    assert convert("--input", root, "--output", out, "--versioned", "--version", "v1") == 0
    capsys.readouterr()
    code, text = run_verify(capsys, out)
    assert code == 0 and text.startswith(f"{out}: LATEST names version v1; reading {out}/v1\n") and "OK: " in text
    assert run_verify(capsys, os.path.join(out, "v1"))[0] == 0


@pytest.mark.parametrize("damage", [
    lambda m: m.pop("counts"),
    lambda m: m["counts"].pop("listed"),
    lambda m: m["splits"]["train"]["shards"][0].pop("crc32c", None) or m["splits"]["train"]["shards"][0].pop("sha256"),
    lambda m: m.__setitem__("splits", []),
    lambda m: m["splits"]["train"].pop("label_counts"),
    lambda m: m["label_map"].__setitem__("classes", None),
])
def test_malformed_manifest_is_a_message_not_a_traceback(copy, capsys, damage):
    m = load(copy)
    damage(m)
    save(copy, m)
    code, text = run_verify(capsys, copy)
    assert code == 1 and "Traceback" not in text and "FAILED" in text
