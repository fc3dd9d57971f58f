"""A fingerprint of a run's inputs and options, so a scheduled run can tell
that nothing changed since the published version and skip the work.

Inputs are fingerprinted from the listing: every file's relative path, size
and modification time (a table's rows too), hashed per listing unit in sorted
order, then the units' digests in sorted order. So the fingerprint does not
depend on how the listing was split over workers.
"""
from __future__ import annotations

import hashlib
import json
from typing import Iterable

FINGERPRINT = "fingerprint"


def shard_options(described: dict) -> dict:
    """The settings that shape the shards and the manifest (not where they
    go, how fast files are read, or when a run gives up on its rejects), from
    the settings as the manifest records them (ConvertConfig.describe())."""
    d = json.loads(json.dumps(described))  # a copy
    if d.get("detection") is None:
        d.pop("detection", None)  # runs without annotations fingerprint as before
    else:
        d["detection"].pop("found", None)  # where the annotations were found, not what they hold
    out = d.pop("output")
    d["feature_keys"] = out["feature_keys"]
    if out.get("source_ids"):  # runs without it fingerprint as before
        d["source_ids"] = True
    # --shard_suffix, --shard_template and --shard_counts at their defaults: as before they existed
    if d["shards"].get("names") == {"suffix": ".tfrecord", "template": "split", "dataset": ""}:
        d["shards"].pop("names")
    if d["shards"].get("counts") == "size":
        d["shards"].pop("counts")
    d["inputs"].pop("fingerprint_root", None)
    # The label map that results is fingerprinted instead (it is the same
    # whether computed, or carried from the previous version).
    d["labels"].pop("frozen_map", None)
    d["labels"].pop("extend_map", None)
    d["images"]["reads"].pop("in_flight", None)
    d["images"]["reads"].pop("timeout", None)
    # A run refused for its rejects (or for being empty, or shrinking) and
    # rerun with another fraction or flag resumes: what may be published,
    # not what is written.
    for k in ("max_reject_fraction", "allow_empty", "allow_shrink"):
        d.pop(k, None)
    return d


def options_digest(options: dict) -> str:
    return hashlib.sha256(json.dumps(options, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def combine(unit_digests: Iterable[tuple], options_hex: str) -> str:
    """The run's fingerprint from (unit, hex digest) pairs and the options' digest."""
    h = hashlib.sha256(options_hex.encode())
    for unit, digest in sorted(unit_digests):
        h.update(f"{unit}\0{digest}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


# A listing unit's digest of the files whose times are too recent to trust
# (transforms/core/provenance.py, racy) is named with this prefix: it counts
# towards the fingerprint a run compares with the previous version's, not
# towards the one it records, so a file changed just after a listing makes the
# next run see a change, and the run after that does not see one again.
RACY = "racy:"


def combine_run(unit_digests: Iterable[tuple], options_hex: str) -> tuple:
    """(recorded, compared) fingerprints of a run: the manifest records the
    first; the second also covers the racy files and is what the run compares
    with the previous version's, and names its resume area."""
    ds = list(unit_digests)
    return combine([d for d in ds if not d[0].startswith(RACY)], options_hex), combine(ds, options_hex)


def recorded(fingerprint) -> str:
    return fingerprint[0] if isinstance(fingerprint, tuple) else fingerprint


def compared(fingerprint) -> str:
    return fingerprint[1] if isinstance(fingerprint, tuple) else fingerprint


def unchanged(fingerprint, previous: str) -> bool:
    return bool(previous) and compared(fingerprint) == previous
