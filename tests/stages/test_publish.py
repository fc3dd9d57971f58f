"""Publish on its own, on Beam's TestPipeline: staged shards (written here
with TensorFlow), rejects, counts, label map, plans and fingerprint in; the
output folder out: shards under their final names (read back with
tf.data), an older run's stale shard gone, rejects.jsonl with each reason,
and the manifest last, its counts reconciled. A replay finds its own
manifest and stops; a run with too many rejects publishes nothing."""
from __future__ import annotations

import json
import os

import apache_beam as beam
import google_crc32c
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from conftest import image_bytes
from tfrecord_pipelines.transforms.core.labels import LabelMap
from tfrecord_pipelines.transforms.core.records import Batch, Reason, Reject, ShardResult
from tfrecord_pipelines.transforms.core.sharding import SplitPlan
from tfrecord_pipelines.transforms.core.specs import LabelType, OutputSpec, PublishSpec
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression, crc32c_text
from tfrecord_pipelines.transforms.stages.publish import Publish, TooManyRejects
from tfrecord_pipelines.transforms.storage import layout, run_lock

RUN = "20261125-170000-abcdef12"
LABELS = LabelMap(LabelType.CLASS, (("cat", 0), ("dog", 1)))
FP = ("1" * 64, "2" * 64)
STALE = "train-00000-of-00005.tfrecord"


def _stage(output: str) -> list:
    """Two staged shards of train (2 records and 1), as WriteShards leaves them; their ShardResults."""
    import tensorflow as tf
    staging = layout.staging_dir(output, RUN)
    os.makedirs(staging)
    results = []
    for index, rels in enumerate([["cat/a.jpg", "dog/b.jpg"], ["cat/c.jpg"]]):
        name = f"train-{index:05d}-of-00002.tfrecord"
        temp = os.path.join(staging, name + ".0123abcd")
        with tf.io.TFRecordWriter(temp) as w:
            for i, rel in enumerate(rels):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_bytes(seed=i)])),
                    "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=[rel.encode()])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                        value=[rel.startswith("dog")]))})).SerializeToString())
        with open(temp, "rb") as f:
            data = f.read()
        labels = tuple(sorted({0: sum(r.startswith("cat") for r in rels), 1: sum(r.startswith("dog") for r in rels)}
                              .items()))
        results.append(ShardResult("train", index, 2, name, temp, len(rels), len(data),
                                   crc32c_text(google_crc32c.value(data)), tuple((k, v) for k, v in labels if v)))
    return results


def _publish(output: str, shards: list, listed: int, max_reject_fraction: float = 1.0, expect=None) -> None:
    spec = PublishSpec(OutputSpec(output, RUN), layout.staging_dir(output, RUN), Compression.NONE,
                       {"shards": {"output_format": "tfrecord"}}, "3" * 64, "test", max_reject_fraction)
    plans = {"train": SplitPlan(3, sum(s.bytes for s in shards), 2, {})}
    with TestPipeline() as p:
        def one(name, value):
            return p | f"Once{name}" >> beam.Create([None]) | name >> beam.Map(lambda _: value)
        manifest = {"shards": p | "Shards" >> beam.Create(shards),
                    "rejects": p | "Rejects" >> beam.Create([Batch([Reject("dog/bad.jpg", Reason.NOT_AN_IMAGE.value,
                                                                            "not an image file", "train")])]),
                    "stats": p | "Stats" >> beam.Create([("listed", listed - 1), ("listed", 1)]),
                    "label_map": one("LabelMap", LABELS), "plans": one("Plans", plans),
                    "fingerprint": one("Fingerprint", FP)} | Publish(spec)
        if expect:
            expect(manifest)


def _read_back(output: str, m: dict) -> list:
    import tensorflow as tf
    files = [os.path.join(output, s["name"]) for s in m["splits"]["train"]["shards"]]
    feature = {"image/filename": tf.io.FixedLenFeature([], tf.string)}
    return [f.decode() for b in tf.data.TFRecordDataset(files).batch(8)
            for f in tf.io.parse_example(b, feature)["image/filename"].numpy()]


def test_shards_move_in_under_their_names_and_the_manifest_comes_last(tmp_path):
    output = str(tmp_path / "out")
    shards = _stage(output)
    with open(os.path.join(output, STALE), "wb") as f:
        f.write(b"an older run's shard")
    run_lock.acquire(output, RUN)
    counts = {"listed": 4, "written": 3, "rejected": 1, "not_selected": 0, "excluded": {}}
    _publish(output, shards, listed=4, expect=lambda m: assert_that(
        m | beam.Map(lambda d: (d["run_id"], d["counts"])), equal_to([(RUN, counts)])))
    names = sorted(os.listdir(output))
    assert STALE not in names and not os.listdir(layout.staging_dir(output, RUN))
    assert {"train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord", layout.MANIFEST,
            layout.REJECTS} <= set(names)
    with open(os.path.join(output, layout.MANIFEST)) as f:
        m = json.load(f)
    assert m["counts"] == counts and m["rejects_by_reason"] == {"not_an_image": 1}
    assert m["splits"]["train"]["label_counts"] == {"cat": 2, "dog": 1}
    for s, r in zip(m["splits"]["train"]["shards"], shards):
        with open(os.path.join(output, s["name"]), "rb") as f:
            assert (s["records"], s["crc32c"]) == (r.records, crc32c_text(google_crc32c.value(f.read())))
    assert _read_back(output, m) == ["cat/a.jpg", "dog/b.jpg", "cat/c.jpg"]
    with open(os.path.join(output, layout.REJECTS)) as f:
        assert [(j["path"], j["reason"]) for j in map(json.loads, f)] == [("dog/bad.jpg", "not_an_image")]

    # A replay of the step (a runner's retry): it finds its own manifest, changes nothing, returns it.
    _publish(output, shards, listed=4, expect=lambda got: assert_that(
        got | beam.Map(lambda d: d["created"]), equal_to([m["created"]])))
    assert sorted(os.listdir(output)) == names


def test_too_many_rejects_publish_nothing_and_keep_the_rejects(tmp_path):
    output = str(tmp_path / "out")
    shards = _stage(output)
    run_lock.acquire(output, RUN)
    with pytest.raises(Exception, match="above --max_reject_fraction 0.1; nothing was published") as e:
        _publish(output, shards, listed=4, max_reject_fraction=0.1)
    assert TooManyRejects.__name__ in repr(e.value) or isinstance(e.value, TooManyRejects)
    names = set(os.listdir(output))
    assert layout.MANIFEST not in names and not any(layout.SHARD_RE.match(n) for n in names)
    with open(os.path.join(output, layout.failed_rejects_name(RUN))) as f:
        assert [json.loads(line)["reason"] for line in f] == ["not_an_image"]
