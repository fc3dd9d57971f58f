"""Convert an image tree or label table into TFRecord shards.

    python -m tfrecord_pipelines.convert --input ./images --output ./out [Beam flags]

The command: flags checked and parsed into the config, the runner chosen, the
run executed under its lifecycle (pipelines/lifecycle.py: the output locked,
the pipeline of pipelines/pipeline.py built and run, the run ended), then the
summary. Exit status 0 done, 1 the run failed, 2 a usage error.
"""
from __future__ import annotations

if __name__ == "__main__":  # start the workers' zygote while Beam is imported below
    import sys as _sys

    from tfrecord_pipelines import runtime as _runtime
    _runtime.prestart(_sys.argv[1:])

import dataclasses
import logging
import os
import sys
import time
import uuid
from typing import Optional

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions, TestOptions

from tfrecord_pipelines import __version__, lifecycle, offline, runtime
from tfrecord_pipelines.config import ConvertConfig
from tfrecord_pipelines.options import ConvertOptions, check_flags, help_parser
from tfrecord_pipelines.parse import UsageError, build_config
from tfrecord_pipelines.report import print_summary, print_warnings
from tfrecord_pipelines.transforms.storage import fsutil, layout, run_lock

log = logging.getLogger("tfrecords.run")


def run(argv: Optional[list] = None, prog: str = "python -m tfrecord_pipelines.convert", check_only: bool = False) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(argv, prog, check_only)
    finally:
        runtime.stop()


def _run(argv: list, prog: str, check_only: bool = False) -> int:
    debug = "--debug" in argv
    runtime.quiet_beam_logs(debug)
    if "-h" in argv or "--help" in argv:
        help_parser(prog).print_help()
        return 0
    if argv in (["--version"], ["-V"]):  # alone; `--version NAME` names a --versioned output's folder
        print(f"tfrecords {__version__}")
        return 0
    argv = _bare_dry_run(argv)
    try:
        check_flags(argv)
        options, cfg, runner = configure(argv, check_only)
    except UsageError as e:  # FlagError and RunnerError too
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # e.g. an input folder we may not read, a bucket without credentials
        if debug:
            raise
        print(f"error: {lifecycle.describe_failure(e, '')}", file=sys.stderr)
        return 1
    if runtime.is_local(options) and _dry_run(options) and not check_only:
        return _preview(options, cfg, runner, debug)
    if cfg.detection is not None:
        print(f"annotations: {cfg.detection.found}", file=sys.stderr)
    try:
        outcome, seconds, result = execute(options, cfg, runner, debug)
    except (UsageError, run_lock.LockHeld) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (Exception, KeyboardInterrupt) as e:
        if debug:
            raise
        print(f"error: {lifecycle.describe_failure(e, cfg.output.output, cfg.output.run_id)}", file=sys.stderr)
        return 1
    try:
        if check_only and outcome != "dry_run":  # `tfrecords check`: pipelines/check.py
            from tfrecord_pipelines.check import report_check
            return report_check(options, cfg, outcome, seconds)
        code = report(options, cfg, runner, outcome, seconds)
        if outcome == "dry_run" and offline.active():
            print("\n".join(offline.summary(options, result)))
        return code
    except Exception as e:  # e.g. a manifest damaged after publishing
        if debug:
            raise
        print(f"error: the run finished, but its output cannot be summarised: {e}", file=sys.stderr)
        return 1


def _bare_dry_run(argv: list) -> list:
    """`--dry_run` alone means `--dry_run True` (Beam's flag takes a value)."""
    return [f"{a}=True" if a == "--dry_run" and (i + 1 == len(argv) or argv[i + 1].startswith("-")) else a
            for i, a in enumerate(argv)]


def _dry_run(options) -> bool:
    from apache_beam.options.pipeline_options import TestOptions
    value = options.view_as(TestOptions).dry_run
    return bool(value) and str(value).strip().lower() not in ("false", "0", "no", "off")


def _preview(options: PipelineOptions, cfg: ConvertConfig, runner, debug: bool) -> int:
    """--dry_run on a local run: what the run would do, before any image is
    read; nothing is locked or written."""
    from tfrecord_pipelines.report import print_preview
    try:
        got = lifecycle.preview(cfg, options, runner, debug)
        print_preview(got, cfg)
    except (Exception, KeyboardInterrupt) as e:
        if debug:
            raise
        print(f"error: {lifecycle.describe_failure(e, '')}", file=sys.stderr)
        return 1
    return 0


