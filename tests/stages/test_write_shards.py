"""WriteShards on its own, on Beam's TestPipeline: planned shards of tiny
generated images in, staged shard files out, read back with TensorFlow
(tf.data.TFRecordDataset + tf.io.parse_example); the ShardResult, rejects and
quality rows each tagged output carries; the same bytes on a second run; and
a second read (first_read=False) holding each file to what was validated."""
from __future__ import annotations

import hashlib
import os

import apache_beam as beam
import google_crc32c
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from conftest import image_bytes, write
from tfrecord_pipelines.transforms.core.images import ImagePolicy, validate_record
from tfrecord_pipelines.transforms.core.labels import LabelMap
from tfrecord_pipelines.transforms.core.records import Reason, Rec, pack
from tfrecord_pipelines.transforms.core.specs import QUALITY, REJECTS, STATS, LabelType
from tfrecord_pipelines.transforms.core.tfrecord_io import crc32c_text
from tfrecord_pipelines.transforms.stages.write_shards import WriteShards, WriteSpec

LABELS = LabelMap(LabelType.CLASS, (("cat", 0), ("dog", 1)))


def _sources(folder) -> dict:
    """rel -> (path, bytes or None for a missing file)."""
    files = {"cat/a.jpg": image_bytes(seed=1), "dog/b.png": image_bytes(20, 30, "PNG", seed=2),
             "cat/c.jpg": image_bytes(seed=3), "dog/bad.jpg": b"<html>not an image</html>"}
    out = {rel: (write(os.path.join(folder, rel), data), data) for rel, data in files.items()}
    out["dog/gone.jpg"] = (os.path.join(folder, "dog/gone.jpg"), None)
    return out


def _rec(rel, path, data) -> Rec:
    label = rel.split("/")[0]
    return Rec(rel=rel, path=path, size=len(data) if data is not None else -1, label_text=label,
               label_id=dict(LABELS.ids)[label], split="train")


def _plan(recs) -> list:
    """Two planned shards: records 0-2 in shard 0 (in two packed groups, out of
    position order), the rest in shard 1."""
    return [(("train", 0, 2), [pack([(2, recs[2])]), pack([(0, recs[0]), (1, recs[1])])]),
            (("train", 1, 2), [pack([(3, recs[3]), (4, recs[4])])])]


def _run(plan, spec: WriteSpec, check=None) -> dict:
    """Runs WriteShards on the plan; returns its counters. `check(outputs)` adds assert_thats."""
    p = TestPipeline()
    label_map = p | "Once" >> beam.Create([None]) | "LabelMap" >> beam.Map(lambda _: LABELS)
    out = p | beam.Create(plan) | WriteShards(spec, label_map)
    if check:
        check(out)
    result = p.run()
    result.wait_until_finish()
    return {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace("tfrecords"))["counters"]}


def _read_shard(path: str) -> list:
    import tensorflow as tf
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/filename": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64),
                "image/key/sha256": tf.io.FixedLenFeature([], tf.string),
                "image/height": tf.io.FixedLenFeature([], tf.int64),
                "image/format": tf.io.FixedLenFeature([], tf.string)}
    rows = []
    for batch in tf.data.TFRecordDataset([path]).batch(16):
        parsed = tf.io.parse_example(batch, features)
        for i in range(int(tf.shape(batch)[0])):
            rows.append({k: v[i].numpy() for k, v in parsed.items()})
    return rows


def _staged(staging: str) -> dict:
    """{final shard name: staged path} (staged names add a unique suffix)."""
    return {n.rsplit(".", 1)[0]: os.path.join(staging, n) for n in sorted(os.listdir(staging))}


def _shard_checks(out, want_rows):
    def results(got):
        assert sorted((r.name, r.records, r.label_counts) for r in got) == [
            ("train-00000-of-00002.tfrecord", 3, ((0, 2), (1, 1))), ("train-00001-of-00002.tfrecord", 0, ())]
        for r in got:  # the result describes the staged file exactly
            with open(r.temp_path, "rb") as f:
                data = f.read()
            assert (r.bytes, r.crc32c) == (len(data), crc32c_text(google_crc32c.value(data))), r.name
    assert_that(out["shards"], results)
    assert_that(out[REJECTS] | "Why" >> beam.FlatMap(lambda b: [(r.rel, r.reason, r.split) for r in b]),
                equal_to([("dog/bad.jpg", Reason.NOT_AN_IMAGE.value, "train"),
                          ("dog/gone.jpg", Reason.MISSING.value, "train")]), label="rejects")
    assert_that(out[QUALITY] | "Rows" >> beam.FlatMap(lambda b: [(r.rel, r.label_id, r.sha256) for r in b]),
                equal_to(want_rows),
                label="quality")
    assert_that(out[STATS], equal_to([]), label="stats")  # box counts: --annotations only


