"""A conversion's two steps, shared by `tfrecords convert`/`check`
(commands/convert.py) and the Python API (api.py): configure (what the
inputs hold read once, options/resolve.py, then the options turned into the
run's config, options/parse.py; the runner chosen as the plan says; UsageError
before anything is submitted or locked), then execute (the run under its
lifecycle, lifecycle.py: the output locked, the pipeline of pipeline.py built
and run, the run ended)."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time

from apache_beam.options.pipeline_options import PipelineOptions, TestOptions

from tfrecord_pipelines.run import lifecycle, offline, preflight, runtime
from tfrecord_pipelines.options.config import ConvertConfig
from tfrecord_pipelines.options.parse import UsageError, build_config
from tfrecord_pipelines.options.resolve import resolve
from tfrecord_pipelines.run.plan import Plan
from tfrecord_pipelines.transforms.storage import gcs, layout, reads

log = logging.getLogger("tfrecords.run")


@dataclasses.dataclass
class Job:
    """A configured conversion: how it runs (plan), our options (values),
    Beam's (options), the run's config and the runner."""
    plan: Plan
    values: object
    options: PipelineOptions
    cfg: ConvertConfig
    runner: object


def configure(values, options: PipelineOptions, plan: Plan, check_only: bool = False) -> Job:
    """The Job; raises UsageError before anything is submitted or locked.
    The command and the Python API (api.py) both start here."""
    run_id = layout.new_run_id()
    local = plan.local
    if options.view_as(TestOptions).dry_run and not local and not runtime.is_dataflow(options):
        raise UsageError(f"--dry_run with {runtime.runner_name(options)}: only DataflowRunner builds a job without "
                         "running it (Beam's other runners ignore --dry_run and would run the job)")
    offline.begin(runtime.remote_dry_run(options))  # a Dataflow dry run needs no network (pipelines/run/offline.py)
    if offline.active():
        offline.prepare(options)
    if values.spill == "on" and not local:
        raise UsageError("--spill on is for local runs (the spill files must be on the workers' own disk); a "
                         "remote runner uses its own shuffle: leave --spill at auto")
    if plan.checks_launch and not offline.active():  # in seconds, before the first listing of a bucket
        preflight.check(values, options, plan.runner)
    with gcs.deadline(_io_timeout(values)):  # the options' checks list and read buckets within --io_timeout
        cfg = build_config(values, resolve(values), run_id, progress=local and values.progress != "off")
    # A job handed to a remote runner goes on if the launcher stops watching: it ends the run itself.
    cfg = dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, job_ends_run=not local))
    if check_only:  # validate and report, whether or not the inputs changed since LATEST (--versioned)
        cfg = dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, check_only=True, republish=True))
    runner = runtime.choose_runner(options, plan)
    if not local and not offline.active():
        runtime.check_external_workers(options)  # a local worker pool that would start no worker
    return Job(plan, values, options, cfg, runner)


def execute(job: Job) -> tuple:
    """Runs the configured conversion under its lifecycle (the output locked,
    the pipeline built and run, the run ended): (outcome, seconds, Beam's
    PipelineResult), the outcome "done", "submitted" or "dry_run". Raises
    what ended the run."""
    started = time.time()
    # The output's lock and listing in this process wait at most --io_timeout on a bucket.
    with gcs.deadline(job.cfg.images.reads.timeout), local_reads(job.plan), \
            lifecycle.locked(job.cfg, job.values.lock_ttl_hours, job.values.break_lock,
                             runtime.runner_name(job.options)) as run_:
        outcome = run_.execute(job)
    if run_.worker_pids:
        log.info("local run: %d worker processes did work", len(run_.worker_pids))
    return outcome, time.time() - started, run_.result


def _io_timeout(values) -> float:
    """--io_timeout, or the default until build_config has refused a bad value."""
    t = values.io_timeout
    return float(t) if isinstance(t, (int, float)) and 0 < t < float("inf") else gcs.DEFAULT_TIMEOUT


@contextlib.contextmanager
def local_reads(plan: Plan):
    """The reads in flight of a run in this process, as the plan says; the
    read threads let go when it ends."""
    reads.set_local_in_flight(plan.reads_in_flight if plan.local else 1)
    try:
        yield
    finally:
        reads.set_local_in_flight(1)
        reads.close_pools()
