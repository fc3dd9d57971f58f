"""The baselines the bench times against our converter; each runs as its own
process (so its imports and start-up count):

    python -m bench.baselines VARIANT --input DIR/train --output OUT [--shards 8]

VARIANT is one of:
  plain               read every file and write it into the shard files, no framing: the I/O reference
  plain_all_cores     the same with the shards dealt over one process per core
  tutorial            the common tutorial loop: tf.train.Example(features=tf.train.Features(...)) per
                      file, tf.io.TFRecordWriter, one process (no decode: the image shape is not recorded)
  tutorial_decode     the same plus `tf.io.decode_jpeg(image).shape` for height/width/depth, as the
                      tensorflow.org TFRecord tutorial does (opt-in)
  naive_beam          Create(paths) | Map(to Example via tf.train.*) | Reshuffle | WriteToTFRecord,
                      on Beam's in-process FnApiRunner
  naive_beam_mp       the same pipeline with --direct_running_mode multi_processing on all cores (opt-in: slow, ~12 GB)
  beam_floor          Beam run as the converter runs a small input, doing no work: its lean import of Beam
                      and runner shortcuts, the in-process FnApiRunner, Create(paths) | Map | GroupByKey |
                      Map | CombineGlobally (barriers, as the converter's shuffle and totals have), the count
                      written to one file, and its exit (os._exit); no image is read ("bytes": 0). What any
                      pipeline on Beam pays here before its first image
  decode_all_cores    a process pool on all cores: read each file and decode it fully with Pillow (`load()`)
  validate_all_cores  the same pool calling our validator, tfrecord_pipelines.transforms.core.images.probe_image in full mode
                      (a JPEG decoded at 1/8 scale with draft(), which still decodes the whole stream)
  bound_header        the work each record of a `--validate header` conversion needs, and nothing else, on all
                      cores: per record a read, the header probe, SHA-256 of the bytes, the Example from our
                      encoder, framed with its two CRC32Cs (the record's, the shard's running one) and written into
                      the shard files, which are dealt over a process per core (bench/profile.py's steps)
  bound_full          the same with full validation's probe (the 1/8-scale decode) and the perceptual hash
                      of each decode that a default full conversion's near-duplicate check needs

Files are listed with a sorted walk; the label is the top folder's name (ids
in sorted order). Each variant prints one JSON line: {"images": n, "bytes": b}.
"""
from __future__ import annotations

import argparse
import io
import json
import multiprocessing as mp
import os
import sys


def list_images(root: str) -> list[tuple[str, str, int]]:
    """[(path, class name, class id)] in sorted order."""
    items = []
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            items.append((path, os.path.relpath(path, root).split(os.sep)[0]))
    ids = {c: i for i, c in enumerate(sorted({c for _, c in items}))}
    return [(p, c, ids[c]) for p, c in items]


def _chunks(items: list, shards: int) -> list[list]:
    n = len(items)
    return [items[s * n // shards:(s + 1) * n // shards] for s in range(shards)]


def plain(items, out: str, shards: int) -> int:
    total = 0
    for s, chunk in enumerate(_chunks(items, shards)):
        with open(os.path.join(out, f"plain-{s:05d}-of-{shards:05d}"), "wb") as f:
            for path, _, _ in chunk:
                with open(path, "rb") as g:
                    data = g.read()
                f.write(data)
                total += len(data)
    return total


def _plain_shards(task) -> int:
    items, out, shards, mine = task
    total = 0
    chunks = _chunks(items, shards)
    for s in mine:
        with open(os.path.join(out, f"plain-{s:05d}-of-{shards:05d}"), "wb") as f:
            for path, _, _ in chunks[s]:
                with open(path, "rb") as g:
                    data = g.read()
                f.write(data)
                total += len(data)
    return total


def _bound_shards(task) -> int:
    from bench import profile
    from tfrecord_pipelines.transforms.core.tfrecord_io import RecordWriter
    items, root, out, shards, mine, mode = task
    header, full = profile.policies()
    policy = full if mode == "full" else header
    encoder = profile.new_encoder()
    total = 0
    chunks = _chunks(items, shards)
    for s in mine:
        hash_inputs = []
        with open(os.path.join(out, f"train-{s:05d}-of-{shards:05d}.tfrecord"), "wb") as f:
            writer = RecordWriter(f)
            for item in chunks[s]:
                total += profile.record_work(root, item, policy, encoder, writer, hash_inputs)
        profile.perceptual_hashes(hash_inputs)
    return total


def bound_all_cores(items, root: str, out: str, shards: int, mode: str) -> int:
    """The work each record needs (`mode`: header or full), the shards dealt over a process per core."""
    procs = max(1, min(os.cpu_count() or 1, shards))
    tasks = [(items, root, out, shards, list(range(p, shards, procs)), mode) for p in range(procs)]
    with mp.get_context("fork").Pool(procs) as pool:
        return sum(pool.map(_bound_shards, tasks))


def plain_all_cores(items, out: str, shards: int) -> int:
    """plain, with the shards dealt over a process per core."""
    procs = max(1, min(os.cpu_count() or 1, shards))
    tasks = [(items, out, shards, list(range(p, shards, procs))) for p in range(procs)]
    with mp.get_context("fork").Pool(procs) as pool:
        return sum(pool.map(_plain_shards, tasks))


def tutorial(items, out: str, shards: int, decode: bool = False) -> int:
    import tensorflow as tf

    def _bytes_feature(value):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def _int64_feature(value):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    total = 0
    for s, chunk in enumerate(_chunks(items, shards)):
        with tf.io.TFRecordWriter(os.path.join(out, f"train-{s:05d}-of-{shards:05d}.tfrecord")) as writer:
            for path, cls, label in chunk:
                image_string = open(path, "rb").read()
                feature = {
                    "image/encoded": _bytes_feature(image_string),
                    "image/format": _bytes_feature(b"jpeg"),
                    "image/class/label": _int64_feature(label),
                    "image/class/text": _bytes_feature(cls.encode()),
                    "image/filename": _bytes_feature(os.path.basename(path).encode()),
                }
                if decode:
                    shape = tf.io.decode_jpeg(image_string).shape
                    feature["image/height"] = _int64_feature(shape[0])
                    feature["image/width"] = _int64_feature(shape[1])
                    feature["image/channels"] = _int64_feature(shape[2])
                example = tf.train.Example(features=tf.train.Features(feature=feature))
                writer.write(example.SerializeToString())
                total += len(image_string)
    return total


def _to_example(item) -> bytes:
    """The naive pipeline's Map: read the file, build the Example with tf.train.*."""
    import tensorflow as tf
    path, cls, label = item
    with open(path, "rb") as f:
        data = f.read()
    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
        "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"jpeg"])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        "image/class/text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[cls.encode()])),
        "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(value=[os.path.basename(path).encode()])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def naive_beam(items, out: str, shards: int, multi_processing: bool = False) -> int:
    import logging

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    args = []
    if multi_processing:
        args = [f"--direct_num_workers={os.cpu_count() or 1}", "--direct_running_mode=multi_processing"]
    # Beam 2.77's DirectRunner would try to download Prism first (offline it fails): use FnApiRunner.
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(args)) as p:
        (p
         | "Create" >> beam.Create(items)
         | "ToExample" >> beam.Map(_to_example)
         | "Reshuffle" >> beam.Reshuffle()
         | "Write" >> beam.io.WriteToTFRecord(os.path.join(out, "train"), file_name_suffix=".tfrecord",
                                              num_shards=shards))
    return sum(os.path.getsize(p) for p, _, _ in items)


