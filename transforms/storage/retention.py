"""Version retention (--keep_versions): which complete versions of a
versioned root are beyond the newest N, and their removal once the new
version is current.

Only complete versions (a folder with a manifest) count: a folder without
one (a run that failed or is being written) is never counted or removed.
The version LATEST names is never removed while a later run's version
keeps it there, nor is the one being published. The choice itself is pure
(transforms/core/provenance.py: versions_beyond); this module reads the
root and deletes.
"""
from __future__ import annotations

from tfrecord_pipelines.transforms.core import provenance
from tfrecord_pipelines.transforms.storage import fsutil, layout


def versions_to_remove(out) -> list:
    """--keep_versions: the complete versions beyond the newest N, never the
    one LATEST names nor this one; folders without a manifest (a run that
    failed or is being written) are never counted or removed. `out`: the
    run's output settings (specs.OutputSpec)."""
    latest = layout.latest_name(out.root)
    complete = [(out.run_id, out.version)]
    protect = {out.version}
    for name in fsutil.list_subdirs(out.root):
        if name == out.version or not layout.VERSION_NAME.match(name):
            continue
        try:
            run_id = str(layout.read_manifest(fsutil.join(out.root, name), check=False).get("run_id"))
        except Exception:  # no manifest: not a complete version
            continue
        complete.append((run_id, name))
        if name == latest and run_id[:15] > out.run_id[:15]:
            protect.add(name)  # a later run's version, which LATEST keeps naming (layout.publish_latest)
    return provenance.versions_beyond(complete, out.keep_versions, protect)


def remove_versions(root: str, names: list) -> None:
    """Deletes the versions `names` (versions_to_remove's, recorded in the
    new version's manifest) under `root`, once the new version is current."""
    for name in names:
        fsutil.delete_tree(fsutil.join(root, name))
