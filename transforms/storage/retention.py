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

A version folder without a manifest that holds only what a run writes (nothing at all, a staging folder,
shards and their companions without a manifest) and no live run's lock is
what a killed run left (`leftovers`): --keep_versions and `tfrecords
cleanup` remove it (a refused run's folder, holding the rejects it kept, is
not one).
"""
from __future__ import annotations

import logging

from tfrecord_pipelines.transforms.core import provenance
from tfrecord_pipelines.transforms.storage import confined, fsutil, layout, run_lock

REPORT = "report.html"  # transforms/storage/report_data.py (not imported: it brings the report's renderer)
CHECK_FILES = ("check.json", "check-rejects.jsonl")  # what `tfrecords check` writes


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
        if fsutil.is_local(root) and (confined.why_not_in_root(root, name)
                                      or confined.why_not_removable(fsutil.join(root, name))):
            continue  # a link, or a folder with another filesystem mounted inside: never ours to remove
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
            if fsutil.is_local(root):
                why = confined.why_not_in_root(root, name) or confined.remove_tree(folder)
                if why:
                    logging.getLogger(__name__).warning("version folder %s was not removed: %s", name, why)
                    continue
            else:
                fsutil.delete_tree(folder)
            removed.append(name)
    return removed
