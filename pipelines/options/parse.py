"""Turn the options' Values into a ConvertConfig once, before anything is
submitted, failing at once with a message that says how to fix it.

Nothing here touches a file, a bucket or the network: what the inputs hold
(a table's header, a folder's top folders, LATEST, a --label_map's text) is
read before, by one step (resolve.py), and handed in as `Resolved`."""
from __future__ import annotations

import dataclasses
import json
import posixpath
import re
import time
import unicodedata
from typing import Optional

from tfrecord_pipelines.outputs import versions
from tfrecord_pipelines._version import __version__
from tfrecord_pipelines.options.config import (KNOWN_SPLIT_FOLDERS, SPLIT_NAME, ConvertConfig, DuplicatePolicy, InputKind, InputSpec,
                              LabelSource, LabelSpec, LabelType, OutputSpec, QualitySpec, ShardSpec, SplitSource,
                              SplitSpec)
from tfrecord_pipelines.options.split_flag import parse_pairs, parse_split, refuse_split_folders_as_classes
from tfrecord_pipelines.transforms.core import labels, provenance, publishable, tables
from tfrecord_pipelines.transforms.core.errors import UsageError  # noqa: F401 (re-exported)
from tfrecord_pipelines.transforms.core.features import DEFAULT_KEYS, features_for
from tfrecord_pipelines.transforms.core.images import STORABLE_FORMATS, ImagePolicy, Validation
from tfrecord_pipelines.transforms.core import resize
from tfrecord_pipelines.transforms.core.resize import FILTERS, PngPolicy, ResizeMode, ResizePolicy
from tfrecord_pipelines.transforms.core.specs import OutputFormat, ReadPolicy, ShardNames
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression
from tfrecord_pipelines.transforms.storage import fsutil  # its path functions only (names, no reads)


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?i?B?)\s*$", re.I)
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_size(text: str) -> int:
    m = _SIZE.match(text)
    unit = m.group(2).upper() if m else None
    if not m or unit not in _UNITS:
        raise UsageError(f"--shard_size {text!r} is not a size; use e.g. 150MB, 1GB, 512MiB")
    n = int(float(m.group(1)) * _UNITS[unit])
    if n < 1:
        raise UsageError(f"--shard_size {text!r} must be positive")
    return n


_DIGITS = re.compile(r"[0-9]{1,9}")


def parse_num_shards(text: str) -> tuple:
    text = text.strip()
    if not text or text.lower() == "auto":
        return ()
    if _DIGITS.fullmatch(text):
        if int(text) < 1:
            # 0 used to mean "auto" silently; say so instead.
            raise UsageError(f"--num_shards {text}: expected N >= 1, or auto (the count follows from --shard_size)")
        return (("*", int(text)),)
    out = []
    for name, v in parse_pairs(text, "--num_shards"):
        if not SPLIT_NAME.match(name) or not _DIGITS.fullmatch(v) or int(v) < 1:
            raise UsageError(f"--num_shards {text!r}: expected N or SPLIT=N,... with N >= 1, or auto")
        out.append((name, int(v)))
    return tuple(out)


def label_map_pairs(path: str, raw: Optional[str]) -> tuple:
    """The ((name, id), ...) of --label_map `path`, whose text is `raw` (None:
    not read, a dry run's remote file: an empty map)."""
    if raw is None:
        return ()
    if path.lower().endswith(".json"):
        try:
            d = json.loads(raw)
        except json.JSONDecodeError as e:
            raise UsageError(f"--label_map {path!r} is not valid JSON: {e}") from None
        if isinstance(d, dict) and "classes" in d and isinstance(d["classes"], dict):
            d = d["classes"]  # a manifest's label_map section
        if not isinstance(d, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in d.values()):
            raise UsageError(f"--label_map {path!r} must be a JSON object {{name: integer id}}")
        pairs = [(str(k), v) for k, v in d.items()]
    else:
        names = [line.strip() for line in raw.splitlines() if line.strip()]
        pairs = [(n, i) for i, n in enumerate(names)]
    if any(not labels.INT64_MIN <= i <= labels.INT64_MAX for _, i in pairs):
        raise UsageError(f"--label_map {path!r}: ids must fit in an int64")
    # Names are compared as labels are: without white space at their ends, in NFC (labels.label_name).
    pairs = [(unicodedata.normalize("NFC", n.strip()), i) for n, i in pairs]
    names = [n for n, _ in pairs]
    ids = [i for _, i in pairs]
    if len(set(names)) != len(names) or len(set(ids)) != len(ids):
        raise UsageError(f"--label_map {path!r} repeats a name (compared without white space at its ends, in Unicode NFC form) or an id")
    return tuple(sorted(pairs, key=lambda p: (p[1], p[0])))


