"""Version retention (--keep_versions): which complete versions of a
versioned root are beyond the newest N, and their removal once the new
version is current.

The versions counted are LATEST's history: the version LATEST names, then
the one its manifest names as `previous_version`, and so on back, each a
real folder of the root (transforms/storage/confined.py) whose manifest
names it. Nothing a neighbour can add to the root takes part: a stray folder,
a link or a folder with a forged manifest (whatever run id it claims) is
never counted or removed, and neither is a folder without a manifest (a run
that failed or is being written) nor a version no longer in the history.
The choice itself is pure (transforms/core/provenance.py: versions_beyond);
this module reads the root and deletes, never following a link nor entering
another filesystem mounted inside a version.
"""
from __future__ import annotations

import logging

from tfrecord_pipelines.transforms.core import provenance
from tfrecord_pipelines.transforms.storage import confined, fsutil, layout


def history(root: str, start: str) -> list:
    """The versions from `start` back through each manifest's
    `previous_version`, newest first, while each is a complete version (a
    real folder of the root with a manifest naming it as its version)."""
    out: list = []
    name = start
    while isinstance(name, str) and layout.VERSION_NAME.fullmatch(name) and name not in out:
        if name == layout.LATEST or fsutil.is_local(root) and confined.why_not_in_root(root, name):
            break
        try:
            m = layout.read_manifest(fsutil.join(root, name), check=False)
        except Exception:  # no manifest, unreadable: the history stops here
            break
        if m.get("version") != name:  # a manifest copied from another version
            break
        out.append(name)
        name = m.get("previous_version")
    return out


def versions_to_remove(out) -> tuple[list, dict]:
    """--keep_versions: (the versions of LATEST's history beyond the newest N,
    this run's version counted first; {version: why it is kept} for those of
    them that cannot be removed safely). Never this version, nor one LATEST
    names other than the one this run replaces. `out`: the run's output
    settings (specs.OutputSpec)."""
    latest = layout.latest_name(out.root)
    newest_first = [out.version] + [v for v in history(out.root, out.previous_version) if v != out.version]
    protect = {out.version} | ({latest} - {out.previous_version, ""})
    beyond = provenance.versions_beyond(newest_first, out.keep_versions, protect)
    if not fsutil.is_local(out.root):
        return beyond, {}
    kept = {v: why for v in beyond if (why := confined.why_not_removable(fsutil.join(out.root, v)))}
    return [v for v in beyond if v not in kept], kept


def remove_versions(root: str, names: list) -> list:
    """Deletes the versions `names` (versions_to_remove's, recorded in the
    new version's manifest) under `root`, once the new version is current:
    the names removed. One that cannot be removed whole is left (a warning
    says why)."""
    removed = []
    for name in names:
        why = confined.remove_tree(fsutil.join(root, name))
        if why:
            logging.getLogger(__name__).warning("--keep_versions: version %s was not removed: %s", name, why)
        else:
            removed.append(name)
    return removed
