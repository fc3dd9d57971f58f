"""Every flag of a conversion, with help text and defaults. Beam's own flags
(--runner, --direct_num_workers, --project, ...) pass through to Beam; a flag
that neither we nor any Beam options class declares is an error."""
from __future__ import annotations

import argparse
import difflib
import re
from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

from tfrecord_pipelines.transforms.core.errors import UsageError
from tfrecord_pipelines.transforms.core.specs import LabelType

LABEL_TYPES = [t.value for t in LabelType if t not in (LabelType.NONE, LabelType.BOXES)]

# Beam's own --labels (Dataflow job labels) takes that name; ours is --label_table.


class ConvertOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        add_convert_args(parser)


def add_convert_args(parser) -> None:
    """Every flag of `tfrecords convert` and `check` (and so every keyword of
    tfrecord_pipelines.convert()), in --help's groups."""
    _input_args(parser)
    _label_args(parser)
    _split_and_shard_args(parser)
    _image_and_example_args(parser)
    _quality_args(parser)
    _output_args(parser)


def _input_args(parser) -> None:
    g = parser.add_argument_group("input")
    g.add_argument("--input", default="",
                   help="Image folder tree (local or gs://): root/<class>/<image>, nested trees, or split "
                        "folders root/train/<class>/...")
    g.add_argument("--label_table", default="",
                   help="Label table instead of a tree: CSV/TSV with a header row, or JSON Lines "
                        "(.csv, .tsv, .jsonl; .gz allowed); a path column and a label column")
    g.add_argument("--file_list", default="",
                   help="A listing instead of a tree or table: one image path or gs:// URI per line (what `gcloud "
                        "storage ls -r gs://bucket/images` prints); labels and split folders from the folders, as "
                        "for --input, below --image_root (default: the folder the listing names first, else the "
                        "folder its paths share)")
    g.add_argument("--table_encoding", default="utf-8",
                   help="Text encoding of --label_table, e.g. latin-1, cp1252, utf-16; a row that does not decode "
                        "is rejected as bad_row with its line number")
    g.add_argument("--image_root", default="",
                   help="Folder the table's paths are relative to (default: the table's folder)")
    g.add_argument("--path_column", default="",
                   help="Table column holding image paths or ids (default: the first of filename, file, "
                        "path, image, id, ... present)")
    g.add_argument("--label_column", default="",
                   help="Table column holding labels (default: the first of label, class, category, target "
                        "present)")
    g.add_argument("--split_column", default="",
                   help="Table column naming each row's split (default: 'split' when --split is auto or column)")
    g.add_argument("--extra_columns", default="*",
                   help="Other table columns to carry into the Example as typed features (int64, float or "
                        "bytes, inferred from all values): '*' for all, '' for none, or a comma list")
    g.add_argument("--include", default="*",
                   help="Comma list of case-insensitive file-name patterns to list in a tree, e.g. '*.jpg,*.png'; "
                        "other files are counted as excluded (hidden files always are)")
    g.add_argument("--allow_absolute_paths", action="store_true", default=False,
                   help="Accept absolute paths and URLs in the label table (refused as unsafe_path by default)")

    add_detection_args(parser)


def _label_args(parser) -> None:
    g = parser.add_argument_group("labels")
    g.add_argument("--label_from", type=str.lower, default="auto", choices=["auto", "folder", "table", "regex", "none"],
                   help="Where labels come from; auto: the table if given, --label_regex if given, else the folder")
    g.add_argument("--label_depth", type=int, default=1,
                   help="Folder level naming the class, counted from the root (below a split folder); negative "
                        "counts up from the file: -1 is the image's own folder")
    g.add_argument("--label_regex", default="",
                   help="Regular expression on the file name; the label is the group named 'label', else group 1, "
                        r"e.g. '^([a-z]+)\.\d+\.jpg$' gives cat for cat.123.jpg")
    g.add_argument("--label_type", type=str.lower, default="auto", choices=LABEL_TYPES,
                   help="auto: int if every label is an integer, float (regression) if every label is a number, "
                        "else class names")
    g.add_argument("--label_map", default="",
                   help="Frozen label map (JSON {name: id}, or a text file of one name per line) that fixes class "
                        "ids; labels outside it are rejected as unknown_label")
    g.add_argument("--extend_label_map", action="store_true", default=False,
                   help="With --label_map: give new classes new ids after the existing ones instead of rejecting")
    g.add_argument("--label_offset", type=int, default=0,
                   help="Added to every class id (1 leaves 0 for a background class)")


