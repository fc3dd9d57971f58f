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

from tfrecord_pipelines.transforms.core.errors import ConversionError, UsageError
from tfrecord_pipelines.transforms.core.specs import OutputSpec
from tfrecord_pipelines.transforms.storage import confined, fsutil, layout

LATEST = layout.LATEST
VERSION_NAME = layout.VERSION_NAME
read_latest = layout.read_latest  # LATEST is read and written in one module
FULL_GIVEN = "--full was given"  # why a --full run converts everything (the summary tells its unchanged case)


def new_version_name(now: Optional[datetime.datetime] = None, previous: str = "") -> str:
    """The UTC time to the second; a run published within the same second as
    `previous` (a scheduled job retried at once) gets `-2`, `-3`, ... so its
    name is new and still sorts after the one LATEST names."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    name = now.strftime("v%Y%m%d-%H%M%S")
    if previous == name or previous.startswith(name + "-"):
        tail = previous[len(name) + 1:]
        name = f"{name}-{int(tail) + 1 if tail.isdigit() else 2}"
    return name


class LatestMoved(ConversionError, RuntimeError):
    """LATEST changed between the run's start and its taking the root's lock."""


def check_latest_unchanged(out: OutputSpec) -> None:
    """The run read LATEST (and carried its label map) before it held the
    root's lock: another run may have published in between. Then this run
    would be built on the version before, its class ids shifted against the
    current one's: it stops before any work instead."""
    if not out.root or out.check_only:
        return
    current = layout.latest_name(out.root)
    if current != out.previous_version:
        raise LatestMoved(f"{fsutil.join(out.root, LATEST)} now names {current or 'no version'}, not "
                          f"{out.previous_version or 'no version'} as when this run read it: another run published "
                          "meanwhile. Nothing was done; rerun to build on the current version")


def latest_name(root: str) -> str:
    """The version name LATEST holds, or "" (none, or not a readable version name)."""
    return layout.latest_name(root)


def make_version_folder(out: OutputSpec) -> None:
    """Makes the run's version folder, under the root's lock, before anything
    is written into it: a path a neighbour planted under the version's name
    (a symbolic link out of the root, a folder of another user, a mount) is
    refused, never written through (transforms/storage/confined.py)."""
    if not out.root or out.check_only:
        return
    try:
        confined.make_version_folder(out.root, out.version)
    except confined.Refused as e:
        raise UsageError(str(e)) from None


def in_own_folder(out: OutputSpec) -> bool:
    """Whether the run's output is its own: not a version folder that is a
    link or another user's (then nothing of the run is there to remove)."""
    return not (out.root and fsutil.is_local(out.root) and confined.why_not_a_folder_of(out.root, out.version))


def remove_if_unused(out: OutputSpec) -> None:
    """The run's version folder, removed if the run left it empty (it
    published nothing: unchanged inputs, a refusal, a failure)."""
    if out.root and not out.check_only:
        confined.remove_if_empty(out.output)
