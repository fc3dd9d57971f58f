"""`tfrecord_pipelines.load(output, split="train")`: an output as a
tf.data.Dataset, parsed with the output's own features (its manifest's
`features` and `feature_roles`, after any --feature_keys renames), its shards
read by a parallel interleave of up to 16 (README's "Reading speed": cycle 1
read 3,700 images/s, 4 read 7,900, 16 read 8,700 with 30 ms per request).

A --versioned dataset root reads the version LATEST names. TensorFlow is
imported here, by the call, never by `import tfrecord_pipelines`.
"""
from __future__ import annotations

import os
from typing import Optional

from tfrecord_pipelines.transforms.core.errors import OutputError, UsageError

CYCLE = 16  # shards read at once: README's "Reading speed"


def resolve(output) -> tuple[str, dict]:
    """(the folder holding the manifest, the manifest): `output` itself, or
    for a --versioned root the version its LATEST names. Read as verify reads
    an output (transforms/storage/untrusted.py): LATEST only as a small
    regular file naming a version, a version folder only inside the root
    (outputs/finished_output.py, follow_latest, which the commands share)."""
    from tfrecord_pipelines.outputs.finished_output import follow_latest
    from tfrecord_pipelines.transforms.storage import fsutil, layout
    out = fsutil.normalize_root(os.fspath(output))
    folder, version = follow_latest(out)
    try:
        return folder, layout.read_manifest(folder)
    except FileNotFoundError:
        pass
    except Exception as e:  # malformed, unreadable
        raise OutputError(f"{layout.MANIFEST} of {folder} cannot be read: {e}") from None
    if version:
        raise OutputError(f"{fsutil.join(out, layout.LATEST)} names {version!r}, which has no {layout.MANIFEST}: "
                          "not a complete version")
    raise OutputError(f"{out}: no {layout.MANIFEST} (and no {layout.LATEST}): not a complete output (a conversion "
                      "that did not finish, or not a dataset)")


def _checked_shards(folder: str, files: list) -> list:
    """The shards, each a regular file inside the output (tf.data opens them
    itself: a FIFO would block it forever, a link would read another
    dataset's records)."""
    from tfrecord_pipelines.transforms.storage import fsutil, untrusted
    for f in files:
        try:
            untrusted.check_file(f, folder)
        except FileNotFoundError:
            raise OutputError(f"{f}: a shard the manifest lists is missing (tfrecords verify {folder} checks the "
                              "output)") from None
        except (fsutil.NotRegularFile, untrusted.Refused) as e:
            raise OutputError(f"{e}: a shard of {folder} that is not read (tfrecords verify {folder} checks the "
                              "output)") from None
    return files


def load(output, split: str = "train", as_supervised: bool = False, decode: bool = True,
         channels: Optional[int] = None, shuffle_files: bool = False):
    """The split's records as a tf.data.Dataset.

    Each element is a dict {feature key: tensor} with the output's keys
    (scalars for the features every record has, tf.SparseTensor for label
    table columns); with decode=True the image is a uint8 [height, width,
    channels] tensor (tf.io.decode_image(..., expand_animations=False)),
    `channels` None keeping each image's own (image/channels), 1, 3 or 4
    making them alike. as_supervised=True gives (image, label) pairs instead:
    the class id, or the float target of a regression output.
    shuffle_files reads the shards in a random order each epoch, interleaved
    out of order; by default the order is the shards', fixed."""
    import tensorflow as tf
    folder, m = resolve(output)
    if split not in m["splits"]:
        raise UsageError(f"split {split!r} is not in {folder}: its splits are {', '.join(m['splits']) or 'none'}")
    if m.get("output_format", "tfrecord") != "tfrecord":
        raise UsageError(f"{folder} holds {m['output_format']} shards, which tf.data does not read: read them with "
                         "Grain (`tfrecords spec` prints the code)")
    if channels not in (None, 1, 3, 4):
        raise UsageError(f"channels={channels!r}: None (each image's own), 1, 3 or 4")
    roles = m.get("feature_roles", {})
    image_key, label_key = roles.get("encoded"), _label_key(m)
    if as_supervised and not (image_key and label_key):
        what = "no image feature" if not image_key else "no labels"
        raise UsageError(f"as_supervised=True: {folder} has {what} (label_map kind "
                         f"{m.get('label_map', {}).get('kind')!r})")
    spec = _parse_spec(m, tf)
    files = _checked_shards(folder, [_join(folder, s["name"]) for s in m["splits"][split]["shards"]])

    def parse(record):
        ex = tf.io.parse_single_example(record, spec)
        if decode and image_key:
            image = tf.io.decode_image(ex[image_key], channels=channels or 0, expand_animations=False)
            image.set_shape([None, None, channels])
            ex[image_key] = image
        return (ex[image_key], ex[label_key]) if as_supervised else ex

    ds = tf.data.Dataset.from_tensor_slices(tf.constant(files, dtype=tf.string))
    if shuffle_files:
        ds = ds.shuffle(len(files), reshuffle_each_iteration=True)
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=m["tf_compression_type"]),
                       cycle_length=max(1, min(len(files), CYCLE)), num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=not shuffle_files)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle_files)


def _label_key(m: dict) -> Optional[str]:
    roles, kind = m.get("feature_roles", {}), m.get("label_map", {}).get("kind")
    key = roles.get("label") if kind in ("class", "int") else roles.get("target") if kind == "float" else None
    return key if key in m["features"] else None


def _parse_spec(m: dict, tf) -> dict:
    """The features every record has (the roles) as scalars; label table
    columns, which may be empty in a record, as VarLen (tfrecords spec's rule)."""
    types = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    roles = set(m.get("feature_roles", {}).values())
    return {k: tf.io.FixedLenFeature([], types[kind]) if k in roles else tf.io.VarLenFeature(types[kind])
            for k, kind in m["features"].items()}


def _join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name
