"""Python source that reads an output, generated from its manifest: behind
`tfrecords spec` (commands/spec.py) and the API's spec().

The code is generated from the output's manifest, so it names the feature keys
as written (after --feature_keys renames), their types, the compression and the
label kind: a tf.data pipeline (shards listed from the manifest, shuffled,
read by a parallel interleave, parsed, images decoded, labels), a TFDS line
when the folder holds TFDS metadata, and PyTorch (the `tfrecord` package) and
NVIDIA DALI readers when the shards have index files (--index_files). For
ArrayRecord shards (--output_format array_record) it prints a Grain module
instead: a random-access source, a global shuffle, and TFDS's as_data_source.

The printed code runs as it is: DALI is imported inside its function, so the
tf.data module needs only TensorFlow; the PyTorch reader follows as a module
of its own (after a "# ---- PyTorch:" line) that never imports TensorFlow.
"""
from __future__ import annotations

import re
from typing import Optional

from tfrecord_pipelines.transforms.core.example_codec import BYTES, FLOAT, INT64
from tfrecord_pipelines.transforms.core.features import FEATURES as _FEATURE_TABLE
from tfrecord_pipelines.transforms.core import sharding
from tfrecord_pipelines.transforms.core.specs import LabelType, ShardNames
from tfrecord_pipelines.transforms.storage import layout

_TF_TYPES = {BYTES: "tf.string", INT64: "tf.int64", FLOAT: "tf.float32"}
# A tool version as it may appear in a comment; any other text is shown as "?" (see _header).
_VERSION = re.compile(r"[0-9A-Za-z.+_-]{1,40}")
_TORCH_TYPES = {BYTES: "byte", INT64: "int", FLOAT: "float"}
_DALI_TYPES = {BYTES: ("tfrecord.string", '""'), INT64: ("tfrecord.int64", "-1"),
               FLOAT: ("tfrecord.float32", "0.0")}


def _feature_lines(m: dict) -> list[str]:
    """Every feature: the ones the writer always sets once as FixedLen scalars;
    label-table extras as VarLen (an empty cell is an empty list)."""
    roles = set(m.get("feature_roles", {}).values())
    repeated = _repeated(m)
    lines = []
    for key, kind in m["features"].items():
        if key in repeated:
            lines.append(f"    {key!r}: tf.io.VarLenFeature({_TF_TYPES[kind]}),  # one value per object")
        elif key in roles:
            lines.append(f"    {key!r}: tf.io.FixedLenFeature([], {_TF_TYPES[kind]}),")
        else:
            lines.append(f"    {key!r}: tf.io.VarLenFeature({_TF_TYPES[kind]}),  # a label table column")
    return lines


_REPEATED_ROLES = frozenset(f.role for f in _FEATURE_TABLE if f.repeated)


def _repeated(m: dict) -> set:
    """The keys (as written) holding one value per object (--annotations)."""
    return {k for role, k in m.get("feature_roles", {}).items() if role in _REPEATED_ROLES}


def _detection_parse(m: dict, encoded: Optional[str]) -> list:
    """parse() of a detection output: the image, its boxes [N, 4] as (ymin, xmin, ymax, xmax)
    normalized (the Object Detection API's order), class ids [N], and masks [N, H, W] when written."""
    roles = m.get("feature_roles", {})
    box = [roles.get(f"bbox_{c}") for c in ("ymin", "xmin", "ymax", "xmax")]
    L = ["    ex = tf.io.parse_single_example(record, FEATURES)"]
    out = []
    if encoded:
        L += ["    # uint8 [height, width, 3]; the boxes are normalized, so they hold after any resize",
              f"    image = tf.io.decode_image(ex[{encoded!r}], channels=3, expand_animations=False)"]
        out.append("image")
    if all(box):
        L += ["    # [N, 4] float32: ymin, xmin, ymax, xmax in [0, 1], as the Object Detection API orders them",
              f"    boxes = tf.stack([tf.sparse.to_dense(ex[k]) for k in {box!r}], axis=-1)"]
        out.append("boxes")
    if roles.get("object_label"):
        L.append(f"    classes = tf.sparse.to_dense(ex[{roles['object_label']!r}])  # [N] int64 ids of CLASS_NAMES")
        out.append("classes")
    if roles.get("mask"):
        h, w = roles.get("height", "image/height"), roles.get("width", "image/width")
        L += ["    # [N, height, width] uint8 0/1: one PNG per object (none for an image without boxes)",
              f"    pngs = tf.sparse.to_dense(ex[{roles['mask']!r}], default_value=b'')",
              "    masks = tf.cond(tf.size(pngs) > 0,",
              "                    lambda: tf.map_fn(lambda p: tf.io.decode_png(p, channels=1)[:, :, 0], pngs,",
              "                                      fn_output_signature=tf.TensorSpec([None, None], tf.uint8)),",
              f"                    lambda: tf.zeros([0, ex[{h!r}], ex[{w!r}]], tf.uint8))"]
        out.append("masks")
    L.append(f"    return {', '.join(out) if out else 'ex'}")
    return L


