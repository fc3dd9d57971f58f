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

from transforms.tfrecord_io import Compression

# Split names become file names (`train-00000-of-00016.tfrecord`), so they are
# held to a strict pattern; no '-' so that `train-*` never matches another split.
SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]{1,64}$")
KNOWN_SPLIT_FOLDERS = ("train", "validation", "val", "valid", "test", "eval", "dev")


class InputKind(str, enum.Enum):
    FOLDER = "folder"
    TABLE = "table"


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


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    num_shards: tuple = ()           # ((split, n), ...); "*" for every split
    shard_bytes: int = 150 * 10**6
    multiple: int = 1
    compression: Compression = Compression.NONE
    seed: int = 0
    max_per_split: int = 0           # 0: no cap
    index_files: bool = False        # an index per shard for DALI and the PyTorch tfrecord reader

    def requested(self, split: str) -> int:
        d = dict(self.num_shards)
        return d.get(split, d.get("*", 0))
