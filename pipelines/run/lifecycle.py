"""A conversion's lifecycle, in one place: the output checked and locked,
the pipeline built and run, the run ended (staging folder removed, lock
released) in one try/finally, and a failure told in one line.

Who ends the run: the launcher, for a local run and for a job that was never
submitted (a failure before submission, a dry run); the job's own Publish
step (transforms/stages/publish.py) for a job the launcher handed to a remote
runner, which goes on if the launcher stops watching.
"""
from __future__ import annotations

import collections
import contextlib
import errno
import json
import logging
import os
import re
import sys
import tempfile
from typing import Optional

from tfrecord_pipelines import speed

from tfrecord_pipelines.outputs import output_guard
from tfrecord_pipelines.run import offline

from tfrecord_pipelines.outputs import versions
from tfrecord_pipelines.options.config import ConvertConfig
from tfrecord_pipelines.transforms.core.errors import UsageError
from tfrecord_pipelines.transforms.core.units import plural
from tfrecord_pipelines.console.progress_line import ProgressLine
from tfrecord_pipelines.run.stderr_filter import filtered_stderr
from tfrecord_pipelines.transforms.core import errors
from tfrecord_pipelines.transforms.stages.publish import TooManyRejects
from tfrecord_pipelines.transforms.storage import copy_trust, fsutil, layout, resume, run_lock, scratch, spill


def check_output_path(output: str) -> None:
    """Before the lock is taken (taking it creates the folder): --output is a
    folder, or can be made, and we may write there. Local paths only; a
    bucket's permissions show when the lock is written."""
    if not fsutil.is_local(output):
        return
    path = os.path.abspath(output)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"--output {output!r} is a file, not a folder")
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"--output {output!r}: {probe!r} is a file, so no folder can be made inside it")
    if not os.access(probe, os.W_OK | os.X_OK):
        if _read_only(probe):  # access() says no there too, whoever asks
            raise UsageError(f"--output {output!r}: {probe!r} is on a read-only filesystem; remount it read-write "
                             "or choose an --output on a writable disk")
        raise UsageError(f"--output {output!r}: no permission to write in {probe!r}")


def _read_only(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows): the permission line stands
        return False


class Run:
    """The locked run: `with locked(cfg, ...) as run: run.execute(...)`."""

    def __init__(self, cfg: ConvertConfig):
        self.cfg = cfg
        self.handed_off = False  # a remote job was submitted: it ends the run itself
        self.worker_pids: set = set()  # local runs: the processes that reported progress
        self.result = None  # Beam's PipelineResult (a dry run's holds the job it built)

    def execute(self, job) -> str:
        """Builds and runs the pipeline of a configured Job (conversion.py):
        "dry_run", "submitted" or "done"."""
        import apache_beam as beam
        from apache_beam.options.pipeline_options import TestOptions, TypeOptions

        from tfrecord_pipelines.run.pipeline import build_pipeline
        options, runner, values, plan = job.options, job.runner, job.values, job.plan
        cfg, local, debug = self.cfg, plan.local, plan.debug
        # Our transforms declare no element types; construction-time type inference would only cost time.
        options.view_as(TypeOptions).pipeline_type_check = False
        reclaim_scratch()
        # This run's scratch folder (progress, error notes, a bucket output's spill files), and for a local
        # run into a local folder the staging folder: what a later run reclaims if this one is killed.
        mine = layout.staging_dir(cfg.output.output, cfg.output.run_id) \
            if local and fsutil.is_local(cfg.output.output) else ""
        with scratch.folder("run", staging=mine) as folder:
            progress_dir = folder if cfg.output.progress else ""
            p = beam.Pipeline(runner=runner, options=options)
            with speed.without_interactive_labels(plan.speed):
                build_pipeline(p, cfg, progress_dir, spill_dir(cfg, local, values.spill, folder))
            progress = ProgressLine(progress_dir, values.progress,
                                    cfg.inputs.root or cfg.inputs.table, cfg.images.reads.timeout)
            try:
                # Beam's own worker processes (when not forked from our zygote) start inside p.run().
                with speed.quiet_stderr(plan.speed.quiet_workers), progress, filtered_stderr(not debug), \
                        _error_notes(folder if local else ""), _job_errors_unlogged(not debug and not local):
                    result = self.result = p.run()
                    if options.view_as(TestOptions).dry_run:
                        return "dry_run"
                    if not local:
                        self.handed_off = True
                        run_lock.name_job(cfg.output.lock_dir, cfg.output.run_id, _job_id(result))
                        if values.detach:
                            return "submitted"
                    try:
                        result.wait_until_finish()
                    except Exception:
                        # The job ended, failed: it may not have released the lock. (Interrupted
                        # instead, the launcher stops watching a job that goes on: it stays the job's.)
                        self.handed_off = False
                        raise
                    self.handed_off = False
            except BaseException as e:
                if not local and not isinstance(e, KeyboardInterrupt) and errors.own_error(e) is None:
                    # A remote job's failure arrives as its worker's traceback, as text: one line of it.
                    raise errors.RunError(describe_failure(e, cfg.output.output, cfg.output.run_id,
                                                           remote=True, local_paths=_local_paths(cfg))) from e
                raise _own_error(folder) or e
            finally:
                self.worker_pids = progress.worker_pids()
                spill.release()  # an in-process run's spill files, before their folder is removed
        return "done"