def _split_and_shard_args(parser) -> None:
    g = parser.add_argument_group("splits, shuffle and shards")
    g.add_argument("--split", default="auto",
                   help="auto (a 'split' table column, or split folders train/validation/test/... at the top of "
                        "the tree, else everything in 'train'), folders, column, a single split name, or ratios "
                        "'train=0.8,validation=0.2' (hash of the relative path, stable as the dataset grows)")
    g.add_argument("--split_salt", default="", help="Salt for ratio splits (change it to draw another split)")
    g.add_argument("--stratify", action="store_true", default=False,
                   help="With ratio splits: give each class the fractions exactly (each class's images in order "
                        "of the path hash, cut at the fractions); an image may then change split when its class "
                        "grows (near the cuts only), which plain ratio splits never do")
    g.add_argument("--seed", type=int, default=0, help="Seed of the deterministic shuffle within each split")
    g.add_argument("--num_shards", default="auto",
                   help="Shards per split: N >= 1 for every split, or 'train=16,validation=2'; "
                        "auto: computed from --shard_size")
    g.add_argument("--shard_size", default="150MB",
                   help="Target shard size when --num_shards is not given (TensorFlow recommends 100-200 MB)")
    g.add_argument("--shard_multiple", type=int, default=1,
                   help="Round each split's shard count up to a multiple of this (e.g. the number of TPU hosts)")
    g.add_argument("--compression", type=str.lower, default="none", choices=["none", "gzip", "zlib"],
                   help="Compress shards (read them with compression_type GZIP or ZLIB); JPEGs gain ~nothing")
    g.add_argument("--max_examples_per_split", type=int, default=0,
                   help="Keep only the first N records of each split in shuffle order, before validation "
                        "(a quick trial run); 0: all")