def _parse_lines(encoded: Optional[str], label: Optional[str], label_what: str) -> list:
    L = ["    ex = tf.io.parse_single_example(record, FEATURES)"]
    returned = []
    if encoded:
        L += ["    # uint8 [height, width, channels]; channels=3 makes gray and RGB images alike, and",
              "    # tf.image.resize(image, [224, 224]) makes them one size, to batch them",
              f"    image = tf.io.decode_image(ex[{encoded!r}], expand_animations=False)"]
        returned.append("image")
    if label:
        L.append(f"    label = ex[{label!r}]  # {label_what}")
        returned.append("label")
    L.append(f"    return {', '.join(returned) if returned else 'ex'}")
    return L


def _label(m: dict) -> tuple[Optional[str], str]:
    """(feature key of the label or target, what it is)."""
    roles = m.get("feature_roles", {})
    kind = m.get("label_map", {}).get("kind", LabelType.NONE)
    if kind in (LabelType.CLASS, LabelType.INT) and "label" in roles:
        return roles["label"], "class id (int64)"
    if kind == LabelType.FLOAT and "target" in roles:
        return roles["target"], "regression target (float32)"
    return None, ""


def _text(s: str) -> str:
    """Text from the manifest or a path, for a comment of the printed code:
    one line of printable characters (a newline would end the comment and
    start code; control and bidirectional characters would hide what the code
    says), as repr() escapes them."""
    return repr(str(s))[1:-1]


def _header(what: str, output: str, m: dict, sizes: str) -> list:
    """The printed module's first comment lines. The first two lines hold
    fixed text only: Python reads a `coding:` declaration there (a tool
    version "coding: utf-7" would make the file decode otherwise)."""
    version = m.get("tool_version")
    version = version if isinstance(version, str) and _VERSION.fullmatch(version) else "?"
    return ["# Reads a tfrecord-pipelines output " + what + ".",
            "# Generated by `tfrecords spec` from the output's manifest.",
            f"# Output: {_text(output)}: {sizes}; written by tfrecord-pipelines {version}."]


def _sizes(m: dict, splits: list) -> str:
    return ", ".join(f"{_text(s)} ({m['splits'][s]['records']:,} records)" for s in splits)


_TPU = ["# Made --for {name}: tensorflow/tpu's imagenet_input.py reads it as it is: its --data_dir is OUT,",
        "# it globs OUT/train-* and OUT/validation-*, decodes JPEG (every record is one) and subtracts 1",
        "# from image/class/label (written 1-based: --label_offset 1), which gives the classes 0..N-1."]
_READER_NOTES = {
    "tpu-resnet": _TPU,
    "tpu-efficientnet": [*_TPU,
                         "# Its holdout_shards mode opens OUT/train-%05d-of-01024 by name: the shards have no",
                         "# suffix (--shard_suffix none); a train split of 1,000,000 records or more has 1024."],
    "model-garden": ["# Made --for model-garden: Model Garden's classification and detection inputs read it with",
                     "# input_path OUT/train* and decode_jpeg_only=True (every record is JPEG); image/source_id,",
                     "# which its detection decoder requires, is on every record (--source_ids)."],
    "keras": ["# Made --for keras: class ids in keras.utils.image_dataset_from_directory's order (folder names",
              "# sorted as strings), so CLASS_NAMES[i] is its class_names[i]."],
    "pytorch": ["# Made --for pytorch: the index of OUT/<shard> is OUT/index/<shard>.idx; the PyTorch module",
                "# below (worker_records, torch_dataset) reads every record as an RGB or grey JPEG."],
    "dali": ["# Made --for dali: the index of OUT/<shard> is OUT/index/<shard>.idx; dali_pipeline below reads",
             "# every record as a JPEG (fn.decoders.image)."],
}