def configure(argv: list, check_only: bool = False) -> tuple:
    """(options, config, runner); raises UsageError before anything is
    submitted or locked. The command and the Python API
    (tfrecord_pipelines.api) both start here."""
    options = PipelineOptions(argv)
    opts = options.view_as(ConvertOptions)
    run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]
    local = runtime.is_local(options)
    if options.view_as(TestOptions).dry_run and not local and not runtime.is_dataflow(options):
        raise UsageError(f"--dry_run with {runtime.runner_name(options)}: only DataflowRunner builds a job without "
                         "running it (Beam's other runners ignore --dry_run and would run the job)")
    offline.begin(runtime.remote_dry_run(options))  # a Dataflow dry run needs no network (pipelines/offline.py)
    if offline.active():
        offline.prepare(options)
    if opts.spill == "on" and not local:
        raise UsageError("--spill on is for local runs (the spill files must be on the workers' own disk); a "
                         "remote runner uses its own shuffle: leave --spill at auto")
    cfg = build_config(opts, run_id, progress=local and opts.progress != "off")
    # A job handed to a remote runner goes on if the launcher stops watching: it ends the run itself.
    cfg = dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, job_ends_run=not local))
    if check_only:  # validate and report, whether or not the inputs changed since LATEST (--versioned)
        cfg = dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, check_only=True, republish=True))
    runner = runtime.choose_runner(options, argv, quiet=not opts.debug)
    if not local and not offline.active():
        runtime.check_external_workers(options)  # a local worker pool that would start no worker
    return options, cfg, runner


def execute(options: PipelineOptions, cfg: ConvertConfig, runner, debug: bool = False) -> tuple:
    """Runs the configured conversion under its lifecycle (the output locked,
    the pipeline built and run, the run ended): (outcome, seconds, Beam's
    PipelineResult), the outcome "done", "submitted" or "dry_run". Raises
    what ended the run."""
    opts = options.view_as(ConvertOptions)
    started = time.time()
    with lifecycle.locked(cfg, opts.lock_ttl_hours, opts.break_lock) as run_:
        outcome = run_.execute(options, runner, debug)
    if run_.worker_pids:
        log.info("local run: %d worker processes did work", len(run_.worker_pids))
    return outcome, time.time() - started, run_.result


def report(options: PipelineOptions, cfg: ConvertConfig, runner, outcome: str, seconds: float) -> int:
    """What the command prints after a conversion (the Python API's
    verbose=True); its exit status."""
    out = cfg.output
    template = options.view_as(GoogleCloudOptions).template_location
    if outcome == "dry_run":
        name = runner if isinstance(runner, str) else type(runner).__name__
        print(f"dry run: the {name} job was built and not submitted")
    elif not runtime.is_local(options) and template:
        print(f"job description written to {template} for the template launcher; the job's last step publishes "
              "the output")
    elif not runtime.is_local(options):
        print(f"job {outcome} ({options.view_as(StandardOptions).runner}); output {out.output}, complete when "
              f"{layout.MANIFEST} appears")
        if outcome == "done":  # the launcher waited: the job's publish step has written the manifest
            print_warnings(out.output)
    elif out.root and not fsutil.exists(fsutil.join(out.output, layout.MANIFEST)):
        if fsutil.is_local(out.output) and os.path.isdir(out.output) and not os.listdir(out.output):
            os.rmdir(out.output)
        print(f"unchanged: inputs and options are the same as version {out.previous_version}; nothing "
              f"published, {fsutil.join(out.root, layout.LATEST)} still names {out.previous_version}")
    else:
        print_summary(out.output, seconds)
    return _latest_told(out) if out.root and outcome == "done" else 0


def _latest_told(out) -> int:
    """What LATEST names after a --versioned run, as it is (read back, not
    assumed); 1 when this run's version was published but is not current."""
    latest = fsutil.join(out.root, layout.LATEST)
    current = layout.latest_name(out.root)
    if current == out.version:
        print(f"published version {out.version}: {latest} now names it")
        return 0
    if not fsutil.exists(fsutil.join(out.output, layout.MANIFEST)):
        return 0  # nothing published (unchanged inputs): said above
    print(f"error: version {out.version} is complete in {out.output}, but {latest} names "
          f"{current or 'no version'}, not this one: training jobs that read LATEST do not see it", file=sys.stderr)
    return 1


def main() -> None:
    from tfrecord_pipelines.cli import exit_now
    exit_now(run())


if __name__ == "__main__":
    main()