def reclaim_scratch(out=None) -> list:
    """Removes what killed runs left on this machine (transforms/storage/scratch.py),
    saying so on stderr (or `out`)."""
    removed = scratch.reclaim()
    if removed:
        from tfrecord_pipelines.transforms.core.units import human_bytes
        shown = ", ".join(r.path for r in removed[:3]) + (", ..." if len(removed) > 3 else "")
        print(f"removed what {'a killed run' if len(removed) == 1 else 'killed runs'} left on this machine: "
              f"{len(removed)} folder{'s' if len(removed) > 1 else ''}, {human_bytes(sum(r.bytes for r in removed))} "
              f"({shown})", file=out or sys.stderr)
    return removed


def preview(job) -> dict:
    """--dry_run on a local run: the figures of pipeline.build_preview, found
    without reading an image, locking or writing anything in the output (its
    spill files wait in a scratch folder)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import TypeOptions

    from tfrecord_pipelines.run.pipeline import build_preview
    cfg, options, runner, debug = job.cfg, job.options, job.runner, job.plan.debug
    options.view_as(TypeOptions).pipeline_type_check = False
    with tempfile.TemporaryDirectory(prefix="tfrecords-preview-") as folder:
        result = os.path.join(folder, "preview.json")
        spill = "" if job.values.spill == "off" else os.path.join(folder, "spill")
        p = beam.Pipeline(runner=runner, options=options)
        with speed.without_interactive_labels(job.plan.speed):
            build_preview(p, cfg, spill, result)
        try:
            with speed.quiet_stderr(job.plan.speed.quiet_workers), filtered_stderr(not debug), _error_notes(folder):
                p.run().wait_until_finish()
        except BaseException as e:
            raise _own_error(folder) or e
        with open(result) as f:
            return json.load(f)


def spill_dir(cfg: ConvertConfig, local: bool, mode: str, scratch: str) -> str:
    """A local run's spill folder: in the staging folder beside the output
    (the disk the user chose for the data, removed with it), or in the
    launcher's scratch folder when the output is a bucket; none for remote
    runners (their shuffle does this) or with --spill off."""
    if not local or mode == "off":
        return ""
    out = cfg.output
    if fsutil.is_local(out.output):
        return os.path.join(layout.staging_dir(out.output, out.run_id), "spill")
    return os.path.join(scratch, "spill")


@contextlib.contextmanager
def locked(cfg: ConvertConfig, ttl_hours: float, break_lock: bool, runner: str = "remote runner"):
    """Checks the output, takes its lock, removes what earlier runs left;
    on leaving, however it leaves, ends the run unless a remote job took it."""
    out = cfg.output
    if offline.skip(out.lock_dir, f"--output {out.output}: permission to write there, whether it already holds a "
                    "dataset, and its lock (taken when the job is submitted)"):
        yield Run(cfg)  # a dry run: no lock to take, nothing to end
        return
    # The friendly checks first: taking the lock creates the folder, and would
    # fail with a raw OSError on a file or an unwritable place.
    check_output_path(out.lock_dir)
    check_output_path(out.output)
    output_guard.check_apart(out.lock_dir, cfg.inputs.root)  # a --versioned root holds the versions
    made = _missing_folders(out.lock_dir, out.output)  # what this run creates, and removes again if it fails
    # A remote job's lock is the job's: its liveness is never this launcher's pid.
    run_lock.acquire(out.lock_dir, out.run_id, ttl_hours, break_lock, runner=runner if out.job_ends_run else "")
    run = Run(cfg)
    failed = False
    try:
        versions.check_latest_unchanged(out)  # read before the lock was ours
        versions.make_version_folder(out)  # never through a path a neighbour planted under its name
        try:
            # A run killed while publishing into this output: its shards go back to its resume area.
            for line in resume.recover(out.root or out.output):
                print(line, file=sys.stderr)
            output_guard.check_output(out.output, cfg.inputs.root, out.overwrite)
            output_guard.remove_leftover_staging(out.output, out.run_id)
        except OSError as e:  # e.g. an output folder we may not list
            raise UsageError(f"--output {out.output!r}: {e.strerror or e}") from None
        yield run
    except BaseException:
        failed = True
        raise
    finally:
        if not run.handed_off:
            if versions.in_own_folder(out):
                fsutil.delete_tree(layout.staging_dir(out.output, out.run_id))
                versions.remove_if_unused(out)
            run_lock.release(out.lock_dir, out.run_id)
            if failed:
                _remove_if_empty(made)


def _missing_folders(*folders: str) -> list:
    """The local folders a run into `folders` creates (each, and its parents
    that do not exist yet), deepest first; none on a bucket, where a folder is
    only a prefix."""
    missing: set = set()
    for folder in folders:
        if not folder or not fsutil.is_local(folder):
            continue
        path = os.path.abspath(folder)
        while not os.path.exists(path):
            missing.add(path)
            path = os.path.dirname(path)
    return sorted(missing, key=lambda p: -p.count(os.sep))


def _remove_if_empty(folders: list) -> None:
    """A failed run leaves no empty folder it created (a folder that existed
    before the run is never in `folders`; one holding anything stays)."""
    for path in folders:
        try:
            os.rmdir(path)  # only an empty folder: the rejects a refused run kept, a resume area, stay
        except OSError:
            pass


def _job_id(result) -> str:
    """The submitted job's id as its runner names it ("" if it has none)."""
    try:
        job = result.job_id() if hasattr(result, "job_id") else getattr(result, "_job_id", "")
    except Exception:  # a runner whose result cannot say
        return ""
    return str(job or "")