def _image_and_example_args(parser) -> None:
    g = parser.add_argument_group("images and examples")
    g.add_argument("--validate", type=str.lower, default="full", choices=["full", "header"],
                   help="full: check structure and decode every image (at 1/8 scale for JPEG); header: structure "
                        "checks only (end markers, chunk CRCs), faster, misses corrupt pixel data")
    g.add_argument("--output_formats", default="jpeg,png",
                   help="Formats stored as-is (bytes unchanged), among jpeg,png")
    g.add_argument("--reencode", type=str.lower, default="off", choices=["off", "jpeg", "png"],
                   help="Other formats (gif, webp, bmp, tiff, avif, or jpeg/png not in --output_formats): off "
                        "rejects them as unsupported_format; jpeg/png re-encodes them (first frame, EXIF "
                        "orientation applied, 16-bit scaled, alpha composited on white for jpeg)")
    g.add_argument("--jpeg_quality", type=int, default=90,
                   help="Quality of re-encoded (resized) JPEGs, 1-100 (default 90: README, resizing)")
    g.add_argument("--color_convert", type=str.lower, default="rgb", choices=["rgb", "keep"],
                   help="rgb: re-encode CMYK and YCCK JPEGs as RGB JPEG (at --jpeg_quality) and palette PNGs as "
                        "RGB/RGBA PNG (lossless), so TensorFlow, PIL and torchvision decode the recorded channels "
                        "(image/source_format says jpeg-cmyk, jpeg-ycck, png-palette); keep: store their bytes "
                        "as found (TensorFlow decodes 3 channels, PIL 4 for CMYK, 1 for a palette)")
    g.add_argument("--exif_orientation", type=str.lower, default="keep", choices=["keep", "apply"],
                   help="keep: store JPEGs unchanged (TensorFlow ignores EXIF orientation, so a photo taken "
                        "sideways decodes sideways); apply: re-encode JPEGs whose EXIF orientation is not 1, "
                        "upright, with the recorded size after rotation")
    g.add_argument("--resize_longest_side", type=int, default=None, metavar="N",
                   help="Store images whose longer side exceeds N pixels resized so that it is N, aspect kept, "
                        "re-encoded (never upscaled); image/original/height, width and sha256 trace each record "
                        "to its file. Default: off")
    g.add_argument("--resize_shorter_side", type=int, default=None, metavar="N",
                   help="Likewise for the shorter side (ImageNet-style: shorter side to N); not with "
                        "--resize_longest_side. Default: off")
    g.add_argument("--resize_filter", type=str.lower, default=None,
                   help="Resampling filter of --resize_*: lanczos (default), bicubic, hamming, bilinear, box, "
                        "nearest")
    g.add_argument("--resize_png", type=str.lower, default=None,
                   help="A PNG that --resize_* re-encodes: keep (stays PNG, the default) or jpeg (stored as JPEG "
                        "at --jpeg_quality when it has no alpha channel)")
    g.add_argument("--resize_smart", type=str.lower, default=None,
                   help="on (default): re-encode only images over the --resize_* bound and store the others "
                        "byte-for-byte; off: re-encode every JPEG and PNG at --jpeg_quality, resizing those over it")
    g.add_argument("--resize_draft", type=str.lower, default=None,
                   help="on (default): decode a JPEG at a reduced scale in the DCT domain (1/2, 1/4, 1/8; never "
                        "below twice the final size) before the final resize, several times faster; off: decode "
                        "at full size")
    g.add_argument("--max_pixels", type=int, default=89_478_485,
                   help="Reject images whose header claims more pixels (decompression bombs) before decoding")
    g.add_argument("--max_file_bytes", type=int, default=1 << 30,
                   help="Reject input files larger than this many bytes (too_large) without reading them whole; "
                        "only regular files are read at all (a FIFO or device is not_a_file)")
    g.add_argument("--reads_in_flight", type=int, default=0,
                   help="Input files each worker reads at once, ahead of validating and writing (in order, so "
                        "the output does not change); 0: none for local disk (reads from the page cache gain "
                        "nothing and the threads cost CPU; try 4-16 for a network disk), 32 for buckets")
    g.add_argument("--reads_per_image", default="auto", choices=["auto", "1", "2"],
                   help="1: read each image once and validate it as its shard is written (half the reads and "
                        "bucket requests; a shard with rejected images holds fewer records); 2: validate first, "
                        "then plan shards from the valid images (shard counts differ by at most one) and read "
                        "each again to write it; auto: 1 for folder trees (the listing gives every file's size) "
                        "and when --num_shards is set for every split, else 2")
    g.add_argument("--io_timeout", type=float, default=120.0,
                   help="Seconds Cloud Storage may fail to answer (transient errors are retried until then) "
                        "before the run stops with an error naming the bucket")
    g.add_argument("--feature_keys", default="",
                   help="Rename Example keys: 'image/encoded=image_raw,image/class/label=label'; an empty new "
                        "name drops the feature")