def _assumed_columns(o) -> list:
    """A table's columns as its flags name them, for a dry run that may not read it."""
    named = [o.path_column or "filename", o.label_column or "label", o.split_column]
    if o.extra_columns.strip() != "*":
        named += [c.strip() for c in o.extra_columns.split(",")]
    return list(dict.fromkeys(c for c in named if c))


@dataclasses.dataclass(frozen=True)
class Resolved:
    """What the file system said about a run's inputs, read by resolve.resolve(); None: not read."""
    subdirs: Optional[tuple] = None         # --input: its top folders (hidden ones left out)
    table_head: Optional[tuple] = None      # --label_table: (columns, first rows, [(line, BadRow)])
    listing: Optional[tuple] = None         # --file_list: (root, {top folder below it})
    annotations: Optional[tuple] = None     # --annotations: (InputSpec, DetectionSpec, splits come with them)
    latest: tuple = ("", None)              # --versioned: (the version LATEST names, its manifest)
    latest_error: str = ""                  # --versioned: why LATEST's manifest cannot be read
    latest_named: str = ""                  # with --full and latest_error: the name LATEST holds
    latest_link_out: str = ""               # --versioned: a part of LATEST's version that is a link out of it
    latest_pinned: object = None            # --versioned: LATEST's version with its pins (copy_trust.with_pins)
    label_map_text: Optional[str] = None    # --label_map: its text


# --for NAME: the flags each reader needs, as (flag, value); True for an on/off flag. Only flags the user
# did not give are set. JPEG only: tensorflow/tpu's decode_and_crop_jpeg, Model Garden's decode_jpeg_only and
# the DALI/PyTorch pipelines `tfrecords spec` prints decode JPEG alone.
_JPEG_ONLY = (("output_formats", "jpeg"), ("reencode", "jpeg"))
# tensorflow/tpu: the shard counts of its ImageNet converter (1024 / 128) for a split of ImageNet's size, else
# a multiple of 8 hosts (--shard_counts tpu, transforms/core/sharding.py).
_TPU_SHARDS = (("shard_multiple", 8), ("shard_counts", "tpu"))
READERS = {
    # imagenet_input.py subtracts 1 from every label (class 0 is background); its hosts read shards round-robin.
    "tpu-resnet": (("label_offset", 1), *_JPEG_ONLY, *_TPU_SHARDS),
    # EfficientNet's holdout_shards mode opens train-%05d-of-01024 by name: no suffix.
    "tpu-efficientnet": (("label_offset", 1), *_JPEG_ONLY, *_TPU_SHARDS, ("shard_suffix", "none")),
    # Model Garden's detection decoder requires image/source_id (without regenerate_source_id=True).
    "model-garden": (*_JPEG_ONLY, ("source_ids", True)),
    # image_dataset_from_directory numbers class folders in string order, all-number names too ("10" < "9").
    "keras": (("label_type", "class"),),
    "pytorch": (("index_files", True), *_JPEG_ONLY),
    "dali": (("index_files", True), *_JPEG_ONLY),
    # tfds.load(NAME, data_dir=D) finds a dataset only at D/NAME/x.y.z: --output D/NAME, versions 1.0.0, 1.0.1, ...
    "tfds": (("versioned", True),),
}


def _next_release(previous: str) -> str:
    """--for tfds: the version after `previous` in TFDS's x.y.z form (1.0.0 first)."""
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", previous or "")
    return f"{m[1]}.{m[2]}.{int(m[3]) + 1}" if m else "1.0.0"


def _apply_reader(o) -> tuple:
    """(the options with the flags of --for NAME that the command line, or the
    API's keywords, did not give, (NAME, "--flag value", ...) or ())."""
    name = getattr(o, "reader", "") or ""
    if not name:
        return o, ()
    if name not in READERS:
        raise UsageError(f"--for {name!r}: the readers are {', '.join(sorted(READERS))}")
    given = getattr(o, "given", frozenset())
    applied, changes = [name], {}
    for dest, value in READERS[name]:
        if dest not in given:
            changes[dest] = value
            applied.append(f"--{dest}" if value is True else f"--{dest} {value}")
    return o.replace(**changes), tuple(applied)


