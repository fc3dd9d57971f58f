"""TFDS metadata beside the shards, so `tfds.builder_from_directory(OUT)` loads
an output: dataset_info.json (the splits' shard lengths and bytes, and a file
name template matching the shards' names: `train-00000-of-00016.tfrecord`, or
TFDS's own `mnist-train.tfrecord-00000-of-00016`), features.json (the
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

Each Example key is a top-level feature of its own name ("image/class/label"
is ex["image/class/label"]), not a nested FeaturesDict: TFDS's supervised keys
(`as_dataset(as_supervised=True)` gives (image, label)) name top-level
features only, and TFDS reads a flat "a/b" feature from the Example key "a/b"
as it would a nested one. The class names' file is then
"image.class.label.labels.txt" (TFDS's name for that feature). The image is a TFDS Image
of 3 channels (TFDS decodes with a fixed channel count: gray images come out
as RGB, a PNG's alpha is dropped); class labels with ids 0..N-1 are a
ClassLabel with their names, other integer labels a plain int64.

No metadata (and the reason, in the manifest) when TFDS cannot read the
output: compressed shards (TFDS reads uncompressed TFRecord only), or the
image feature dropped.
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
TFDS_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"  # --shard_template tfds: mnist-train.tfrecord-00000-of-00001


def filename_template(options: dict) -> str:
    """The splits' filepathTemplate for the shard names the run's settings give
    (--shard_suffix, --shard_template; the manifest's options.shards.names)."""
    names = ((options or {}).get("shards") or {}).get("names") or {}
    if names.get("template") == "tfds":
        return TFDS_TEMPLATE
    return {"none": "{SPLIT}-{SHARD_X_OF_Y}", ".tfrecords": "{SPLIT}-{SHARD_X_OF_Y}.tfrecords"}.get(
        names.get("suffix"), FILENAME_TEMPLATE)

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
    if "encoded" not in manifest.get("feature_roles", {}):
        return "the image feature was dropped (--feature_keys)"
    return ""


def _label_names(manifest: dict) -> Optional[list]:
    """Class names by id when the ids are exactly 0..N-1 (what ClassLabel
    holds) and TFDS reads every name back as written, else None (the label
    is then a plain int64; image/class/text and label_map.json keep the names)."""
    lm = manifest.get("label_map", {})
    if lm.get("kind") != LabelType.CLASS:
        return None
    by_id = {i: name for name, i in lm.get("classes", {}).items()}
    if not by_id or sorted(by_id) != list(range(len(by_id))):
        return None
    if any(not fits_labels_file(n) for n in by_id.values()):
        return None
    return [by_id[i] for i in range(len(by_id))]


def fits_labels_file(name: str) -> bool:
    """Whether TFDS reads this class name back from its labels file as it is.
    It reads the file as text (universal newlines: \n, \r and \r\n end a
    line), splits it at \n, strips each line of whitespace and drops blank
    ones (class_label_feature._load_names_from_file): a blank name vanishes and
    every later id gets the next one's name; " cat" comes back as "cat"."""
    return bool(name) and name == name.strip() and "\n" not in name and "\r" not in name


def names_why_not(manifest: dict) -> str:
    """Why the class names are not in TFDS's metadata although the labels are
    classes with ids 0..N-1 ("" when they are, or do not apply)."""
    lm = manifest.get("label_map", {})
    if lm.get("kind") != LabelType.CLASS:
        return ""
    bad = sorted(n for n in lm.get("classes", {}) if not fits_labels_file(n))
    if not bad:
        return ""
    shown = ", ".join(repr(n) for n in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
    return (f"class name(s) {shown} cannot be a line of TFDS's labels file (it strips each line and drops blank "
            "ones, which would shift every later id's name), so TFDS gets the label as a plain int64 without "
            "names; label_map.json and image/class/text hold them")


def labels_file(key: str) -> str:
    """The file TFDS reads a ClassLabel's names from, for a top-level feature
    named `key` (tfds.features.feature.convert_feature_name_to_filename)."""
    return key.replace("/", ".") + LABELS_SUFFIX


def supervised_keys(manifest: dict) -> Optional[dict]:
    """TFDS's supervised keys, (image, label or target), as dataset_info.json
    holds them; None for an output without labels."""
    roles = manifest.get("feature_roles", {})
    label = roles.get("label") if manifest.get("label_map", {}).get("kind") in (LabelType.CLASS, LabelType.INT) \
        else roles.get("target")
    if not label or label not in manifest["features"] or "encoded" not in roles:
        return None
    return {"tuple": {"items": [{"featureKey": roles["encoded"]}, {"featureKey": label}]}}


def metadata_files(manifest: dict, description: str = "") -> dict:
    """{file name: bytes} of the TFDS metadata for an output whose manifest
    is `manifest`; {} when unsupported(manifest) says why not."""
    if unsupported(manifest):
        return {}
    roles = {key: role for role, key in manifest.get("feature_roles", {}).items()}
    names = _label_names(manifest)
    # Every Example key a top-level feature (supervised keys name them), but
    # the per-object keys of one folder: one Sequence of objects under it.
    parent, objects = _objects(manifest, roles)
    tree: dict = {parent: _sequence(objects)} if parent else {}
    tree.update((key, _connector(key, kind, roles, names)) for key, kind in manifest["features"].items()
                if not (parent and key.startswith(parent + "/")))
    template = filename_template(manifest.get("options"))
    splits = [{"filepathTemplate": template, "name": split, "numBytes": str(s["bytes"]),
               "shardLengths": [str(e["records"]) for e in s["shards"]]}
              for split, s in manifest["splits"].items()]
    # "array_record" (--output_format): the FILEFORMAT of the template, so shards are
    # train-00000-of-00016.array_record; TFDS reads them with as_data_source.
    info = {"description": description, "fileFormat": manifest.get("output_format", "tfrecord"), "splits": splits,
            "version": "1.0.0"}
    if "{DATASET}" in template:  # TFDS fills it from the dataset's name
        info["name"] = manifest["options"]["shards"]["names"]["dataset"]
    supervised = supervised_keys(manifest)
    if supervised:
        info["supervisedKeys"] = supervised
    files = {DATASET_INFO: _json(info), FEATURES: _json(_features_dict(tree))}
    label_key = manifest.get("feature_roles", {}).get("label")
    if names is not None and label_key:
        files[labels_file(label_key)] = "".join(n + "\n" for n in names).encode("utf-8")
    return files


def _json(value: dict) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
