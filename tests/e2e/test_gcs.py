"""gs:// in and out, against a GCS-protocol emulator the tests start
themselves: gs:// -> gs://, local -> gs://, a table on GCS, verify and
inspect on gs://, shards larger than one upload chunk, nothing left behind."""
import csv
import io
import os

import pytest

from conftest import check_against_source, convert, image_bytes, make_tree, manifest, write
from gcs_emulator import BUCKET, download_prefix, gcs, list_names, upload_tree  # noqa: F401 (fixture)

DATASET_FILES = {"manifest.json", "rejects.jsonl", "label_map.json", "schema.pbtxt",
                 "dataset_info.json", "features.json", "image.class.label.labels.txt",  # and TFDS's metadata
                 "report.html"}


def check_output(prefix, local, expected_labels, source):
    """Downloads the output, reads it back with TensorFlow, and holds every record's
    label and image bytes against the local files the input was made from (so
    reading the wrong object, or a stale one, fails here even though verify,
    which hashes what was read, would pass)."""
    names = download_prefix(prefix, local)
    shards = [n for n in names if n.endswith(".tfrecord")]
    # A version (--versioned) also holds each shard's provenance, for the next version's copies.
    provenance = {f"provenance/{n}.jsonl" for n in shards} & set(names)
    assert not provenance or provenance == {f"provenance/{n}.jsonl" for n in shards}, names
    assert set(names) == DATASET_FILES | set(shards) | provenance, names  # no staging, lock or temp objects
    check_against_source(local, expected_labels, source)
    return manifest(local)


def test_gs_to_gs_multi_process(gcs, tmp_path):
    local = str(tmp_path / "imgs")
    labels = make_tree(local, per_class=5)
    write(os.path.join(local, "dog", "bad.jpg"), b"not an image")
    upload_tree(local, "in1")
    out = f"gs://{BUCKET}/out1"
    assert convert("--input", f"gs://{BUCKET}/in1", "--output", out, "--num_shards", "2",
                   "--split", "train=0.7,validation=0.3", "--max_reject_fraction", "0.1", in_memory=False) == 0
    m = check_output("out1", str(tmp_path / "dl"), labels, local)
    assert m["rejects_by_reason"] == {"not_an_image": 1}

    from tfrecord_pipelines.outputs.verification import verify_output
    report = verify_output(out)
    assert report.ok, report.errors
    assert report.records == len(labels)


def test_local_to_gs_and_table_on_gcs(gcs, tmp_path):
    local = str(tmp_path / "imgs")
    labels = make_tree(local, per_class=3)
    out = f"gs://{BUCKET}/out2"
    assert convert("--input", local, "--output", out) == 0
    check_output("out2", str(tmp_path / "dl"), labels, local)

    upload_tree(local, "in3/images")
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["filename", "label"])
    w.writerows(sorted(labels.items()))
    from gcs_emulator import bucket
    bucket().blob("in3/labels.csv").upload_from_string(buf.getvalue())
    out3 = f"gs://{BUCKET}/out3"
    assert convert("--label_table", f"gs://{BUCKET}/in3/labels.csv", "--image_root", f"gs://{BUCKET}/in3/images",
                   "--output", out3) == 0
    check_output("out3", str(tmp_path / "dl3"), labels, local)


def test_shards_larger_than_an_upload_chunk(gcs, tmp_path):
    local = str(tmp_path / "big")
    rels = {}
    for k in range(44):  # ~0.5 MB each of incompressible noise: one ~22 MB shard
        rel = f"noise/{k}.png"
        write(os.path.join(local, rel), image_bytes(420, 420, fmt="PNG", seed=k))
        rels[rel] = "noise"
    out = f"gs://{BUCKET}/big"
    assert convert("--input", local, "--output", out, "--num_shards", "1", "--validate", "header") == 0
    m = check_output("big", str(tmp_path / "dl"), rels, local)
    assert m["splits"]["train"]["shards"][0]["bytes"] > 16 * 2**20


def test_verify_and_inspect_on_gs(gcs, tmp_path, capsys):
    local = str(tmp_path / "imgs")
    make_tree(local, per_class=2)
    out = f"gs://{BUCKET}/out4"
    assert convert("--input", local, "--output", out) == 0
    from tfrecord_pipelines.commands.inspect import main as inspect_main
    from tfrecord_pipelines.commands.verify import main as verify_main
    assert verify_main([out, "--quiet"]) == 0
    assert inspect_main([out, "-n", "1"]) == 0
    assert "image/class/text" in capsys.readouterr().out
    from gcs_emulator import bucket
    name = manifest_shard = [n for n in list_names("out4") if n.endswith(".tfrecord")][0]
    blob = bucket().blob(f"out4/{name}")
    data = bytearray(blob.download_as_bytes())
    data[100] ^= 1
    blob.upload_from_string(bytes(data))
    assert verify_main([out, "--quiet"]) == 1
    assert f"{manifest_shard}: record 0" in capsys.readouterr().err


