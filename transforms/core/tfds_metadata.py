"""TFDS metadata beside the shards, so `tfds.builder_from_directory(OUT)` loads
an output: dataset_info.json (the splits' shard lengths and bytes, and a file
name template matching `train-00000-of-00016.tfrecord`), features.json (the
Example's features as TFDS feature connectors) and, for class labels, the
label feature's `<key with / as ->.labels.txt` of class names by id.

Why we write this JSON ourselves rather than call
`tfds.folder_dataset.write_metadata`: publish runs once per conversion, on
one worker, and tensorflow_datasets imports TensorFlow (~2.6 s and ~600 MB,
more with tfds' own imports) and pulls ~10 more packages into the product's
requirements; a small local conversion takes well under a second today.
The files are a handful of fixed JSON shapes (TFDS's DatasetInfo and
FeaturesDict protos in JSON form), which tests/e2e/test_tfds.py holds to what
write_metadata itself writes for the same dataset, and loads with tfds.

Keys with "/" become nested FeaturesDicts, as TFDS names nested features
("image/class/label" is image -> class -> label). The image is a TFDS Image
of 3 channels (TFDS decodes with a fixed channel count: gray images come out
as RGB, a PNG's alpha is dropped); class labels with ids 0..N-1 are a
ClassLabel with their names, other integer labels a plain int64.

No metadata (and the reason, in the manifest) when TFDS cannot read the
output: compressed shards (TFDS reads uncompressed TFRecord only), or renamed
keys where one key is a prefix folder of another ("image" and "image/height").
"""
from __future__ import annotations

import json
from typing import Optional

from tfrecord_pipelines.transforms.core.example_codec import BYTES, FLOAT, INT64
from tfrecord_pipelines.transforms.core.specs import LabelType

DATASET_INFO = "dataset_info.json"
FEATURES = "features.json"
LABELS_SUFFIX = ".labels.txt"
FILENAME_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}"  # train-00000-of-00016.tfrecord

_PKG = "tensorflow_datasets.core.features."
_DTYPES = {BYTES: "string", INT64: "int64", FLOAT: "float32"}


def _tensor(kind: str, shape: list, cls: str) -> dict:
    dims = {"dimensions": [str(d) for d in shape]} if shape else {}
    return {"pythonClassName": _PKG + cls, "tensor": {"dtype": _DTYPES[kind], "encoding": "none", "shape": dims}}


# Detection (--annotations): one value per object; inside a Sequence, each is one object's value.
_OBJECT_ROLES = frozenset({"bbox_xmin", "bbox_ymin", "bbox_xmax", "bbox_ymax", "object_label", "object_text",
                           "is_crowd", "area", "difficult", "truncated", "mask"})


def _object_connector(kind: str, role: str) -> dict:
    """One object's value inside the Sequence of objects."""
    if role == "object_text":
        return {"pythonClassName": _PKG + "text_feature.Text", "text": {}}
    if role == "mask":
        return {"pythonClassName": _PKG + "image_feature.Image",
                "image": {"dtype": "uint8", "encodingFormat": "png", "shape": {"dimensions": ["-1", "-1", "1"]}}}
    return _tensor(kind, [], "tensor_feature.Tensor")


def _objects(manifest: dict, roles: dict) -> tuple:
    """(folder, {key: connector}) when the per-object keys are exactly the keys
    of one folder ("image/object"): a TFDS Sequence of objects there, each
    with its box, class and flags; else (None, {}) and each is a list."""
    keys = [k for k in manifest["features"] if roles.get(k) in _OBJECT_ROLES]
    folders = {k.rsplit("/", 1)[0] if "/" in k else "" for k in keys}
    parent = min(folders, key=len) if folders else ""
    if not keys or not parent or any(not k.startswith(parent + "/") for k in keys) or any(
            k.startswith(parent + "/") and k not in keys for k in manifest["features"]):
        return None, {}
    return parent, {k[len(parent) + 1:]: _object_connector(manifest["features"][k], roles[k]) for k in keys}


def _sequence(objects: dict) -> dict:
    tree: dict = {}
    for key, connector in objects.items():
        *parents, leaf = key.split("/")
        node = tree
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = connector
    return {"pythonClassName": _PKG + "sequence_feature.Sequence",
            "sequence": {"feature": _features_dict(tree), "length": "-1"}}