def test_one_read_validates_writes_in_position_order_and_rejects_with_reasons(tmp_path):
    src = _sources(str(tmp_path / "in"))
    recs = [_rec(rel, *src[rel]) for rel in ("cat/a.jpg", "dog/b.png", "cat/c.jpg", "dog/bad.jpg", "dog/gone.jpg")]
    want_rows = [(r.rel, r.label_id, hashlib.sha256(src[r.rel][1]).hexdigest()) for r in recs[:3]]
    staging = str(tmp_path / "staging")
    spec = WriteSpec(staging, ImagePolicy(), first_read=True, quality_rows=True)
    counters = _run(_plan(recs), spec, lambda out: _shard_checks(out, want_rows))
    assert (counters["records_written"], counters["shards_written"]) == (3, 2)
    assert (counters["images_valid"], counters["images_rejected"]) == (3, 2)  # validated here

    staged = _staged(staging)
    assert sorted(staged) == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    rows = _read_shard(staged["train-00000-of-00002.tfrecord"])
    assert [r["image/filename"].decode() for r in rows] == ["cat/a.jpg", "dog/b.png", "cat/c.jpg"]
    for r in rows:
        data = src[r["image/filename"].decode()][1]
        assert r["image/encoded"] == data  # the file's bytes, unchanged
        assert r["image/key/sha256"].decode() == hashlib.sha256(data).hexdigest()
    assert [r["image/class/label"] for r in rows] == [0, 1, 0]
    assert [(r["image/format"], r["image/height"]) for r in rows] == [(b"jpeg", 16), (b"png", 30), (b"jpeg", 16)]
    assert _read_shard(staged["train-00001-of-00002.tfrecord"]) == []  # every record rejected: an empty shard

    # Determinism: the same plan again gives byte-identical shards.
    again = str(tmp_path / "again")
    _run(_plan(recs), WriteSpec(again, ImagePolicy(), first_read=True, quality_rows=True))
    for name, path in _staged(again).items():
        with open(path, "rb") as a, open(staged[name], "rb") as b:
            assert a.read() == b.read(), name


def test_a_second_read_holds_each_file_to_what_was_validated(tmp_path):
    src = _sources(str(tmp_path / "in"))
    policy = ImagePolicy()
    validated = []
    for rel in ("cat/a.jpg", "dog/b.png", "cat/c.jpg"):
        path, data = src[rel]
        validated.append(validate_record(_rec(rel, path, data), data, policy)[0])  # as ValidateImages leaves it
    # After validation, c.jpg is rewritten with other bytes of the same size, and b.png is deleted.
    c_path, c_data = src["cat/c.jpg"]
    write(c_path, bytes(reversed(c_data)))
    os.remove(src["dog/b.png"][0])
    recs = validated + [validated[0]._replace(rel="cat/a2.jpg")]  # a second record of a.jpg's unchanged file
    plan = [(("train", 0, 1), [pack(list(enumerate(recs)))])]
    staging = str(tmp_path / "staging")

    def check(out):
        assert_that(out[REJECTS] | beam.FlatMap(lambda b: [(r.rel, r.reason) for r in b]),
                    equal_to([("dog/b.png", Reason.CHANGED.value), ("cat/c.jpg", Reason.CHANGED.value)]))
        assert_that(out["shards"] | beam.Map(lambda r: (r.records, r.read)), equal_to([(2, 4)]), label="result")

    counters = _run(plan, WriteSpec(staging, policy, first_read=False), check)
    assert counters["rejected_changed"] == 2 and "images_valid" not in counters  # no validation here
    rows = _read_shard(_staged(staging)["train-00000-of-00001.tfrecord"])
    assert [(r["image/filename"].decode(), r["image/encoded"]) for r in rows] == [
        ("cat/a.jpg", src["cat/a.jpg"][1]), ("cat/a2.jpg", src["cat/a.jpg"][1])]