def beam_floor(items, out: str) -> int:
    """The paths counted through Beam (written to out/count.txt, read back):
    the number of images the pipeline saw."""
    import logging

    from tfrecord_pipelines.speed import shortcuts as beam_shortcuts, lean_import as lean_beam
    lean_beam.import_lean()
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    beam_shortcuts.install()
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    count_file = os.path.join(out, "count.txt")
    with beam.Pipeline(runner=FnApiRunner()) as p:
        (p
         | "Create" >> beam.Create([path for path, _, _ in items])
         | "Key" >> beam.Map(lambda path: (len(path) % 8, path))
         | "Group" >> beam.GroupByKey()
         | "Count" >> beam.Map(lambda kv: len(kv[1]))
         | "Sum" >> beam.CombineGlobally(sum)
         | "Write" >> beam.Map(lambda n: open(count_file, "w").write(str(n))))
    with open(count_file) as f:
        return int(f.read())


def _decode_one(path: str) -> int:
    from PIL import Image
    with open(path, "rb") as f:
        data = f.read()
    with Image.open(io.BytesIO(data)) as im:
        im.load()
    return len(data)


_POLICY = None


def _validate_one(path: str) -> int:
    global _POLICY
    from tfrecord_pipelines.transforms.core.images import ImagePolicy, probe_image
    if _POLICY is None:
        _POLICY = ImagePolicy()  # full validation, the converter's default
    with open(path, "rb") as f:
        data = f.read()
    probe_image(data, _POLICY)
    return len(data)


def all_cores(items, fn) -> int:
    paths = [p for p, _, _ in items]
    procs = os.cpu_count() or 1
    chunk = max(1, min(64, len(paths) // (procs * 8) or 1))
    with mp.get_context("fork").Pool(procs) as pool:
        return sum(pool.imap_unordered(fn, paths, chunksize=chunk))


VARIANTS = ("plain", "plain_all_cores", "tutorial", "tutorial_decode", "naive_beam", "naive_beam_mp",
            "beam_floor", "decode_all_cores", "validate_all_cores", "bound_header", "bound_full")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variant", choices=VARIANTS)
    ap.add_argument("--input", required=True, help="the image tree (DIR/train)")
    ap.add_argument("--output", required=True, help="folder for the output files (created)")
    ap.add_argument("--shards", type=int, default=8)
    a = ap.parse_args(argv)
    os.makedirs(a.output, exist_ok=True)
    items = list_images(a.input)
    v = a.variant
    seen = len(items)
    if v == "plain":
        total = plain(items, a.output, a.shards)
    elif v == "plain_all_cores":
        total = plain_all_cores(items, a.output, a.shards)
    elif v in ("tutorial", "tutorial_decode"):
        total = tutorial(items, a.output, a.shards, decode=v == "tutorial_decode")
    elif v in ("naive_beam", "naive_beam_mp"):
        total = naive_beam(items, a.output, a.shards, multi_processing=v == "naive_beam_mp")
    elif v == "beam_floor":
        seen, total = beam_floor(items, a.output), 0  # what went through the pipeline; no image is read
    elif v in ("bound_header", "bound_full"):
        import bench.profile  # noqa: F401  (imported once, before the fork)
        total = bound_all_cores(items, a.input.rstrip(os.sep) or a.input, a.output, a.shards, v[len("bound_"):])
    elif v == "decode_all_cores":
        import PIL.Image  # noqa: F401  (imported once, before the fork)
        total = all_cores(items, _decode_one)
    else:
        import tfrecord_pipelines.transforms.core.images  # noqa: F401
        total = all_cores(items, _validate_one)
    print(json.dumps({"images": seen, "bytes": total}))
    sys.stdout.flush()
    if v == "beam_floor":  # the converter's exit: Beam's threads and modules are not torn down one by one
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
