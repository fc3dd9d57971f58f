"""The `tfrecords` command: the dispatcher that routes to a command's module
(tfrecord_pipelines/commands/) and ends the process with its status
(process.py)."""
from __future__ import annotations

import difflib
import sys

from tfrecord_pipelines.console.process import exit_now, one_line_failure

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
COMMANDS = ("convert", "check", "verify", "inspect", "report", "spec", "demo", "cleanup")


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        sys.exit(0 if argv else 2)
    if argv[0] in ("--version", "-V"):
        # Only here: `convert --version NAME` names a --versioned output's folder.
        from tfrecord_pipelines._version import __version__
        print(f"tfrecords {__version__}")
        sys.exit(0)
    cmd, rest = argv[0], argv[1:]
    if cmd in ("convert", "check"):
        if cmd == "convert":
            from tfrecord_pipelines.commands import convert
            exit_now(convert.run(rest, prog="tfrecords convert", own_process=True))
        from tfrecord_pipelines.commands import check
        exit_now(check.run(rest, own_process=True))
    # The commands that read an output anyone may have written end with one line, whatever it holds.
    if cmd == "report":
        from tfrecord_pipelines.commands import report
        sys.exit(one_line_failure(cmd, report.main, rest))
    if cmd == "verify":
        from tfrecord_pipelines.commands import verify
        sys.exit(one_line_failure(cmd, verify.main, rest))
    if cmd == "inspect":
        from tfrecord_pipelines.commands import inspect
        sys.exit(one_line_failure(cmd, inspect.main, rest))
    if cmd == "spec":
        from tfrecord_pipelines.commands import spec
        sys.exit(one_line_failure(cmd, spec.main, rest))
    if cmd == "cleanup":
        from tfrecord_pipelines.commands import cleanup
        sys.exit(cleanup.main(rest))
    if cmd == "demo":
        from tfrecord_pipelines.commands import demo
        sys.exit(demo.main(rest))
    near = difflib.get_close_matches(cmd, COMMANDS, n=1, cutoff=0.6)
    hint = f": did you mean {near[0]}? (tfrecords {near[0]} --help)" if near else ""
    print(f"tfrecords: unknown command {cmd!r}{hint}\n\n{USAGE}", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
