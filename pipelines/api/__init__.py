"""The Python API: `tfrecord_pipelines.convert(...)`, `check`, `verify`,
`report` and `spec`, the commands as functions that return results and raise
typed errors instead of printing and exiting.

    import tfrecord_pipelines as tfp
    result = tfp.convert(input="images", output="out", num_shards=4)
    result = tfp.convert(label_table=df, output="out", split={"train": 0.8, "validation": 0.2})

The keywords are the command's options, declared once in
pipelines/options/table.py (and Beam's own options, which go to Beam), taken
as typed values (pipelines/options/keywords.py); a conversion runs the
command's own code path (conversion.configure, then conversion.execute under
the run's lifecycle), without the command line's speed layer. Errors: UsageError (a ValueError)
for a bad option, before anything runs; ConversionError subclasses for a run
that failed (TooManyRejects, LockHeld, RunError for a failure not of ours,
the original as its __cause__). Nothing is printed unless asked: verbose=True
prints the command's summary; progress=None shows the progress line where a
person is watching (a terminal or a notebook), True always, False never.

A call leaves the caller's process as it found it: no function of another
library replaced, no environment variable, warning filter, logger level,
fd, signal handler, Pillow setting, thread or child process left behind
(tests/e2e/test_process_state.py holds that). Beam is imported by the first
call, not by `import tfrecord_pipelines`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import os
import time
from typing import Optional

from tfrecord_pipelines.api.results import CheckResult, ConversionResult, ReportResult, VerifyResult
from tfrecord_pipelines.transforms.core import errors
from tfrecord_pipelines.transforms.core.errors import OutputError, RunError, UsageError, VerificationError

def convert(**options) -> ConversionResult:
    """Converts an image folder tree, a label table (a file, a pandas
    DataFrame, or an iterable of (path, label) pairs or dicts) or a listing
    into TFRecord (or ArrayRecord) shards in `output`; returns the result.
    Takes every option of `tfrecords convert` as a keyword (see
    tfrecord_pipelines.api.options_help()), Beam's own options too."""
    verbose = bool(options.pop("verbose", False))
    started = time.time()
    outcome, job, seconds = _run("convert", options, check_only=False)
    from tfrecord_pipelines.console import summary
    cfg, options_, runner = job.cfg, job.options, job.runner
    out = cfg.output
    if outcome == "done" and not job.plan.local:
        outcome = "submitted"
    elif outcome == "done":
        outcome = "unchanged" if out.root and not _has_manifest(out.output) else "published"
    if verbose:
        with _quiet_logs(False):
            summary.print_outcome(options_, cfg, runner, "done" if outcome in ("published", "unchanged") else outcome,
                           seconds)
    if outcome == "unchanged":
        from tfrecord_pipelines.transforms.storage import fsutil
        _remove_if_empty(out.output)
        return ConversionResult.read(outcome, fsutil.join(out.root, out.previous_version), out.previous_version,
                                     seconds=time.time() - started)
    return ConversionResult.read(outcome, out.output, out.version, seconds=seconds)


def check(**options) -> CheckResult:
    """`tfrecords check`: lists, labels, splits and validates like convert
    (same keywords), writes report.html, check.json and check-rejects.jsonl
    into `output`, and no shard. Returns the figures; would_publish says
    whether a conversion with these options would publish."""
    verbose = bool(options.pop("verbose", False))
    outcome, job, seconds = _run("check", options, check_only=True)
    cfg = job.cfg
    if outcome != "done" or not job.plan.local:
        return CheckResult(output=cfg.output.output, seconds=seconds)
    if verbose:
        from tfrecord_pipelines.console.summary import print_check_summary
        print_check_summary(cfg.output.output, seconds)
    return CheckResult.read(cfg.output.output, seconds)


def _suggesting(func):
    """A keyword the function does not take is a TypeError naming the nearest
    one it does (as convert()'s keywords are)."""
    params = inspect.signature(func).parameters

    @functools.wraps(func)
    def call(*args, **kwargs):
        for name in kwargs:
            if name not in params:
                from tfrecord_pipelines.options.keywords import nearest
                raise TypeError(f"{func.__name__}() got an unexpected keyword argument {name!r}"
                                f"{nearest(name, list(params))}")
        return func(*args, **kwargs)
    return call


@_suggesting
def verify(output, fast: bool = False, decode: bool = False, io_timeout: Optional[float] = None,
           verbose: bool = False) -> VerifyResult:
    """`tfrecords verify`: re-reads every shard of `output` against its
    manifest. Returns the totals; raises VerificationError listing every
    problem (its `problems`), or OutputError when there is no readable manifest.
    The keywords are the command's flags (--fast, --decode, --io_timeout
    seconds); verbose=True prints what `tfrecords verify` prints without --quiet.
    A --versioned dataset root is verified at the version its LATEST names."""
    from tfrecord_pipelines.outputs.verification import verify_output
    from tfrecord_pipelines.transforms.storage import fsutil, gcs
    out = fsutil.normalize_root(os.fspath(output))
    if io_timeout is not None and not (isinstance(io_timeout, (int, float)) and 0 < io_timeout < float("inf")):
        raise UsageError(f"io_timeout {io_timeout!r} must be a positive number of seconds")
    kept = gcs.timeout()
    if io_timeout is not None:
        gcs.set_timeout(float(io_timeout))
    try:
        out = _followed(out)  # a --versioned root: the version LATEST names, as load() reads it
        _manifest(out)  # an output that is not one: OutputError, as load() and spec() say it
        report = verify_output(out, deep=not fast, log=print if verbose else None, decode=decode)
    finally:
        gcs.set_timeout(kept)
    if not report.ok:
        raise VerificationError(f"{len(report.errors)} problem(s) in {out}: {report.errors[0]}"
                                + (" (and more: see .problems)" if len(report.errors) > 1 else ""), report.errors)
    return VerifyResult(output=out, shards=report.shards, records=report.records, bytes=report.bytes)