def door(values, rows: bool = False):
    """`values` with the flags of --for NAME, once the options every run
    needs are there (`rows`: the inputs are a pipeline's rows, not a flag);
    UsageError otherwise. The first check, before anything is read."""
    o, _ = _apply_reader(values)
    _check_door(o, rows)
    return o


def _check_door(o, rows: bool) -> None:
    if not o.output:
        raise UsageError("--output is required: the folder (local or gs://) for the shards")
    if not o.lock_ttl_hours > 0:
        raise UsageError(f"--lock_ttl_hours {o.lock_ttl_hours} must be positive")
    if [bool(o.input), bool(o.label_table), bool(o.file_list), bool(o.annotations),
            rows].count(True) != 1:
        raise UsageError("give exactly one of --input (an image folder tree), --label_table (a CSV/TSV/JSONL "
                         "label table with --image_root), --file_list (a listing of image paths) or --annotations "
                         "(COCO, Pascal VOC or YOLO boxes)")


def build_config(o, resolved: Resolved, run_id: str, progress: bool = False,
                 given_inputs: Optional[tuple] = None) -> ConvertConfig:
    """The run's config from the Values `o` and what resolve.resolve(o) read
    for them. `given_inputs`: (InputSpec, SplitSpec, label source) of inputs
    that are not a flag (the rows of a user's own pipeline: api/ptransforms.py)."""
    o, reader = _apply_reader(o)
    _check_door(o, given_inputs is not None)
    detection = None
    if given_inputs is not None:
        inputs, split, label_from = given_inputs
    elif o.annotations:
        inputs, split, label_from, detection = _annotations(o, resolved.annotations)
    elif o.file_list:
        from tfrecord_pipelines.options.file_list import list_input
        inputs, split, label_from = list_input(o, *resolved.listing)
    else:
        inputs, split, label_from = (_folder_input(o, resolved.subdirs) if o.input
                                     else _table_input(o, resolved.table_head))
    previous_version, previous, broken = "", None, ""
    if o.versioned:
        previous_version, previous = resolved.latest
        if resolved.latest_error:
            if not o.full:
                raise UsageError(f"{resolved.latest_error}. Pass --full to convert everything again (the class ids "
                                 "of that version are then lost, unless --label_map gives them)")
            previous_version, broken = resolved.latest_named, resolved.latest_error
        inputs = dataclasses.replace(inputs, fingerprint_root=inputs.kind is InputKind.TABLE)
    elif o.version or o.republish_unchanged or o.full or o.keep_versions:
        raise UsageError("--version, --republish_unchanged, --full and --keep_versions need --versioned")
    if o.keep_versions < 0:
        raise UsageError(f"--keep_versions {o.keep_versions} must be >= 0 (0 keeps every version)")
    keys = _feature_keys(o.feature_keys, inputs.extra_columns)
    shards = _shard_spec(o)
    quality = _quality_spec(o)
    split = _stratify(o, split)
    images = _image_policy(o, _read_once(o.reads_per_image, inputs, shards, quality))
    images = dataclasses.replace(images, perceptual_hash=quality.enabled and quality.max_distance > 0
                                 and images.validation is Validation.FULL)
    cfg = ConvertConfig(
        inputs=inputs, labels=_label_spec(o, label_from, inputs, previous, resolved.label_map_text), splits=split,
        images=images, shards=shards,
        output=_output_spec(o, run_id, keys, progress, previous_version, previous),
        max_reject_fraction=_fraction(o.max_reject_fraction), quality=quality,
        allow_empty=o.allow_empty, allow_shrink=_allow_shrink(o), detection=detection)
    _check_written_keys(cfg)
    if reader:
        if reader[0] == "tfds" and not o.version:
            reader += (f"--version {cfg.output.version}",)
        cfg = dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, reader=reader))
    return _incremental(cfg, o, previous, broken, resolved.latest_link_out, resolved.latest_pinned)


