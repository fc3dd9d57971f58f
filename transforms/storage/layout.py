"""Names of what a conversion writes in its output folder."""
from __future__ import annotations

import datetime
import json
import os
import re
import uuid
from typing import Optional

from tfrecord_pipelines.transforms.core.example_codec import BYTES, FLOAT, INT64
from tfrecord_pipelines.transforms.core.specs import SPLIT_NAME, LabelType, OutputFormat
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression
from tfrecord_pipelines.transforms.storage import fsutil, untrusted

MANIFEST = "manifest.json"        # written last, create-only: the output is complete
REJECTS = "rejects.jsonl"         # one JSON object per rejected record
LABEL_MAP = "label_map.json"      # {"name": id}; usable as --label_map for the next run
LABEL_MAP_PBTXT = "label_map.pbtxt"  # --annotations: the classes in the Object Detection API's format
SCHEMA = "schema.pbtxt"           # the features as a TFX Schema (tensorflow_metadata)
# TFDS metadata (transforms/core/tfds_metadata.py)
from tfrecord_pipelines.transforms.core.tfds_metadata import DATASET_INFO as TFDS_DATASET_INFO  # noqa: E402
from tfrecord_pipelines.transforms.core.tfds_metadata import FEATURES as TFDS_FEATURES  # noqa: E402
from tfrecord_pipelines.transforms.core.tfds_metadata import LABELS_SUFFIX as TFDS_LABELS_SUFFIX  # noqa: E402
LOCK = ".tfrecords.lock"          # held by a running conversion
STAGING_PREFIX = ".tfrecords-staging-"
RESUME_PREFIX = ".tfrecords-resume-"  # a resume area (transforms/storage/resume.py), named after the run's inputs
# Any shard we could have written, whatever its split, count, compression, format or naming
# (--shard_suffix: .tfrecord, .tfrecords or none; --shard_template tfds: DATASET-SPLIT.FORMAT-X-of-Y).
_X_OF_Y = r"\d{5,}-of-\d{5,}"
SPLIT_SHARD_RE = re.compile(r"^[A-Za-z0-9_]{1,64}-" + _X_OF_Y + r"(?:(?:\.tfrecords?)?(?:\.gz|\.zlib)?|\.array_record)$")
TFDS_SHARD_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}-[A-Za-z0-9_]{1,64}\.(?:tfrecord-" + _X_OF_Y
                           + r"(?:\.gz|\.zlib)?|array_record-" + _X_OF_Y + ")$")
SHARD_RE = re.compile("^(?:" + SPLIT_SHARD_RE.pattern[1:-1] + "|" + TFDS_SHARD_RE.pattern[1:-1] + ")$")
# --index_files: a shard's record index for DALI's readers.tfrecord and the
# PyTorch `tfrecord` package, in a folder of its own ("index/<shard name>.idx"):
# beside the shard, "train-*" (the glob of most TFRecord readers) matched it too.
INDEX_FOLDER = "index"
INDEX_SUFFIX = ".idx"
INDEX_RE = re.compile(SHARD_RE.pattern[:-1] + re.escape(INDEX_SUFFIX) + "$")  # an index's base name
MANIFEST_FORMAT = "tfrecord-pipelines/manifest/v1"
LATEST = "LATEST"                 # --versioned: a dataset root's pointer to its current version
VERSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")  # a version folder's name
# A temp file of fsutil.write_bytes/create_only ("name.tmp-PID-HEX"; older
# versions wrote "name.tmp-PID"), left only by a crash: the next run removes it.
TEMP_RE = re.compile(r"^(.+)\.tmp-\d+(-[0-9a-f]+)?$")
FAILED_REJECTS_RE = re.compile(r"^failed-(.+)\." + re.escape(REJECTS) + "$")
KEEP_FAILED_REJECTS = 3           # failed-<run>.rejects.jsonl of the latest failed runs kept for inspection
# The name a refused run gives its rejects, exactly (a run id: layout.new_run_id): what a later successful
# run into the same folder removes, and verify names.
FAILED_RUN_REJECTS_RE = re.compile(r"^failed-(\d{8}-\d{6}-\d{6}-[0-9a-f]{8})\." + re.escape(REJECTS) + "$")


class ManifestError(ValueError):
    """A manifest.json that is not a complete, well-formed manifest."""


