"""`tfrecords convert` (and `tfrecords check`, the same flags with
check_only): the flags checked, the conversion configured and executed
(conversion.py), then the summary (summary.py); every failure one line.
Exit status (process.py): 0 done, 1 the run failed, 2 a usage error, 130
interrupted (SIGINT), 143 terminated (SIGTERM).

    tfrecords convert --input ./images --output ./out [Beam flags]
"""
from __future__ import annotations

import sys
from typing import Optional

from tfrecord_pipelines import speed

from tfrecord_pipelines.console import process
from tfrecord_pipelines._version import __version__
from tfrecord_pipelines.run.plan import Plan


def run(argv: Optional[list] = None, prog: str = "python -m tfrecord_pipelines.convert",
        check_only: bool = False, own_process: bool = False) -> int:
    """The command: its plan decided from the arguments before Beam is
    imported, then the run with the speed layer applied (pipelines/speed/) as
    the plan allows. `own_process`: called by the command's entry point (a
    fresh process that ends with the command), where Beam may be imported lean."""
    argv = _bare_dry_run(list(sys.argv[1:] if argv is None else argv))
    plan = Plan.from_argv(argv, command_line=True, own_process=own_process)
    with process.interrupts(plan.debug):
        try:
            with speed.applied(plan.speed):
                return _run(argv, prog, check_only, plan)
        except KeyboardInterrupt as e:  # before the run started, or while its summary was printed
            if plan.debug:
                raise
            process.error("interrupted: nothing was published")
            return process.interrupted_status(e)


def _run(argv: list, prog: str, check_only: bool, plan: Plan) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_pipelines.run import conversion, lifecycle, offline, runtime

    from tfrecord_pipelines.console import summary
    from tfrecord_pipelines.options.flags import check_flags, help_parser, values
    from tfrecord_pipelines.options.parse import UsageError
    from tfrecord_pipelines.transforms.storage import run_lock
    debug = plan.debug
    runtime.quiet_beam_logs(debug)
    if "-h" in argv or "--help" in argv:
        help_parser(prog).print_help()
        return process.OK
    if argv in (["--version"], ["-V"]):  # alone; `--version NAME` names a --versioned output's folder
        print(f"tfrecords {__version__}")
        return process.OK
    try:
        check_flags(argv, plan.runner)
        job = conversion.configure(values(argv), PipelineOptions(argv), plan, check_only)
    except UsageError as e:  # FlagError and RunnerError too
        process.error(str(e))
        return process.USAGE
    except Exception as e:  # e.g. an input folder we may not read, a bucket without credentials
        if debug:
            raise
        process.error(lifecycle.describe_failure(e, ''))
        return process.FAILED
    options, cfg = job.options, job.cfg
    if plan.local and _dry_run(options) and not check_only:
        return _preview(job)
    if cfg.detection is not None:
        print(f"annotations: {cfg.detection.found}", file=sys.stderr)
    try:
        outcome, seconds, result = conversion.execute(job)
    except (UsageError, run_lock.LockHeld) as e:
        process.error(str(e))
        return process.USAGE
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (process.interrupts)
        if debug:
            raise
        process.error(lifecycle.describe_interrupt(cfg))
        return process.interrupted_status(e)
    except Exception as e:
        if debug:
            raise
        if process.interrupted_by() is not None:  # the in-process runner's wrapping of the KeyboardInterrupt
            process.error(lifecycle.describe_interrupt(cfg))
            return process.interrupted_by()
        process.error(lifecycle.describe_failure(e, cfg.output.output, cfg.output.run_id))
        return process.FAILED
    try:
        if check_only and outcome != "dry_run":  # `tfrecords check`
            return summary.print_check_outcome(options, cfg, outcome, seconds)
        code = summary.print_outcome(options, cfg, job.runner, outcome, seconds)
        if outcome == "dry_run" and offline.active():
            print("\n".join(offline.summary(options, result)))
        return code
    except Exception as e:  # e.g. a manifest damaged after publishing
        if debug:
            raise
        process.error(f"the run finished, but its output cannot be summarised: {e}")
        return process.FAILED


def _bare_dry_run(argv: list) -> list:
    """`--dry_run` alone means `--dry_run True` (Beam's flag takes a value)."""
    return [f"{a}=True" if a == "--dry_run" and (i + 1 == len(argv) or argv[i + 1].startswith("-")) else a
            for i, a in enumerate(argv)]


def _dry_run(options) -> bool:
    from apache_beam.options.pipeline_options import TestOptions
    value = options.view_as(TestOptions).dry_run
    return bool(value) and str(value).strip().lower() not in ("false", "0", "no", "off")


def _preview(job) -> int:
    """--dry_run on a local run: what the run would do, before any image is
    read; nothing is locked or written."""
    from tfrecord_pipelines.run import lifecycle
    from tfrecord_pipelines.console import summary
    try:
        got = lifecycle.preview(job)
        refused = summary.print_preview(got, job.cfg)
    except KeyboardInterrupt as e:
        if job.plan.debug:
            raise
        process.error("interrupted: nothing was read, locked or written")
        return process.interrupted_status(e)
    except Exception as e:
        if job.plan.debug:
            raise
        process.error(lifecycle.describe_failure(e, ''))
        return process.FAILED
    return process.FAILED if refused else process.OK
