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
import re
from typing import Optional

from transforms.storage import fsutil, layout

LATEST = layout.LATEST
VERSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def new_version_name(now: Optional[datetime.datetime] = None) -> str:
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("v%Y%m%d-%H%M%S")


def read_latest(root: str) -> tuple[str, Optional[dict]]:
    """(version name, its manifest) that LATEST points at, or ("", None)."""
    try:
        version = fsutil.read_bytes(fsutil.join(root, LATEST)).decode("utf-8").strip()
    except Exception:
        return "", None
    if not VERSION_NAME.match(version):
        raise ValueError(f"{fsutil.join(root, LATEST)} holds {version!r}, not a version folder name")
    try:
        return version, layout.read_manifest(fsutil.join(root, version))
    except Exception as e:
        raise ValueError(f"{fsutil.join(root, LATEST)} points at {version!r}, whose manifest cannot be read: "
                         f"{e}") from None

