#!/usr/bin/env bash
# Schedule a conversion: a Cloud Scheduler job that launches the Flex Template (built by
# launch/flex_template/build.sh) on a cron schedule, by POSTing launch/scheduler/body.json to
#   https://dataflow.googleapis.com/v1b3/projects/PROJECT/locations/REGION/flexTemplates:launch
# with an OAuth token of a service account.
#
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket \
#   INPUT=gs://my-bucket/images OUTPUT=gs://my-bucket/datasets/images \
#   SERVICE_ACCOUNT=tfrecords-scheduler@my-project.iam.gserviceaccount.com \
#     launch/scheduler/create_job.sh
#
# Each run writes a new version under OUTPUT (versioned=true): OUTPUT/v<UTC time>/, and moves
# OUTPUT/LATEST to it once its manifest is written; a run whose inputs and options have not
# changed since LATEST publishes nothing. Class ids carry over from LATEST's version, and new
# classes get new ids (extend_label_map=true). Runs do not overlap: a launch while the previous
# job still holds OUTPUT/.tfrecords.lock fails (and a second job of the same name cannot start).
# A job that dies without releasing the lock blocks the next runs until the lock expires
# (lock_ttl_hours=20 in body.json: keep it below the schedule's interval); LATEST never moves
# back to a version of an earlier-started run, even if an old job finishes late.
#
# Required environment: PROJECT, REGION (the Dataflow region), BUCKET (temp and staging files, and
#   the template at gs://$BUCKET/templates/tfrecords.json unless TEMPLATE is set), INPUT, OUTPUT
#   (gs://...), SERVICE_ACCOUNT: the identity Cloud Scheduler calls Dataflow as. It needs
#   roles/dataflow.developer on the project, and roles/iam.serviceAccountUser on the workers'
#   service account (the Compute Engine default one unless the body sets serviceAccountEmail).
# Optional: SCHEDULE (cron; default "0 3 * * *"), TIME_ZONE (default Etc/UTC), JOB (the scheduler
#   job's name; default tfrecords-<last part of OUTPUT>), JOB_NAME (the Dataflow job's; default
#   JOB), SCHEDULER_LOCATION (default REGION), TEMPLATE (default
#   gs://$BUCKET/templates/tfrecords.json), BODY (default launch/scheduler/body.json: edit a copy
#   to add parameters, e.g. "num_shards": "64", or worker settings).
# Arguments: none. Needs gcloud.
# An existing scheduler job of that name is updated. Run it once now:
#   gcloud scheduler jobs run JOB --project PROJECT --location SCHEDULER_LOCATION
# Exit status: 0 scheduled; 2 a usage error; else gcloud's. -h, --help: this text.
set -euo pipefail

for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    --) break ;;
  esac
done

here="$(cd "$(dirname "$0")" && pwd)"
die() { echo "error: $*" >&2; exit 2; }

for v in PROJECT REGION BUCKET INPUT OUTPUT SERVICE_ACCOUNT; do
  [ -n "${!v:-}" ] || die "set $v (see the top of $0)"
done
BUCKET="${BUCKET#gs://}"; BUCKET="${BUCKET%/}"
OUTPUT="${OUTPUT%/}"
case "$INPUT" in gs://?*) ;; *) die "INPUT must be gs://... (the workers read it), not $INPUT" ;; esac
case "$OUTPUT" in gs://?*) ;; *) die "OUTPUT must be gs://... (the dataset root), not $OUTPUT" ;; esac
command -v gcloud >/dev/null || die "gcloud is not installed (https://cloud.google.com/sdk/docs/install)"

SCHEDULE="${SCHEDULE:-0 3 * * *}"
TIME_ZONE="${TIME_ZONE:-Etc/UTC}"
TEMPLATE="${TEMPLATE:-gs://$BUCKET/templates/tfrecords.json}"
SCHEDULER_LOCATION="${SCHEDULER_LOCATION:-$REGION}"
default_job="tfrecords-$(basename "$OUTPUT" | tr 'A-Z_.' 'a-z--' | tr -cd 'a-z0-9-')"
JOB="${JOB:-${default_job:0:60}}"
JOB_NAME="${JOB_NAME:-$JOB}"
[[ "$JOB_NAME" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] || die "JOB_NAME $JOB_NAME: a Dataflow job name is lower-case letters, digits and -"
BODY="${BODY:-$here/body.json}"
[ -f "$BODY" ] || die "no request body template at $BODY"

# Fill in the body's ${NAME} placeholders (values must not hold quotes or backslashes).
rendered="$(mktemp)"
trap 'rm -f "$rendered"' EXIT
sed_args=()
for v in JOB_NAME TEMPLATE INPUT OUTPUT BUCKET PROJECT REGION; do
  value="${!v}"
  case "$value" in *'"'*|*\\*) die "$v must not contain quotes or backslashes" ;; esac
  value="${value//&/\\&}"; value="${value//|/\\|}"
  sed_args+=(-e "s|\${$v}|$value|g")
done
sed "${sed_args[@]}" "$BODY" > "$rendered"
# shellcheck disable=SC2016  # a literal ${ is what is looked for
if grep -q '\${' "$rendered"; then
  # shellcheck disable=SC2016
  die "$BODY has placeholders this script does not fill: $(grep -o '\${[A-Za-z_]*}' "$rendered" | sort -u | tr '\n' ' ')"
fi
if command -v python3 >/dev/null; then
  python3 -m json.tool "$rendered" >/dev/null || die "the request body is not valid JSON"
fi
echo "request body:"; cat "$rendered"

uri="https://dataflow.googleapis.com/v1b3/projects/$PROJECT/locations/$REGION/flexTemplates:launch"
common=(--project "$PROJECT" --location "$SCHEDULER_LOCATION"
        --schedule "$SCHEDULE" --time-zone "$TIME_ZONE"
        --uri "$uri" --http-method POST
        --message-body-from-file "$rendered"
        --oauth-service-account-email "$SERVICE_ACCOUNT"
        --oauth-token-scope "https://www.googleapis.com/auth/cloud-platform"
        --attempt-deadline 180s --max-retry-attempts 2 --min-backoff 300s
        --description "tfrecord-pipelines: $INPUT -> $OUTPUT (versioned), Flex Template $TEMPLATE")

if gcloud scheduler jobs describe "$JOB" --project "$PROJECT" --location "$SCHEDULER_LOCATION" >/dev/null 2>&1; then
  cmd=(gcloud scheduler jobs update http "$JOB" "${common[@]}" --update-headers "Content-Type=application/json")
else
  cmd=(gcloud scheduler jobs create http "$JOB" "${common[@]}" --headers "Content-Type=application/json")
fi
printf '+'; printf ' %q' "${cmd[@]}"; printf '\n'
"${cmd[@]}"

cat <<EOF

Scheduled $JOB ($SCHEDULE, $TIME_ZONE): launches $TEMPLATE in $REGION.
  run it now:   gcloud scheduler jobs run $JOB --project $PROJECT --location $SCHEDULER_LOCATION
  its launches: gcloud dataflow jobs list --project $PROJECT --region $REGION --filter name=$JOB_NAME
  the dataset:  gcloud storage cat $OUTPUT/LATEST
EOF