def _reader_lines(m: dict) -> list:
    """The notes for the reader the output was made for (--for NAME), from a fixed table: the
    manifest only chooses which."""
    reader = ((m.get("options") or {}).get("output") or {}).get("reader")
    name = reader[0] if isinstance(reader, list) and reader and isinstance(reader[0], str) else ""
    return [line.format(name=name) for line in _READER_NOTES.get(name, [])]


def _glob(m: dict) -> str:
    """The shards' glob with {split} in the split's place (the output's --shard_template)."""
    names = sharding.names_of(m.get("options"))
    if names.template == "tfds" and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", names.dataset):
        return sharding.pattern_of(names, "tfrecord", "{split}")
    return sharding.pattern_of(ShardNames(), "tfrecord", "{split}")


def reading_code(output: str, m: dict, tfds_metadata: bool = False) -> str:
    """The Python source that reads `output` (whose manifest is `m`)."""
    if m.get("output_format") == "array_record":
        return _grain_code(output, m, tfds_metadata)
    roles = m.get("feature_roles", {})
    encoded = roles.get("encoded")
    label, label_what = _label(m)
    splits = list(m["splits"])
    indexed = any(isinstance(e.get("index"), str) for s in m["splits"].values() for e in s["shards"])
    kind = m.get("label_map", {}).get("kind", LabelType.NONE)
    L = [
        *_header("with tf.data", output, m, _sizes(m, splits)),
        *_reader_lines(m),
        "import json",
        "",
        "import tensorflow as tf",
        "",
        f"OUT = {output!r}",
        f"COMPRESSION = {m['tf_compression_type']!r}  # compression_type for tf.data.TFRecordDataset",
        "FEATURES = {",
        *_feature_lines(m),
        "}",
    ]
    if kind in (LabelType.CLASS, LabelType.BOXES):
        L += ["# {class id: class name}, from the label map written beside the shards",
              f"with tf.io.gfile.GFile(OUT + '/{layout.LABEL_MAP}') as f:",
              "    CLASS_NAMES = {i: name for name, i in json.load(f).items()}"]
    L += [
        "",
        "",
        "def shard_files(split):",
        f"    \"\"\"The split's shards, as the manifest lists them (or: tf.io.gfile.glob(f'{{OUT}}/{_glob(m)}')).\"\"\"",
        f"    with tf.io.gfile.GFile(OUT + '/{layout.MANIFEST}') as f:",
        "        return [OUT + '/' + s['name'] for s in json.load(f)['splits'][split]['shards']]",
        "",
        "",
        "def parse(record):",
    ]
    if kind == LabelType.BOXES:
        L += _detection_parse(m, encoded)
    else:
        L += _parse_lines(encoded, label, label_what)
    L += [
        "",
        "",
        "def dataset(split, training=True):",
        "    \"\"\"training: shuffled shards, interleaved out of order, records shuffled; else a fixed order.\"\"\"",
        "    files = shard_files(split)",
        "    ds = tf.data.Dataset.from_tensor_slices(files)",
        "    if training:",
        "        ds = ds.shuffle(len(files), reshuffle_each_iteration=True)",
        "    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=COMPRESSION),",
        "                       cycle_length=min(len(files), 16), num_parallel_calls=tf.data.AUTOTUNE,",
        "                       deterministic=not training)",
        "    if training:",
        "        ds = ds.shuffle(10_000)",
        "    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)",
        "",
        "",
        f"# e.g. for image, label in dataset({splits[0] if splits else 'train'!r}).take(1): ...",
    ]
    if tfds_metadata:
        L += ["",
              "# TFDS: the folder holds dataset_info.json and features.json",
              "# import tensorflow_datasets as tfds",
              f"# ds = tfds.builder_from_directory(OUT).as_dataset(split={splits[0] if splits else 'train'!r})"]
    if indexed:
        dali, torch = _index_readers(output, m, encoded, label)
        L += dali + torch
    return "\n".join(L) + "\n"


