"""Versioned outputs for scheduled reprocessing.

With --versioned, --output is a dataset root: each run writes a new version
folder (`<root>/v20261121-073000`) and, only once that version's manifest is
written, moves the pointer `<root>/LATEST` (a one-line text file holding the
version folder name) to it. Training jobs read LATEST; a failed run never
moves it. The previous version's label map carries over, so class ids stay
stable, and its fingerprint lets an unchanged run publish nothing.
"""
from __future__ import annotations

import datetime
from typing import Optional

from tfrecord_pipelines.transforms.storage import fsutil, layout

LATEST = layout.LATEST
VERSION_NAME = layout.VERSION_NAME
read_latest = layout.read_latest  # LATEST is read and written in one module


def new_version_name(now: Optional[datetime.datetime] = None) -> str:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("v%Y%m%d-%H%M%S")


def latest_name(root: str) -> str:
    """The version name LATEST holds, or "" (none, or not a version name)."""
    try:
        name = fsutil.read_bytes(fsutil.join(root, LATEST)).decode("utf-8").strip()
    except Exception:  # no LATEST, or unreadable
        return ""
    return name if VERSION_NAME.match(name) else ""
