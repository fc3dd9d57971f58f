#!/usr/bin/env bash
# Launch a conversion from the Flex Template that build.sh built.
#
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket \
#     launch/flex_template/run.sh input=gs://my-bucket/images output=gs://my-bucket/tfrecords/images \
#       num_shards=16 split=train=0.8,validation=0.2 [-- more gcloud flags]
#
# Arguments: parameters NAME=VALUE, NAME being a conversion flag without its -- (the list with help:
#   launch/flex_template/metadata.json, or tfrecords convert --help; output= is required); on/off
#   flags take true or false (overwrite=true). Values may hold commas and '='. Arguments after --
#   go to gcloud, e.g. -- --max-workers 50 --worker-machine-type n2-highcpu-8 --service-account-email SA.
# Required environment: PROJECT, REGION, and BUCKET or TEMPLATE.
# Optional: TEMPLATE (default gs://$BUCKET/templates/tfrecords.json), JOB_NAME (default
#   tfrecords-<UTC time>).
# Needs gcloud. Returns once the job is submitted; the output is complete when manifest.json
# appears in it (with versioned=true, when <output>/LATEST names the new version).
# Exit status: gcloud's; 2 a usage error. -h, --help (before any --): this text.
set -euo pipefail

for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    --) break ;;
  esac
done

die() { echo "error: $*" >&2; exit 2; }

[ -n "${PROJECT:-}" ] || die "set PROJECT to your Google Cloud project id"
[ -n "${REGION:-}" ] || die "set REGION to the Dataflow region, e.g. europe-west1"
if [ -z "${TEMPLATE:-}" ]; then
  [ -n "${BUCKET:-}" ] || die "set BUCKET (the template is gs://\$BUCKET/templates/tfrecords.json) or TEMPLATE"
  BUCKET="${BUCKET#gs://}"; BUCKET="${BUCKET%/}"
  TEMPLATE="gs://$BUCKET/templates/tfrecords.json"
fi
command -v gcloud >/dev/null || die "gcloud is not installed (https://cloud.google.com/sdk/docs/install)"
JOB_NAME="${JOB_NAME:-tfrecords-$(date -u +%Y%m%d-%H%M%S)}"

params=()
have_output=""
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; break ;;
    --*) die "parameters are NAME=VALUE (e.g. output=gs://b/out); put gcloud flags after --" ;;
    *=*)
      name="${1%%=*}"
      [[ "$name" =~ ^[a-z][a-z0-9_]*$ ]] || die "bad parameter name in $1"
      [ "$name" = output ] && have_output=1
      # ^~^ makes ~ gcloud's list separator, so a value may hold commas (split=train=0.8,validation=0.2).
      params+=(--parameters "^~^$1")
      ;;
    *) die "parameters are NAME=VALUE, not $1" ;;
  esac
  shift
done
[ -n "$have_output" ] || die "output=gs://... is required"

cmd=(gcloud dataflow flex-template run "$JOB_NAME" --project "$PROJECT" --region "$REGION"
     --template-file-gcs-location "$TEMPLATE" "${params[@]}" "$@")
printf '+'; printf ' %q' "${cmd[@]}"; printf '\n'
"${cmd[@]}"
