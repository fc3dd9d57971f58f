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


def options_digest(options: dict) -> str:
    return hashlib.sha256(json.dumps(options, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def combine(unit_digests: Iterable[tuple], options_hex: str) -> str:
    """The run's fingerprint from (unit, hex digest) pairs and the options' digest."""
    h = hashlib.sha256(options_hex.encode())
    for unit, digest in sorted(unit_digests):
        h.update(f"{unit}\0{digest}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def unchanged(fingerprint: str, previous: str) -> bool:
    return bool(previous) and fingerprint == previous