@contextlib.contextmanager
def _error_notes(folder: str):
    """While the pipeline runs, our errors note their type in `folder`
    (transforms/core/errors.py); the workers inherit the variable."""
    if not folder:
        yield
        return
    before = os.environ.get(errors.NOTES_ENV)
    os.environ[errors.NOTES_ENV] = folder
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(errors.NOTES_ENV, None)
        else:
            os.environ[errors.NOTES_ENV] = before


def _own_error(folder: str) -> Optional[errors.ConversionError]:
    noted = errors.noted_errors(folder)
    return noted[0] if noted else None


class _JobErrorMessages(logging.Filter):
    """Drops the error messages a portable job streams back (Beam logs each on
    the root logger: the worker's traceback, some 60 lines); the failure is
    told once, in one line (describe_failure), and --debug shows them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno >= logging.ERROR and record.funcName == "read_messages"
                    and record.pathname.endswith("portable_runner.py"))


@contextlib.contextmanager
def _job_errors_unlogged(enabled: bool):
    if not enabled:
        yield
        return
    root, dropped = logging.getLogger(), _JobErrorMessages()
    root.addFilter(dropped)
    try:
        yield
    finally:
        root.removeFilter(dropped)


# What Beam's local runner says when one of its worker processes is gone (killed, or out of memory).
_WORKER_DIED = ("Channel closed prematurely",)
_OS_ERROR = re.compile(r"\[Errno (\d+)\] ([^\n\[]+?)(?:: '([^'\n]*)')?(?: \[while running|\n|$)")
_LAST_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Exit)): (.+)$", re.M)
# An exception's last traceback line, "module.Name: message": ours are known by their name or module.
_RAISED = re.compile(r"^((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*): (.+)$", re.M)


def _local_paths(cfg: ConvertConfig) -> tuple:
    """The run's paths on this machine's filesystem, as their flags: what a
    remote runner's workers see only if they share that filesystem."""
    named = (("--input", cfg.inputs.root), ("--label_table", cfg.inputs.table), ("--output", cfg.output.output))
    if cfg.inputs.source and cfg.inputs.table:  # rows from Python: the table is a scratch copy under temp_location
        named = named[:1] + (("temp_location", cfg.inputs.table),) + named[2:]
    return tuple((flag, path) for flag, path in named if path and fsutil.is_local(path))


