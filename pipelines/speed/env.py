"""The speed layer's environment variables."""
SWITCH_ENV = "TFRECORDS_SPEEDUPS"  # 0: the layer is off (read by the run's plan only: pipelines/run/plan.py)
ZYGOTE_ENV = "TFRECORDS_WORKER_ZYGOTE"  # the zygote's socket, for the worker commands of a run
LEAN_WORKERS_ENV = "TFRECORDS_LEAN_WORKERS"  # 1: a run's worker processes import Beam lean