def read_manifest(output: str, check: bool = True) -> dict:
    """The manifest of the output folder `output` (FileNotFoundError if none;
    ManifestError if it is not a well-formed manifest, not a regular file,
    larger than untrusted.MAX_MANIFEST_BYTES or a link out of the folder).
    check=False only requires a JSON object (to read fields such as run_id)."""
    try:
        data = untrusted.read(fsutil.join(output, MANIFEST), untrusted.MAX_MANIFEST_BYTES, within=output)
    except untrusted.TooLarge as e:
        raise ManifestError(f"{e}; TFRECORDS_MAX_MANIFEST_BYTES raises the cap") from None
    except (fsutil.NotRegularFile, untrusted.Refused) as e:
        raise ManifestError(str(e)) from None
    return parse_manifest(data, check)


def _no_repeated_keys(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"the key {twice[:80]!r} appears twice in one object")
    return d


def parse_manifest(data: bytes, check: bool = True) -> dict:
    try:
        # A key given twice is refused: readers that keep the first and those that keep the last would see
        # two different datasets.
        m = json.loads(data, object_pairs_hook=_no_repeated_keys)
    except (ValueError, RecursionError) as e:  # bad UTF-8 or JSON (a 0-byte file), absurd nesting
        raise ManifestError(f"{MANIFEST} is not valid JSON ({len(data):,} bytes): {str(e)[:200]}") from None
    if not isinstance(m, dict):
        raise ManifestError(f"{MANIFEST} is not a JSON object")
    if check:
        check_manifest(m)
    return m


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise ManifestError(f"{MANIFEST}: {what}")


def _count(v) -> bool:
    return type(v) is int and 0 <= v < 1 << 63  # noqa: E721 (bool is not a count)


def check_manifest(m: dict) -> None:
    """Every field readers index (verify, inspect, the summary) is there with
    its type, so they never meet a KeyError or TypeError."""
    _need(m.get("format") == MANIFEST_FORMAT, f"format is {str(m.get('format'))[:80]!r}, not {MANIFEST_FORMAT!r}")
    for key in ("run_id", "compression", "tf_compression_type"):
        _need(isinstance(m.get(key), str), f"{key!r} is missing or not a string")
    counts = m.get("counts")
    _need(isinstance(counts, dict), "'counts' is missing or not an object")
    for key in ("listed", "written", "rejected", "not_selected"):
        _need(_count(counts.get(key)), f"counts.{key} is missing or not a count")
    for key, where in (("excluded", counts), ("rejects_by_reason", m)):
        v = where.get(key, {}) if key == "excluded" else where.get(key)
        _need(isinstance(v, dict) and all(_count(c) for c in v.values()), f"{key!r} is missing or not a map of counts")
    features = m.get("features")
    _need(isinstance(features, dict) and all(isinstance(k, str) and v in (BYTES, INT64, FLOAT)
                                             for k, v in features.items()),
          "'features' is missing or not a map of feature name to bytes/int64/float")
    roles = m.get("feature_roles", {})
    _need(isinstance(roles, dict) and all(isinstance(v, str) for v in roles.values()),
          "'feature_roles' is not a map of role to feature name")
    lm = m.get("label_map")
    classes = lm.get("classes") if isinstance(lm, dict) else None
    _need(isinstance(lm, dict) and isinstance(lm.get("kind"), str) and isinstance(classes, dict)
          and all(type(v) is int for v in classes.values()), "'label_map' is missing or malformed")  # noqa: E721
    splits = m.get("splits")
    _need(isinstance(splits, dict), "'splits' is missing or not an object")
    for name, split in splits.items():
        _need(isinstance(split, dict) and isinstance(split.get("shards"), list),
              f"split {str(name)[:80]!r} has no list of shards")
        for key in ("records", "bytes", "num_shards"):
            _need(_count(split.get(key)), f"split {name!r}: {key} is missing or not a count")
        _need(isinstance(split.get("pattern"), str), f"split {name!r}: 'pattern' is missing")
        for e in split["shards"]:
            _need(isinstance(e, dict) and isinstance(e.get("name"), str) and bool(SHARD_RE.match(e["name"]))
                  and _count(e.get("records")) and _count(e.get("bytes"))
                  and (isinstance(e.get("crc32c"), str) and bool(re.fullmatch(r"[A-Za-z0-9+/]{6}==", e["crc32c"]))
                       # manifests written before 0.3 carry a sha256 instead
                       or isinstance(e.get("sha256"), str) and bool(re.fullmatch(r"[0-9a-f]{64}", e["sha256"]))),
                  f"split {name!r}: a shard entry is malformed: {str(e)[:200]}")
    _check_names_and_kinds(m)


def _optional(m: dict, key: str, kind) -> None:
    _need(m.get(key) is None or isinstance(m.get(key), kind),
          f"{key!r} is not {'an object' if kind is dict else 'a list' if kind is list else 'a string'}")


