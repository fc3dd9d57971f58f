#!/usr/bin/env bash
# Run a conversion on Google Cloud Dataflow from this checkout.
#
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket \
#     launch/dataflow.sh --input gs://my-bucket/images --output gs://my-bucket/tfrecords/images [flags]
#
# Required (environment, or the same Beam flags on the command line):
#   PROJECT (--project), REGION (--region), and BUCKET for temp and staging files under
#   gs://$BUCKET/dataflow/ (tmp/ and staging/), unless --temp_location gs://... is given
#   (--staging_location defaults to the temp location).
# Worker settings, from the environment (a flag on the command line wins, Beam keeps the last):
#   MACHINE_TYPE (--machine_type; default n2-standard-4), MAX_WORKERS (--max_num_workers; default 10),
#   DISK_SIZE_GB (--disk_size_gb; default 50), EXPERIMENTS (--experiments, a comma list; default none),
#   SDK_CONTAINER_IMAGE (--sdk_container_image; default none: e.g. the Flex Template image from
#   launch/flex_template/build.sh, so that workers start with every dependency installed; without
#   it they pip-install the package and its dependencies, TensorFlow included, at start-up, which
#   needs internet access from the workers), JOB_NAME (--job_name; default tfrecords-<UTC time>).
# DRY_RUN=1 (default 0): build the job without submitting it (Beam's --dry_run True), offline:
#   the options, the package (the sdist of setup.py) and the job graph are checked on this machine
#   in seconds; no bucket is listed or written and no lock is taken, and the end of the output says
#   what that leaves unchecked (the buckets, the project's API and quota, the worker image).
# Arguments: the flags of `tfrecords convert` (--input, --label_table, --image_root, --label_map
#   and --output must be gs://...) and Beam's Dataflow flags, passed as they are; --detach returns
#   once the job is submitted instead of waiting for it.
# Adds: --runner DataflowRunner, --setup_file ./setup.py (the workers run this checkout's code).
# Exit status: 0 the job succeeded (or, with --detach or DRY_RUN=1, was submitted or built),
#   1 it failed, 2 a usage error.
# -h, --help: this text.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"

die() { echo "error: $*" >&2; exit 2; }

# The value of --NAME VALUE or --NAME=VALUE among the arguments (the last one), or "".
arg_value() {
  local name="--$1" prev="" value="" a
  for a in "${args[@]}"; do
    if [ "$prev" = "$name" ]; then value="$a"; fi
    case "$a" in "$name="*) value="${a#"$name="}" ;; esac
    prev="$a"
  done
  printf '%s' "$value"
}

args=("$@")
for a in "${args[@]}"; do
  case "$a" in -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;; esac
done
[ ${#args[@]} -gt 0 ] || die "usage: PROJECT=... REGION=... BUCKET=... $0 --input gs://... --output gs://... [flags] (--help)"

if [ -x "$root/.venv/bin/python" ]; then
  py="$root/.venv/bin/python"
else
  py="$(command -v python3 || true)"
  [ -n "$py" ] || die "no Python: run 'make install' in $root first"
  echo "warning: no $root/.venv (make install); using $py, which must have the project's dependencies" >&2
fi

project="$(arg_value project)"; project="${project:-${PROJECT:-}}"
region="$(arg_value region)"; region="${region:-${REGION:-}}"
temp="$(arg_value temp_location)"
staging="$(arg_value staging_location)"
[ -n "$project" ] || die "set PROJECT (or pass --project): the Google Cloud project to run in"
[ -n "$region" ] || die "set REGION (or pass --region): the Dataflow region, e.g. europe-west1"
if [ -z "$temp" ]; then
  [ -n "${BUCKET:-}" ] || die "set BUCKET (or pass --temp_location gs://...): a bucket for Dataflow's temp and staging files"
  bucket="${BUCKET#gs://}"; bucket="${bucket%/}"
  temp="gs://$bucket/dataflow/tmp"
  staging="${staging:-gs://$bucket/dataflow/staging}"
fi
staging="${staging:-$temp}"
case "$temp" in gs://*) ;; *) die "--temp_location must be gs://..., not $temp" ;; esac
case "$staging" in gs://*) ;; *) die "--staging_location must be gs://..., not $staging" ;; esac
out="$(arg_value output)"
[ -n "$out" ] || die "--output gs://... is required"
case "$out" in gs://*) ;; *) die "--output must be gs://... (Dataflow workers cannot write $out)" ;; esac
for flag in input label_table image_root label_map; do
  v="$(arg_value "$flag")"
  case "$v" in ""|gs://*) ;; *) die "--$flag must be gs://... on Dataflow (the workers cannot read $v)" ;; esac
done

cmd=("$py" -m tfrecord_pipelines.convert
     --runner DataflowRunner
     --project "$project" --region "$region"
     --temp_location "$temp" --staging_location "$staging"
     --setup_file "$root/setup.py"
     --job_name "${JOB_NAME:-tfrecords-$(date -u +%Y%m%d-%H%M%S)}"
     --machine_type "${MACHINE_TYPE:-n2-standard-4}"
     --max_num_workers "${MAX_WORKERS:-10}"
     --disk_size_gb "${DISK_SIZE_GB:-50}")
if [ -n "${EXPERIMENTS:-}" ]; then cmd+=(--experiments "$EXPERIMENTS"); fi
if [ -n "${SDK_CONTAINER_IMAGE:-}" ]; then cmd+=(--sdk_container_image "$SDK_CONTAINER_IMAGE"); fi
if [ -n "${DRY_RUN:-}" ] && [ "${DRY_RUN}" != 0 ]; then cmd+=(--dry_run True); fi
cmd+=("${args[@]}")

printf '+ (cd %q &&' "$root"; printf ' %q' "${cmd[@]}"; printf ')\n'
cd "$root"
exec "${cmd[@]}"
