"""The Example's features: one table, from which everything else is derived.

Each row is one feature: its role (the short name used by --feature_keys'
documentation and the manifest's `feature_roles`), its default key, its kind,
which label kinds carry it, how its value is taken from a stored record, and
the sentence the README's table shows. The Example values
(`example_features`), the default keys (`DEFAULT_KEYS`), the manifest's
schema (`feature_schema`), `schema.pbtxt` and tfx-bsl's decoder
(`tfmd_schema`), the TFDS features and `verify`'s expectations all come from
here; adding a feature is adding a row (and its test).
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional

from tfrecord_pipelines.transforms.core.example_codec import BYTES, FLOAT, INT64, assemble, bytes_entry, encode_example, entry
from tfrecord_pipelines.transforms.core.annotations import path_id
from tfrecord_pipelines.transforms.core.records import Rec
from tfrecord_pipelines.transforms.core.specs import LabelType


class Feature(NamedTuple):
    role: str
    key: str
    kind: str                              # BYTES, INT64 or FLOAT (transforms/core/example_codec.py)
    value: Callable[[Rec, bytes, str], object]  # (record, bytes stored, their sha256 hex) -> the one value
    doc: str                               # the README's "value" column
    labels: Optional[tuple] = None         # the label kinds that carry it; None: every record
    resized_only: bool = False             # carried only when --resize_* is on
    repeated: bool = False                 # `value` gives a list (one value per object), not one value
    masks_only: bool = False               # carried only with --masks png
    opt_in: tuple = ()                     # label kinds that carry it too with --source_ids


_CLASSES = (LabelType.CLASS, LabelType.INT)
_BOXES = (LabelType.BOXES,)


def _text(s: str) -> bytes:
    return s.encode("utf-8")


FEATURES = (
    Feature("encoded", "image/encoded", BYTES, lambda r, d, h: d,
            "the original file bytes, unchanged (or re-encoded, see below)"),
    Feature("format", "image/format", BYTES, lambda r, d, h: _text(r.fmt),
            "`jpeg` or `png`, sniffed from the bytes, not the extension"),
    Feature("source_format", "image/source_format", BYTES, lambda r, d, h: _text(r.source_fmt or r.fmt),
            "the input file's format before any re-encoding (`jpeg`, `png`, `gif`, `bmp`, `webp`, ...); "
            "`jpeg-cmyk`, `jpeg-ycck` or `png-palette` when that colour model was converted to RGB"),
    Feature("height", "image/height", INT64, lambda r, d, h: r.height,
            "height in pixels, as `tf.io.decode_image(..., expand_animations=False)` returns it"),
    Feature("width", "image/width", INT64, lambda r, d, h: r.width, "width in pixels, likewise"),
    Feature("channels", "image/channels", INT64, lambda r, d, h: r.channels, "channels, likewise"),
    Feature("colorspace", "image/colorspace", BYTES, lambda r, d, h: _text(r.colorspace),
            "`RGB`, `RGBA`, `Grayscale` or `GrayscaleAlpha`"),
    Feature("label", "image/class/label", INT64, lambda r, d, h: r.label_id,
            "class id (class and integer labels)", _CLASSES),
    Feature("text", "image/class/text", BYTES, lambda r, d, h: _text(r.label_text),
            "the label as found (class and integer labels)", _CLASSES),
    Feature("target", "image/target", FLOAT, lambda r, d, h: r.target,
            "regression target (float labels)", (LabelType.FLOAT,)),
    Feature("filename", "image/filename", BYTES, lambda r, d, h: r.rel.encode("utf-8", "surrogateescape"),
            "path relative to the root"),
    Feature("sha256", "image/key/sha256", BYTES, lambda r, d, h: h.encode(),
            "hex sha256 of `image/encoded`"),
    Feature("original_height", "image/original/height", INT64, lambda r, d, h: r.orig_height or r.height,
            "with `--resize_*` only: the input file's height before resizing, as decoded", resized_only=True),
    Feature("original_width", "image/original/width", INT64, lambda r, d, h: r.orig_width or r.width,
            "with `--resize_*` only: the input file's width, likewise", resized_only=True),
    Feature("original_sha256", "image/original/sha256", BYTES, lambda r, d, h: (r.orig_sha256 or h).encode(),
            "with `--resize_*` only: hex sha256 of the input file's bytes", resized_only=True),
    # Object detection (--annotations): the TF Object Detection API's and Model Garden's keys, one
    # value per object; `Rec.annotation` is the shard writer's boxes.Written by then.
    Feature("source_id", "image/source_id", BYTES,
            lambda r, d, h: _text(r.annotation.source_id if r.annotation else path_id(r.rel)),
            "detection: COCO's image id; for VOC and YOLO the file name's number, else a number from the path; "
            "with `--source_ids`, on every record (a number from the path's hash)",
            _BOXES, opt_in=(LabelType.CLASS, LabelType.INT, LabelType.FLOAT, LabelType.NONE)),
    Feature("bbox_xmin", "image/object/bbox/xmin", FLOAT, lambda r, d, h: r.annotation.xmin,
            "detection: each box's left edge, normalized to [0, 1] of the width", _BOXES, repeated=True),
    Feature("bbox_ymin", "image/object/bbox/ymin", FLOAT, lambda r, d, h: r.annotation.ymin,
            "detection: top edge, normalized to the height", _BOXES, repeated=True),
    Feature("bbox_xmax", "image/object/bbox/xmax", FLOAT, lambda r, d, h: r.annotation.xmax,
            "detection: right edge", _BOXES, repeated=True),
    Feature("bbox_ymax", "image/object/bbox/ymax", FLOAT, lambda r, d, h: r.annotation.ymax,
            "detection: bottom edge", _BOXES, repeated=True),
    Feature("object_label", "image/object/class/label", INT64, lambda r, d, h: r.annotation.label,
            "detection: each object's class id (`label_map.json`)", _BOXES, repeated=True),
    Feature("object_text", "image/object/class/text", BYTES, lambda r, d, h: r.annotation.text,
            "detection: each object's class name", _BOXES, repeated=True),
    Feature("is_crowd", "image/object/is_crowd", INT64, lambda r, d, h: r.annotation.is_crowd,
            "detection: 1 for a COCO crowd region, else 0", _BOXES, repeated=True),
    Feature("area", "image/object/area", FLOAT, lambda r, d, h: r.annotation.area,
            "detection: COCO's segment area (else the box's), in pixels of the stored image", _BOXES,
            repeated=True),
    Feature("difficult", "image/object/difficult", INT64, lambda r, d, h: r.annotation.difficult,
            "detection: VOC's difficult flag (else 0)", _BOXES, repeated=True),
    Feature("truncated", "image/object/truncated", INT64, lambda r, d, h: r.annotation.truncated,
            "detection: VOC's truncated flag (else 0)", _BOXES, repeated=True),
    Feature("mask", "image/object/mask", BYTES, lambda r, d, h: r.annotation.masks,
            "with `--masks png` only: each object's mask, a PNG of the stored image's size (0 and 1)", _BOXES,
            repeated=True, masks_only=True),
)

DEFAULT_KEYS = {f.role: f.key for f in FEATURES}   # role -> default key


@functools.lru_cache(maxsize=None)
def features_for(label_kind, resized: bool = False, masks: bool = False, source_ids: bool = False) -> tuple:
    """The rows every record carries for this label kind (LabelType or its
    value); `resized`: the run resizes (--resize_*); `masks`: --masks png;
    `source_ids`: --source_ids."""
    kind = LabelType(label_kind)
    return tuple(f for f in FEATURES if (f.labels is None or kind in f.labels or source_ids and kind in f.opt_in)
                 and (resized or not f.resized_only) and (masks or not f.masks_only))


def repeated_keys() -> frozenset:
    """The default keys holding one value per object (a VarLen feature to read)."""
    return frozenset(f.key for f in FEATURES if f.repeated)


def _renamed(d: dict, keys: dict) -> dict:
    if not keys:
        return d
    d = {keys.get(k, k): v for k, v in d.items()}
    d.pop("", None)   # a key renamed to "" is left out
    return d


def example_features(rec: Rec, data: bytes, sha256_hex: str, label_kind, keys: dict,
                     resized: bool = False, masks: bool = False, source_ids: bool = False) -> dict:
    """{key: (kind, values)} of one record's Example, keyed by the (possibly
    renamed) feature keys; then the table's extra columns."""
    f = {ft.key: (ft.kind, list(ft.value(rec, data, sha256_hex)) if ft.repeated else [ft.value(rec, data, sha256_hex)])
         for ft in features_for(label_kind, resized, masks, source_ids)}
    for col, kind, values in rec.features:
        f[col] = (kind, values)
    return _renamed(f, keys)