def _quality_args(parser) -> None:
    g = parser.add_argument_group("data-quality checks (the manifest's quality section)")
    g.add_argument("--quality", type=str.lower, default="on", choices=["on", "off"],
                   help="off: no duplicate, near-duplicate, class-balance or size checks")
    g.add_argument("--duplicates", type=str.lower, default="keep_all", choices=["keep_all", "keep_one", "reject"],
                   help="Files with the same bytes (sha256): keep_all writes every copy and lists them; keep_one "
                        "writes only the copy with the smallest relative path (the others count as not selected); "
                        "reject writes that copy and rejects the others as duplicate_content. keep_one and reject "
                        "find duplicates before shards are planned, so they read each image twice "
                        "(--reads_per_image 2)")
    g.add_argument("--near_duplicates", type=int, default=8,
                   help="List image pairs whose perceptual hashes (64-bit DCT hash of the decode full validation "
                        "does) differ in at most this many bits: re-encoded, resized or recompressed copies; "
                        "0: off. Needs --validate full")
    g.add_argument("--min_class_count", type=int, default=1,
                   help="List the classes with fewer records than this in a split (0 in a split counts)")


def _output_args(parser) -> None:
    g = parser.add_argument_group("output")
    g.add_argument("--output", default="", help="Output folder (local or gs://) for shards and manifest")
    g.add_argument("--output_format", type=str.lower, default="tfrecord", choices=["tfrecord", "array_record"],
                   help="Shard file format: tfrecord (tf.data, TFDS, DALI, PyTorch) or array_record (random access "
                        "by record index, for Grain's global shuffle and TFDS's as_data_source; uncompressed, one "
                        "record per chunk); the same Examples either way. Not --output_formats (image formats)")
    g.add_argument("--for", dest="reader", type=str.lower, default="", metavar="READER",
                   choices=["", "tpu-resnet", "tpu-efficientnet", "model-garden", "keras", "pytorch", "dali", "tfds"],
                   help="Set the flags a widely used reader needs (printed in the summary; a flag you give wins): "
                        "tpu-resnet, tpu-efficientnet (tensorflow/tpu: 1-based labels, JPEG only, shard counts a "
                        "multiple of 8 hosts), model-garden (JPEG only), keras (class ids in "
                        "image_dataset_from_directory's order, all-number folders too), pytorch, dali (index "
                        "files, JPEG only), tfds (--output D/NAME holds versions 1.0.0, 1.0.1, ... that "
                        "tfds.load(NAME, data_dir=D) finds)")
    g.add_argument("--index_files", action="store_true", default=False,
                   help="Also write an index per shard, index/<shard>.idx (one line '<byte offset> <record "
                        "length>' per record, as DALI's tfrecord2idx writes it), for NVIDIA DALI's readers.tfrecord and the "
                        "PyTorch tfrecord package to split records across workers; uncompressed shards only")
    g.add_argument("--overwrite", action="store_true", default=False,
                   help="Replace a dataset already in --output (its stale shards are removed)")
    g.add_argument("--max_reject_fraction", type=float, default=0.05,
                   help="Fail without publishing when more than this fraction of listed records is rejected "
                        "(the rejects are still written for inspection); 1 never fails")
    g.add_argument("--allow_empty", action="store_true", default=False,
                   help="Publish even when no record is written (an empty input, or every file rejected); without "
                        "it such a run fails and publishes nothing, since an unmounted share or empty class folders "
                        "look just like that")
    g.add_argument("--allow_shrink", action="store_true", default=False,
                   help="With --versioned: publish and move LATEST even when the record count fell by more than "
                        "half against the version LATEST names (refused by default: it looks like missing input)")
    g.add_argument("--versioned", action="store_true", default=False,
                   help="Treat --output as a dataset root: write this run into <output>/<version> and, once its "
                        "manifest is written, point <output>/LATEST at it (a failed run never moves it). Class ids "
                        "carry over from the version LATEST names; the records of unchanged images are copied from "
                        "it (byte-identical to a full conversion); unchanged inputs and options publish nothing")
    g.add_argument("--version", default="",
                   help="With --versioned: the version folder name (default: the UTC time, v20261121-073000)")
    g.add_argument("--republish_unchanged", action="store_true", default=False,
                   help="With --versioned: publish a new version even when inputs and options are unchanged "
                        "since LATEST (its shards are then identical)")
    g.add_argument("--full", action="store_true", default=False,
                   help="With --versioned: convert every image again instead of copying the unchanged records "
                        "from the version LATEST names (the shards are the same either way); also repairs a "
                        "damaged previous version")
    g.add_argument("--keep_versions", type=int, default=0,
                   help="With --versioned: after a successful publish, remove the oldest complete versions beyond "
                        "this many (never the one LATEST names); 0 keeps every version")
    g.add_argument("--lock_ttl_hours", type=float, default=48.0,
                   help="A lock on --output older than this is taken over (a run that died without releasing it, "
                        "e.g. a failed Dataflow job); a lock of a dead process on this machine is taken over at once")
    g.add_argument("--break_lock", action="store_true", default=False,
                   help="Take over the lock on --output whoever holds it (when you know that run is gone)")
    g.add_argument("--detach", action="store_true", default=False,
                   help="With a remote runner (Dataflow): return once the job is submitted instead of waiting for "
                        "it; the job's last step publishes the output and releases the lock")
    g.add_argument("--spill", type=str.lower, default="auto", choices=["auto", "on", "off"],
                   help="Where a local run's record metadata waits between stages: in spill files on local disk "
                        "(auto: every local run; memory stays flat however many images) or in the runner's "
                        "memory (off: about 1.5 KB per image). Remote runners use their own shuffle")
    g.add_argument("--progress", type=str.lower, default="auto", choices=["auto", "on", "off"],
                   help="Progress line during a local run (auto: on when stderr is a terminal, else a line every "
                        "10 s)")
    g.add_argument("--debug", action="store_true", default=False,
                   help="On failure, show Beam's logs and the full traceback instead of a one-line message")


