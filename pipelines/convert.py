"""Convert an image tree or label table into TFRecord shards.

    python -m pipelines.convert --input ./images --output ./out [Beam flags]

The pipeline, one stage per step (element shapes in the comments):
    ListInputs | AssignLabels | Split | PlanShards | WriteShards (reading and validating) | Publish
or, with --reads_per_image 2 (tables without sizes, --max_examples_per_split):
    ListInputs | AssignLabels | Split | ValidateImages | PlanShards | WriteShards | Publish
"""
from __future__ import annotations

if __name__ == "__main__":  # start the workers' zygote while Beam is imported below
    import sys as _sys

    from pipelines import local_worker as _local_worker
    from pipelines.stderr import workers_stderr_to_log as _to_log
    with _to_log("--debug" not in _sys.argv[1:]):
        _local_worker.prestart(_sys.argv[1:])

import collections
import contextlib
import errno
import json
import logging
import os
import re
import sys
import tempfile
import time
import uuid
from typing import Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import (GoogleCloudOptions, PipelineOptions, StandardOptions, TestOptions,
                                                      TypeOptions)

from pipelines import __version__, local_worker, output_guard, runner as runners
from pipelines.config import ConvertConfig
from pipelines.options import ConvertOptions, FlagError, check_flags, help_parser
from pipelines.parse import UsageError, build_config
from pipelines.report import ProgressLine, TracebackFilter, print_summary
from pipelines.stderr import workers_stderr_to_log
from transforms import fingerprint, fsutil, layout
from transforms.assign_labels import AssignLabels
from transforms.fingerprint import FINGERPRINT
from transforms.list_inputs import RECORDS, REJECTS, STATS, ListInputs
from transforms.plan_shards import PlanShards
from transforms.labels import LabelError
from transforms.publish import Publish, PublishError, release_lock
from transforms.split import Split
from transforms.validate_images import ValidateImages
from transforms.write_shards import WriteShards


def build_pipeline(p: beam.Pipeline, cfg: ConvertConfig, progress_dir: str = "") -> None:
    out = cfg.output
    staging = layout.staging_dir(out.output, out.run_id)
    listed = p | "ListInputs" >> ListInputs(cfg.inputs)
    # [Rec(rel, path, size, raw label/split/extras)] batches
    labeled = listed[RECORDS] | "AssignLabels" >> AssignLabels(cfg.labels, cfg.inputs.extra_columns)
    # [Rec + label_id | target, typed extras]; label_map: singleton LabelMap
    split = labeled[RECORDS] | "Split" >> Split(cfg.splits, cfg.shards.seed, cfg.shards.max_per_split)
    # [Rec + split, shuffle key]
    fp = (listed[FINGERPRINT] | "Fingerprint" >> beam.combiners.ToList()
          | "RunFingerprint" >> beam.Map(
              lambda digests, lm: fingerprint.combine(digests + [("label_map", fingerprint.options_digest(
                  lm.to_json()))], fingerprint.options_digest(cfg.fingerprint_options())),
              beam.pvalue.AsSingleton(labeled["label_map"])))
    # singleton: sha256 of the listing, the options and the label map
    records = split[RECORDS]
    if out.previous_fingerprint and not out.republish:
        records = records | "SkipIfUnchanged" >> beam.FlatMap(
            lambda b, run_fp: [] if fingerprint.unchanged(run_fp, out.previous_fingerprint) else [b],
            beam.pvalue.AsSingleton(fp))
    read_once = cfg.images.reads.once
    valid_rejects = None
    if not read_once:  # two reads per image: validate, plan from the valid ones, read again to write
        valid = records | "ValidateImages" >> ValidateImages(cfg.images, progress_dir)
        # [Rec + size, format, height, width, channels, crc]
        records, valid_rejects = valid[RECORDS], valid[REJECTS]
    planned = records | "PlanShards" >> PlanShards(cfg.shards)
    # ((split, index, num_shards), [[(position, Rec)]]); plans: singleton {split: SplitPlan}
    written = planned["shards"] | "WriteShards" >> WriteShards(
        staging, cfg.shards.compression, cfg.images, dict(out.feature_keys), labeled["label_map"], progress_dir,
        validate=read_once, index_files=cfg.shards.index_files)
    # ShardResult(name, temp path, records, bytes, crc32c); rejects (validation's, with one read)
    rejects = ([pc for pc in (listed.get(REJECTS), labeled[REJECTS], split[REJECTS], valid_rejects,
                              written[REJECTS]) if pc is not None]
               | "AllRejects" >> beam.Flatten())
    stats = [pc for pc in (listed[STATS], split.get(STATS)) if pc is not None] | "AllStats" >> beam.Flatten()
    ({"shards": written["shards"], "rejects": rejects, "stats": stats,
      "label_map": labeled["label_map"], "plans": planned["plans"], "fingerprint": fp}
     | "Publish" >> Publish(spec=out, staging=staging, options=cfg.describe(),
                            options_fingerprint=fingerprint.options_digest(cfg.fingerprint_options()),
                            compression=cfg.shards.compression,
                            max_reject_fraction=cfg.max_reject_fraction, tool_version=__version__))
    # manifest.json, written last