def _incremental(cfg: ConvertConfig, o, previous: Optional[dict], broken: str = "", link_out: str = "",
                 pinned=None) -> ConvertConfig:
    """Where a killed run of these inputs resumes, and (--versioned) whether
    the records of the version LATEST names may be copied, or why not."""
    out, inputs = cfg.output, cfg.inputs
    # A table run's fingerprint covers its files only when the image root is listed too (--versioned):
    # without that, a rerun could not tell that an image changed since the killed run.
    # A run with --annotations resumes: its fingerprint covers the image folders' listing and the
    # annotation files (COCO's bytes, VOC's and YOLO's files by identity). It reuses no records of a
    # previous version, though: a box may change while its image's file does not.
    resumable = cfg.detection is not None or inputs.kind is InputKind.FOLDER or inputs.fingerprint_root
    changes = {"listed_at_ns": time.time_ns(), "keep_versions": o.keep_versions,
               "resume_parent": (out.root or out.output) if resumable else ""}
    if out.root:
        inc = (previous or {}).get("incremental")
        listed = inc.get("listed_at_ns") if isinstance(inc, dict) else None
        changes["racy_after_ns"] = provenance.racy_after(listed) if type(listed) is int and listed > 0 else 0  # noqa: E721
        expect = {"tool_version": __version__, "options": cfg.fingerprint_options(),
                  "image_library": resize.library_versions(), "compression": cfg.shards.compression.value,
                  "output_format": cfg.shards.output_format.value}
        why = (f"LATEST names {out.previous_version}, whose manifest cannot be read" if broken
               else versions.FULL_GIVEN if o.full
               else "--annotations are converted in full (a box may change while its image does not)"
               if cfg.detection is not None else provenance.why_full(previous, expect))
        prev = None
        if not why:
            try:
                prev = provenance.previous_version(previous, out.previous_version,
                                                   fsutil.join(out.root, out.previous_version))
                if pinned is not None and fsutil.is_local(prev.folder):
                    prev = pinned  # the same version, with what was pinned of it (read by the resolve step)
            except provenance.ProvenanceError as e:
                why = f"its manifest's provenance section is malformed ({e}); --full repairs it"
        if prev is not None and link_out:  # copied from only where it lies: never through a link out of the version
            prev, why = None, f"{link_out}: not copied from"
        changes.update(previous=prev, why_full=why)
    return dataclasses.replace(cfg, output=dataclasses.replace(out, **changes))


def _annotations(o, found: tuple) -> tuple:
    """--annotations: inputs, splits, label source, DetectionSpec; `found`: (InputSpec, DetectionSpec,
    whether splits come with them), what resolve read (pipelines/options/annotation_input.py)."""
    inputs, detection, keyed = found
    if o.label_table or o.label_regex or o.label_from not in ("auto", "table") or o.label_type != "auto":
        raise UsageError("with --annotations the classes are the annotations' categories: drop --label_from, "
                         "--label_regex and --label_type")
    split = parse_split(o.split, False, keyed)
    if split.source is SplitSource.FOLDERS:
        raise UsageError("--split folders: with --annotations, splits come with them (SPLIT=PATH,... or YOLO's "
                         "images/<split>/), or from --split ratios")
    return inputs, split, "table", detection


def _quality_spec(o) -> QualitySpec:
    if not 0 <= o.near_duplicates <= 32:
        raise UsageError(f"--near_duplicates {o.near_duplicates}: a Hamming distance 0..32 between 64-bit hashes "
                         "(0: off; distinct photos are ~32 apart)")
    if o.min_class_count < 0:
        raise UsageError(f"--min_class_count {o.min_class_count} must be >= 0")
    enabled = o.quality == "on"
    if not enabled and o.duplicates != "keep_all":
        raise UsageError(f"--duplicates {o.duplicates} needs the quality checks: drop --quality off")
    return QualitySpec(enabled=enabled, duplicates=DuplicatePolicy(o.duplicates), max_distance=o.near_duplicates,
                       min_class_count=o.min_class_count)


def _stratify(o, split: SplitSpec) -> SplitSpec:
    if o.stratify and split.source is not SplitSource.RATIOS:
        raise UsageError(f"--stratify needs ratio splits (--split train=0.8,validation=0.2), not --split {o.split}")
    return dataclasses.replace(split, salt=o.split_salt, stratify=o.stratify) if split.source is SplitSource.RATIOS \
        else split