def _grain_code(output: str, m: dict, tfds_metadata: bool) -> str:
    """Grain over ArrayRecord shards (--output_format array_record): a random-access
    source over the split's shards, a global shuffle, Examples parsed with TensorFlow
    into NumPy. ArrayRecord's reader opens local paths only: a bucket is read through
    a gcsfuse mount (Cloud TPU VMs and Vertex AI mount buckets under /gcs/)."""
    encoded = m.get("feature_roles", {}).get("encoded")
    label, label_what = _label(m)
    splits = list(m["splits"])
    first = splits[0] if splits else "train"
    out = output
    if output.startswith("gs://"):
        out = "/gcs/" + output[len("gs://"):]
    returned = (["image"] if encoded else []) + (["label"] if label else [])
    L = [
        *_header("with Grain", output, m, _sizes(m, splits)),
        "# ArrayRecord shards, random access by record index.",
        "# pip install grain tensorflow  (TensorFlow parses the tf.train.Example records and decodes images)",
        "import json",
        "",
        "import grain",
        "import tensorflow as tf",
        "",
        f"OUT = {out!r}" + (f"  # {_text(output)} mounted with gcsfuse: ArrayRecord reads local paths only"
                            if out != output else ""),
        "FEATURES = {",
        *_feature_lines(m),
        "}",
    ]
    if m.get("label_map", {}).get("kind") == LabelType.CLASS:
        L += ["# {class id: class name}, from the label map written beside the shards",
              f"with open(OUT + '/{layout.LABEL_MAP}') as f:",
              "    CLASS_NAMES = {i: name for name, i in json.load(f).items()}"]
    L += [
        "",
        "",
        "def shard_files(split):",
        "    \"\"\"The split's shards in manifest order: record i of the split is record i of their concatenation.\"\"\"",
        f"    with open(OUT + '/{layout.MANIFEST}') as f:",
        "        return [OUT + '/' + s['name'] for s in json.load(f)['splits'][split]['shards']]",
        "",
        "",
        "def source(split):",
        "    \"\"\"Random access: source(split)[i] is the split's serialized Example i.\"\"\"",
        "    return grain.sources.ArrayRecordDataSource(shard_files(split))",
        "",
        "",
        "def parse(record):",
        "    ex = tf.io.parse_single_example(record, FEATURES)",
    ]
    if encoded:
        L += ["    # uint8 [height, width, channels]",
              f"    image = tf.io.decode_image(ex[{encoded!r}], expand_animations=False).numpy()"]
    if label:
        L.append(f"    label = ex[{label!r}].numpy()  # {label_what}")
    L.append(f"    return {', '.join(returned) if returned else '{k: v.numpy() for k, v in ex.items()}'}")
    L += [
        "",
        "",
        "def dataset(split, training=True, seed=0):",
        "    \"\"\"A Grain MapDataset: training shuffles every record of the split globally (a new order per",
        "    seed), else the split's order.\"\"\"",
        "    ds = grain.MapDataset.source(source(split))",
        "    if training:",
        "        ds = ds.shuffle(seed=seed)",
        "    return ds.map(parse)",
        "",
        "",
        f"# e.g. image, label = dataset({first!r})[0]; or iterate: for image, label in dataset({first!r}): ...",
        "# then .batch(...) (after resizing to one size) and .to_iter_dataset() for worker processes",
    ]
    if tfds_metadata:
        L += ["",
              "# TFDS: the folder holds dataset_info.json and features.json (fileFormat array_record)",
              "# import tensorflow_datasets as tfds",
              f"# ds = tfds.builder_from_directory(OUT).as_data_source(split={first!r})  # ds[i]: decoded features"]
    return "\n".join(L) + "\n"


