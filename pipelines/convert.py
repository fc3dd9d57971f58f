"""`python -m tfrecord_pipelines.convert [flags]`: `tfrecords convert`
(commands/convert.py) as a module to run, the way the launch scripts, the
Dockerfile and Dataflow's flex template call it. No code imports this
module: `tfrecord_pipelines.convert` is the Python API's function (__init__.py)."""
if __name__ == "__main__":
    import sys

    from tfrecord_pipelines import runtime
    runtime.prestart(sys.argv[1:])  # the workers' zygote imports while the command imports Beam
    from tfrecord_pipelines.commands.convert import run
    from tfrecord_pipelines.process import exit_now
    exit_now(run())