def _connector(key: str, kind: str, roles: dict, label_names: Optional[list]) -> dict:
    """The TFDS feature connector of one Example feature."""
    role = roles.get(key)
    if role in _OBJECT_ROLES:  # not under one folder: a list
        return _tensor(kind, [-1], "tensor_feature.Tensor")
    if role == "encoded":
        return {"pythonClassName": _PKG + "image_feature.Image",
                "image": {"dtype": "uint8", "shape": {"dimensions": ["-1", "-1", "3"]}}}
    if role == "label" and label_names is not None:
        return {"pythonClassName": _PKG + "class_label_feature.ClassLabel",
                "classLabel": {"numClasses": str(len(label_names))}}
    if role == "text":
        return {"pythonClassName": _PKG + "text_feature.Text", "text": {}}
    if role is None:  # a label table column: a list (an empty cell is empty)
        return _tensor(kind, [-1], "tensor_feature.Tensor")
    if kind == "bytes":
        return _tensor(kind, [], "tensor_feature.Tensor")
    return _tensor(kind, [], "scalar.Scalar")


def _features_dict(tree: dict) -> dict:
    return {"pythonClassName": _PKG + "features_dict.FeaturesDict",
            "featuresDict": {"features": {k: _features_dict(v) if isinstance(v, dict) and "pythonClassName" not in v
                                          else v for k, v in sorted(tree.items())}}}


def unsupported(manifest: dict) -> str:
    """Why TFDS cannot load this output ("" if it can)."""
    if manifest.get("compression", "none") != "none":
        return f"TFDS reads uncompressed TFRecord shards only (these are {manifest['compression']})"
    keys = sorted(manifest["features"])
    for key in keys:
        if not all(key.split("/")):
            return f"feature key {key!r} has an empty part between '/'; TFDS nests features by '/'"
    for a, b in zip(keys, keys[1:]):
        if b.startswith(a + "/"):
            return f"feature key {a!r} is also the folder of {b!r}; TFDS nests features by '/'"
    if "encoded" not in manifest.get("feature_roles", {}):
        return "the image feature was dropped (--feature_keys)"
    return ""


def _label_names(manifest: dict) -> Optional[list]:
    """Class names by id when the ids are exactly 0..N-1 (what ClassLabel
    holds), else None."""
    lm = manifest.get("label_map", {})
    if lm.get("kind") != LabelType.CLASS:
        return None
    by_id = {i: name for name, i in lm.get("classes", {}).items()}
    if not by_id or sorted(by_id) != list(range(len(by_id))):
        return None
    if any("\n" in n or "\r" in n for n in by_id.values()):  # one name a line in the labels file
        return None
    return [by_id[i] for i in range(len(by_id))]


def labels_file(key: str) -> str:
    """The file TFDS reads a ClassLabel's names from, for a (nested) key."""
    return key.replace("/", "-") + LABELS_SUFFIX


def metadata_files(manifest: dict, description: str = "") -> dict:
    """{file name: bytes} of the TFDS metadata for an output whose manifest
    is `manifest`; {} when unsupported(manifest) says why not."""
    if unsupported(manifest):
        return {}
    roles = {key: role for role, key in manifest.get("feature_roles", {}).items()}
    names = _label_names(manifest)
    tree: dict = {}
    parent, objects = _objects(manifest, roles)
    if parent:
        *up, leaf = parent.split("/")
        node = tree
        for p in up:
            node = node.setdefault(p, {})
        node[leaf] = _sequence(objects)
    for key, kind in manifest["features"].items():
        if parent and key.startswith(parent + "/"):
            continue
        *parents, leaf = key.split("/")
        node = tree
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = _connector(key, kind, roles, names)
    splits = [{"filepathTemplate": FILENAME_TEMPLATE, "name": split, "numBytes": str(s["bytes"]),
               "shardLengths": [str(e["records"]) for e in s["shards"]]}
              for split, s in manifest["splits"].items()]
    # "array_record" (--output_format): the FILEFORMAT of the template, so shards are
    # train-00000-of-00016.array_record; TFDS reads them with as_data_source.
    info = {"description": description, "fileFormat": manifest.get("output_format", "tfrecord"), "splits": splits,
            "version": "1.0.0"}
    files = {DATASET_INFO: _json(info), FEATURES: _json(_features_dict(tree))}
    label_key = manifest.get("feature_roles", {}).get("label")
    if names is not None and label_key:
        files[labels_file(label_key)] = "".join(n + "\n" for n in names).encode("utf-8")
    return files


def _json(value: dict) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