PYTORCH_MARKER = "# ---- PyTorch:"


def _index_readers(output: str, m: dict, encoded: Optional[str], label: Optional[str]) -> tuple[list, list]:
    """(the DALI reader, for the tf.data module; the PyTorch module, printed
    after it as a module of its own: the tfrecord package registers its own
    copy of TensorFlow's Example protos, and protobuf refuses both in one
    process, so it must not import beside TensorFlow)."""
    roles = set(m.get("feature_roles", {}).values())
    keys = [k for k in (encoded, label) if k] or [k for k in m["features"] if k in roles]
    torch_desc = ", ".join(f"{k!r}: {_TORCH_TYPES[m['features'][k]]!r}" for k in keys)
    dali = ", ".join(f"{k!r}: tfrecord.FixedLenFeature([], {_DALI_TYPES[m['features'][k]][0]}, "
                     f"{_DALI_TYPES[m['features'][k]][1]})" for k in keys)
    dali_lines = [
        "",
        "",
        "def dali_pipeline(split, shard_id=0, num_shards=1, batch_size=64, device_id=0):",
        "    \"\"\"NVIDIA DALI (pip install nvidia-dali-cuda120): records split across num_shards by the",
        "    shards' indexes (index/<shard>.idx).\"\"\"",
        "    from nvidia.dali import fn, pipeline_def, tfrecord",
        "    files = shard_files(split)",
        f"    with tf.io.gfile.GFile(OUT + '/{layout.MANIFEST}') as f:",
        "        indexes = [OUT + '/' + s['index'] for s in json.load(f)['splits'][split]['shards']]",
        "",
        "    @pipeline_def(batch_size=batch_size, num_threads=4, device_id=device_id)",
        "    def pipe():",
        "        ex = fn.readers.tfrecord(path=files, index_path=indexes,",
        f"                                 features={{{dali}}},",
        "                                 shard_id=shard_id, num_shards=num_shards, random_shuffle=True,",
        "                                 name='Reader')",
        *([f"        return fn.decoders.image(ex[{encoded!r}], device='mixed')"
           + (f", ex[{label!r}]" if label else "")] if encoded else
          [f"        return {', '.join(f'ex[{k!r}]' for k in keys)}"]),
        "",
        "    return pipe()",
    ]
    torch_lines = [
        "",
        "",
        f"{PYTORCH_MARKER} a module of its own, without TensorFlow (pip install tfrecord torch; the tfrecord",
        "# package's Example protos clash with TensorFlow's in one process). Local files only.",
        "import json",
        "",
        f"OUT = {output!r}",
        f"DESCRIPTION = {{{torch_desc}}}",
        "",
        "",
        "def worker_records(split, worker=0, num_workers=1, description=DESCRIPTION):",
        "    \"\"\"This worker's part of every shard of the split, found by the shards' indexes",
        "    (index/<shard>.idx).\"\"\"",
        "    from tfrecord.reader import tfrecord_loader",
        f"    with open(OUT + '/{layout.MANIFEST}') as f:",
        "        shards = json.load(f)['splits'][split]['shards']",
        "    for k, s in enumerate(shards):",
        "        path = OUT + '/' + s['name']",
        "        if s['records'] > 1:",
        "            yield from tfrecord_loader(path, OUT + '/' + s['index'], description,",
        "                                       shard=(worker, num_workers))",
        "        elif s['records'] == 1 and k % num_workers == worker:  # tfrecord 1.14 cannot read a 1-line index",
        "            yield from tfrecord_loader(path, None, description)",
        "",
        "",
        "def torch_dataset(split):",
        "    \"\"\"A torch IterableDataset: each DataLoader worker reads its own records, none twice.\"\"\"",
        "    import torch",
        "",
        "    class Records(torch.utils.data.IterableDataset):",
        "        def __iter__(self):",
        "            info = torch.utils.data.get_worker_info()",
        "            return worker_records(split, info.id, info.num_workers) if info else worker_records(split)",
        "",
        "    return Records()",
    ]
    return dali_lines, torch_lines


def has_tfds_metadata(m: dict) -> bool:
    return bool(m.get("tfds", {}).get("metadata"))
