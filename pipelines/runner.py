"""Which runner a conversion uses.

With no --runner, or --runner DirectRunner, a local run uses Beam's FnApiRunner
directly. Beam 2.77's DirectRunner would first try to download and start the
Prism runner (offline it fails, then falls back), so a local run would behave
differently online and offline. Local runs are multi-process on all cores
unless told otherwise. Beam's multi_threading mode is refused: it silently
lost records in our measurements.
"""
from __future__ import annotations

import os

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipelines import local_worker
from pipelines.parse import UsageError

LOCAL_NAMES = {"", "directrunner", "direct", "fnapirunner", "switchingdirectrunner"}


def is_local(options: PipelineOptions) -> bool:
    return (options.view_as(StandardOptions).runner or "").lower() in LOCAL_NAMES


def _given(argv: list, flag: str) -> bool:
    return any(a == f"--{flag}" or a.startswith(f"--{flag}=") for a in argv)


def choose_runner(options: PipelineOptions, argv: list):
    """A runner instance for local runs (options adjusted), else the runner name."""
    std = options.view_as(StandardOptions)
    if not is_local(options):
        return std.runner
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_threading":
        raise UsageError("--direct_running_mode multi_threading is refused: it silently lost records in our "
                         "runs; use multi_processing (the default) or in_memory")
    workers = direct.direct_num_workers if _given(argv, "direct_num_workers") else 0
    workers = workers or os.cpu_count() or 1  # 0 means all cores, as in Beam
    if not _given(argv, "direct_running_mode"):
        direct.direct_running_mode = "multi_processing" if workers > 1 else "in_memory"
    if direct.direct_running_mode == "multi_processing" and workers == 1:
        direct.direct_running_mode = "in_memory"  # one worker process only adds its start-up time
    if direct.direct_running_mode == "in_memory":
        workers = 1  # in_memory runs one bundle at a time; more "workers" would be threads
    direct.direct_num_workers = workers
    std.runner = None
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    if direct.direct_running_mode == "multi_processing" and local_worker.available():
        # The same multi-process run, with workers forked from a warm zygote
        # (pipelines/local_worker.py). Beam keeps a given environment only in
        # in_memory mode; num_workers still sets how many workers it starts.
        from apache_beam.transforms import environments
        local_worker.start_zygote()
        direct.direct_running_mode = "in_memory"
        return FnApiRunner(default_environment=environments.SubprocessSDKEnvironment.from_command_string(
            local_worker.worker_command()))
    return FnApiRunner()