@_suggesting
def report(output, to: str = "", deadline: Optional[float] = None, sources: str = "") -> ReportResult:
    """`tfrecords report`: (re)builds `output`'s report.html (or writes it to
    `to`); returns where it went. Thumbnails of rejected files (and of
    duplicates the shards do not hold) are made only from files under
    `sources`, the folder the run converted: never from the root the manifest
    names, which anyone who can edit the manifest could point elsewhere. A
    --versioned dataset root's report is that of the version its LATEST names."""
    from tfrecord_pipelines.transforms.storage import fsutil, report_data
    out = fsutil.normalize_root(os.fspath(output))
    deadline = report_data.DEADLINE_SECONDS if deadline is None else deadline
    if not (isinstance(deadline, (int, float)) and deadline > 0):
        raise UsageError(f"deadline {deadline!r} must be a positive number of seconds")
    out = _followed(out)  # a --versioned root: the version LATEST names (its report.html is rebuilt)
    if not _has_manifest(out) and fsutil.exists(fsutil.join(out, "check.json")):
        raise OutputError(f"{out} has no manifest.json: it holds a `tfrecords check` report (rerun the check to "
                          "rebuild that)")
    m = _manifest(out)
    target = fsutil.normalize_root(os.fspath(to)) if to else fsutil.join(out, report_data.REPORT)
    started = time.monotonic()
    budget = report_data.Budget(deadline)
    try:
        src = fsutil.normalize_root(os.fspath(sources)) if sources else ""
        page = report_data.build(out, m, deadline, src, budget).encode("utf-8")
        fsutil.write_bytes(target, page)
    except Exception as e:  # unreadable shards are noted in the page; this is a failure to build or write it
        raise RunError(f"the report of {out} could not be built or written: {type(e).__name__}: {e}") from e
    return ReportResult(path=target, bytes=len(page), seconds=time.monotonic() - started, reads=budget.summary())


@_suggesting
def spec(output) -> str:
    """`tfrecords spec`: Python source that reads `output` (tf.data, TFDS,
    PyTorch, DALI or Grain, as the output allows), from its manifest; for a
    --versioned dataset root, that of the version its LATEST names."""
    from tfrecord_pipelines.outputs.reading_code import has_tfds_metadata, reading_code
    from tfrecord_pipelines.transforms.storage import fsutil
    out = fsutil.normalize_root(os.fspath(output))
    if fsutil.is_local(out):
        out = os.path.abspath(out)
    out = _followed(out)  # a --versioned root: the code reads the version LATEST names now
    m = _manifest(out)
    return reading_code(out, m, has_tfds_metadata(m))


def options_help() -> str:
    """Every keyword of convert() and check(), with its help and default."""
    from tfrecord_pipelines.options.keywords import help_text
    return help_text()


# ---- the shared path --------------------------------------------------------------------------------------------------


def _run(func: str, options: dict, check_only: bool):
    """Configures and executes the command's code path: (outcome, Job,
    seconds); typed errors, worded as the caller wrote the options."""
    from tfrecord_pipelines.api import rows as python_rows
    from tfrecord_pipelines.options import keywords
    from tfrecord_pipelines.run.plan import Plan
    progress = options.pop("progress", None)
    table = options.get("label_table")
    given_rows = python_rows.is_rows(table)
    kw = {k: v for k, v in options.items() if not (given_rows and k in ("label_table", "image_root"))}
    try:
        values, beam = keywords.split_keywords(func, kw, _beam_names())
    except UsageError as e:
        raise type(e)(keywords.as_keywords(str(e))) from None
    values = values.replace(progress=_progress(progress))
    plan = Plan.decide(values, beam, command_line=False)
    source = python_rows.describe(table) if given_rows else ""
    with _quiet_logs(plan.debug), _process_kept():
        from apache_beam.options.pipeline_options import PipelineOptions
        beam_options = PipelineOptions(flags=[], **beam)
        with _rows_table(table if given_rows else None, options, values, beam_options) as values:
            return _configured_run(values, beam_options, plan, check_only, source)


