"""`python -m tfrecord_pipelines.convert [flags]`: `tfrecords convert`
(commands/convert.py) as a module to run, the way the launch scripts, the
Dockerfile and Dataflow's flex template call it. No code imports this
module: `tfrecord_pipelines.convert` is the Python API's function (__init__.py)."""
if __name__ == "__main__":
    from tfrecord_pipelines.commands.convert import run
    from tfrecord_pipelines.console.process import exit_now
    exit_now(run(own_process=True))