def _ours_in(text: str):
    """(type name, message) of the first error of ours a remote worker's
    traceback names (the cause; Beam re-raises it with the step's name
    appended), or None."""
    known = errors._known()
    for m in _RAISED.finditer(text):
        module, name, message = m.group(1).rstrip("."), m.group(2), m.group(3)
        if name in known or module.startswith("tfrecord_pipelines") and name != "RunError":
            return name, message.split(" [while running")[0].strip()
    return None


def _unseen_paths(local_paths: tuple) -> str:
    if not local_paths:
        return ""
    shown = ", ".join(f"{flag} {path}" for flag, path in local_paths)
    return (f"; {shown} {'is a path' if len(local_paths) == 1 else 'are paths'} on this machine, which the "
            "remote runner's workers may not see: give gs:// paths, or paths on a filesystem every worker mounts "
            "at the same place")


def describe_interrupt(cfg: ConvertConfig) -> str:
    """The line for a run stopped by SIGINT or SIGTERM: nothing published,
    what its resume area keeps (transforms/storage/resume.py), and that the
    same command resumes from it."""
    parent = cfg.output.resume_parent
    if not parent:
        return "interrupted: nothing was published; the same command starts the run again"
    try:
        done = _completed_shards(parent)
    except Exception:  # the line stands without the count
        done = None
    if done is None:
        return ("interrupted: nothing was published; the completed shards are kept and the same command resumes "
                "from them")
    if not done:
        return "interrupted: nothing was published and no shard was complete; the same command starts the run again"
    return (f"interrupted: nothing was published; the {plural(done, 'completed shard')} "
            f"{'is' if done == 1 else 'are'} kept and the same command resumes from {'it' if done == 1 else 'them'}")


def _completed_shards(parent: str) -> Optional[int]:
    """The complete shards in the resume area written last under `parent`
    (this run's: another run's would be older): those whose done-record is
    pinned, as a rerun keeps them (a signal can land between a done-record's
    write and its pin); None when that cannot be told (a bucket keeps no
    folder times)."""
    found = resume.areas(parent)
    if not found:
        return 0
    if not fsutil.is_local(parent):
        return None
    newest = max(found, key=lambda a: os.stat(a).st_mtime_ns)
    return sum(1 for n in os.listdir(newest)
               if n.endswith(resume.DONE_SUFFIX) and copy_trust.pinned(os.path.join(newest, n)))


