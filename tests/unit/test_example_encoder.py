"""The shard writer's Example encoder (features.ExampleEncoder) against the
general path (encode_example(example_features(...))) and protobuf's parser:
every label kind, renamed and dropped keys, resizing, a table's extra
columns, values that repeat (cached entries) and values that do not."""
import hashlib
import random

import pytest

from tfrecord_pipelines.transforms.core.example_codec import BYTES, FLOAT, INT64, encode_example
from tfrecord_pipelines.transforms.core.features import ExampleEncoder, example_features, features_for
from tfrecord_pipelines.transforms.core.records import Rec
from tfrecord_pipelines.transforms.core.annotations.boxes import Written
from tfrecord_pipelines.transforms.core.specs import LabelType


def objects(rng: random.Random) -> Written:
    """A detection record's object features: none, one, or several (--annotations)."""
    n = rng.choice([0, 1, 3])
    floats = lambda: [rng.random() for _ in range(n)]  # noqa: E731
    return Written(str(rng.randint(1, 10**12)), floats(), floats(), floats(), floats(),
                   [rng.choice([1, 7, 90, 2**40]) for _ in range(n)], [rng.choice([b"person", "ä".encode()])
                                                                       for _ in range(n)],
                   [rng.choice([0, 1]) for _ in range(n)], [rng.random() * 1e4 for _ in range(n)],
                   [0] * n, [1] * n, [rng.randbytes(rng.choice([60, 5000])) for _ in range(n)])


def records(n: int, rng: random.Random) -> list:
    out = []
    for i in range(n):
        extras = ()
        if i % 7 == 3:
            extras = (("bbox", FLOAT, [0.5, 0.25]), ("image/class/text", BYTES, [b"override"]),
                      ("z_id", INT64, [i]))
        out.append(Rec(f"train/c{i % 5}/im{i}-ä.jpg", "/x", 100 + i, label_text=f"c{i % 5}", label_id=i % 5,
                       target=rng.choice([0.5, -2.25, 1e-30, float(i)]), features=extras,
                       fmt=rng.choice(["jpeg", "png"]), source_fmt=rng.choice(["", "gif"]),
                       height=rng.choice([24, 128, 300, 70000]), width=rng.choice([1, 32, 129]),
                       channels=rng.choice([1, 3, 4]), colorspace="RGB",
                       orig_height=rng.choice([0, 600]), orig_width=rng.choice([0, 800]),
                       orig_sha256=rng.choice(["", "ab" * 32]), annotation=objects(rng)))
    return out


@pytest.mark.parametrize("kind", [k for k in LabelType])
@pytest.mark.parametrize("keys", [{}, {"image/encoded": "jpeg_bytes", "image/class/label": "a/label",
                                       "image/filename": ""}])
@pytest.mark.parametrize("resized", [False, True])
def test_same_bytes_as_the_general_path(kind, keys, resized):
    rng = random.Random(3)
    masks = kind is LabelType.BOXES and resized  # --masks png, with and without
    enc = ExampleEncoder(kind, keys, resized, masks)
    enc.CACHED = 5  # small, so the switch from caching to not caching is exercised too
    for rec in records(60, rng):
        data = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 10, 5000])))
        sha = hashlib.sha256(data).hexdigest()
        chunks, n = enc.encode(rec, data, sha)
        want, want_n = encode_example(example_features(rec, data, sha, kind, keys, resized, masks))
        assert b"".join(chunks) == b"".join(want) and n == want_n == len(b"".join(chunks))


def test_protobuf_reads_what_the_encoder_writes():
    from tensorflow.core.example import example_pb2
    rng = random.Random(5)
    enc = ExampleEncoder(LabelType.CLASS, {})
    for rec in records(20, rng):
        rec = rec._replace(features=())
        data = rng.randbytes(6000)
        chunks, n = enc.encode(rec, data, hashlib.sha256(data).hexdigest())
        assert any(c is data for c in chunks)  # the image bytes are not copied
        ex = example_pb2.Example.FromString(b"".join(chunks))
        f = ex.features.feature
        assert sorted(f) == sorted(ft.key for ft in features_for(LabelType.CLASS))
        assert f["image/encoded"].bytes_list.value == [data]
        assert f["image/class/label"].int64_list.value == [rec.label_id]
        assert f["image/height"].int64_list.value == [rec.height]
        assert f["image/filename"].bytes_list.value == [rec.rel.encode()]
        assert ex.SerializeToString(deterministic=True) == b"".join(chunks)


def test_detection_examples_are_what_tensorflow_serializes():
    """Per-object lists (floats, ints, names, PNG masks; empty for an image without
    boxes) byte for byte as protobuf's deterministic serialization writes them."""
    from tensorflow.core.example import example_pb2
    rng = random.Random(7)
    enc = ExampleEncoder(LabelType.BOXES, {}, False, True)
    for rec in records(30, rng):
        rec = rec._replace(features=())
        data = rng.randbytes(300)
        chunks, _ = enc.encode(rec, data, hashlib.sha256(data).hexdigest())
        ex = example_pb2.Example()
        for key, kind, values in [(k, v[0], v[1]) for k, v in example_features(
                rec, data, hashlib.sha256(data).hexdigest(), LabelType.BOXES, {}, False, True).items()]:
            lst = getattr(ex.features.feature[key], {"bytes": "bytes_list", "int64": "int64_list",
                                                     "float": "float_list"}[kind])
            lst.value.extend(values)
        assert ex.SerializeToString(deterministic=True) == b"".join(chunks)
        parsed = example_pb2.Example.FromString(b"".join(chunks)).features.feature
        assert list(parsed["image/object/class/label"].int64_list.value) == rec.annotation.label
        assert list(parsed["image/object/mask"].bytes_list.value) == rec.annotation.masks
        assert parsed["image/object/bbox/xmin"].float_list.value == pytest.approx(rec.annotation.xmin, rel=1e-6)