def _check_names_and_kinds(m: dict) -> None:
    """What readers turn into paths, code or enum values: split, shard and
    index names in layout's patterns (so they stay inside the output), the
    enumerations, and the type of every optional section a reader opens."""
    shards: set = set()
    for name, split in m["splits"].items():
        _need(bool(SPLIT_NAME.fullmatch(name)), f"split name {name[:80]!r} is not 1-64 letters, digits or '_'")
        _need(split.get("label_counts") is None or isinstance(split["label_counts"], dict)
              and all(_count(c) for c in split["label_counts"].values()),
              f"split {name!r}: 'label_counts' is not a map of counts")
        for e in split["shards"]:
            shard = e["name"]
            _need(bool(SHARD_RE.fullmatch(shard)) and split_of(shard) == name,
                  f"split {name!r}: shard {shard[:80]!r} is not a shard name of that split")
            _need(shard not in shards, f"shard {shard!r} is listed twice")
            shards.add(shard)
            _need(e.get("index") in (None, index_name(shard), legacy_index_name(shard)),
                  f"shard {shard!r}: its index must be {index_name(shard)!r}, not {str(e.get('index'))[:80]!r}")
    _need(m["compression"] in {c.value for c in Compression},
          f"compression {m['compression'][:40]!r} is not one of {[c.value for c in Compression]}")
    _need(m["tf_compression_type"] in ("", "GZIP", "ZLIB"),
          f"tf_compression_type {m['tf_compression_type'][:40]!r} is not '', 'GZIP' or 'ZLIB'")
    _need(m.get("output_format", OutputFormat.TFRECORD.value) in [f.value for f in OutputFormat],
          f"output_format {str(m.get('output_format'))[:40]!r} is not one of {[f.value for f in OutputFormat]}")
    roles = m.get("feature_roles", {})
    _need(all(v in m["features"] for v in roles.values()), "'feature_roles' names a feature not in 'features'")
    lm = m["label_map"]
    _need(lm["kind"] in {k.value for k in LabelType}, f"label_map kind {lm['kind'][:40]!r} is unknown")
    _need(type(lm.get("offset", 0)) is int, "label_map offset is not an integer")  # noqa: E721
    for key in ("tool_version", "created", "rejects_file", "previous_version"):
        _optional(m, key, str)
    _need(m.get("rejects_file") in (None, REJECTS), f"rejects_file is not {REJECTS!r}")
    for key in ("options", "quality", "tfds", "report", "fingerprint", "image_library"):
        _optional(m, key, dict)
    _need(all(isinstance(v, str) for v in (m.get("fingerprint") or {}).values()),
          "'fingerprint' is not a map of strings")
    metadata = (m.get("tfds") or {}).get("metadata")
    _need(metadata is None or isinstance(metadata, list) and all(isinstance(n, str) and is_tfds_file(n)
                                                                    and "/" not in n for n in metadata),
          "tfds.metadata is not a list of TFDS metadata file names")


def split_of(shard: str) -> str:
    """The split a shard name of SHARD_RE belongs to ("" for another name)."""
    if SPLIT_SHARD_RE.match(shard):
        return shard.split("-", 1)[0]
    if TFDS_SHARD_RE.match(shard):
        return shard.split("-", 1)[1].split(".", 1)[0]
    return ""


def index_name(shard: str) -> str:
    """A shard's index as the manifest names it, relative to the output folder."""
    return f"{INDEX_FOLDER}/{shard}{INDEX_SUFFIX}"


def legacy_index_name(shard: str) -> str:
    """Where earlier versions kept it (beside the shard): such outputs are still read and verified."""
    return shard + INDEX_SUFFIX


def list_indexes(output: str) -> list:
    """The index files in `output` (index/NAME.idx, and NAME.idx beside the shards that older versions wrote)."""
    return ([n for n in fsutil.list_dir(output) if INDEX_RE.match(n)]
            + [f"{INDEX_FOLDER}/{n}" for n in fsutil.list_dir(fsutil.join(output, INDEX_FOLDER)) if INDEX_RE.match(n)])


def staging_dir(output: str, run_id: str) -> str:
    return fsutil.join(output, STAGING_PREFIX + run_id)


def is_dataset_file(name: str) -> bool:
    return bool(SHARD_RE.match(name)) or name in (MANIFEST, REJECTS, LABEL_MAP, SCHEMA) or is_tfds_file(name)