def add_detection_args(parser) -> None:
    g = parser.add_argument_group("detection: boxes and masks (with --annotations)")
    g.add_argument("--annotations", default="",
                   help="Object annotations instead of --input or --label_table: a COCO JSON file "
                        "(instances_train2017.json), a folder of Pascal VOC XML files (or a VOC root holding "
                        "Annotations/ and JPEGImages/), or a YOLO folder (images/ and labels/, with classes.txt or "
                        "a data YAML) or its data YAML; SPLIT=PATH,... gives one per split (COCO's train and val "
                        "files). The images are under --image_root (SPLIT=FOLDER,... to match)")
    g.add_argument("--annotation_format", type=str.lower, default="auto", choices=["auto", "coco", "voc", "yolo"],
                   help="Format of --annotations; auto: found from the file or folder (and said)")
    g.add_argument("--masks", type=str.lower, default="off", choices=["off", "png"],
                   help="png: write image/object/mask, one PNG per object at the stored image's size (COCO "
                        "polygons and RLE; a box for objects without a segmentation)")
    g.add_argument("--bad_boxes", type=str.lower, default="clip", choices=["clip", "drop", "reject_image"],
                   help="A box that does not fit its image (checked against the image's real size): clip one past "
                        "the edge and drop the empty, non-finite or unknown ones; drop every bad box; or reject "
                        "the image (bad_box). Every box is counted by reason in the manifest")
    g.add_argument("--images_without_boxes", type=str.lower, default="keep", choices=["keep", "drop"],
                   help="keep: write images without boxes (negatives); drop: reject them as no_boxes")
    g.add_argument("--category_ids", type=str.lower, default="keep", choices=["keep", "contiguous"],
                   help="keep: the source's category ids (COCO's 1..90 with gaps, YOLO's indexes); contiguous: "
                        "1..N in the order of the source's ids (VOC: 1..N by name either way)")
    g.add_argument("--max_annotation_bytes", type=int, default=64 << 20,
                   help="Largest per-image annotation file (VOC XML, YOLO text) or class list read; a larger one "
                        "is rejected as bad_annotation (COCO JSON is streamed, whatever its size)")


