"""Where a conversion runs, as the run's plan decided (pipelines/run/plan.py):
the runner, the local workers, Beam's logs.

With no --runner, or --runner DirectRunner, a local run uses Beam's FnApiRunner
directly. The DirectRunner would first try to download and start the Prism
runner (offline it fails, then falls back), so a local run would behave
differently online and offline. Beam's multi_threading mode is refused: it
silently lost records in our measurements.

The local workers are forked from a warm zygote when the plan's speed layer
says so (pipelines/speed/); otherwise Beam starts its own worker processes,
slower to start and otherwise the same (tests/e2e/test_runtime.py checks both
use two).
"""
from __future__ import annotations

import logging
import os
import sys
import time

from tfrecord_pipelines.run.plan import LOCAL_RUNNERS
from tfrecord_pipelines.transforms.core.errors import UsageError


class RunnerError(UsageError):
    """A runner setting we refuse (--direct_running_mode multi_threading)."""


def is_local(options) -> bool:
    from apache_beam.options.pipeline_options import StandardOptions
    runner = options.view_as(StandardOptions).runner or ""
    return isinstance(runner, str) and runner.lower() in LOCAL_RUNNERS


def runner_name(options) -> str:
    from apache_beam.options.pipeline_options import StandardOptions
    runner = options.view_as(StandardOptions).runner or ""
    return runner if isinstance(runner, str) else type(runner).__name__


def is_dataflow(options) -> bool:
    return runner_name(options).lower() in ("dataflowrunner", "dataflow")


def remote_dry_run(options) -> bool:
    """Beam's --dry_run with Dataflow: the job is built on this machine and not
    submitted, so nothing may need the network (pipelines/run/offline.py). Beam's
    other remote runners ignore --dry_run (convert refuses it with them)."""
    from apache_beam.options.pipeline_options import TestOptions
    return bool(options.view_as(TestOptions).dry_run) and is_dataflow(options)


def choose_runner(options, plan):
    """A runner instance for local runs (options set as the plan says), else the runner name."""
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
    std = options.view_as(StandardOptions)
    if not plan.local:
        return std.runner
    if plan.running_mode == "multi_threading":
        raise RunnerError("--direct_running_mode multi_threading is refused: it silently lost records in our "
                          "runs; use multi_processing (the default) or in_memory")
    direct = options.view_as(DirectOptions)
    direct.direct_num_workers = plan.workers
    direct.direct_running_mode = plan.running_mode
    std.runner = None
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from tfrecord_pipelines import speed
    forked = speed.worker_environment(plan.speed) if plan.running_mode == "multi_processing" else None
    if forked is not None:
        direct.direct_running_mode = "in_memory"  # the given environment starts direct_num_workers forks
        return FnApiRunner(default_environment=forked)
    return FnApiRunner()


def quiet_beam_logs(debug: bool = False) -> None:
    """Every failure reaches us as the exception of p.run(), which the
    launcher turns into one line; Beam's own error logs of it are tracebacks.
    --debug shows them."""
    quiet = logging.ERROR if debug else logging.CRITICAL
    if not debug:
        logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    # Local workers relay their start-up chatter at WARNING; keep errors only.
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(quiet)
    logging.getLogger("apache_beam.options.pipeline_options").setLevel(quiet)
    # We run subprocess workers in Beam's in_memory mode; its warning about that is moot.
    logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner").setLevel(quiet)


WORKER_START_SECONDS = 30.0  # Beam's import takes 1-2 s; a busy machine, several times that


def check_external_workers(options, wait: float = WORKER_START_SECONDS) -> None:
    """With --environment_type EXTERNAL and a worker pool on this machine
    (Beam's worker_pool_main, as for a PortableRunner run against a local job
    service), asks the pool for one SDK worker and waits for it to connect:
    the pool starts workers with the `python` first on its own PATH, and
    one without Beam dies at once, after which the job waited silently for
    its 300 s timeout. A pool on other machines (Flink's or Spark's task
    managers) is theirs to check. Raises RunnerError."""
    from apache_beam.options.pipeline_options import PortableOptions
    portable = options.view_as(PortableOptions)
    config = (portable.environment_config or "").strip()
    if (portable.environment_type or "").upper() != "EXTERNAL" or not config:
        return
    host = config.rsplit(":", 1)[0].strip("[]")
    if host not in ("localhost", "127.0.0.1", "::1"):
        return
    import threading
    import uuid
    from concurrent import futures

    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2

    connected = threading.Event()

    class Control(beam_fn_api_pb2_grpc.BeamFnControlServicer):
        def Control(self, request_iterator, context):  # noqa: N802 (gRPC's name)
            connected.set()
            return iter(())  # no work: the worker's stream ends, and the pool is told to stop it

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    beam_fn_api_pb2_grpc.add_BeamFnControlServicer_to_server(Control(), server)
    port = server.add_insecure_port("localhost:0")
    server.start()
    worker_id = f"tfrecords-probe-{uuid.uuid4().hex[:8]}"
    channel = grpc.insecure_channel(config)
    pool = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
    started = time.monotonic()
    try:
        try:
            endpoint = endpoints_pb2.ApiServiceDescriptor(url=f"localhost:{port}")
            reply = pool.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
                worker_id=worker_id, control_endpoint=endpoint, logging_endpoint=endpoint,
                artifact_endpoint=endpoint, provision_endpoint=endpoint), timeout=wait)
        except grpc.RpcError as e:
            raise RunnerError(f"--environment_config {config}: no worker pool answers there ({e.code().name}); "
                              "start one with: python -m apache_beam.runners.worker.worker_pool_main "
                              f"--service_port={config.rsplit(':', 1)[-1]}") from None
        if reply.error:
            raise RunnerError(f"the worker pool at {config} could not start an SDK worker: "
                              f"{reply.error.strip().splitlines()[-1]}")
        if not connected.wait(max(wait - (time.monotonic() - started), 1.0)):
            raise RunnerError(
                f"the worker pool at {config} started no SDK worker that connected within {wait:g} s. The pool "
                "starts workers with the `python` first on its own PATH, and that Python needs Apache Beam and "
                "this package (a worker without them dies at once, and the job would wait silently for its "
                "300 s timeout): start the pool from this environment, e.g. "
                f"PATH={os.path.dirname(sys.executable)}:$PATH python -m "
                f"apache_beam.runners.worker.worker_pool_main --service_port={config.rsplit(':', 1)[-1]}")
    finally:
        try:
            pool.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id=worker_id), timeout=10)
        except grpc.RpcError:
            pass
        channel.close()
        server.stop(0)