def _error_message(e: BaseException) -> Optional[str]:
    """Our own error inside a Beam failure (Beam wraps it with tracebacks)."""
    if isinstance(e, (PublishError, LabelError)):
        return str(e).split(" [while running")[0]
    text = str(e)
    for cls in _OWN_ERRORS:
        marker = cls + ": "
        if marker in text:
            return text[text.rindex(marker) + len(marker):].split("\n")[0].split(" [while running")[0]
    return None


_OWN_ERRORS = ("TooManyRejects", "PublishError", "LabelError", "StorageUnavailable", "TableError")
_OS_ERROR = re.compile(r"\[Errno (\d+)\] ([^\n\[]+?)(?:: '([^'\n]*)')?(?: \[while running|\n|$)")
_LAST_ERROR = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Exit)): (.+)$", re.M)


def describe_failure(e: BaseException, output: str) -> str:
    """One line for any failure of a run: ours as they are, an OS error
    (disk full, permissions) by its cause and path, else the last error Beam
    wrapped, without its traceback (--debug shows it)."""
    own = _error_message(e)
    if own is not None:
        return own + _rejects_by_reason(own)
    if isinstance(e, KeyboardInterrupt):
        return "interrupted; nothing was published"
    text = f"{type(e).__name__}: {e}" if isinstance(e, OSError) else str(e)
    m = _OS_ERROR.search(text)
    if m:
        code, what, path = int(m.group(1)), m.group(2).strip(), m.group(3)
        where = f" ({path})" if path else ""
        if output and code in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return (f"{what}{where} while writing --output {output}: free space (or raise the quota) on that "
                    "device and rerun; nothing was published")
        return f"{what}{where}; nothing was published"
    found = _LAST_ERROR.findall(text)
    lines = text.strip().splitlines()
    detail = f"{found[-1][0]}: {found[-1][1]}" if found else lines[-1] if lines else type(e).__name__
    return f"the run failed: {detail.split(' [while running')[0]} (rerun with --debug for the traceback)"


def _rejects_by_reason(message: str) -> str:
    """For a run refused for its rejects: the counts by reason, from the
    rejects file the message names."""
    m = re.search(r"(\S+\.rejects\.jsonl)", message)
    if not m:
        return ""
    try:
        counts = collections.Counter(json.loads(line).get("reason", "?")
                                     for line in fsutil.read_bytes(m.group(1)).splitlines() if line.strip())
    except Exception:  # the message stands without the counts
        return ""
    return "\nrejected by reason: " + ", ".join(f"{k} {v:,}" for k, v in counts.most_common())


