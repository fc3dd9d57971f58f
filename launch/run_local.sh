#!/usr/bin/env bash
# Convert a dataset on this machine with the local runner on all cores, then verify the output.
#
#   launch/run_local.sh --input ./images --output ./out [more tfrecords convert flags]
#
# Arguments: the flags of `tfrecords convert` (listed below), passed as they are; --output is
#   required. After a successful conversion, `tfrecords verify OUTPUT --quiet` re-reads every
#   shard (with --versioned, of the version OUTPUT/LATEST names).
# Environment: none of its own. Uses the project's virtualenv, .venv (made by `make install` or
#   `make demo`). TMPDIR: where a run whose --output is a bucket keeps its spill files (about
#   1 KB per image; a local output keeps them beside it); TFRECORDS_SPEEDUPS=0: the command's speed layer
#   off (Beam imported whole, Beam's own worker processes instead of forked ones).
# Exit status: convert's (0 done, 1 the run failed, 2 a usage error), else verify's.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="$here/.venv/bin/python"
for a in "$@"; do
  case "$a" in
    -h|--help)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
      if [ -x "$py" ]; then echo; "$py" -m tfrecord_pipelines.convert --help | sed 's/python -m tfrecord_pipelines.convert/launch\/run_local.sh/'; fi
      exit 0 ;;
  esac
done
[ -x "$py" ] || { echo "no virtualenv at $here/.venv: run 'make install' first" >&2; exit 2; }
"$py" -m tfrecord_pipelines.convert "$@"
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "--output" ] && out="$a"
  case "$a" in --output=*) out="${a#--output=}";; esac
  prev="$a"
done
versioned=""
for a in "$@"; do [ "$a" = --versioned ] && versioned=1; done
if [ -n "$out" ] && [ -n "$versioned" ] && [ -f "$out/LATEST" ]; then
  out="$out/$(head -n 1 "$out/LATEST")"
fi
if [ -n "$out" ]; then
  "$py" -m tfrecord_pipelines.cli verify "$out" --quiet
fi