def test_rerun_is_refused_then_overwritten_and_the_manifest_is_create_only(gcs, tmp_path, capsys):
    local = str(tmp_path / "imgs")
    make_tree(local, per_class=2)
    out = f"gs://{BUCKET}/out5"
    assert convert("--input", local, "--output", out, "--num_shards", "3") == 0
    assert convert("--input", local, "--output", out, "--num_shards", "2") == 2
    assert "already holds a complete dataset" in capsys.readouterr().err
    assert convert("--input", local, "--output", out, "--num_shards", "2", "--overwrite") == 0
    assert [n for n in list_names("out5") if n.endswith(".tfrecord")] == [
        "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    from tfrecord_pipelines.transforms.storage import fsutil
    with pytest.raises(fsutil.AlreadyExists):
        fsutil.create_only(f"{out}/manifest.json", b"{}")


def test_versioned_dataset_in_a_bucket(gcs, tmp_path, capsys):
    local = str(tmp_path / "imgs")
    labels = make_tree(local, per_class=2)
    upload_tree(local, "in6")
    root = f"gs://{BUCKET}/ds6"
    args = ["--input", f"gs://{BUCKET}/in6", "--output", root, "--versioned"]
    assert convert(*args, "--version", "v1") == 0
    from gcs_emulator import bucket
    assert bucket().blob("ds6/LATEST").download_as_bytes() == b"v1\n"
    check_output("ds6/v1", str(tmp_path / "dl"), labels, local)
    capsys.readouterr()
    assert convert(*args, "--version", "v2") == 0
    assert "unchanged" in capsys.readouterr().out
    assert bucket().blob("ds6/LATEST").download_as_bytes() == b"v1\n"
    assert not list_names("ds6/v2") and ".tfrecords.lock" not in list_names("ds6")
    write(os.path.join(local, "cat", "new.jpg"), image_bytes(seed=77))
    bucket().blob("in6/cat/new.jpg").upload_from_filename(os.path.join(local, "cat", "new.jpg"))
    assert convert(*args, "--version", "v3") == 0
    assert bucket().blob("ds6/LATEST").download_as_bytes() == b"v3\n"
    check_output("ds6/v3", str(tmp_path / "dl3"), dict(labels, **{"cat/new.jpg": "cat"}), local)

    # A failed run (too many rejects) leaves LATEST alone in the bucket, publishes no
    # manifest and releases the lock.
    for k in range(4):
        bucket().blob(f"in6/cat/broken{k}.jpg").upload_from_string(b"")
    capsys.readouterr()
    assert convert(*args, "--version", "v4") == 1
    assert "above --max_reject_fraction" in capsys.readouterr().err
    assert bucket().blob("ds6/LATEST").download_as_bytes() == b"v3\n"
    assert "manifest.json" not in list_names("ds6/v4") and ".tfrecords.lock" not in list_names("ds6")


def test_a_dry_run_from_a_bucket_lists_it_and_estimates_the_bucket_reads_only(gcs, tmp_path, capsys):
    """--dry_run with a gs:// input: the listing's object sizes give the
    estimate (pipelines/run/cpu_estimate.py), priced as reads from a bucket only,
    and nothing is written to the output."""
    from tfrecord_pipelines.transforms.core.units import human_bytes
    local = str(tmp_path / "imgs")
    labels = make_tree(local, per_class=4)
    upload_tree(local, "dry_in")
    total = sum(os.path.getsize(os.path.join(local, rel)) for rel in labels)
    capsys.readouterr()
    assert convert("--input", f"gs://{BUCKET}/dry_in", "--output", f"gs://{BUCKET}/dry_out", "--dry_run") == 0
    out = capsys.readouterr().out
    assert f"listed {len(labels)} files" in out
    line = next(x for x in out.splitlines() if x.startswith("estimated CPU"))
    assert line.startswith(f"estimated CPU for the {len(labels)} images to read ({human_bytes(total)}, "
                           "full validation): "), line
    assert "from a bucket" in line and "from a local disk" not in line
    assert not [n for n in list_names("dry_out")]