def _configured_run(values, beam_options, plan, check_only: bool, source: str):
    from tfrecord_pipelines.run import conversion, lifecycle
    from tfrecord_pipelines.options import keywords
    debug = plan.debug
    try:
        from tfrecord_pipelines.options.flags import check_runner
        check_runner(plan.runner)
        job = conversion.configure(values, beam_options, plan, check_only)
    except UsageError as e:
        raise _named(e, values, source) from None
    except Exception as e:  # e.g. an input we may not read
        if debug:
            raise
        raise RunError(lifecycle.describe_failure(e, "")) from e
    if source:
        job.cfg = dataclasses.replace(job.cfg, inputs=dataclasses.replace(job.cfg.inputs, source=source))
    try:
        outcome, seconds, _ = conversion.execute(job)
    except UsageError as e:
        raise type(e)(keywords.as_keywords(str(e))) from None
    except KeyboardInterrupt:
        raise
    except Exception as e:
        own = errors.own_error(e)
        if own is e or debug:
            raise
        if own is not None:  # ours, noted by a worker process or raised as the cause
            raise own from None
        raise RunError(lifecycle.describe_failure(e, job.cfg.output.output, job.cfg.output.run_id)) from e
    return outcome, job, seconds


@functools.lru_cache(maxsize=1)
def _beam_names() -> frozenset:
    """The names of Beam's own options (keywords that go to Beam)."""
    from tfrecord_pipelines.options import table
    from tfrecord_pipelines.options.flags import _all_options_parser
    return frozenset(a.dest for a in _all_options_parser()._actions
                     if a.option_strings and a.dest != "help" and a.dest not in table.BY_NAME)


@contextlib.contextmanager
def _rows_table(table, options: dict, values, beam_options):
    """The run's Values for rows given from Python: they are written as a
    table first (tfrecord_pipelines/api/rows.py), removed when the run ends (a
    detached remote job removes it itself, once it has read it)."""
    if table is None:
        yield values
        return
    from tfrecord_pipelines.api import rows as python_rows
    scratch = python_rows.scratch_folder(beam_options)
    with python_rows.as_table(table, options.get("image_root") or "", options.get("path_column") or "",
                              scratch, bool(options.get("allow_empty")),
                              python_rows.job_removes(beam_options, bool(values.detach))) as (path, root):
        yield values.replace(label_table=path, image_root=root)


def _named(e: UsageError, values, source: str) -> UsageError:
    """A usage error in the caller's spelling; one that names the scratch
    table of rows from Python names the rows instead."""
    from tfrecord_pipelines.options.keywords import as_keywords
    text = str(e)
    if source:
        table = values.label_table
        text = text.replace(f"--label_table {table!r}", f"label_table {source}").replace(table, source)
    text = as_keywords(text)
    return type(e)(text) if text != str(e) else e


def _progress(setting) -> str:
    """The --progress value for progress=None|True|False (or the flag's own
    words): None means on where a person is watching, a terminal or a
    notebook, and off otherwise (a script's log stays clean)."""
    if setting is None:
        from tfrecord_pipelines.console.progress_line import interactive
        return "on" if interactive() else "off"
    if isinstance(setting, bool):
        return "on" if setting else "off"
    return str(setting)


@contextlib.contextmanager
def _quiet_logs(debug: bool):
    """The command's quiet Beam logs for the call, then the caller's levels back."""
    from tfrecord_pipelines.run import runtime
    names = ["apache_beam", "apache_beam.runners.portability.local_job_service",
             "apache_beam.options.pipeline_options", "apache_beam.runners.portability.fn_api_runner.fn_runner"]
    levels = {n: logging.getLogger(n).level for n in names}
    runtime.quiet_beam_logs(debug)
    try:
        yield
    finally:
        for n, level in levels.items():
            logging.getLogger(n).setLevel(level)


@contextlib.contextmanager
def _process_kept():
    """What a run in the caller's process sets for itself (the stages set
    Pillow's bomb limit and silence its bomb warning, as every worker process
    does), put back as it was."""
    import warnings

    from PIL import Image
    pixels = Image.MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():  # the caller's filters back on leaving
            yield
    finally:
        Image.MAX_IMAGE_PIXELS = pixels


def _followed(out: str) -> str:
    """`out`, or for a --versioned root the version folder its LATEST names (OutputError if LATEST is unsafe)."""
    from tfrecord_pipelines.outputs.finished_output import follow_latest
    return follow_latest(out)[0]


def _manifest(out: str) -> dict:
    from tfrecord_pipelines.transforms.storage import layout
    try:
        return layout.read_manifest(out)
    except FileNotFoundError:
        from tfrecord_pipelines.outputs.finished_output import no_manifest
        raise OutputError(no_manifest(out)) from None
    except Exception as e:  # malformed, unreadable
        raise OutputError(f"{layout.MANIFEST} of {out} cannot be read: {e}") from None


def _has_manifest(out: str) -> bool:
    from tfrecord_pipelines.transforms.storage import fsutil, layout
    return fsutil.exists(fsutil.join(out, layout.MANIFEST))


def _remove_if_empty(folder: str) -> None:
    """An unchanged --versioned run leaves no empty version folder (as the command)."""
    from tfrecord_pipelines.transforms.storage import fsutil
    if fsutil.is_local(folder) and os.path.isdir(folder) and not os.listdir(folder):
        os.rmdir(folder)