class _OwnErrorsFilter(logging.Filter):
    """Beam logs a traceback for every failed bundle; ours get a one-line message."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(name in text for name in _OWN_ERRORS)


def _quiet_beam_logs(debug: bool = False) -> None:
    # Every failure reaches us as the exception of p.run(), which we turn into
    # one line (describe_failure); Beam's own error logs of it are tracebacks.
    # --debug shows them.
    quiet = logging.ERROR if debug else logging.CRITICAL
    if not debug:
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    # Local workers relay their start-up chatter at WARNING; keep errors only.
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(quiet)
    logging.getLogger("apache_beam.options.pipeline_options").setLevel(quiet)
    # We run subprocess workers in Beam's in_memory mode (pipelines/runner.py); its warning about that is moot.
    logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner").setLevel(quiet)
    for name in ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                 "apache_beam.runners.portability.local_job_service"):
        logging.getLogger(name).addFilter(_OwnErrorsFilter())


def run(argv: Optional[list] = None, prog: str = "python -m pipelines.convert") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(argv, prog)
    finally:
        local_worker.stop_zygote()


def _run(argv: list, prog: str) -> int:
    debug = "--debug" in argv
    _quiet_beam_logs(debug)
    if "-h" in argv or "--help" in argv:
        help_parser(prog).print_help()
        return 0
    if argv in (["--version"], ["-V"]):  # alone; `--version NAME` names a --versioned output's folder
        print(f"tfrecords {__version__}")
        return 0
    try:
        check_flags(argv)
        options, cfg, runner = _prepare(argv)
    except (UsageError, FlagError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # e.g. an input folder we may not read, a bucket without credentials
        if debug:
            raise
        print(f"error: {describe_failure(e, '')}", file=sys.stderr)
        return 1
    started = time.time()
    try:
        outcome = _execute(options, cfg, runner)
    except (Exception, KeyboardInterrupt) as e:
        release_lock(cfg.output.lock_dir, cfg.output.run_id)
        fsutil.delete_tree(layout.staging_dir(cfg.output.output, cfg.output.run_id))
        if debug:
            raise
        print(f"error: {describe_failure(e, cfg.output.output)}", file=sys.stderr)
        return 1
    try:
        _report(options, cfg, runner, outcome, time.time() - started)
    except Exception as e:  # e.g. a manifest damaged after publishing
        if debug:
            raise
        print(f"error: the run finished, but its output cannot be summarised: {e}", file=sys.stderr)
        return 1
    return 0


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
        raise UsageError(f"--output {output!r}: no permission to write in {probe!r}")


def _lock(cfg: ConvertConfig, opts) -> None:
    try:
        output_guard.acquire_lock(cfg.output.lock_dir, cfg.output.run_id, opts.lock_ttl_hours, opts.break_lock)
    except OSError as e:  # e.g. read-only file system, no space left, permission denied
        raise UsageError(f"--output {cfg.output.output!r}: cannot create the lock file "
                         f"({e.strerror or e}{': ' + e.filename if getattr(e, 'filename', None) else ''})") from None


def _prepare(argv: list) -> tuple:
    """(options, config, runner), with the output checked and locked; raises
    UsageError before anything is submitted."""
    options = PipelineOptions(argv)
    opts = options.view_as(ConvertOptions)
    run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]
    cfg = build_config(opts, run_id, progress=runners.is_local(options) and opts.progress != "off")
    with workers_stderr_to_log(not opts.debug):  # the zygote starts here unless started already
        runner = runners.choose_runner(options, argv)
    # The friendly checks first: taking the lock creates the folder, and would
    # fail with a raw OSError on a file or an unwritable place.
    check_output_path(cfg.output.lock_dir)
    check_output_path(cfg.output.output)
    _lock(cfg, opts)
    try:
        output_guard.check_output(cfg.output.output, cfg.inputs.root, cfg.output.overwrite)
        output_guard.remove_leftover_staging(cfg.output.output, run_id)
    except UsageError:
        release_lock(cfg.output.lock_dir, run_id)
        raise
    except OSError as e:  # e.g. an output folder we may not list
        release_lock(cfg.output.lock_dir, run_id)
        raise UsageError(f"--output {cfg.output.output!r}: {e.strerror or e}") from None
    return options, cfg, runner


def _execute(options: PipelineOptions, cfg: ConvertConfig, runner) -> str:
    """Builds and runs the pipeline: "dry_run", "submitted" or "done"."""
    opts = options.view_as(ConvertOptions)
    # Our transforms declare no element types; construction-time type inference would only cost time.
    options.view_as(TypeOptions).pipeline_type_check = False
    with tempfile.TemporaryDirectory(prefix="tfrecords-progress-") as progress_dir:
        folder = progress_dir if cfg.output.progress else ""
        p = beam.Pipeline(runner=runner, options=options)
        build_pipeline(p, cfg, folder)
        # Beam's own worker processes (when not forked from our zygote) start inside p.run().
        quiet = not opts.debug and runners.is_local(options)
        progress = ProgressLine(folder, opts.progress, cfg.inputs.root or cfg.inputs.table, cfg.images.reads.timeout)
        with workers_stderr_to_log(quiet), progress, _filtered_stderr(not opts.debug):
            result = p.run()
            if options.view_as(TestOptions).dry_run:
                release_lock(cfg.output.lock_dir, cfg.output.run_id)
                return "dry_run"
            if opts.detach and not runners.is_local(options):
                return "submitted"
            result.wait_until_finish()
    return "done"


@contextlib.contextmanager
def _filtered_stderr(enabled: bool):
    if not enabled:
        yield
        return
    real, sys.stderr = sys.stderr, TracebackFilter(sys.stderr)
    try:
        yield
    finally:
        sys.stderr = real


def _report(options: PipelineOptions, cfg: ConvertConfig, runner, outcome: str, seconds: float) -> None:
    out = cfg.output
    template = options.view_as(GoogleCloudOptions).template_location
    if outcome == "dry_run":
        name = runner if isinstance(runner, str) else type(runner).__name__
        print(f"dry run: the {name} job was built and not submitted")
    elif not runners.is_local(options) and template:
        print(f"job description written to {template} for the template launcher; the job's last step publishes "
              "the output")
    elif not runners.is_local(options):
        print(f"job {outcome} ({options.view_as(StandardOptions).runner}); output {out.output}, complete when "
              f"{layout.MANIFEST} appears")
    elif out.root and not fsutil.exists(fsutil.join(out.output, layout.MANIFEST)):
        if fsutil.is_local(out.output) and os.path.isdir(out.output) and not os.listdir(out.output):
            os.rmdir(out.output)
        print(f"unchanged: inputs and options are the same as version {out.previous_version}; nothing "
              f"published, {fsutil.join(out.root, layout.LATEST)} still names {out.previous_version}")
    else:
        print_summary(out.output, seconds)
        if out.root:
            print(f"published version {out.version}: {fsutil.join(out.root, layout.LATEST)} now names it")


def main() -> None:
    from pipelines.cli import exit_now
    exit_now(run())


if __name__ == "__main__":
    main()