def describe_failure(e: BaseException, output: str, run_id: str = "", remote: bool = False,
                     local_paths: tuple = ()) -> str:
    """One line for any failure of a run: ours by their message, an OS error
    (disk full, permissions) by its cause and path, else the last error a
    remote runner reported, without its traceback (--debug shows it): an
    error of ours there by its type. `remote`: a remote job's failure, whose
    `local_paths` ((flag, path) on this machine's disk) its workers may not
    see, which the line says."""
    own = errors.own_error(e)
    if own is not None:
        return str(own) + (_rejects_by_reason(output, run_id) if isinstance(own, TooManyRejects) else "")
    if isinstance(e, KeyboardInterrupt):
        return "interrupted: nothing was published"
    text = f"{type(e).__name__}: {e}" if isinstance(e, OSError) else str(e)
    died = next((s for s in _WORKER_DIED if s in text), None)
    if died is not None and not remote:
        return (f"a worker process of the run died ({died}): most likely it ran out of memory (the kernel's OOM "
                "killer; `dmesg` says so) or something killed it; nothing was published. Rerun with fewer worker "
                "processes (--direct_num_workers) or with more memory free")
    ours = _ours_in(text) if "Traceback (most recent call last)" in text else None
    if ours is not None:
        name, message = ours
        by_reason = _rejects_by_reason(output, run_id) if name == TooManyRejects.__name__ else ""
        return (f"the job failed: {name}: {message}{_unseen_paths(local_paths if remote else ())} (rerun with --debug for the "
                f"worker's traceback){by_reason}")
    m = _OS_ERROR.search(text)
    if m:
        code, what, path = int(m.group(1)), m.group(2).strip(), m.group(3)
        where = f" ({path})" if path else ""
        if output and not fsutil.is_local(output) and code in (errno.ENOSPC, errno.EDQUOT):
            # A bucket does not fill up like a disk: what is full is a local one, where this
            # run keeps its scratch files (spill files, temp shards) when the output is a bucket.
            return (f"{what}{where} on this machine, not in --output {output}: a run to a bucket keeps its "
                    f"scratch files (spill files, about 1 KB per image) in the temp folder {tempfile.gettempdir()}; "
                    "free space there or point TMPDIR at a disk with room (or pass --spill off); nothing was "
                    "published")
        if code == errno.EROFS:
            return (f"{what}{where}: that filesystem is mounted read-only; remount it read-write or choose "
                    "another --output, then rerun; nothing was published")
        if output and code in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return (f"{what}{where} while writing --output {output}: free space (or raise the quota) on that "
                    "device and rerun; nothing was published")
        return f"{what}{where}{_unseen_paths(local_paths if remote else ())}; nothing was published"
    found = _LAST_ERROR.findall(text)
    lines = text.strip().splitlines()
    detail = f"{found[-1][0]}: {found[-1][1]}" if found else lines[-1] if lines else type(e).__name__
    return (f"the {'job' if remote else 'run'} failed: {detail.split(' [while running')[0]}"
            f"{_unseen_paths(local_paths if remote else ())} (rerun with --debug for the traceback)")


def _rejects_by_reason(output: str, run_id: str) -> str:
    """For a run refused for its rejects: the counts by reason, from the
    rejects file the publish step wrote."""
    try:
        data = fsutil.read_bytes(fsutil.join(output, layout.failed_rejects_name(run_id)))
        counts = collections.Counter(json.loads(line).get("reason", "?") for line in data.splitlines() if line.strip())
    except Exception:  # the message stands without the counts
        return ""
    return "\nrejected by reason: " + ", ".join(f"{k} {v:,}" for k, v in counts.most_common())
