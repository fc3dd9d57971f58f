#!/usr/bin/env bash
# Convert a dataset on this machine with the local runner on all cores.
#   launch/run_local.sh --input ./images --output ./out [more tfrecords convert flags]
# Uses the project's virtualenv (made by `make install` or `make demo`).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="$here/.venv/bin/python"
[ -x "$py" ] || { echo "no virtualenv at $here/.venv: run 'make install' first" >&2; exit 2; }
"$py" -m tfrecord_pipelines.convert "$@"
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "--output" ] && out="$a"
  case "$a" in --output=*) out="${a#--output=}";; esac
  prev="$a"
done
[ -n "$out" ] && "$py" -m tfrecord_pipelines.cli verify "$out" --quiet
