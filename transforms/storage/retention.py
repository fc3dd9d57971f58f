"""Version retention (--keep_versions): which complete versions of a
versioned root are beyond the newest N, and their removal once the new
version is current.

Only complete versions (a folder with a manifest) count: a folder without
one (a run that failed or is being written) is never counted as one. Such a
folder that holds only what a run writes (nothing at all, a staging folder,
shards and their companions without a manifest) and no live run's lock is
what a killed run left (`leftovers`): --keep_versions and `tfrecords
cleanup` remove it (a refused run's folder, holding the rejects it kept, is
not one).
The version LATEST names is never removed while a later run's version
keeps it there, nor is the one being published. The choice itself is pure
(transforms/core/provenance.py: versions_beyond); this module reads the
root and deletes.
"""
from __future__ import annotations

from tfrecord_pipelines.transforms.core import provenance
from tfrecord_pipelines.transforms.storage import fsutil, layout, run_lock

REPORT = "report.html"  # transforms/storage/report_data.py (not imported: it brings the report's renderer)
CHECK_FILES = ("check.json", "check-rejects.jsonl")  # what `tfrecords check` writes


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


def _ours(name: str) -> bool:
    """A file name a run writes into its output folder (the manifest aside).
    Not a refused run's failed-<run>.rejects.jsonl: that run ended, and kept
    them for inspection (its error named the file)."""
    temp = layout.TEMP_RE.match(name)
    return (name != layout.MANIFEST and layout.is_dataset_file(name) or name in (layout.LABEL_MAP_PBTXT, REPORT)
            or name in CHECK_FILES or bool(temp) and (temp.group(1) == layout.MANIFEST or _ours(temp.group(1))))


def _only_run_files(folder: str) -> tuple[bool, int]:
    """(whether `folder` holds nothing but what a run writes, without a
    manifest, and no live lock; how many files it holds, staging aside)."""
    files = fsutil.list_dir(folder)
    if layout.MANIFEST in files or run_lock.held_by_live_run(folder):
        return False, 0
    if not all(_ours(n) or n == layout.LOCK for n in files):
        return False, 0
    count = len([n for n in files if n != layout.LOCK])
    for d in fsutil.list_subdirs(folder):
        if d.startswith(layout.STAGING_PREFIX):
            continue
        if d not in (layout.INDEX_FOLDER, provenance.FOLDER) or fsutil.list_subdirs(fsutil.join(folder, d)):
            return False, 0
        inner = fsutil.list_dir(fsutil.join(folder, d))
        if not all(layout.INDEX_RE.match(n) or n.endswith(provenance.SUFFIX) or layout.TEMP_RE.match(n)
                   for n in inner):
            return False, 0
        count += len(inner)
    return True, count


def leftovers(root: str, protect: set) -> list:
    """The version folders of `root` that killed runs left, as (name, files
    in it): no manifest, nothing but what a run writes, no live run's lock
    (a conversion writing ROOT/NAME under its own); never one in `protect`
    (LATEST's, the run's own), nor LATEST's even if `protect` misses it."""
    protect = set(protect) | {layout.latest_name(root)}
    found = []
    for name in fsutil.list_subdirs(root):
        if name in protect or not layout.VERSION_NAME.match(name):
            continue
        only, count = _only_run_files(fsutil.join(root, name))
        if only:
            found.append((name, count))
    return found


def describe_leftovers(found: list) -> str:
    """"v1 (no files), v2 (3 files)": leftovers' names as the console gives them
    (a killed run's staging folder is not counted)."""
    return ", ".join(f"{name} ({'no' if not n else f'{n:,}'} file{'' if n == 1 else 's'})" for name, n in found)


def remove_leftovers(root: str, names: list) -> list:
    """Deletes the leftover version folders `names` (leftovers') under `root`,
    each checked again first (a run may have started writing one since);
    returns those removed."""
    removed = []
    for name in names:
        folder = fsutil.join(root, name)
        if name != layout.latest_name(root) and _only_run_files(folder)[0]:
            fsutil.delete_tree(folder)
            removed.append(name)
    return removed