def _folder_input(o, found: Optional[tuple]) -> tuple[InputSpec, SplitSpec, str]:
    """`found`: the folder's top folders (None: not listed, a dry run's remote folder)."""
    root = fsutil.normalize_root(o.input)
    unlisted = found is None
    subdirs = list(found or ())
    split_folders = bool(subdirs) and all(d.lower() in KNOWN_SPLIT_FOLDERS for d in subdirs)
    split = parse_split(o.split, split_folders, False)
    if split.source is SplitSource.COLUMN:
        raise UsageError("--split column needs a --label_table")
    if split.source is SplitSource.FOLDERS and not subdirs and not unlisted:
        raise UsageError(f"--split folders: {o.input!r} has no sub-folders to name the splits")
    if o.label_from == "table":
        raise UsageError("--label_from table needs a --label_table")
    refuse_split_folders_as_classes(o, subdirs, split_folders, split)
    include = tuple(p.strip() for p in o.include.split(",") if p.strip()) or ("*",)
    inputs = InputSpec(InputKind.FOLDER, root, include=include, split_folders=split.source is SplitSource.FOLDERS)
    return inputs, split, o.label_from


def table_format(o, table: str) -> tuple:
    """(format, encoding) of --label_table `table`, from its name and --table_encoding."""
    try:
        fmt = tables.table_format(table)
    except tables.TableError as e:
        raise UsageError(str(e)) from None
    try:
        encoding = tables.check_encoding(o.table_encoding)
    except tables.TableError as e:
        raise UsageError(str(e)) from None
    return fmt, encoding


def _table_input(o, head: Optional[tuple]) -> tuple[InputSpec, SplitSpec, str]:
    """`head`: (columns, first rows, [(line, BadRow)]) of the table (None: not read, a dry run's
    remote table: the columns the flags name)."""
    table = fsutil.normalize_root(o.label_table)
    fmt, encoding = table_format(o, table)
    columns, sample, bad = head if head is not None else (_assumed_columns(o), [], [])
    undecodable = [n for n, row in bad if publishable.TABLE_ENCODING in row.detail]
    if undecodable and o.max_reject_fraction < 1:  # the publish step would refuse it: say so before the run
        raise UsageError(f"--label_table {o.label_table!r}: " + publishable.undecodable_rows(
            f"{len(undecodable):,} of its first rows", encoding, f"line {undecodable[0]}")
            + " (--max_reject_fraction 1 converts without those rows)")
    label_from = o.label_from
    try:
        path_col = tables.pick_column(columns, o.path_column, tables.PATH_COLUMNS, "path")
        split_col = tables.pick_column(columns, o.split_column, tables.SPLIT_COLUMNS, "split",
                                       required=o.split == "column")
        label_col = tables.label_column_of(columns, path_col, split_col, o.label_column, label_from, o.label_regex)
    except tables.TableError as e:
        hint = tables.delimiter_hint(columns) if fmt != "jsonl" else ""
        if fmt != "jsonl" and any(labels.is_float(c) for c in columns):
            hint = (f". Its first row {columns[:4]} looks like data: the first row must be a header naming the "
                    "columns, e.g. filename,label")
        raise UsageError(f"--label_table {o.label_table!r}: {e}{hint}") from None
    if label_from == "auto" and not label_col and not o.label_regex:
        label_from = "none"  # a table of paths only
    split = parse_split(o.split, False, bool(split_col))
    if split.source is SplitSource.FOLDERS:
        raise UsageError("--split folders needs an --input folder tree, not a table")
    if split.source is not SplitSource.COLUMN:
        split_col = ""
    if o.extra_columns.strip() == "*":
        extras = tuple(c for c in columns if c and c not in (path_col, label_col, split_col))
    else:
        extras = tuple(c.strip() for c in o.extra_columns.split(",") if c.strip())
        missing = [c for c in extras if c not in columns]
        if missing:
            raise UsageError(f"--extra_columns {missing} not in the table; columns are {columns}")
    # A table naming files without extensions (ids) is joined with a listing of the image root.
    resolve_ids = any(r.get(path_col) and not tables.has_image_extension(r[path_col]) for r in sample)
    inputs = InputSpec(InputKind.TABLE, fsutil.normalize_root(o.image_root or posixpath.dirname(table)),
                       table=table, table_format=fmt, table_encoding=encoding, path_column=path_col,
                       label_column=label_col,
                       split_column=split_col, extra_columns=extras, resolve_ids=resolve_ids,
                       allow_absolute_paths=o.allow_absolute_paths)
    return inputs, split, label_from


