"""Checks of the output folder before a conversion starts (its lock: transforms/storage/run_lock.py)."""
from __future__ import annotations

import os

from tfrecord_pipelines.parse import UsageError
from tfrecord_pipelines.transforms.storage import fsutil, layout


def check_output(output: str, inputs_root: str, overwrite: bool) -> None:
    """`inputs_root`: the folder the run lists, "" for none (a pipeline's rows)."""
    if inputs_root and fsutil.is_local(output) and fsutil.is_local(inputs_root):
        if os.path.commonpath([output, inputs_root]) == inputs_root:
            raise UsageError(f"--output {output!r} is inside the input folder {inputs_root!r}; its shards would "
                             "be listed as inputs. Choose a folder outside it")
    if fsutil.is_local(output) and os.path.exists(output) and not os.path.isdir(output):
        raise UsageError(f"--output {output!r} is a file, not a folder")
    names = [n for n in fsutil.list_dir(output) if layout.is_dataset_file(n)]
    if names and not overwrite:
        shards = sum(1 for n in names if layout.SHARD_RE.match(n))
        what = _dataset_state(output, names)
        raise UsageError(f"--output {output!r} already holds {what}: {shards} shard(s), "
                         f"{', '.join(n for n in names if not layout.SHARD_RE.match(n)) or 'no other files'}. "
                         "Pass --overwrite to replace it, or choose another folder")


def _dataset_state(output: str, names: list) -> str:
    """A folder is a complete dataset only if its manifest reads as one: a
    0-byte or damaged manifest.json (disk full under an older version) is not."""
    if layout.MANIFEST not in names:
        return "an incomplete dataset (no manifest.json)"
    try:
        layout.read_manifest(output)
    except Exception as e:  # unreadable for any reason: not a success marker
        return f"an incomplete dataset ({layout.MANIFEST} cannot be read: {str(e)[:200]})"
    return "a complete dataset"


def remove_leftover_staging(output: str, run_id: str) -> None:
    """Staging folders and temp files (`name.tmp-*`) of earlier runs that died
    or failed mid-write (we hold the lock, so no other run is using them)."""
    mine = layout.STAGING_PREFIX + run_id
    for d in fsutil.list_subdirs(output):
        if d.startswith(layout.STAGING_PREFIX) and d != mine:
            fsutil.delete_tree(fsutil.join(output, d))
    fsutil.delete(layout.leftover_temp_files(output))
