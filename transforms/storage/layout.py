"""Names of what a conversion writes in its output folder."""
from __future__ import annotations

import json
import re
from typing import Optional

from tfrecord_pipelines.transforms.core.example_codec import BYTES, FLOAT, INT64
from tfrecord_pipelines.transforms.storage import fsutil

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
# Any shard we could have written, whatever its split, count, compression or format.
SHARD_RE = re.compile(r"^[A-Za-z0-9_]{1,64}-\d{5,}-of-\d{5,}\.(tfrecord(\.gz|\.zlib)?|array_record)$")
# --index_files: a shard's record index for DALI's readers.tfrecord and the
# PyTorch `tfrecord` package, next to it ("<shard name>.idx").
INDEX_SUFFIX = ".idx"
INDEX_RE = re.compile(SHARD_RE.pattern[:-1] + re.escape(INDEX_SUFFIX) + "$")
MANIFEST_FORMAT = "tfrecord-pipelines/manifest/v1"
LATEST = "LATEST"                 # --versioned: a dataset root's pointer to its current version
VERSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")  # a version folder's name
# A temp file of fsutil.write_bytes/create_only ("name.tmp-PID-HEX"; older
# versions wrote "name.tmp-PID"), left only by a crash: the next run removes it.
TEMP_RE = re.compile(r"^(.+)\.tmp-\d+(-[0-9a-f]+)?$")
FAILED_REJECTS_RE = re.compile(r"^failed-(.+)\." + re.escape(REJECTS) + "$")
KEEP_FAILED_REJECTS = 3           # failed-<run>.rejects.jsonl of the latest failed runs kept for inspection


class ManifestError(ValueError):
    """A manifest.json that is not a complete, well-formed manifest."""


def read_manifest(output: str, check: bool = True) -> dict:
    """The manifest of the output folder `output` (FileNotFoundError if none;
    ManifestError if it is not a well-formed manifest). check=False only
    requires a JSON object (to read fields such as run_id)."""
    return parse_manifest(fsutil.read_bytes(fsutil.join(output, MANIFEST)), check)


def parse_manifest(data: bytes, check: bool = True) -> dict:
    try:
        m = json.loads(data)
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
    return type(v) is int and v >= 0  # noqa: E721 (bool is not a count)


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


def index_name(shard: str) -> str:
    return shard + INDEX_SUFFIX


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
    try:
        version = fsutil.read_bytes(fsutil.join(root, LATEST)).decode("utf-8").strip()
    except Exception:
        return "", None
    if not VERSION_NAME.match(version):
        raise ValueError(f"{fsutil.join(root, LATEST)} holds {version!r}, not a version folder name")
    try:
        return version, read_manifest(fsutil.join(root, version))
    except Exception as e:
        raise ValueError(f"{fsutil.join(root, LATEST)} points at {version!r}, whose manifest cannot be read: "
                         f"{e}") from None


def publish_latest(root: str, version: str, run_id: str) -> bool:
    """Points LATEST at `version` (an atomic replace of a one-line file),
    unless it already names a version of a run that started later (run ids
    begin with the start time): a slow old run must not move it back."""
    try:
        current = fsutil.read_bytes(fsutil.join(root, LATEST)).decode().strip()
        current_run = str(read_manifest(fsutil.join(root, current), check=False).get("run_id", ""))
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
