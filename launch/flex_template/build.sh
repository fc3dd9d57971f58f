#!/usr/bin/env bash
# Build the Flex Template: the image (pushed to Artifact Registry) and the template
# spec file on Cloud Storage that points at it, with metadata.json's parameters.
#
#   PROJECT=my-project REGION=europe-west1 BUCKET=my-bucket launch/flex_template/build.sh
#
# Required environment: PROJECT, REGION, BUCKET (no gs://; the template, staging and temp files).
# Optional: REPOSITORY (the Artifact Registry Docker repository, created if missing; default
#   tfrecords), IMAGE_NAME (default tfrecord-pipelines), TAG (default <UTC time>-<git commit>),
#   IMAGE (default $REGION-docker.pkg.dev/$PROJECT/$REPOSITORY/$IMAGE_NAME:$TAG), TEMPLATE
#   (default gs://$BUCKET/templates/tfrecords.json), BUILDER (cloudbuild, the default, or docker to
#   build and push locally), LAUNCHER_IMAGE (the python311-template-launcher-base image; default
#   gcr.io/dataflow-templates-base/python311-template-launcher-base:latest, pin a dated tag),
#   MACHINE_TYPE (default n2-standard-4) and MAX_WORKERS (default 10): template defaults, a launch
#   may override them.
# Arguments: none.
# Needs: gcloud (authenticated, with Cloud Build, Artifact Registry and Dataflow APIs enabled);
#   docker only with BUILDER=docker.
# Exit status: 0 built; 2 a usage error; else the failed command's. -h, --help: this text.
set -euo pipefail

for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    --) break ;;
  esac
done

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

die() { echo "error: $*" >&2; exit 2; }
run() { printf '+'; printf ' %q' "$@"; printf '\n'; "$@"; }

[ -n "${PROJECT:-}" ] || die "set PROJECT to your Google Cloud project id"
[ -n "${REGION:-}" ] || die "set REGION to a Dataflow region, e.g. europe-west1"
[ -n "${BUCKET:-}" ] || die "set BUCKET to a Cloud Storage bucket (no gs://) for the template, staging and temp files"
BUCKET="${BUCKET#gs://}"; BUCKET="${BUCKET%/}"
command -v gcloud >/dev/null || die "gcloud is not installed (https://cloud.google.com/sdk/docs/install)"

REPOSITORY="${REPOSITORY:-tfrecords}"
IMAGE_NAME="${IMAGE_NAME:-tfrecord-pipelines}"
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo nogit)"
TAG="${TAG:-$(date -u +%Y%m%d-%H%M%S)-$commit}"
IMAGE="${IMAGE:-$REGION-docker.pkg.dev/$PROJECT/$REPOSITORY/$IMAGE_NAME:$TAG}"
TEMPLATE="${TEMPLATE:-gs://$BUCKET/templates/tfrecords.json}"
BUILDER="${BUILDER:-cloudbuild}"
LAUNCHER_IMAGE="${LAUNCHER_IMAGE:-gcr.io/dataflow-templates-base/python311-template-launcher-base:latest}"
MACHINE_TYPE="${MACHINE_TYPE:-n2-standard-4}"
MAX_WORKERS="${MAX_WORKERS:-10}"

if [ -n "$(git -C "$root" status --porcelain -- setup.py constraints.txt pipelines transforms launch/flex_template 2>/dev/null)" ]; then
  echo "warning: the checkout has uncommitted changes; the image is built from the working tree, tagged $TAG" >&2
fi

# 1. The Artifact Registry repository.
if ! gcloud artifacts repositories describe "$REPOSITORY" --project "$PROJECT" --location "$REGION" >/dev/null 2>&1; then
  run gcloud artifacts repositories create "$REPOSITORY" --project "$PROJECT" --location "$REGION" \
    --repository-format docker --description "tfrecord-pipelines Flex Template images"
fi

# 2. The build context: only what the Dockerfile copies (not .venv, data or .git).
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp "$root/setup.py" "$root/constraints.txt" "$root/README.md" "$ctx/"
cp -R "$root/pipelines" "$root/transforms" "$ctx/"
mkdir -p "$ctx/launch/flex_template"
cp "$here/Dockerfile" "$here/main.py" "$here/cloudbuild.yaml" "$ctx/launch/flex_template/"
find "$ctx" -name __pycache__ -type d -prune -exec rm -rf {} +

# 3. The image: the launcher and the workers' SDK container in one.
if [ "$BUILDER" = docker ]; then
  command -v docker >/dev/null || die "BUILDER=docker needs docker"
  run gcloud auth configure-docker "$REGION-docker.pkg.dev" --quiet
  run docker build --file "$ctx/launch/flex_template/Dockerfile" --build-arg "SDK_CONTAINER_IMAGE=$IMAGE" \
    --build-arg "LAUNCHER_IMAGE=$LAUNCHER_IMAGE" --tag "$IMAGE" "$ctx"
  run docker push "$IMAGE"
elif [ "$BUILDER" = cloudbuild ]; then
  run gcloud builds submit "$ctx" --project "$PROJECT" \
    --config "$ctx/launch/flex_template/cloudbuild.yaml" \
    --substitutions "_IMAGE=$IMAGE,_LAUNCHER_IMAGE=$LAUNCHER_IMAGE"
else
  die "BUILDER must be cloudbuild or docker, not $BUILDER"
fi

# 4. The template spec file: the image, the parameters, and default worker settings.
run gcloud dataflow flex-template build "$TEMPLATE" --project "$PROJECT" \
  --image "$IMAGE" --sdk-language PYTHON --metadata-file "$here/metadata.json" \
  --staging-location "gs://$BUCKET/dataflow/staging" --temp-location "gs://$BUCKET/dataflow/tmp" \
  --worker-machine-type "$MACHINE_TYPE" --max-workers "$MAX_WORKERS"

cat <<EOF

Built $TEMPLATE
  image $IMAGE (also the workers' SDK container)
Run a conversion from it:
  PROJECT=$PROJECT REGION=$REGION BUCKET=$BUCKET TEMPLATE=$TEMPLATE \\
    launch/flex_template/run.sh input=gs://$BUCKET/images output=gs://$BUCKET/tfrecords/images
or directly:
  gcloud dataflow flex-template run "tfrecords-\$(date -u +%Y%m%d-%H%M%S)" --project $PROJECT --region $REGION \\
    --template-file-gcs-location $TEMPLATE \\
    --parameters input=gs://$BUCKET/images --parameters output=gs://$BUCKET/tfrecords/images
Schedule it: launch/scheduler/create_job.sh (TEMPLATE=$TEMPLATE)
EOF