def _output_spec(o, run_id: str, keys: tuple, progress: bool, previous_version: str,
                 previous: Optional[dict]) -> OutputSpec:
    out = fsutil.normalize_root(o.output)
    if not o.versioned:
        return OutputSpec(out, run_id, o.overwrite, keys, progress, source_ids=o.source_ids)
    version = o.version or (_next_release(previous_version) if getattr(o, "reader", "") == "tfds"
                            else versions.new_version_name(previous=previous_version))
    if not versions.VERSION_NAME.match(version):
        raise UsageError(f"--version {version!r}: use letters, digits, '.', '_' or '-' (it names a folder)")
    if version in (previous_version, versions.LATEST):
        raise UsageError(f"--version {version!r} is already published in {out}; give a new version name")
    return OutputSpec(fsutil.join(out, version), run_id, o.overwrite, keys, progress, root=out, version=version,
                      previous_version=previous_version,
                      previous_fingerprint=(previous or {}).get("fingerprint", {}).get("run", ""),
                      republish=o.republish_unchanged, source_ids=o.source_ids)


def _label_spec(o, label_from: str, inputs: InputSpec, previous: Optional[dict] = None,
                label_map_text: Optional[str] = None) -> LabelSpec:
    if label_from == "auto":
        label_from = "regex" if o.label_regex else "table" if inputs.kind is InputKind.TABLE else "folder"
    source = LabelSource(label_from)
    if source is LabelSource.REGEX:
        if not o.label_regex:
            raise UsageError("--label_from regex needs --label_regex")
        try:
            re.compile(o.label_regex)
        except re.error as e:
            raise UsageError(f"--label_regex {o.label_regex!r} is not a valid regular expression: {e}") from None
    if source is LabelSource.FOLDER and o.label_depth == 0:
        raise UsageError("--label_depth 0 names no folder; use 1 for root/<class>/..., -1 for the image's folder")
    if not -(2**62) <= o.label_offset <= 2**62:
        raise UsageError(f"--label_offset {o.label_offset} is out of range (class ids are int64)")
    frozen = label_map_pairs(o.label_map, label_map_text) if o.label_map else None
    carried = (previous or {}).get("label_map", {})
    if frozen is None and carried.get("kind") == LabelType.CLASS and o.label_type in (LabelType.AUTO, LabelType.CLASS):
        # A new version keeps the class ids of the version before it.
        frozen = tuple(sorted(carried["classes"].items(), key=lambda p: (p[1], p[0])))
    if o.extend_label_map and frozen is None and not o.versioned:
        raise UsageError("--extend_label_map needs --label_map (the map to extend), or --versioned (which "
                         "carries the previous version's map)")
    label_type = LabelType(o.label_type)
    if frozen is not None and label_type not in (LabelType.AUTO, LabelType.CLASS):
        raise UsageError(f"--label_map gives class names; it cannot be used with --label_type {o.label_type}")
    return LabelSpec(source, depth=o.label_depth, regex=o.label_regex, label_type=label_type, frozen_map=frozen,
                     extend_map=o.extend_label_map, offset=o.label_offset, split_folders=inputs.split_folders)


def _read_once(choice: str, inputs: InputSpec, shards: ShardSpec, quality: QualitySpec = QualitySpec()) -> bool:
    """Whether each image is read once (validated as it is written). Planning
    shards before validation needs every file's size (a folder listing gives
    them, a table does not) or a --num_shards for every split; dropping
    duplicates needs their content before planning."""
    if quality.dedup_before_writing:
        if choice == "1":
            raise UsageError(f"--duplicates {quality.duplicates.value} finds duplicates before shards are planned, "
                             "which reads each image twice: use --reads_per_image 2 (or auto)")
        return False
    if choice != "auto":
        return choice == "1"
    # --annotations: the images' folders are listed too, which gives every size.
    return inputs.kind in (InputKind.FOLDER, InputKind.ANNOTATIONS) or "*" in dict(shards.num_shards)