class _HelpFormatter(argparse.HelpFormatter):
    """Shows "(default: X)" once: not for empty defaults or on/off flags, and
    not when the help text already says what the default is."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("(default" in text or not action.option_strings
                or action.default in ("", None, False, argparse.SUPPRESS)):
            return text
        return text + " (default: %(default)s)"


def help_parser(prog: str) -> argparse.ArgumentParser:
    """A parser holding only our flags, for --help (Beam's has hundreds)."""
    p = argparse.ArgumentParser(
        prog=prog, formatter_class=_HelpFormatter,
        description="Convert an image folder tree or a label table into deterministic, fixed-size TFRecord "
                    "shards of tf.train.Example.",
        epilog="Beam flags pass through, e.g. --runner (default: the local FnApiRunner, multi-process on all "
               "cores; DirectRunner means the same), --direct_num_workers N, --direct_running_mode "
               "in_memory|multi_processing, --runner DataflowRunner --project P --region R --temp_location "
               "gs://... --setup_file ./setup.py.")
    add_convert_args(p)
    return p


class FlagError(UsageError):
    """A flag nobody declares, or a bad value for a declared one."""


class _CheckingParser(_BeamArgumentParser):
    def error(self, message):
        raise FlagError(message)


def _all_options_parser() -> argparse.ArgumentParser:
    """Our flags and Beam's, as Beam itself collects them (PipelineOptions.get_all_options)."""
    parser = _CheckingParser(allow_abbrev=False, add_help=False)
    subset: dict = {}
    for cls in PipelineOptions.__subclasses__():
        subset.setdefault(str(cls), cls)
    for cls in subset.values():
        cls._add_argparse_args(parser)  # pylint: disable=protected-access
    return parser


def check_flags(argv: list) -> None:
    """Raises FlagError for the first flag that neither we nor Beam declare
    (Beam would silently drop it: `--num_shard 4` would run with the default),
    with a suggestion, or for a bad value of a declared flag."""
    parser = _all_options_parser()
    _, unknown = parser.parse_known_args(argv)
    _check_numbers(argv)
    if not unknown:
        return
    flag = next((a for a in unknown if a.startswith("-")), None)
    if flag is None:
        raise FlagError(f"unexpected argument {unknown[0]!r}: every value follows its flag (--name VALUE)")
    name = flag.split("=", 1)[0]
    ours = [a.option_strings[0] for a in help_parser("x")._actions if a.option_strings and a.dest != "help"]
    beams = [s for a in parser._actions for s in a.option_strings if s.startswith("--") and s not in ours]
    raise FlagError(f"unknown flag {name}{_suggestion(name, ours, beams)} (tfrecords convert --help lists ours; "
                    "Beam's own flags pass through)")


_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _check_numbers(argv: list) -> None:
    """Numbers of our flags by the strict grammar of labels (transforms/core/labels.py):
    argparse's int() and float() take `1_0` as 10 and `nan`, `inf`, ' 1'."""
    typed = {s: a.type for a in help_parser("x")._actions if a.type in (int, float) for s in a.option_strings}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag not in typed:
            continue
        if not eq:
            if i + 1 >= len(argv):
                continue  # argparse says the value is missing
            value = argv[i + 1]
        grammar = _INT if typed[flag] is int else _FLOAT
        if not grammar.fullmatch(value):
            kind = "an integer" if typed[flag] is int else "a number"
            raise FlagError(f"{flag} {value!r} is not {kind} (plain digits{'' if typed[flag] is int else ', . and e'})")


def _suggestion(name: str, ours: list, beams: list) -> str:
    underscored = "--" + name.lstrip("-").replace("-", "_")
    if underscored in ours or underscored in beams:
        return f": did you mean {underscored}? (flags are spelled with underscores)"
    best: Optional[list] = (difflib.get_close_matches(underscored, ours, n=1, cutoff=0.6)
                            or difflib.get_close_matches(underscored, beams, n=1, cutoff=0.75))
    return f": did you mean {best[0]}?" if best else ""
