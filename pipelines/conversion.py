"""A conversion's two steps, shared by `tfrecords convert`/`check`
(commands/convert.py) and the Python API (api.py): configure (the flags
parsed into the run's config, the runner chosen; UsageError before anything
is submitted or locked), then execute (the run under its lifecycle,
lifecycle.py: the output locked, the pipeline of pipeline.py built and run,
the run ended)."""
from __future__ import annotations

import dataclasses
import logging
import time

from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

from tfrecord_pipelines import lifecycle, offline, runtime
from tfrecord_pipelines.config import ConvertConfig
from tfrecord_pipelines.options import ConvertOptions
from tfrecord_pipelines.parse import UsageError, build_config
from tfrecord_pipelines.transforms.storage import layout

log = logging.getLogger("tfrecords.run")


def configure(argv: list, check_only: bool = False) -> tuple:
    """(options, config, runner); raises UsageError before anything is
    submitted or locked. The command and the Python API
    (api.py) both start here."""
    options = PipelineOptions(argv)
    opts = options.view_as(ConvertOptions)
    run_id = layout.new_run_id()
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
    with lifecycle.locked(cfg, opts.lock_ttl_hours, opts.break_lock, runtime.runner_name(options)) as run_:
        outcome = run_.execute(options, runner, debug)
    if run_.worker_pids:
        log.info("local run: %d worker processes did work", len(run_.worker_pids))
    return outcome, time.time() - started, run_.result
