"""`tfrecords verify` catches every kind of damage, naming shard and offset,
and exits non-zero; `tfrecords inspect` shows records and saves images."""
import os
import shutil
import struct

import pytest

from conftest import converted
from tfrecord_pipelines.commands.verify import main as verify_main

FIRST = "train-00000-of-00002.tfrecord"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return converted(tmp_path_factory.mktemp("verify"), per_class=5, num_shards=2)


def run_verify(out, capsys):
    code = verify_main([out, "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def flip(path, offset, mask=0x01):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def record_offsets(path):
    offsets, pos = [], 0
    data = open(path, "rb").read()
    while pos < len(data):
        offsets.append(pos)
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 16 + n
    return offsets


def test_a_good_output_verifies(good, capsys):
    code, text = run_verify(good, capsys)
    assert code == 0 and "OK: 2 shards, 15 records" in text


@pytest.mark.parametrize("where,message", [
    ("length", "length CRC mismatch"),
    ("length_crc", "length CRC mismatch"),
    ("data", "data CRC mismatch"),
    ("data_crc", "data CRC mismatch"),
])
def test_bit_flips(copy, capsys, where, message):
    path = os.path.join(copy, FIRST)
    third = record_offsets(path)[2]
    (n,) = struct.unpack_from("<Q", open(path, "rb").read(), third)
    offset = {"length": third + 1, "length_crc": third + 9, "data": third + 12 + n // 2,
              "data_crc": third + 12 + n + 2}[where]
    flip(path, offset)
    code, text = run_verify(copy, capsys)
    assert code == 1
    assert f"{FIRST}: record 2 at byte offset {third}: {message}" in text
    assert "does not match the manifest" in text  # the shard's sha256


def test_shard_cut_at_a_record_boundary_is_caught_by_the_count(copy, capsys):
    path = os.path.join(copy, FIRST)
    last = record_offsets(path)[-1]
    with open(path, "r+b") as f:
        f.truncate(last)
    code, text = run_verify(copy, capsys)
    assert code == 1 and "records read, the manifest says" in text


def test_trailing_garbage(copy, capsys):
    with open(os.path.join(copy, FIRST), "ab") as f:
        f.write(b"\x00garbage")
    code, text = run_verify(copy, capsys)
    assert code == 1 and FIRST in text and "file ends inside a record header" in text


def test_missing_and_stale_shards(copy, capsys):
    os.remove(os.path.join(copy, FIRST))
    shutil.copy(os.path.join(copy, "train-00001-of-00002.tfrecord"), os.path.join(copy, "train-00000-of-00004.tfrecord"))
    code, text = run_verify(copy, capsys)
    assert code == 1
    assert f"{FIRST}: missing" in text
    assert "train-00000-of-00004.tfrecord: a shard file not in the manifest" in text


def test_no_manifest_means_incomplete(copy, capsys):
    os.remove(os.path.join(copy, "manifest.json"))
    code, text = run_verify(copy, capsys)
    assert code == 1 and "not a complete output" in text


def test_image_bytes_swapped_inside_a_valid_record(copy, capsys):
    """A record rewritten with valid framing but other image bytes: only the
    per-image sha256 can tell."""
    from tfrecord_pipelines.transforms.core.tfrecord_io import RecordWriter, iter_records
    from tensorflow.core.example import example_pb2
    path = os.path.join(copy, FIRST)
    with open(path, "rb") as f:
        datas = [d for _, d in iter_records(f)]
    ex = example_pb2.Example.FromString(datas[1])
    ex.features.feature["image/encoded"].bytes_list.value[0] = b"\xff\xd8\xff" + b"x" * 10
    datas[1] = ex.SerializeToString(deterministic=True)
    with open(path, "wb") as f:
        w = RecordWriter(f)
        for d in datas:
            w.write([d], len(d))
    code, text = run_verify(copy, capsys)
    assert code == 1 and "record 1 at byte offset" in text and "do not match their recorded sha256" in text


def test_inspect_prints_records_and_saves_images(good, tmp_path, capsys):
    from tfrecord_pipelines.commands.inspect import main as inspect_main
    folder = str(tmp_path / "imgs")
    assert inspect_main([good, "-n", "2", "--save_images", folder]) == 0
    text = capsys.readouterr().out
    assert "image/class/text" in text and "image/encoded: <" in text
    saved = sorted(os.listdir(folder))
    assert saved == ["train-0.jpg", "train-1.jpg"]
    import tensorflow as tf
    assert tf.io.decode_jpeg(open(os.path.join(folder, saved[0]), "rb").read()).shape[2] == 3