def _image_policy(o, read_once: bool = True) -> ImagePolicy:
    formats = frozenset(f.strip().lower().replace("jpg", "jpeg") for f in o.output_formats.split(",") if f.strip())
    bad = formats - set(STORABLE_FORMATS)
    if not formats or bad:
        raise UsageError(f"--output_formats {o.output_formats!r}: allowed are {','.join(STORABLE_FORMATS)} "
                         "(other formats decode to 4-D tensors or not at all in TensorFlow; use --reencode)")
    if not 1 <= o.jpeg_quality <= 100:
        raise UsageError(f"--jpeg_quality {o.jpeg_quality} must be 1..100")
    if o.max_pixels < 1:
        raise UsageError(f"--max_pixels {o.max_pixels} must be positive")
    for flag, value in (("max_file_bytes", o.max_file_bytes), ("io_timeout", o.io_timeout)):
        if not value > 0:
            raise UsageError(f"--{flag} {value} must be positive")
    if not 0 <= o.reads_in_flight <= 1024:
        raise UsageError(f"--reads_in_flight {o.reads_in_flight} must be 0 (automatic) to 1024")
    reads = ReadPolicy(in_flight=o.reads_in_flight, timeout=o.io_timeout, max_file_bytes=o.max_file_bytes,
                       once=read_once)
    return ImagePolicy(validation=Validation(o.validate), output_formats=formats,
                       reencode="" if o.reencode == "off" else o.reencode,
                       max_pixels=o.max_pixels, jpeg_quality=o.jpeg_quality, color_convert=o.color_convert == "rgb",
                       apply_orientation=o.exif_orientation == "apply", reads=reads, resize=_resize_policy(o))


def _resize_policy(o) -> ResizePolicy:
    """--resize_*: a bound, and how to meet it; the other flags need a bound."""
    longest, shorter = o.resize_longest_side, o.resize_shorter_side
    for flag, v in (("resize_longest_side", longest), ("resize_shorter_side", shorter)):
        if v is not None and v < 1:
            raise UsageError(f"--{flag} {v} must be a positive number of pixels")
    if longest is not None and shorter is not None:
        raise UsageError("--resize_longest_side and --resize_shorter_side exclude each other: give one bound")
    how = {"resize_filter": o.resize_filter, "resize_png": o.resize_png, "resize_smart": o.resize_smart,
           "resize_draft": o.resize_draft}
    if longest is None and shorter is None:
        given = [f"--{k}" for k, v in how.items() if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)} need a bound: --resize_longest_side N or --resize_shorter_side N")
        return ResizePolicy()
    allowed = {"resize_filter": tuple(FILTERS), "resize_png": tuple(p.value for p in PngPolicy),
               "resize_smart": ("on", "off"), "resize_draft": ("on", "off")}
    for k, v in how.items():
        if v is not None and v not in allowed[k]:
            raise UsageError(f"--{k} {v!r}: allowed are {', '.join(allowed[k])}")
    return ResizePolicy(mode=ResizeMode.LONGEST if longest is not None else ResizeMode.SHORTER,
                        size=longest if longest is not None else shorter, filter=o.resize_filter or "lanczos",
                        png=PngPolicy(o.resize_png or "keep"), smart=o.resize_smart != "off",
                        draft=o.resize_draft != "off")


def _shard_spec(o) -> ShardSpec:
    if o.shard_multiple < 1:
        raise UsageError(f"--shard_multiple {o.shard_multiple} must be >= 1")
    if not -(2**63) <= o.seed < 2**63:
        raise UsageError(f"--seed {o.seed} must fit in 64 bits")
    if o.max_examples_per_split < 0:
        raise UsageError("--max_examples_per_split must be >= 0 (0: no cap)")
    if o.index_files and o.compression != "none":
        raise UsageError(f"--index_files cannot be used with --compression {o.compression}: an index gives byte "
                         "offsets into the file as stored, which a reader cannot seek to inside a compressed "
                         "stream (DALI and the PyTorch tfrecord package read indexes of uncompressed shards only); "
                         "use --compression none")
    if o.output_format == OutputFormat.ARRAY_RECORD and (o.compression != "none" or o.index_files):
        flag = f"--compression {o.compression}" if o.compression != "none" else "--index_files"
        raise UsageError(f"{flag} cannot be used with --output_format array_record: ArrayRecord shards are written "
                         "uncompressed (JPEG and PNG bytes do not compress) and locate their records themselves "
                         "(random access by index, no .idx file needed); use --output_format tfrecord for "
                         f"{flag}")
    return ShardSpec(num_shards=parse_num_shards(o.num_shards), shard_bytes=parse_size(o.shard_size),
                     multiple=o.shard_multiple, compression=Compression(o.compression), seed=o.seed,
                     max_per_split=o.max_examples_per_split, index_files=o.index_files,
                     output_format=OutputFormat(o.output_format), names=_shard_names(o), counts=o.shard_counts)


