"""What a conversion reads and how it labels, splits and shards it: the
specs the stages are built from, as frozen dataclasses and enums. The
application (pipelines/) builds them from the command line; the library
(transforms/) only reads them, and never imports the application.
"""
from __future__ import annotations

import dataclasses
import enum
import re
from typing import Optional

from tfrecord_pipelines.transforms.core.tfrecord_io import Compression

# Split names become file names (`train-00000-of-00016.tfrecord`), so they are
# held to a strict pattern; no '-' so that `train-*` never matches another split.
SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]{1,64}\Z")  # \Z: "$" would also match before a final newline
KNOWN_SPLIT_FOLDERS = ("train", "validation", "val", "valid", "test", "eval", "dev")

# The stages' output tags: records go on, rejects go to rejects.jsonl, stats to the manifest.
RECORDS, REJECTS, STATS = "records", "rejects", "stats"
QUALITY = "quality"  # WriteShards' small per-record rows for CheckQuality
DEFAULT_IO_TIMEOUT = 120.0  # seconds a remote store may stay silent; --io_timeout


class InputKind(str, enum.Enum):
    FOLDER = "folder"
    TABLE = "table"
    ROWS = "rows"      # a PCollection of rows in a user's own pipeline (tfrecord_pipelines.ToRecords)
    ANNOTATIONS = "annotations"  # object annotations (COCO, Pascal VOC, YOLO) and their images


class LabelSource(str, enum.Enum):
    FOLDER = "folder"  # a folder level of the path
    TABLE = "table"    # a column of the label table
    REGEX = "regex"    # a regular expression on the file name
    NONE = "none"      # unlabelled


class LabelType(str, enum.Enum):
    AUTO = "auto"    # int if every label is an integer, float if every label is a number, else class
    CLASS = "class"  # names, mapped to ids 0..N-1 in sorted order (or by --label_map)
    INT = "int"      # integer class ids, kept as they are
    FLOAT = "float"  # regression targets
    NONE = "none"    # unlabelled (a label map's kind, never a --label_type)
    BOXES = "boxes"  # object detection: ids of the annotations' categories (a label map's kind, never a --label_type)


class SplitSource(str, enum.Enum):
    SINGLE = "single"    # everything in one split
    FOLDERS = "folders"  # first folder level under the root names the split
    COLUMN = "column"    # a table column names the split
    RATIOS = "ratios"    # hash of the relative path (and salt) against fractions


@dataclasses.dataclass(frozen=True)
class InputSpec:
    kind: InputKind
    root: str                        # folder root, or the image root of a table
    table: str = ""
    table_format: str = ""           # csv, tsv or jsonl
    table_encoding: str = "utf-8"    # --table_encoding
    path_column: str = ""
    label_column: str = ""
    split_column: str = ""
    extra_columns: tuple = ()        # carried into the Example as typed features
    resolve_ids: bool = False        # table paths without extension name files by stem
    include: tuple = ("*",)          # file-name patterns to list (folder input)
    allow_absolute_paths: bool = False
    split_folders: bool = False      # the first level under the root is the split
    fingerprint_root: bool = False   # list a table's image root too, to fingerprint the files
    source: str = ""                 # rows given from Python: what they were (the table is a scratch copy)


@dataclasses.dataclass(frozen=True)
class LabelSpec:
    source: LabelSource
    depth: int = 1                   # folder level naming the class (negative: from the file up)
    regex: str = ""
    label_type: LabelType = LabelType.AUTO
    frozen_map: Optional[tuple] = None  # ((name, id), ...) from --label_map
    extend_map: bool = False
    offset: int = 0
    split_folders: bool = False      # skip the split folder when counting levels


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    source: SplitSource
    name: str = "train"              # SINGLE
    ratios: tuple = ()               # RATIOS: ((name, fraction), ...)
    salt: str = ""
    stratify: bool = False           # RATIOS: the fractions within each class (quality.stratified_cuts)


class DuplicatePolicy(str, enum.Enum):
    KEEP_ALL = "keep_all"  # write every copy; the manifest lists them
    KEEP_ONE = "keep_one"  # write the copy with the smallest relative path; the others are not selected
    REJECT = "reject"      # write that copy; the others are rejected as duplicate_content