class ExampleEncoder:
    """Encodes records' Examples, as encode_example(example_features(...))
    does, byte for byte (tests/unit/test_example_encoder.py), at a quarter of its cost:
    the rows are put in key order once, and an entry whose value repeats from
    record to record (format, sizes, the class) is encoded once and reused."""

    CACHED = 4096  # distinct values a row keeps; a row with more (filenames) stops caching
    SMALL = 48     # bytes values longer than this are not cached (hashes, image bytes)

    def __init__(self, label_kind, keys: dict, resized: bool = False, masks: bool = False, source_ids: bool = False):
        self._kind, self._keys, self._resized, self._masks = label_kind, keys, resized, masks
        self._source_ids = source_ids
        rows = [(keys.get(ft.key, ft.key), ft) for ft in features_for(label_kind, resized, masks, source_ids)]
        # A repeated row (one value per object) is never cached: None in the cache's place.
        self._rows = [(key, ft.kind, ft.value, None if ft.repeated else {}) for key, ft in rows if key]
        self._repeated = {key for key, ft in rows if ft.repeated}
        self._rows.sort(key=lambda row: row[0].encode("utf-8"))

    def encode(self, rec: Rec, data: bytes, sha256_hex: str) -> tuple[list, int]:
        """(chunks, length) of the record's Example."""
        if rec.features:  # a table's extra columns: merged in key order (and renamed) the general way
            return encode_example(example_features(rec, data, sha256_hex, self._kind, self._keys, self._resized,
                                                   self._masks, self._source_ids))
        pieces: list = []
        total = 0
        for key, kind, value, cache in self._rows:
            v = value(rec, data, sha256_hex)
            cached = cache is not None and (kind != BYTES or len(v) <= self.SMALL)
            got = cache.get(v) if cached else None
            if got is None:
                if key in self._repeated:
                    got = entry(key, kind, v)
                else:
                    got = bytes_entry(key, v) if kind == BYTES else entry(key, kind, (v,))
                if cached:
                    cache[v] = got
                    if len(cache) >= self.CACHED:  # values that do not repeat: caching them costs
                        self._rows = [r if r[0] != key else (key, kind, value, None) for r in self._rows]
            pieces += got[0]
            total += got[1]
        return assemble(pieces, total)


def feature_schema(label_kind, extra_kinds: tuple, keys: dict, resized: bool = False, masks: bool = False,
                   source_ids: bool = False) -> dict:
    """{feature key: kind} of every Example written, after renaming, sorted."""
    schema = {f.key: f.kind for f in features_for(label_kind, resized, masks, source_ids)}
    schema.update(dict(extra_kinds))
    return dict(sorted(_renamed(schema, keys).items()))


def feature_roles(schema: dict, keys: dict) -> dict:
    """{role: key as written} of the roles present in `schema` (the manifest's)."""
    return {role: keys.get(key, key) for role, key in DEFAULT_KEYS.items() if keys.get(key, key) in schema}


def tfmd_schema(features: dict, required: bool = True):
    """The features as a tensorflow_metadata Schema proto: `schema.pbtxt` and
    tfx-bsl's Example decoder (verify) are built from it."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    kinds = {BYTES: schema_pb2.BYTES, INT64: schema_pb2.INT, FLOAT: schema_pb2.FLOAT}
    schema = schema_pb2.Schema()
    for name, kind in features.items():
        f = schema.feature.add(name=name, type=kinds[kind])
        if required:
            f.presence.min_fraction = 1.0
    return schema