def is_tfds_file(name: str) -> bool:
    """TFDS's metadata (transforms/core/tfds_metadata.py): dataset_info.json,
    features.json and a class label's <key>.labels.txt."""
    return name in (TFDS_DATASET_INFO, TFDS_FEATURES) or name.endswith(TFDS_LABELS_SUFFIX)


def failed_rejects_name(run_id: str) -> str:
    return f"failed-{run_id}.{REJECTS}"


def read_latest(root: str) -> tuple[str, Optional[dict]]:
    """(version name, its manifest) that LATEST points at, or ("", None)."""
    version = read_pointer(root)
    if version is None:
        return "", None
    folder = fsutil.join(root, version)
    if fsutil.is_local(folder) and os.path.lexists(folder) and not untrusted.inside(folder, root):
        # a link planted under a version's name: its records would be copied from wherever it leads
        raise ValueError(f"{fsutil.join(root, LATEST)} points at {version!r}, a link to {os.path.realpath(folder)}, "
                         f"outside {root}: not read")
    try:
        return version, read_manifest(folder)
    except Exception as e:
        raise ValueError(f"{fsutil.join(root, LATEST)} points at {version!r}, whose manifest cannot be read: "
                         f"{e}") from None


def read_pointer(root: str) -> Optional[str]:
    """The version name LATEST holds (None if there is no LATEST). Raises
    ValueError if it is not a regular file, too large, or not a version name:
    a FIFO there would block its reader, and any other name could lead out of
    the root."""
    path = fsutil.join(root, LATEST)
    try:
        data = untrusted.read(path, untrusted.MAX_POINTER_BYTES, within=root)
    except (FileNotFoundError, NotADirectoryError):  # no LATEST (a root that is a file is refused elsewhere)
        return None
    except OSError as e:  # not a regular file, too large, a link out of the root, unreadable
        raise ValueError(f"{path} cannot be read: {e}") from None
    try:
        version = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        version = data.decode("utf-8", "backslashreplace").strip()
    if not VERSION_NAME.fullmatch(version):
        raise ValueError(f"{path} holds {version[:80]!r}, not a version folder name")
    return version


def new_run_id(tag: str = "") -> str:
    """A run's id: its start to the microsecond, then a random part. Ids sort
    by start, so --keep_versions keeps the newest (two versions made in one
    second tied on a start to the second, and the random part then chose);
    the first 15 characters are the start to the second ("YYYYmmdd-HHMMSS"), in UTC."""
    # UTC, the clock of version names (pipelines/outputs/versions.py): a run under another TZ must not look hours
    # newer or older than its neighbours when LATEST's runs are compared
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S-%f-") + tag + uuid.uuid4().hex[:8]


def latest_name(root: str) -> str:
    """What LATEST holds ("" when there is none or it cannot be read)."""
    try:
        return read_pointer(root) or ""
    except ValueError:  # not a regular file, too large, not a version name: no current version
        return ""


def publish_latest(root: str, version: str, run_id: str, expected: Optional[str] = None) -> bool:
    """Points LATEST at `version` (an atomic replace of a one-line file),
    unless it already names a version of a run that started later (run ids
    begin with the start time): a slow old run must not move it back. With
    `expected` (the version LATEST named when the run read it, "" for none),
    only if LATEST still names that one (or already `version`): a run built on
    one version (its class ids carried from it) never replaces another."""
    current = latest_name(root)
    if expected is not None and current not in (expected, version):
        return False
    try:
        current_run = str(read_manifest(fsutil.join(root, current), check=False).get("run_id", "")) if current else ""
    except Exception:  # no LATEST yet, or it names an unreadable version: ours is better
        current, current_run = "", ""
    if current and current != version and current_run[:15] > run_id[:15]:  # compare "YYYYmmdd-HHMMSS"
        return False
    fsutil.write_bytes(fsutil.join(root, LATEST), (version + "\n").encode())
    # LATEST temp files a crash left behind (we hold the root's lock).
    fsutil.delete([fsutil.join(root, n) for n in fsutil.list_dir(root)
                   if (m := TEMP_RE.match(n)) and m.group(1) == LATEST])
    return True


def leftover_temp_files(output: str) -> list:
    """Temp files of dataset files in `output` (fsutil's atomic writes left
    them only if the process died or an older version failed mid-write). Not
    the lock's: another run may be about to link its lock from one."""
    return [fsutil.join(output, n) for n in fsutil.list_dir(output)
            if (m := TEMP_RE.match(n)) and (is_dataset_file(m.group(1)) or m.group(1) == LATEST
                                             or FAILED_REJECTS_RE.match(m.group(1)))]