@dataclasses.dataclass(frozen=True)
class QualitySpec:
    """The data-quality checks (transforms/stages/check_quality.py)."""
    enabled: bool = True
    duplicates: DuplicatePolicy = DuplicatePolicy.KEEP_ALL
    max_distance: int = 8            # near duplicates: perceptual hashes within this many bits; 0: off
    min_class_count: int = 1         # classes with fewer records in a split are listed

    @property
    def dedup_before_writing(self) -> bool:
        return self.enabled and self.duplicates is not DuplicatePolicy.KEEP_ALL


class OutputFormat(str, enum.Enum):
    TFRECORD = "tfrecord"          # tf.data, TFDS, DALI, PyTorch's tfrecord
    ARRAY_RECORD = "array_record"  # random access by record index: Grain (a global shuffle), TFDS data sources

    @property
    def extension(self) -> str:
        """The shard file's extension, TFDS's FILEFORMAT (`train-00000-of-00016.array_record`)."""
        return self.value


@dataclasses.dataclass(frozen=True)
class ShardNames:
    """How shard files are named (--shard_suffix, --shard_template): readers
    that build names by hand (EfficientNet's holdout shards, TFDS's default
    template) need theirs. The default is train-00000-of-00016.tfrecord."""
    suffix: str = ".tfrecord"        # TFRecord shards: .tfrecord, .tfrecords or none (no suffix)
    template: str = "split"          # split: SPLIT-00000-of-00016.tfrecord; tfds: DATASET-SPLIT.tfrecord-00000-of-00016
    dataset: str = ""                # tfds: TFDS's DATASET (the dataset folder's name)


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    num_shards: tuple = ()           # ((split, n), ...); "*" for every split
    shard_bytes: int = 150 * 10**6
    multiple: int = 1
    compression: Compression = Compression.NONE
    seed: int = 0
    max_per_split: int = 0           # 0: no cap
    index_files: bool = False        # an index per shard for DALI and the PyTorch tfrecord reader
    output_format: OutputFormat = OutputFormat.TFRECORD
    names: ShardNames = ShardNames()
    counts: str = "size"             # size: from shard_bytes; tpu: also tensorflow/tpu's 1024/128 (sharding.py)

    def requested(self, split: str) -> int:
        d = dict(self.num_shards)
        return d.get(split, d.get("*", 0))

# Local disk: no read-ahead. Measured on 10,000 ImageNet-like files in the page
# cache (2 workers, header mode), 4 reads in flight gave 3,383 images/s and
# 320 us of CPU each against 6,141 and 288 us with none: the threads contend
# for the GIL. A cold or network disk may want --reads_in_flight 4-16.
LOCAL_IN_FLIGHT = 1
REMOTE_IN_FLIGHT = 32  # a bucket's latency (20-100 ms) is hidden by many reads at once


@dataclasses.dataclass(frozen=True)
class ReadPolicy:
    in_flight: int = 0                 # reads at once per worker; 0: by the input's scheme
    timeout: float = DEFAULT_IO_TIMEOUT   # seconds a remote store may stay silent
    max_file_bytes: int = 1 << 30      # larger files are rejected (`too_large`)
    once: bool = True                  # read each image once, validating it as its shard is written

    def in_flight_for(self, path: str) -> int:
        return self.in_flight or (REMOTE_IN_FLIGHT if is_remote(path) else LOCAL_IN_FLIGHT)


def is_remote(path: str) -> bool:
    # fsutil.is_local's rule, without importing fsutil (and with it Beam) into
    # the specs, which the pure modules import.
    return "://" in path


