"""Stage WriteShards: each shard's records, in shuffle order, read from their
files and streamed into one TFRecord file in the staging folder.

Image bytes are read here, one at a time, and never pass through the runner;
a worker holds one image and one shard's metadata at a time. The file gets a
unique temporary name; only the publish step gives it its final name, so a
retried or replayed bundle rewrites instead of duplicating, and nothing
partial is ever visible under a final name.

Input:  ((split, index, num_shards), [packed [(position, Rec), ...], ...])
Output: ShardResult; rejects [Reject] (`changed`: the file changed since it was validated)
"""
from __future__ import annotations

import collections
import hashlib
import operator
import uuid
from typing import Optional

import apache_beam as beam

from transforms import fsutil
from transforms.example_codec import BYTES, FLOAT, INT64, encode_example
from transforms.images import ImagePolicy, reencode_image
from transforms.list_inputs import REJECTS
from transforms.progress import Progress
from transforms.records import Batch, Reason, Rec, ShardResult, fingerprint, reject, unpack
from transforms.sharding import shard_name
from transforms.tfrecord_io import Compression, RecordWriter

DEFAULT_KEYS = {
    "encoded": "image/encoded", "format": "image/format", "height": "image/height",
    "width": "image/width", "channels": "image/channels", "colorspace": "image/colorspace",
    "label": "image/class/label", "text": "image/class/text", "target": "image/target",
    "filename": "image/filename", "sha256": "image/key/sha256",
}


def example_features(rec: Rec, data: bytes, sha256_hex: str, label_kind: str, keys: dict) -> dict:
    """The Example's features for one record, keyed by the (possibly renamed)
    feature keys; a key renamed to "" is left out."""
    f = {
        "image/encoded": (BYTES, [data]),
        "image/format": (BYTES, [rec.fmt.encode()]),
        "image/height": (INT64, [rec.height]),
        "image/width": (INT64, [rec.width]),
        "image/channels": (INT64, [rec.channels]),
        "image/colorspace": (BYTES, [rec.colorspace.encode()]),
        "image/filename": (BYTES, [rec.rel.encode("utf-8", "surrogateescape")]),
        "image/key/sha256": (BYTES, [sha256_hex.encode()]),
    }
    if label_kind in ("class", "int"):
        f["image/class/label"] = (INT64, [rec.label_id])
        f["image/class/text"] = (BYTES, [rec.label_text.encode("utf-8")])
    elif label_kind == "float":
        f["image/target"] = (FLOAT, [rec.target])
    for col, kind, values in rec.features:
        f[col] = (kind, values)
    if keys:
        f = {keys.get(k, k): v for k, v in f.items()}
        f.pop("", None)
    return f


def read_checked(rec: Rec) -> tuple[Optional[bytes], str]:
    """The file's bytes if they are still the ones validated, else (None, why)."""
    try:
        data = fsutil.read_bytes(rec.path)
    except Exception as e:  # any filesystem's error (OSError locally; BeamIOError, NotFound on GCS)
        return None, f"the file could not be read again: {type(e).__name__}: {e}"[:500]
    if len(data) != rec.size or (rec.crc >= 0 and fingerprint(data) != rec.crc):
        return None, f"the file changed since it was validated ({rec.size} -> {len(data)} bytes)"
    return data, ""


class _WriteShardFn(beam.DoFn):
    def __init__(self, staging: str, compression: Compression, policy: ImagePolicy,
                 keys: dict, progress_dir: str = ""):
        self._staging = staging
        self._compression = compression
        self._policy = policy
        self._keys = keys
        self._progress_dir = progress_dir
        self._records = beam.metrics.Metrics.counter("tfrecords", "records_written")
        self._bytes = beam.metrics.Metrics.counter("tfrecords", "bytes_written")
        self._shards = beam.metrics.Metrics.counter("tfrecords", "shards_written")
        self._changed = beam.metrics.Metrics.counter("tfrecords", "rejected_changed")

    def setup(self):
        self._progress = Progress(self._progress_dir, "write")

    def process(self, element, label_map):
        (split, index, num_shards), groups = element
        items = sorted((it for g in groups for it in unpack(g)), key=operator.itemgetter(0))
        name = shard_name(split, index, num_shards, self._compression.suffix)
        temp = fsutil.join(self._staging, f"{name}.{uuid.uuid4().hex}")
        label_counts = collections.Counter()
        rejects = Batch()
        with fsutil.open_write(temp) as sink:
            writer = RecordWriter(sink, self._compression)
            for _, rec in items:
                data, why = read_checked(rec)
                if data is None:
                    rejects.append(reject(rec, Reason.CHANGED, why))
                    continue
                if rec.reencode_to:
                    data = reencode_image(data, rec.reencode_to, self._policy)
                feats = example_features(rec, data, hashlib.sha256(data).hexdigest(), label_map.kind, self._keys)
                chunks, length = encode_example(feats)
                before = writer.bytes_written
                writer.write(chunks, length)
                if rec.label_id is not None:
                    label_counts[rec.label_id] += 1
                self._progress.add(1, writer.bytes_written - before)
            sha = writer.close()
        self._records.inc(writer.records)
        self._bytes.inc(writer.bytes_written)
        self._shards.inc()
        self._changed.inc(len(rejects))
        self._progress.flush()
        if rejects:
            yield beam.pvalue.TaggedOutput(REJECTS, rejects)
        yield ShardResult(split, index, num_shards, name, temp, writer.records, writer.bytes_written,
                          sha, tuple(sorted(label_counts.items())))

    def teardown(self):
        self._progress.flush(force=True)


class WriteShards(beam.PTransform):
    def __init__(self, staging: str, compression: Compression, policy: ImagePolicy,
                 keys: dict, label_map, progress_dir: str = ""):
        super().__init__()
        self._args = (staging, compression, policy, keys)
        self._label_map = label_map
        self._progress_dir = progress_dir

    def expand(self, shard_inputs):
        staging, compression, policy, keys = self._args
        return shard_inputs | "Write" >> beam.ParDo(
            _WriteShardFn(staging, compression, policy, keys, self._progress_dir),
            beam.pvalue.AsSingleton(self._label_map)).with_outputs(REJECTS, main="shards")


def feature_schema(label_kind: str, extra_kinds: tuple, keys: dict) -> dict:
    """{feature key: kind} of every Example written, after renaming."""
    schema = {"image/encoded": BYTES, "image/format": BYTES, "image/height": INT64, "image/width": INT64,
              "image/channels": INT64, "image/colorspace": BYTES, "image/filename": BYTES,
              "image/key/sha256": BYTES}
    if label_kind in ("class", "int"):
        schema.update({"image/class/label": INT64, "image/class/text": BYTES})
    elif label_kind == "float":
        schema["image/target"] = FLOAT
    schema.update(dict(extra_kinds))
    if keys:
        schema = {keys.get(k, k): v for k, v in schema.items()}
        schema.pop("", None)
    return dict(sorted(schema.items()))
