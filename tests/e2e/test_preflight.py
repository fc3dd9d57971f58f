"""A remote launch checks first, in seconds, what it needs from this machine
(pipelines/run/preflight.py): credentials, the service's host names, the
buckets within --io_timeout; each failure is one line naming the cause and
the fix. Before, a Dataflow launch without credentials or network listed its
input with Beam's anonymous client for 120-150 s and ended in
`BeamIOError ... RetryError('Timeout of 120.0s exceeded')`."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from gcs_emulator import BUCKET, _credentials_file, gcs, gcs_proxied  # noqa: F401 (fixtures)

LAUNCH = ["--runner", "DataflowRunner", "--project", "fake-proj", "--region", "us-central1",
          "--temp_location", "gs://b/tmp", "--input", "gs://b/in", "--output", "gs://b/out"]


def _no_cloud_env(tmp_path, **extra) -> dict:
    """No credentials anywhere google-auth looks: no key file, an empty HOME
    (no gcloud credentials), no metadata server; no emulator."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG",
                        "GOOGLE_CLOUD_PROJECT")}
    env.update(HOME=str(home), NO_GCE_CHECK="True", TMPDIR=str(tmp_path))
    env.update(extra)
    return env


def _launch(args: list, env: dict) -> tuple:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.convert", *args], env=env,
                          capture_output=True, text=True, timeout=300)
    return proc, time.monotonic() - started


def _one_line(proc) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "RetryError" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_dataflow_launch_without_credentials_fails_in_seconds(tmp_path):
    for extra in ([], ["--io_timeout", "15"]):
        proc, seconds = _launch(LAUNCH + extra, _no_cloud_env(tmp_path))
        line = _one_line(proc)
        assert line == ("error: no Google Cloud credentials on this machine: a DataflowRunner launch needs them to "
                        "submit the job and to read gs://b; run `gcloud auth application-default login`, or set "
                        "GOOGLE_APPLICATION_CREDENTIALS to a service account's key file"), line
        print(f"launch {extra}: {seconds:.1f} s: {line}")
        assert seconds < 30, seconds  # it took 120-147 s before

    # A key file that is not there: the variable is named, with its value.
    missing = str(tmp_path / "nowhere" / "key.json")
    proc, seconds = _launch(LAUNCH, _no_cloud_env(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=missing))
    line = _one_line(proc)
    assert line.startswith(f"error: GOOGLE_APPLICATION_CREDENTIALS={missing} gives no usable Google Cloud "
                           "credentials (") and "not found" in line, line
    assert line.endswith("point it at a service account's key file, or unset it and run "
                         "`gcloud auth application-default login`"), line
    assert seconds < 30, seconds


def test_a_launch_whose_service_name_does_not_resolve_says_so(tmp_path):
    """Credentials found (a service account's key), the Dataflow endpoint's
    name unresolvable (.invalid never resolves): one line naming the host."""
    key = _credentials_file("http://127.0.0.1:9/token")
    proc, seconds = _launch(LAUNCH + ["--dataflow_endpoint", "https://dataflow.invalid"],
                            _no_cloud_env(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=key))
    line = _one_line(proc)
    assert line.startswith("error: cannot resolve dataflow.invalid (the Dataflow API: "), line
    assert line.endswith("this machine cannot reach Google Cloud; check its network and DNS (or set HTTPS_PROXY) "
                         "and rerun"), line
    assert seconds < 30, seconds


def test_a_bucket_that_does_not_answer_fails_the_launch_within_io_timeout(gcs_proxied, tmp_path):
    """The buckets through a proxy that accepts and never answers: the launch
    (a template written to the bucket, so no Dataflow endpoint is needed)
    stops after --io_timeout, naming the bucket, the bound and the fix."""
    env = dict(_no_cloud_env(tmp_path), STORAGE_EMULATOR_HOST=gcs_proxied.url, GOOGLE_CLOUD_PROJECT="test-project",
               GOOGLE_APPLICATION_CREDENTIALS=_credentials_file("http://127.0.0.1:9/token"))
    args = ["--runner", "DataflowRunner", "--project", "test-project", "--region", "us-central1",
            "--temp_location", f"gs://{BUCKET}/pf/tmp", "--template_location", f"gs://{BUCKET}/pf/job",
            "--input", f"gs://{BUCKET}/pf/in", "--output", f"gs://{BUCKET}/pf/out", "--io_timeout", "3"]
    gcs_proxied.set(blackhole=True)
    try:
        proc, seconds = _launch(args, env)
    finally:
        gcs_proxied.set(blackhole=False)
    line = _one_line(proc)
    assert line.startswith(f"error: --input gs://{BUCKET}/pf/in: listing gs://{BUCKET} failed: no usable answer "
                           "from Cloud Storage within --io_timeout 3 s ("), line
    assert line.endswith(f"check that this machine reaches bucket {BUCKET} (network, proxy, "
                         f"STORAGE_EMULATOR_HOST={gcs_proxied.url}), or raise --io_timeout"), line
    assert seconds < 30, seconds

    # A bucket that does not exist: named, with its flag.
    proc, _ = _launch([a.replace(f"gs://{BUCKET}/pf/out", "gs://no-such-bucket-pf/out") for a in args], env)
    line = _one_line(proc)
    assert line == ("error: --output gs://no-such-bucket-pf/out: bucket no-such-bucket-pf does not exist (or this "
                    "account cannot see it); check the name, or create it with `gcloud storage buckets create "
                    "gs://no-such-bucket-pf`"), line


def test_the_check_lets_an_emulator_launch_through_and_leaves_the_process_as_it_was(gcs):
    """Against the tests' emulator (anonymous clients, no Google host to
    resolve) every check passes; the call leaves no variable, thread or
    logger level behind."""
    import logging

    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_pipelines.options import table
    from tfrecord_pipelines.run import preflight
    values = table.defaults().replace(input=f"gs://{BUCKET}/pf-ok/in", output=f"gs://{BUCKET}/pf-ok/out")
    options = PipelineOptions(["--temp_location", f"gs://{BUCKET}/pf-ok/tmp"])
    env, threads = dict(os.environ), {t.ident for t in threading.enumerate()}
    levels = {n: logging.getLogger(n).level for n in ("", "google.auth", "urllib3")}
    for runner in ("PortableRunner", "FlinkRunner"):
        assert preflight.check(values, options, runner) is None
    assert dict(os.environ) == env
    assert {t.ident for t in threading.enumerate()} == threads
    assert {n: logging.getLogger(n).level for n in levels} == levels