# TFDS's dataset names (naming._NAME_CLASS, ASCII only): its template's {DATASET}.
_TFDS_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def _shard_names(o) -> ShardNames:
    """--shard_suffix and --shard_template, checked against the format and the output folder's name."""
    if o.shard_suffix != ".tfrecord" and o.output_format != OutputFormat.TFRECORD:
        raise UsageError(f"--shard_suffix {o.shard_suffix} is for TFRecord shards; --output_format "
                         f"{o.output_format} shards end in .{o.output_format}: leave --shard_suffix out")
    if o.shard_template != "tfds":
        return ShardNames(suffix=o.shard_suffix)
    if o.shard_suffix != ".tfrecord":
        raise UsageError(f"--shard_suffix {o.shard_suffix} cannot be used with --shard_template tfds: TFDS's "
                         "template puts the format's name (.tfrecord) before the shard number; leave one out")
    dataset = fsutil.normalize_root(o.output).rstrip("/").rsplit("/", 1)[-1]
    if not _TFDS_NAME.fullmatch(dataset):
        raise UsageError(f"--shard_template tfds: the dataset's name is the output folder's, and {dataset!r} is not "
                         "a TFDS name (a letter, then letters, digits or '_', at most 64): name the folder e.g. "
                         f"{(re.sub(r'[^A-Za-z0-9_]', '_', dataset).lstrip('_0123456789') or 'my_dataset')[:64]!r}")
    return ShardNames(template="tfds", dataset=dataset)


def _feature_keys(text: str, extra_columns: tuple) -> tuple:
    known = set(DEFAULT_KEYS.values()) | set(extra_columns)
    clash = set(extra_columns) & set(DEFAULT_KEYS.values())
    pairs = parse_pairs(text, "--feature_keys")
    renamed = {old for old, _ in pairs}
    if clash - renamed:
        raise UsageError(f"table columns {sorted(clash - renamed)} have the names of built-in features; "
                         "rename them with --feature_keys or leave them out with --extra_columns")
    for old, new in pairs:
        if old not in known:
            raise UsageError(f"--feature_keys: {old!r} is not a feature; features are {sorted(known)}")
    return tuple(pairs)


def _check_written_keys(cfg: ConvertConfig) -> None:
    """Two features of one record must not share a key. Only the features the run writes count (a
    classification run writes no image/source_id without --source_ids): those of each label kind its labels
    may turn out to be."""
    labels = cfg.labels
    kinds = ([LabelType.BOXES] if cfg.detection is not None else [LabelType.NONE] if labels.source is LabelSource.NONE
             else [LabelType.CLASS, LabelType.INT, LabelType.FLOAT] if labels.label_type is LabelType.AUTO
             else [labels.label_type])
    renames = dict(cfg.output.feature_keys)
    for kind in kinds:
        written = [f.key for f in features_for(kind, cfg.images.resize.enabled,
                                               cfg.detection is not None and cfg.detection.masks,
                                               cfg.output.source_ids)]
        seen: dict = {}
        for key in [*written, *cfg.inputs.extra_columns]:
            new = renames.get(key, key)
            if new and new in seen:
                free = next((k for k in (seen[new], key) if k == new and k not in renames), None)
                raise UsageError(f"--feature_keys: {seen[new]!r} and {key!r} would both be written as {new!r}"
                                 + (f"; add {free}= to leave {free!r} out, or {free}=NEW to rename it" if free else ""))
            if new:
                seen[new] = key


def _allow_shrink(o) -> bool:
    if o.allow_shrink and not o.versioned:
        raise UsageError("--allow_shrink needs --versioned (a run is held to the version LATEST names)")
    return o.allow_shrink


def _fraction(x: float) -> float:
    if not 0 <= x <= 1:
        raise UsageError(f"--max_reject_fraction {x} must be between 0 and 1")
    return x
