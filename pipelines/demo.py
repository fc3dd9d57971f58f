"""`python -m tfrecord_pipelines.demo [--dir demo]`: `tfrecords demo`
(commands/demo.py) as a module to run, as `make demo` calls it."""
if __name__ == "__main__":
    import sys

    from tfrecord_pipelines.commands.demo import main
    sys.exit(main())
