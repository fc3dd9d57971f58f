"""What runs that were killed left in an output: its staging folders and
resume areas (kept for a rerun of the same command to resume from), and in
a --versioned root (a folder holding LATEST) the version folders they left
unpublished (transforms/storage/retention.py, leftovers), removed
under the output's lock (behind `tfrecords cleanup`, commands/cleanup.py;
the temp folder's leftovers: lifecycle.reclaim_scratch)."""
from __future__ import annotations

from tfrecord_pipelines.outputs import output_guard
from tfrecord_pipelines.transforms.storage import confined, fsutil, layout, resume, retention, run_lock


def clean_output(output: str) -> tuple[list, list, str]:
    """(staging folders, resume areas, the version folders killed runs left as
    retention.describe_leftovers gives them) removed from `output` (and from
    its version folders, for a --versioned root), under its lock; raises
    run_lock.LockHeld. A resume area is what a rerun of a killed run would
    keep its complete shards from: cleaning the output gives that up."""
    run_id = layout.new_run_id("cleanup-")
    folders = [output] + [fsutil.join(output, d) for d in fsutil.list_subdirs(output)
                          if layout.VERSION_NAME.match(d) and not d.startswith(layout.STAGING_PREFIX)]
    # never through a link planted under a version's name, nor into a filesystem mounted there
    folders = [f for f in folders if f == output or confined.is_plain_folder(f)]
    run_lock.acquire(output, run_id, ttl_hours=1.0)
    removed, areas, left = [], [], []
    try:
        for folder in folders:  # a folder another live run holds the lock of (ROOT/NAME) is left alone
            removed += output_guard.remove_leftover_staging(folder, run_id)
        areas = resume.areas(output)
        resume.remove_all(output)
        if layout.LATEST in fsutil.list_dir(output):  # a --versioned root: never a folder LATEST names
            found = retention.leftovers(output, set())
            gone = set(retention.remove_leftovers(output, [name for name, _ in found]))
            left = [(name, n) for name, n in found if name in gone]
    finally:
        run_lock.release(output, run_id)
    return removed, areas, retention.describe_leftovers(left)