ROWS_FOLDER_PREFIX = "tfrecords-rows-"  # the scratch folder of one run's rows table (a remote job's end removes it)
RUN_ONLY = {"recorded": False}  # a field of a spec that the manifest's settings leave out


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """Where and how the output is written. Fields marked RUN_ONLY belong to
    this run (its id, what it found in the previous version, how it reports)
    and are not among the settings the manifest records."""
    output: str                      # the folder the shards go to
    run_id: str = dataclasses.field(metadata=RUN_ONLY)
    overwrite: bool = False
    feature_keys: tuple = ()         # ((default key, new key or ""), ...)
    progress: bool = dataclasses.field(default=False, metadata=RUN_ONLY)
    root: str = ""                   # --versioned: the dataset root holding versions and LATEST
    version: str = ""                # --versioned: this run's version folder name
    previous_version: str = ""       # the version LATEST named when the run started
    previous_fingerprint: str = dataclasses.field(default="", metadata=RUN_ONLY)
    republish: bool = False          # publish even when nothing changed
    # the job's Publish step releases the lock (a launcher that does not wait)
    job_ends_run: bool = dataclasses.field(default=False, metadata=RUN_ONLY)
    # `tfrecords check`: validate and report; no shards, no manifest
    check_only: bool = dataclasses.field(default=False, metadata=RUN_ONLY)
    # when the run started (before its listing): provenance's racy threshold
    listed_at_ns: int = dataclasses.field(default=0, metadata=RUN_ONLY)
    # --versioned: provenance.PreviousVersion whose records may be copied
    previous: object = dataclasses.field(default=None, metadata=RUN_ONLY)
    # --versioned: why no record is copied from the previous version
    why_full: str = dataclasses.field(default="", metadata=RUN_ONLY)
    # --versioned: complete versions kept after publishing (0: all)
    keep_versions: int = dataclasses.field(default=0, metadata=RUN_ONLY)
    # where the resume area lives (the root, or the output); "": no resume
    resume_parent: str = dataclasses.field(default="", metadata=RUN_ONLY)
    # files changed since this time are treated as changed (provenance.racy)
    racy_after_ns: int = dataclasses.field(default=0, metadata=RUN_ONLY)
    reader: tuple = ()               # --for NAME: (NAME, the flags it set, ...) as the summary prints them
    source_ids: bool = False         # --source_ids: image/source_id on classification records too

    @property
    def lock_dir(self) -> str:
        """Versioned runs lock the dataset root, so scheduled runs never overlap."""
        return self.root or self.output


@dataclasses.dataclass(frozen=True)
class PublishSpec:
    """What the publish step needs besides the run's results."""
    output: OutputSpec
    staging: str                     # the run's staging folder
    compression: Compression
    options: dict                    # the settings, as the manifest records them
    options_fingerprint: str
    tool_version: str
    max_reject_fraction: float = 1.0
    allow_empty: bool = False        # --allow_empty: publish a dataset of 0 records
    allow_shrink: bool = False       # --allow_shrink: a version may fall below half of LATEST's records
    shard_options: dict = None       # the settings that shape the shards (the manifest's incremental.options)
    remove_at_end: str = ""          # a folder the job removes when it ends the run (rows from Python's table)

    @property
    def job_ends_run(self) -> bool:
        return self.output.job_ends_run


class AnnotationFormat(str, enum.Enum):
    COCO = "coco"  # one JSON document: images, annotations, categories
    VOC = "voc"    # Pascal VOC: one XML file per image
    YOLO = "yolo"  # one text file per image: class index and normalized cx cy w h per line


class BadBoxes(str, enum.Enum):
    """What a box that does not fit its image becomes (transforms/core/annotations/boxes.py)."""
    CLIP = "clip"                  # past the edge: clipped; empty, not finite, unknown category: dropped
    DROP = "drop"                  # any bad box is dropped (counted by reason)
    REJECT_IMAGE = "reject_image"  # any bad box rejects its image (bad_box)


@dataclasses.dataclass(frozen=True)
class DetectionSpec:
    """Object annotations: where they are and how boxes are checked (--annotations and its group)."""
    fmt: AnnotationFormat
    sources: tuple = ()            # ((split or "", annotation file or folder, image folder), ...)
    names: tuple = ()              # YOLO: class names by index (classes.txt or the data YAML)
    masks: bool = False            # image/object/mask: a PNG per object (--masks png)
    bad_boxes: BadBoxes = BadBoxes.CLIP
    keep_empty: bool = True        # an image without boxes is written (a negative); else rejected (no_boxes)
    contiguous_ids: bool = False   # --category_ids contiguous: 1..N in the source's order, not its own ids
    max_annotation_bytes: int = 64 << 20   # a per-image annotation file (VOC XML, YOLO text) larger is refused
    found: str = ""                # what --annotations was found to be, as the run says it
