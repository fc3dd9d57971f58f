"""Every option of `tfrecords convert` and `check`, declared once: name,
kind, default, group (of --help) and help. From this table come the
command's argparse flags (flags.py), the Python API's keywords and their
signature (keywords.py), and the frozen Values a run's config is built from
(pipelines/options/parse.py). No Beam here: the run's plan reads these
options before Beam is imported (pipelines/run/plan.py).

Beam's own options (--runner, --direct_num_workers, --project, ...) are not
declared here: they pass through to Beam.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

# Kinds: how the command line parses a value and how a Python keyword is taken.
STR = "str"      # text; from Python also a path, a list (comma-joined) or a dict (NAME=VALUE pairs)
LOWER = "lower"  # one of `choices`, case-insensitive
INT = "int"
FLOAT = "float"
FLAG = "flag"    # on/off: --name turns it on; True/False from Python


@dataclasses.dataclass(frozen=True)
class Option:
    name: str
    kind: str
    default: Any
    group: str
    choices: Optional[tuple] = None
    metavar: Optional[str] = None
    help: str = ""
    cli: str = ""  # the command line's name when it differs from the keyword's (--for: reader=)

    @property
    def flag(self) -> str:
        return "--" + (self.cli or self.name)


OPTIONS = (
    # input
    Option('input', STR, '', 'input',
           help='Image folder tree (local or gs://): root/<class>/<image>, nested trees, or split folders '
                'root/train/<class>/...'),
    Option('label_table', STR, '', 'input',
           help='Label table instead of a tree: CSV/TSV with a header row, or JSON Lines (.csv, .tsv, .jsonl; .gz '
                'allowed); a path column and a label column. Cells are split at , (.csv) or TAB (.tsv), or at '
                'the one other of ; TAB | the header line holds'),
    Option('file_list', STR, '', 'input',
           help='A listing instead of a tree or table: one image path or gs:// URI per line (what `gcloud storage '
                'ls -r gs://bucket/images` prints); labels and split folders from the folders, as for --input, '
                'below --image_root (default: the folder the listing names first, else the folder its paths '
                'share)'),
    Option('table_encoding', STR, 'utf-8', 'input',
           help='Text encoding of --label_table, e.g. latin-1, cp1252, utf-16; a row that does not decode is '
                'rejected as bad_row with its line number'),
    Option('image_root', STR, '', 'input',
           help="Folder the table's paths are relative to (default: the table's folder)"),
    Option('path_column', STR, '', 'input',
           help='Table column holding image paths or ids (default: the first of filename, file, path, image, id, '
                '... present)'),
    Option('label_column', STR, '', 'input',
           help='Table column holding labels (default: the first of label, class, category, target present)'),
    Option('split_column', STR, '', 'input',
           help="Table column naming each row's split (default: 'split' when --split is auto or column)"),
    Option('extra_columns', STR, '*', 'input',
           help='Other table columns to carry into the Example as typed features (int64, float or bytes, inferred '
                "from all values): '*' for all, '' for none, or a comma list"),
    Option('include', STR, '*', 'input',
           help="Comma list of case-insensitive file-name patterns to list in a tree, e.g. '*.jpg,*.png'; other "
                'files are counted as excluded (hidden files always are)'),
    Option('allow_absolute_paths', FLAG, False, 'input',
           help='Accept absolute paths and URLs in the label table (refused as unsafe_path by default)'),
    # detection: boxes and masks (with --annotations)
    Option('annotations', STR, '', 'detection: boxes and masks (with --annotations)',
           help='Object annotations instead of --input or --label_table: a COCO JSON file '
                '(instances_train2017.json), a folder of Pascal VOC XML files (or a VOC root holding Annotations/ '
                'and JPEGImages/), or a YOLO folder (images/ and labels/, with classes.txt or a data YAML) or its '
                "data YAML; SPLIT=PATH,... gives one per split (COCO's train and val files). The images are under "
                '--image_root (SPLIT=FOLDER,... to match)'),
    Option('annotation_format', LOWER, 'auto', 'detection: boxes and masks (with --annotations)',
           choices=('auto', 'coco', 'voc', 'yolo'), help='Format of --annotations; auto: found from the file or folder (and said)'),
    Option('masks', LOWER, 'off', 'detection: boxes and masks (with --annotations)',
           choices=('off', 'png'), help="png: write image/object/mask, one PNG per object at the stored image's size (COCO polygons and "
                'RLE; a box for objects without a segmentation)'),
    Option('bad_boxes', LOWER, 'clip', 'detection: boxes and masks (with --annotations)',
           choices=('clip', 'drop', 'reject_image'), help="A box that does not fit its image (checked against the image's real size): clip one past the "
                'edge and drop the empty, non-finite or unknown ones; drop every bad box; or reject the image '
                '(bad_box). Every box is counted by reason in the manifest'),
    Option('images_without_boxes', LOWER, 'keep', 'detection: boxes and masks (with --annotations)',
           choices=('keep', 'drop'), help='keep: write images without boxes (negatives); drop: reject them as no_boxes'),
    Option('category_ids', LOWER, 'keep', 'detection: boxes and masks (with --annotations)',
           choices=('keep', 'contiguous'), help="keep: the source's category ids (COCO's 1..90 with gaps, YOLO's indexes); contiguous: 1..N in "
                "the order of the source's ids (VOC: 1..N by name either way)"),
    Option('max_annotation_bytes', INT, 67108864, 'detection: boxes and masks (with --annotations)',
           help='Largest per-image annotation file (VOC XML, YOLO text) or class list read; a larger one is '
                'rejected as bad_annotation (COCO JSON is streamed, whatever its size)'),
    # labels
    Option('label_from', LOWER, 'auto', 'labels',
           choices=('auto', 'folder', 'table', 'regex', 'none'), help='Where labels come from; auto: the table if given, --label_regex if given, else the folder'),
    Option('label_depth', INT, 1, 'labels',
           help='Folder level naming the class, counted from the root (below a split folder); negative counts up '
                "from the file: -1 is the image's own folder"),
    Option('label_regex', STR, '', 'labels',
           help="Regular expression on the file name; the label is the group named 'label', else group 1, e.g. "
                "'^([a-z]+)\\.\\d+\\.jpg$' gives cat for cat.123.jpg"),
    Option('label_type', LOWER, 'auto', 'labels',
           choices=('auto', 'class', 'int', 'float'), help='auto: int if every label is an integer, float (regression) if every label is a number, else '
                'class names'),
    Option('label_map', STR, '', 'labels',
           help='Frozen label map (JSON {name: id}, or a text file of one name per line) that fixes class ids; '
                'labels outside it are rejected as unknown_label'),
    Option('extend_label_map', FLAG, False, 'labels',
           help='With --label_map: give new classes new ids after the existing ones instead of rejecting'),
    Option('label_offset', INT, 0, 'labels',
           help='Added to every class id (1 leaves 0 for a background class)'),
    # splits, shuffle and shards
    Option('split', STR, 'auto', 'splits, shuffle and shards',
           help="auto (a 'split' table column, or split folders train/validation/test/... at the top of the tree, "
                "else everything in 'train'), folders, column, a single split name, or ratios "
                "'train=0.8,validation=0.2' (hash of the relative path, stable as the dataset grows)"),
    Option('split_salt', STR, '', 'splits, shuffle and shards',
           help='Salt for ratio splits (change it to draw another split)'),
    Option('stratify', FLAG, False, 'splits, shuffle and shards',
           help="With ratio splits: give each class the fractions exactly (each class's images in order of the "
                'path hash, cut at the fractions); an image may then change split when its class grows (near the '
                'cuts only), which plain ratio splits never do'),
    Option('seed', INT, 0, 'splits, shuffle and shards',
           help='Seed of the deterministic shuffle within each split'),
    Option('num_shards', STR, 'auto', 'splits, shuffle and shards',
           help="Shards per split: N >= 1 for every split, or 'train=16,validation=2'; auto: computed from "
                '--shard_size'),
    Option('shard_size', STR, '150MB', 'splits, shuffle and shards',
           help='Target shard size when --num_shards is not given (TensorFlow recommends 100-200 MB)'),
    Option('shard_multiple', INT, 1, 'splits, shuffle and shards',
           help="Round each split's shard count up to a multiple of this (e.g. the number of TPU hosts)"),
    Option('shard_counts', LOWER, 'size', 'splits, shuffle and shards',
           choices=('size', 'tpu'), help="How --num_shards auto counts a split's shards: size: from --shard_size; tpu: as size, but "
                "at least 1024 for a split of 1,000,000 records or more and 128 for 50,000 or more (the 1024 "
                'train / 128 validation shards of tensorflow/tpu\'s ImageNet converter)'),
    Option('compression', LOWER, 'none', 'splits, shuffle and shards',
           choices=('none', 'gzip', 'zlib'), help='Compress shards (read them with compression_type GZIP or ZLIB); JPEGs gain ~nothing'),
    Option('max_examples_per_split', INT, 0, 'splits, shuffle and shards',
           help='Keep only the first N records of each split in shuffle order, before validation (a quick trial '
                'run); 0: all'),
    # images and examples
    Option('validate', LOWER, 'full', 'images and examples',
           choices=('full', 'header'), help='full: check structure and decode every image (at 1/8 scale for JPEG); header: structure checks '
                'only (end markers, chunk CRCs), faster, misses corrupt pixel data'),
    Option('output_formats', STR, 'jpeg,png', 'images and examples',
           help='Formats stored as-is (bytes unchanged), among jpeg,png'),
    Option('reencode', LOWER, 'off', 'images and examples',
           choices=('off', 'jpeg', 'png'), help='Other formats (gif, webp, bmp, tiff, avif, or jpeg/png not in --output_formats): off rejects '
                'them as unsupported_format; jpeg/png re-encodes them (first frame, EXIF orientation applied, '
                '16-bit scaled, alpha composited on white for jpeg)'),
    Option('jpeg_quality', INT, 90, 'images and examples',
           help='Quality of re-encoded (resized) JPEGs, 1-100 (default 90: README, resizing)'),
    Option('color_convert', LOWER, 'rgb', 'images and examples',
           choices=('rgb', 'keep'), help='rgb: re-encode CMYK and YCCK JPEGs as RGB JPEG (at --jpeg_quality) and palette PNGs as '
                'RGB/RGBA PNG (lossless), so TensorFlow, PIL and torchvision decode the recorded channels '
                '(image/source_format says jpeg-cmyk, jpeg-ycck, png-palette); keep: store their bytes as found '
                '(TensorFlow decodes 3 channels, PIL 4 for CMYK, 1 for a palette)'),
    Option('exif_orientation', LOWER, 'keep', 'images and examples',
           choices=('keep', 'apply'), help='keep: store JPEGs unchanged (TensorFlow ignores EXIF orientation, so a photo taken sideways '
                'decodes sideways); apply: re-encode JPEGs whose EXIF orientation is not 1, upright, with the '
                'recorded size after rotation'),
    Option('resize_longest_side', INT, None, 'images and examples',
           metavar='N', help='Store images whose longer side exceeds N pixels resized so that it is N, aspect kept, re-encoded '
                '(never upscaled); image/original/height, width and sha256 trace each record to its file. '
                'Default: off'),
    Option('resize_shorter_side', INT, None, 'images and examples',
           metavar='N', help='Likewise for the shorter side (ImageNet-style: shorter side to N); not with '
                '--resize_longest_side. Default: off'),
    Option('resize_filter', LOWER, None, 'images and examples',
           choices=('lanczos', 'bicubic', 'hamming', 'bilinear', 'box', 'nearest'), help='Resampling filter of --resize_*: lanczos (default), bicubic, hamming, bilinear, box, nearest'),
    Option('resize_png', LOWER, None, 'images and examples',
           choices=('keep', 'jpeg'), help='A PNG that --resize_* re-encodes: keep (stays PNG, the default) or jpeg (stored as JPEG at '
                '--jpeg_quality when it has no alpha channel)'),
    Option('resize_smart', LOWER, None, 'images and examples',
           choices=('on', 'off'), help='on (default): re-encode only images over the --resize_* bound and store the others '
                'byte-for-byte; off: re-encode every JPEG and PNG at --jpeg_quality, resizing those over it'),
    Option('resize_draft', LOWER, None, 'images and examples',
           choices=('on', 'off'), help='on (default): decode a JPEG at a reduced scale in the DCT domain (1/2, 1/4, 1/8; never below '
                'twice the final size) before the final resize, several times faster; off: decode at full size'),
    Option('max_pixels', INT, 89478485, 'images and examples',
           help='Reject images whose header claims more pixels (decompression bombs) before decoding'),
    Option('max_file_bytes', INT, 1073741824, 'images and examples',
           help='Reject input files larger than this many bytes (too_large) without reading them whole; only '
                'regular files are read at all (a FIFO or device is not_a_file)'),
    Option('reads_in_flight', INT, 0, 'images and examples',
           help='Input files each worker reads at once, ahead of validating and writing (in order, so the output '
                'does not change); 0: none for local disk (reads from the page cache gain nothing and the threads '
                'cost CPU; try 4-16 for a network disk), 32 for buckets'),
    Option('reads_per_image', STR, 'auto', 'images and examples',
           choices=('auto', '1', '2'), help='1: read each image once and validate it as its shard is written (half the reads and bucket '
                'requests; a shard with rejected images holds fewer records); 2: validate first, then plan shards '
                'from the valid images (shard counts differ by at most one) and read each again to write it; '
                "auto: 1 for folder trees (the listing gives every file's size) and when --num_shards is set for "
                'every split, else 2'),
    Option('io_timeout', FLOAT, 120.0, 'images and examples',
           help='Seconds Cloud Storage may fail to answer (transient errors are retried until then) before the '
                'run stops with an error naming the bucket'),
    Option('feature_keys', STR, '', 'images and examples',
           help="Rename Example keys: 'image/encoded=image_raw,image/class/label=label'; an empty new name drops "
                'the feature'),
    Option('source_ids', FLAG, False, 'images and examples',
           help="Write image/source_id on classification records too (a decimal number from the hash of the "
                "image's relative path, stable from run to run), as Model Garden's detection decoder requires"),
    # data-quality checks (the manifest's quality section)
    Option('quality', LOWER, 'on', "data-quality checks (the manifest's quality section)",
           choices=('on', 'off'), help='off: no duplicate, near-duplicate, class-balance or size checks'),
    Option('duplicates', LOWER, 'keep_all', "data-quality checks (the manifest's quality section)",
           choices=('keep_all', 'keep_one', 'reject'), help='Files with the same bytes (sha256): keep_all writes every copy and lists them; keep_one writes '
                'only the copy with the smallest relative path (the others count as not selected); reject writes '
                'that copy and rejects the others as duplicate_content. keep_one and reject find duplicates '
                'before shards are planned, so they read each image twice (--reads_per_image 2)'),
    Option('near_duplicates', INT, 8, "data-quality checks (the manifest's quality section)",
           help='List image pairs whose perceptual hashes (64-bit DCT hash of the decode full validation does) '
                'differ in at most this many bits: re-encoded, resized or recompressed copies; 0: off. Needs '
                '--validate full'),
    Option('min_class_count', INT, 1, "data-quality checks (the manifest's quality section)",
           help='List the classes with fewer records than this in a split (0 in a split counts)'),
    # output
    Option('output', STR, '', 'output',
           help='Output folder (local or gs://) for shards and manifest'),
    Option('output_format', LOWER, 'tfrecord', 'output',
           choices=('tfrecord', 'array_record'), help='Shard file format: tfrecord (tf.data, TFDS, DALI, PyTorch) or array_record (random access by '
                "record index, for Grain's global shuffle and TFDS's as_data_source; uncompressed, one record per "
                'chunk); the same Examples either way. Not --output_formats (image formats)'),
    Option('shard_suffix', LOWER, '.tfrecord', 'output',
           choices=('.tfrecord', '.tfrecords', 'none'), help='Suffix of TFRecord shard names: train-00000-of-00016.tfrecord, .tfrecords, or none '
                "(train-00000-of-00016, as tensorflow/tpu's ImageNet converter names them and EfficientNet's "
                'holdout_shards mode builds them); a compression suffix (.gz) follows it'),
    Option('shard_template', LOWER, 'split', 'output',
           choices=('split', 'tfds'), help="split: SPLIT-00000-of-00016.tfrecord; tfds: TFDS's default template "
                '{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y} (mnist-train.tfrecord-00000-of-00016), DATASET '
                'being the name of the dataset folder (--output, or its root with --versioned)'),
    Option('reader', LOWER, '', 'output', cli='for', metavar='READER',
           choices=('', 'tpu-resnet', 'tpu-efficientnet', 'model-garden', 'keras', 'pytorch', 'dali', 'tfds'),
           help='Set the flags a widely used reader needs (printed in the summary; a flag you give wins): '
                'tpu-resnet, tpu-efficientnet (tensorflow/tpu: 1-based labels, JPEG only, shard counts a multiple '
                'of 8 hosts), model-garden (JPEG only), keras (class ids in image_dataset_from_directory\'s order, '
                'all-number folders too), pytorch, dali (index files, JPEG only), tfds (--output D/NAME holds '
                'versions 1.0.0, 1.0.1, ... that tfds.load(NAME, data_dir=D) finds)'),
    Option('index_files', FLAG, False, 'output',
           help="Also write an index per shard, index/<shard>.idx (one line '<byte offset> <record length>' per record, "
                "as DALI's tfrecord2idx writes it), for NVIDIA DALI's readers.tfrecord and the PyTorch tfrecord "
                'package to split records across workers; uncompressed shards only'),
    Option('overwrite', FLAG, False, 'output',
           help='Replace a dataset already in --output (its stale shards are removed)'),
    Option('max_reject_fraction', FLOAT, 0.05, 'output',
           help='Fail without publishing when more than this fraction of listed records is rejected (the rejects '
                'are still written for inspection); 1 never fails'),
    Option('allow_empty', FLAG, False, 'output',
           help='Publish even when no record is written (an empty input, or every file rejected); without it such '
                'a run fails and publishes nothing, since an unmounted share or empty class folders look just '
                'like that'),
    Option('allow_shrink', FLAG, False, 'output',
           help='With --versioned: publish and move LATEST even when the record count fell by more than half '
                'against the version LATEST names (refused by default: it looks like missing input)'),
    Option('versioned', FLAG, False, 'output',
           help='Treat --output as a dataset root: write this run into <output>/<version> and, once its manifest '
                'is written, point <output>/LATEST at it (a failed run never moves it). Class ids carry over from '
                'the version LATEST names; the records of unchanged images are copied from it (byte-identical to '
                'a full conversion); unchanged inputs and options publish nothing'),
    Option('version', STR, '', 'output',
           help='With --versioned: the version folder name (default: the UTC time, v20261121-073000)'),
    Option('republish_unchanged', FLAG, False, 'output',
           help='With --versioned: publish a new version even when inputs and options are unchanged since LATEST '
                '(its shards are then identical)'),
    Option('full', FLAG, False, 'output',
           help='With --versioned: convert every image again instead of copying the unchanged records from the '
                'version LATEST names (the shards are the same either way); also repairs a damaged previous '
                'version'),
    Option('keep_versions', INT, 0, 'output',
           help='With --versioned: after a successful publish, remove the oldest complete versions beyond this '
                'many (never the one LATEST names); 0 keeps every version'),
    Option('lock_ttl_hours', FLOAT, 48.0, 'output',
           help='A lock on --output older than this is taken over (a run that died without releasing it, e.g. a '
                'failed Dataflow job); a lock of a dead process on this machine is taken over at once'),
    Option('break_lock', FLAG, False, 'output',
           help='Take over the lock on --output whoever holds it (when you know that run is gone)'),
    Option('detach', FLAG, False, 'output',
           help='With a remote runner (Dataflow): return once the job is submitted instead of waiting for it; the '
                "job's last step publishes the output and releases the lock"),
    Option('spill', LOWER, 'auto', 'output',
           choices=('auto', 'on', 'off'), help="Where a local run's record metadata waits between stages: in spill files on local disk (auto: "
                "every local run; memory stays flat however many images) or in the runner's memory (off: about "
                '1.5 KB per image). Remote runners use their own shuffle'),
    Option('progress', LOWER, 'auto', 'output',
           choices=('auto', 'on', 'off'), help='Progress bar of a local run. auto: the bar when stderr is a terminal or a notebook; piped or '
                'in a log, no bar: only a line when nothing has moved for 15 s (saying what the run waits on), '
                'and the summary at the end. on: the bar and a last progress line even when piped. off: no '
                'bar and no stall line'),
    Option('debug', FLAG, False, 'output',
           help="On failure, show Beam's logs and the full traceback instead of a one-line message"),
)

BY_NAME = {o.name: o for o in OPTIONS}
BY_FLAG = {o.flag[2:]: o for o in OPTIONS}
_FLAGS = {o.flag: o.name for o in OPTIONS}
assert len(BY_NAME) == len(OPTIONS), "an option is declared twice"
GROUPS = tuple(dict.fromkeys(o.group for o in OPTIONS))

# The frozen values of one run's options, one field per option (attribute access, as the config's builder reads them).
Values = dataclasses.make_dataclass(
    "Values", [(o.name, Any, dataclasses.field(default=o.default)) for o in OPTIONS]
    + [("given", frozenset, dataclasses.field(default=frozenset()))],  # the names the caller gave
    frozen=True,
    namespace={"__doc__": "The options of one conversion, typed (pipelines/options/table.py declares them).",
               "replace": lambda self, **changes: dataclasses.replace(self, **changes)})
Values.__module__ = __name__


def defaults() -> "Values":
    return Values()


def values_of(mapping) -> "Values":
    """Values from a mapping or namespace holding (at least) every option."""
    get = mapping.get if isinstance(mapping, dict) else lambda k: getattr(mapping, k)
    return Values(**{o.name: get(o.name) for o in OPTIONS})


def add_to(parser) -> None:
    """Every option as an argparse flag of `parser`, in --help's groups."""
    groups: dict = {}
    for o in OPTIONS:
        g = groups.get(o.group)
        if g is None:
            g = groups[o.group] = parser.add_argument_group(o.group)
        if o.kind == FLAG:
            g.add_argument(o.flag, dest=o.name, action="store_true", default=o.default, help=o.help)
            continue
        kw: dict = {"dest": o.name, "default": o.default, "help": o.help}
        if o.kind == LOWER:
            kw["type"] = str.lower
        elif o.kind == INT:
            kw["type"] = int
        elif o.kind == FLOAT:
            kw["type"] = float
        if o.choices:
            kw["choices"] = list(o.choices)
        if o.metavar:
            kw["metavar"] = o.metavar
        g.add_argument(o.flag, **kw)


def parse_known(argv: list) -> tuple:
    """(Values, the arguments that are not ours) from a command line; ValueError
    for a bad value of one of ours (flags.check_flags words it for the user)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(message)

    parser = Parser(add_help=False, allow_abbrev=False)
    add_to(parser)
    ns, rest = parser.parse_known_args(list(argv))
    ours = [a for a in argv if a not in rest or a.startswith("--") and a.split("=", 1)[0] in _FLAGS]
    given = frozenset(_FLAGS[a.split("=", 1)[0]] for a in ours if a.split("=", 1)[0] in _FLAGS)
    return dataclasses.replace(values_of(vars(ns)), given=given), rest
