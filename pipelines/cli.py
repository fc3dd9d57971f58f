"""The `tfrecords` command: convert, check, verify, inspect, report, spec, demo."""
from __future__ import annotations

import os
import sys

USAGE = """usage: tfrecords COMMAND [options]
       tfrecords --version

commands:
  convert   image folder tree or label table -> TFRecord shards (tfrecords convert --help)
  check     pre-flight: list and validate like convert (same flags), write only report.html and check.json
  verify    re-read an output and check it against its manifest
  inspect   print the first records of an output, optionally save their images
  report    rebuild an output's report.html (charts, thumbnails, rejects, duplicates)
  spec      print Python code that reads an output (tf.data, TFDS, PyTorch, DALI)
  demo      generate a sample dataset from the shipped photos, convert and verify it
  cleanup   remove what killed runs left (spill files in the temp folder, staging folders of outputs)
"""


def exit_now(code: int) -> None:
    """Ends the command without Python's shutdown, which takes ~0.3 s with Beam
    and gRPC loaded and does nothing we need: every file is closed by now."""
    import logging
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def read_output(cmd: str, fn, argv: list) -> int:
    """Runs a command that reads an output (which anyone may have written):
    whatever its files hold, the command ends with one line, never a
    traceback. The commands report what they expect themselves; this is for
    what nobody foresaw."""
    try:
        return fn(argv)
    except Exception as e:  # noqa: BLE001 (any failure: one line, exit 1)
        text = f"{type(e).__name__}: {e}"
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:500])
        print(f"error: tfrecords {cmd} failed: {text}", file=sys.stderr)
        return 1


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        sys.exit(0 if argv else 2)
    if argv[0] in ("--version", "-V"):
        # Only here: `convert --version NAME` names a --versioned output's folder.
        from tfrecord_pipelines import __version__
        print(f"tfrecords {__version__}")
        sys.exit(0)
    cmd, rest = argv[0], argv[1:]
    if cmd == "convert":
        from tfrecord_pipelines import runtime
        runtime.prestart(rest)  # the workers' zygote imports while we import Beam
        from tfrecord_pipelines.convert import run
        exit_now(run(rest, prog="tfrecords convert"))
    if cmd == "check":
        from tfrecord_pipelines import runtime
        runtime.prestart(rest)
        from tfrecord_pipelines.check import run as check
        exit_now(check(rest))
    if cmd == "report":
        from tfrecord_pipelines.report_cmd import main as report
        sys.exit(read_output(cmd, report, rest))
    if cmd == "verify":
        from tfrecord_pipelines.verify import main as verify
        sys.exit(read_output(cmd, verify, rest))
    if cmd == "inspect":
        from tfrecord_pipelines.inspect_output import main as inspect
        sys.exit(read_output(cmd, inspect, rest))
    if cmd == "spec":
        from tfrecord_pipelines.spec import main as spec
        sys.exit(read_output(cmd, spec, rest))
    if cmd == "cleanup":
        from tfrecord_pipelines.cleanup import main as cleanup
        sys.exit(cleanup(rest))
    if cmd == "demo":
        from tfrecord_pipelines.demo import main as demo
        sys.exit(demo(rest))
    print(f"tfrecords: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
