"""Names of what a conversion writes in its output folder."""
from __future__ import annotations

import json
import re

from transforms import fsutil

MANIFEST = "manifest.json"        # written last, create-only: the output is complete
REJECTS = "rejects.jsonl"         # one JSON object per rejected record
LABEL_MAP = "label_map.json"      # {"name": id}; usable as --label_map for the next run
SCHEMA = "schema.pbtxt"           # the features as a TFX Schema (tensorflow_metadata)
LOCK = ".tfrecords.lock"          # held by a running conversion
STAGING_PREFIX = ".tfrecords-staging-"
# Any shard we could have written, whatever its split, count or compression.
SHARD_RE = re.compile(r"^[A-Za-z0-9_]{1,64}-\d{5,}-of-\d{5,}\.tfrecord(\.gz|\.zlib)?$")
MANIFEST_FORMAT = "tfrecord-pipelines/manifest/v1"
LATEST = "LATEST"                 # --versioned: a dataset root's pointer to its current version


def read_manifest(output: str) -> dict:
    """The manifest of the output folder `output` (FileNotFoundError if none)."""
    return json.loads(fsutil.read_bytes(fsutil.join(output, MANIFEST)))


def staging_dir(output: str, run_id: str) -> str:
    return fsutil.join(output, STAGING_PREFIX + run_id)


def is_dataset_file(name: str) -> bool:
    return bool(SHARD_RE.match(name)) or name in (MANIFEST, REJECTS, LABEL_MAP, SCHEMA)


def failed_rejects_name(run_id: str) -> str:
    return f"failed-{run_id}.{REJECTS}"


def publish_latest(root: str, version: str, run_id: str) -> bool:
    """Points LATEST at `version` (an atomic replace of a one-line file),
    unless it already names a version of a run that started later (run ids
    begin with the start time): a slow old run must not move it back."""
    try:
        current = fsutil.read_bytes(fsutil.join(root, LATEST)).decode().strip()
        current_run = read_manifest(fsutil.join(root, current)).get("run_id", "")
    except Exception:  # no LATEST yet, or it names an unreadable version: ours is better
        current, current_run = "", ""
    if current and current != version and current_run[:15] > run_id[:15]:  # compare "YYYYmmdd-HHMMSS"
        return False
    fsutil.write_bytes(fsutil.join(root, LATEST), (version + "\n").encode())
    return True
