"""The commands of `tfrecords` (cli.py routes to them), one module each:
convert, check, verify, inspect, report, spec, demo, cleanup. Each parses its
flags, calls the application's modules (the ones the Python API, api.py,
calls too), prints what a person reads, and returns an exit status
(process.py); none ends the process and none is imported by the application
below it (tests/unit/test_layering.py)."""
