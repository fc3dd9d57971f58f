"""Dataflow, offline: the job a user's flags build, and the launch files in launch/.

* Beam's Dataflow dry run (--dry_run True) builds the whole job for a gs:// to
  gs:// conversion (against the GCS emulator) without submitting it: our
  stages are in it, every DoFn and CombineFn unpickles in a fresh interpreter,
  the setup.py sdist is attached for the workers, the worker settings reach
  the job's environment, and the output's lock is released afterwards.
* launch/dataflow.sh builds the same job (DRY_RUN=1).
* The Flex Template: its entry file, run as the launcher runs it with the
  scheduler's request body, builds and stages the complete job (Beam's template
  mode: staged to the emulator, not submitted); metadata.json matches the
  conversion options; the Dockerfile's Beam is setup.py's.
* build.sh, run.sh and create_job.sh, run against a fake gcloud.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

from conftest import ROOT, make_tree, users_project
from gcs_emulator import BUCKET, bucket, gcs, list_names, upload_tree  # noqa: F401 (fixture)

LAUNCH = os.path.join(ROOT, "launch")
FLEX = os.path.join(LAUNCH, "flex_template")
# A folder tree: each image is read once and validated as it is written (no ValidateImages stage).
STAGES = ["ListInputs", "AssignLabels", "Split", "PlanShards", "WriteShards", "Publish"]


def stage_names(pp) -> list:
    """The pipeline's top transforms and their parts, in order, by their last
    name: ListInputs, then Records' (AssignLabels, Split, ...), then Dataset's
    (PlanShards, WriteShards, Publish) or Check's (pipelines/run/pipeline.py)."""
    transforms = pp.components.transforms
    names = []
    for r in pp.root_transform_ids:
        for t in transforms[r].subtransforms:
            names.append(transforms[t].unique_name)
            names += [transforms[c].unique_name.rsplit("/", 1)[-1] for c in transforms[t].subtransforms]
    return names
PROJECT, REGION = "test-project", "europe-west1"
WORKERS = ["--machine_type", "n2-standard-4", "--max_num_workers", "5", "--disk_size_gb", "50"]


def beam_pin() -> str:
    """The Beam constraints.txt pins: the one `make install` and the image's launcher install."""
    with open(os.path.join(ROOT, "constraints.txt")) as f:
        return re.search(r"^apache-beam==([0-9.]+)$", f.read(), re.M).group(1)


def load_module(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def capture_jobs(monkeypatch, tmp_path):
    """Records what DataflowRunner.run_pipeline returns, fails if anything
    creates a Dataflow API client (a dry run must not), and keeps Beam's
    staging temp folders under tmp_path."""
    from apache_beam.runners.dataflow import dataflow_runner
    from apache_beam.runners.dataflow.internal import apiclient
    beam_tmp = tmp_path / "beam-tmp"
    beam_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(beam_tmp))
    jobs = []
    original = dataflow_runner.DataflowRunner.run_pipeline

    def run_pipeline(self, pipeline, options, pipeline_proto=None):
        result = original(self, pipeline, options, pipeline_proto)
        waited = []
        result.wait_until_finish = lambda duration=None: waited.append(duration)
        jobs.append((result, waited))
        return result

    class NoClient:
        def __init__(self, *a, **k):
            raise AssertionError("a dry run created a Dataflow API client")

    monkeypatch.setattr(dataflow_runner.DataflowRunner, "run_pipeline", run_pipeline)
    monkeypatch.setattr(apiclient, "DataflowApplicationClient", NoClient)
    return jobs


def test_dry_run_builds_the_dataflow_job(gcs, tmp_path, capture_jobs, capsys, installed_package):
    local = str(tmp_path / "imgs")
    make_tree(local, per_class=3)
    upload_tree(local, "df1/in")
    out = f"gs://{BUCKET}/df1/out"
    from tfrecord_pipelines.commands.convert import run
    rc = run(["--input", f"gs://{BUCKET}/df1/in", "--output", out, "--num_shards", "2",
              "--split", "train=0.7,validation=0.3",
              "--runner", "DataflowRunner", "--dry_run", "True", "--project", PROJECT, "--region", REGION,
              "--temp_location", f"gs://{BUCKET}/tmp", "--staging_location", f"gs://{BUCKET}/staging",
              "--setup_file", os.path.join(ROOT, "setup.py"), "--job_name", "tfrecords-dry-run-test"] + WORKERS)
    assert rc == 0
    assert "dry run: the DataflowRunner job was built and not submitted" in capsys.readouterr().out
    (result, waited), = capture_jobs
    assert waited == []  # returned without waiting for the job
    job = result.job

    # The Dataflow Job message: a batch job under the given name.
    from google.cloud.dataflow_v1beta3 import types as dataflow
    assert isinstance(job.proto, dataflow.Job)
    assert job.proto.name == "tfrecords-dry-run-test"
    assert job.proto.type_ == dataflow.JobType.JOB_TYPE_BATCH

    # Our stages, in order, at the top of the pipeline.
    pp = job.proto_pipeline
    transforms = pp.components.transforms
    top = stage_names(pp)
    assert [s for s in top if s in STAGES] == STAGES, top

    # The workers' environment: Beam's container of setup.py's Beam version, with the sdist of setup.py.
    from apache_beam.portability.api import beam_runner_api_pb2
    envs = list(pp.components.environments.values())
    assert len(envs) == 1
    image = beam_runner_api_pb2.DockerPayload.FromString(envs[0].payload).container_image
    assert image.endswith(f"/beam_python{sys.version_info.major}.{sys.version_info.minor}_sdk:{beam_pin()}"), image
    staged = {}
    for dep in envs[0].dependencies:
        path = beam_runner_api_pb2.ArtifactFilePayload.FromString(dep.type_payload).path
        staged[beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(dep.role_payload).staged_name] = path
    assert "workflow.tar.gz" in staged, staged  # what --setup_file stages
    import tarfile
    with tarfile.open(staged["workflow.tar.gz"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"pipelines/convert.py", "pipelines/commands/convert.py", "transforms/stages/write_shards.py", "setup.py"} <= names

    # Every DoFn and CombineFn unpickles in a fresh interpreter (as on a worker).
    check_functions_unpickle(pp, tmp_path, installed_package)

    # The worker settings, in the environment the Dataflow client would submit with the job.
    from apache_beam.runners.dataflow.internal import apiclient
    env = apiclient.Environment(
        packages=sorted(staged), options=job.options,
        environment_version=apiclient._FNAPI_ENVIRONMENT_MAJOR_VERSION,  # pylint: disable=protected-access
        proto_pipeline_staged_url=f"gs://{BUCKET}/staging/pipeline.pb", proto_pipeline=pp).proto
    pool, = env.worker_pools
    assert pool.machine_type == "n2-standard-4"
    assert pool.autoscaling_settings.max_num_workers == 5
    assert pool.disk_size_gb == 50
    assert "workflow.tar.gz" in [p.name for p in pool.packages]
    assert env.temp_storage_prefix.startswith(f"storage.googleapis.com/{BUCKET}/tmp/")
    sdk_options = dict(env.sdk_pipeline_options["options"])
    assert sdk_options["project"] == PROJECT and sdk_options["region"] == REGION
    assert sdk_options["input"] == f"gs://{BUCKET}/df1/in" and sdk_options["output"] == out
    assert sdk_options["num_shards"] == "2"

    # Nothing left in the output: the lock was released, no staging folder, no shards.
    assert list_names("df1/out") == []


def test_a_detection_dry_run_builds_the_dataflow_job(gcs, tmp_path, capture_jobs, capsys, installed_package):
    """--annotations on Dataflow: COCO JSON and images in a bucket, the job
    built (ListAnnotations in place of ListInputs and AssignLabels), every
    function unpickled as on a worker, nothing left in the output."""
    from detection_data import make_coco
    src = make_coco(str(tmp_path / "coco"), n=6)
    upload_tree(str(tmp_path / "coco"), "df_det/coco")
    out = f"gs://{BUCKET}/df_det/out"
    from tfrecord_pipelines.commands.convert import run
    rc = run(["--annotations", f"gs://{BUCKET}/df_det/coco/annotations/{os.path.basename(src['json'])}",
              "--output", out, "--num_shards", "2", "--masks", "png",
              "--runner", "DataflowRunner", "--dry_run", "True", "--project", PROJECT, "--region", REGION,
              "--temp_location", f"gs://{BUCKET}/tmp", "--staging_location", f"gs://{BUCKET}/staging",
              "--setup_file", os.path.join(ROOT, "setup.py"), "--job_name", "tfrecords-detection-dry-run"] + WORKERS)
    assert rc == 0
    captured = capsys.readouterr()
    assert "dry run: the DataflowRunner job was built and not submitted" in captured.out
    assert "annotations: a COCO JSON file" in captured.err
    (result, _), = capture_jobs
    pp = result.job.proto_pipeline
    top = stage_names(pp)
    want = ["ListAnnotations", "Split", "PlanShards", "WriteShards", "Publish"]
    assert [s for s in top if s in want] == want and "ListInputs" not in top and "AssignLabels" not in top, top
    sdk = dict(result.job.options.get_all_options(drop_default=True))
    assert sdk["annotations"].endswith("instances_train2017.json") and sdk["masks"] == "png"
    check_functions_unpickle(pp, tmp_path, installed_package)
    assert list_names("df_det/out") == []


def check_functions_unpickle(pp, tmp_path, installed: str) -> None:
    """Every pickled function loads in a worker-like process: the installed
    package only (not the checkout), started in a user's project folder that
    has modules of its own named `transforms` and `pipelines`."""
    from apache_beam.portability import common_urns, python_urns
    from apache_beam.portability.api import beam_runner_api_pb2
    payloads = []
    for t in pp.components.transforms.values():
        if t.spec.urn == common_urns.primitives.PAR_DO.urn:
            fn = beam_runner_api_pb2.ParDoPayload.FromString(t.spec.payload).do_fn
            if fn.urn == python_urns.PICKLED_DOFN_INFO:
                payloads.append(fn.payload)
        elif t.spec.urn in (common_urns.composites.COMBINE_PER_KEY.urn, common_urns.composites.COMBINE_GLOBALLY.urn):
            fn = beam_runner_api_pb2.CombinePayload.FromString(t.spec.payload).combine_fn
            if fn.urn == python_urns.PICKLED_COMBINE_FN:
                payloads.append(fn.payload)
    assert len(payloads) > 20
    folder = tmp_path / "payloads"
    folder.mkdir()
    for i, p in enumerate(payloads):
        (folder / f"{i:03d}.bin").write_bytes(p)
    script = (
        "import glob, sys\n"
        "from apache_beam.internal import pickler\n"
        "mods = set()\n"
        "for f in sorted(glob.glob(sys.argv[1] + '/*.bin')):\n"
        "    obj = pickler.loads(open(f, 'rb').read())\n"
        "    fn = obj[0] if isinstance(obj, tuple) else obj\n"
        "    mods.add(type(fn).__module__)\n"
        "print(' '.join(sorted(mods)))\n")
    env = dict(os.environ, PYTHONPATH=installed)  # the package, as installed on a worker
    script += "import tfrecord_pipelines; assert tfrecord_pipelines.__file__.startswith(sys.argv[2])\n"
    project = users_project(tmp_path / "project")
    proc = subprocess.run([sys.executable, "-c", script, str(folder), installed], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = proc.stdout.split()
    assert any(m.startswith("tfrecord_pipelines.transforms.") for m in modules), modules


def run_script(args, env_extra=None, timeout=120, path_prefix=""):
    env = dict(os.environ)
    env.update(env_extra or {})
    if path_prefix:
        env["PATH"] = path_prefix + os.pathsep + env.get("PATH", "")
    return subprocess.run(["bash"] + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_dataflow_sh_builds_the_job(gcs, tmp_path):
    local = str(tmp_path / "imgs")
    make_tree(local, per_class=2)
    upload_tree(local, "df2/in")
    env = {"PROJECT": PROJECT, "REGION": REGION, "BUCKET": BUCKET, "DRY_RUN": "1", "MACHINE_TYPE": "n2-highcpu-8",
           "MAX_WORKERS": "7", "TMPDIR": str(tmp_path)}
    proc = run_script([os.path.join(LAUNCH, "dataflow.sh"), "--input", f"gs://{BUCKET}/df2/in",
                       "--output", f"gs://{BUCKET}/df2/out", "--num_shards", "3"], env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "dry run: the DataflowRunner job was built and not submitted" in proc.stdout
    command = proc.stdout.splitlines()[0]
    for flag in ("--runner DataflowRunner", f"--project {PROJECT}", f"--region {REGION}",
                 f"--temp_location gs://{BUCKET}/dataflow/tmp", f"--staging_location gs://{BUCKET}/dataflow/staging",
                 f"--setup_file {ROOT}/setup.py", "--machine_type n2-highcpu-8", "--max_num_workers 7",
                 "--disk_size_gb 50", "--dry_run True", "--num_shards 3"):
        assert flag in command, (flag, command)
    assert list_names("df2/out") == []  # lock released

    # What is missing is named before anything runs.
    for env_missing, message in (({"PROJECT": ""}, "set PROJECT"), ({"REGION": ""}, "set REGION"),
                                 ({"BUCKET": ""}, "set BUCKET")):
        proc = run_script([os.path.join(LAUNCH, "dataflow.sh"), "--input", "gs://b/in", "--output", "gs://b/out"],
                          dict(env, **env_missing))
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    proc = run_script([os.path.join(LAUNCH, "dataflow.sh"), "--input", "./imgs", "--output", "gs://b/out"], env)
    assert proc.returncode == 2 and "--input must be gs://" in proc.stderr


def render_body(values: dict) -> dict:
    with open(os.path.join(LAUNCH, "scheduler", "body.json")) as f:
        text = f.read()
    for k, v in values.items():
        text = text.replace("${" + k + "}", v)
    assert "${" not in text, text
    return json.loads(text)


def test_flex_template_launch_of_the_scheduled_body(gcs, tmp_path, monkeypatch, capsys):
    """Runs main.py as the Flex Template launcher does, with the parameters of
    launch/scheduler/body.json: Beam's template mode stages the complete job
    (to the emulator) and writes its description instead of submitting it."""
    local = str(tmp_path / "imgs")
    make_tree(local, per_class=2)
    upload_tree(local, "df3/images")
    template = f"gs://{BUCKET}/templates/tfrecords.json"
    body = render_body({"JOB_NAME": "tfrecords-df3", "TEMPLATE": template, "INPUT": f"gs://{BUCKET}/df3/images",
                        "OUTPUT": f"gs://{BUCKET}/df3/dataset", "BUCKET": BUCKET})
    launch = body["launchParameter"]
    environment = launch["environment"]
    image = f"{REGION}-docker.pkg.dev/{PROJECT}/tfrecords/tfrecord-pipelines:test"
    monkeypatch.setenv("TFRECORDS_SDK_CONTAINER_IMAGE", image)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    job_file = f"gs://{BUCKET}/df3/launch/job_object"
    # Beam's flags as the launcher passes them, then the parameters as --name=value.
    argv = ["--runner=DataflowRunner", f"--project={PROJECT}", f"--region={REGION}", f"--job_name={launch['jobName']}",
            f"--temp_location={environment['tempLocation']}", f"--staging_location={environment['stagingLocation']}",
            f"--template_location={job_file}", "--no_auth",
            f"--machine_type={environment['machineType']}", f"--max_num_workers={environment['maxWorkers']}",
            f"--disk_size_gb={environment['diskSizeGb']}"]
    argv += [f"--{k}={v}" for k, v in launch["parameters"].items()]
    main = load_module("flex_main", os.path.join(FLEX, "main.py"))
    assert main.main(argv) == 0
    printed = capsys.readouterr().out
    assert "job description written to gs://" in printed and "--versioned" in printed and "--project" not in printed

    job = json.loads(bucket().blob("df3/launch/job_object").download_as_bytes())
    assert job["name"] == "tfrecords-df3" and job["type"] == "JOB_TYPE_BATCH"
    pool, = job["environment"]["workerPools"]
    assert pool["machineType"] == "n2-standard-4" and pool["diskSizeGb"] == 50
    assert pool["autoscalingSettings"]["maxNumWorkers"] == 10
    assert [c["containerImage"] for c in pool["sdkHarnessContainerImages"]] == [image]
    assert "workflow.tar.gz" not in [p["name"] for p in pool.get("packages", [])]  # the image holds the package
    options = job["environment"]["sdkPipelineOptions"]["options"]
    assert options["versioned"] is True and options["extend_label_map"] is True and options["detach"] is True
    assert options["output"] == f"gs://{BUCKET}/df3/dataset" and options["sdk_container_image"] == image
    staged = [n for n in list_names("dataflow/staging") if n.startswith("tfrecords-df3.")]
    assert any(n.endswith("/pipeline.pb") for n in staged), staged

    # The launch took the dataset root's lock for the job, which releases it when it publishes.
    names = list_names("df3/dataset")
    assert names == [".tfrecords.lock"], names
    bucket().blob("df3/dataset/.tfrecords.lock").delete()


def test_flex_template_arguments():
    main = load_module("flex_main_args", os.path.join(FLEX, "main.py"))
    got = main.template_argv(["--overwrite=true", "--versioned=false", "--extend_label_map", "--allow_absolute_paths",
                              "TRUE", "--label_depth=", "--compression=", "--split=", "--output=gs://b/o"],
                             env={"TFRECORDS_SDK_CONTAINER_IMAGE": "img"})
    assert got == ["--overwrite", "--extend_label_map", "--allow_absolute_paths", "--split=", "--output=gs://b/o",
                   "--runner=DataflowRunner", "--detach", "--sdk_container_image=img"]
    assert main.template_argv(["--runner=DirectRunner", "--detach", "--setup_file=/x/setup.py"], env={}) == [
        "--runner=DirectRunner", "--detach", "--setup_file=/x/setup.py"]
    setup = os.path.join(ROOT, "setup.py")
    assert main.template_argv([], env={"TFRECORDS_SETUP_FILE": setup})[-1] == f"--setup_file={setup}"
    with pytest.raises(main.TemplateArgError):
        main.template_argv(["--overwrite=maybe"], env={})


def template_options():
    sys.path.insert(0, FLEX)
    try:
        return load_module("flex_metadata", os.path.join(FLEX, "metadata.py"))
    finally:
        sys.path.remove(FLEX)


# A value other than the default for each kind of parameter, which the parser accepts.
SAMPLES = {"input": "gs://b/images", "label_table": "gs://b/t.csv", "label_map": "gs://b/map.json",
           "output": "gs://b/out", "label_depth": "-1", "label_offset": "1", "seed": "7", "compression": "gzip",
           "split": "train=0.8,validation=0.2", "num_shards": "train=16,validation=2", "shard_size": "512MiB",
           "max_reject_fraction": "0.1", "version": "v20260101-000000", "overwrite": "true",
           "label_regex": r"^([a-z]+)\.\d+\.jpg$", "feature_keys": "image/encoded=image_raw"}


def test_template_metadata_matches_the_options():
    gen = template_options()
    path = os.path.join(FLEX, "metadata.json")
    with open(path) as f:
        text = f.read()
    assert text == gen.render(), "launch/flex_template/metadata.json is stale: run python launch/flex_template/metadata.py"
    meta = json.loads(text)
    actions = {a.dest: a for _, a in gen.options()}
    from tfrecord_pipelines.options import help_parser
    assert set(actions) == {a.dest for a in help_parser("x")._actions if a.option_strings and a.dest != "help"}
    params = {p["name"]: p for p in meta["parameters"]}
    assert len(params) == len(meta["parameters"])
    assert set(gen.EXCLUDED) <= set(actions), "an excluded option no longer exists"
    assert set(params) == set(actions) - set(gen.EXCLUDED)
    assert set(gen.EXCLUDED) == {"detach", "progress", "spill", "reader"}

    # The Dataflow API's TemplateMetadata message takes it (an unknown field would fail).
    from google.cloud.dataflow_v1beta3 import types as dataflow
    from google.protobuf import json_format
    json_format.ParseDict(meta, dataflow.TemplateMetadata.pb()())

    from apache_beam.options.pipeline_options import PipelineOptions
    from tfrecord_pipelines.options import ConvertOptions
    main = load_module("flex_main_meta", os.path.join(FLEX, "main.py"))
    for name, p in params.items():
        a = actions[name]
        assert p["helpText"] == a.help and p["label"], name
        assert p["isOptional"] is (name != "output"), name
        regexes = [re.compile(r) for r in p.get("regexes", [])]
        values = [v for v in (gen.text_default(a), SAMPLES.get(name)) if v] if p["isOptional"] else [SAMPLES[name]]
        values += list(a.choices or [])
        for value in values:
            assert all(r.match(value) for r in regexes), (name, value, p.get("regexes"))
            # What the launcher passes: the parser takes it, and sees the value.
            args = main.template_argv([f"--{name}={value}", "--runner=DataflowRunner"], env={})
            parsed = getattr(PipelineOptions(args).view_as(ConvertOptions), name)
            expected = (value == "true") if isinstance(a, argparse._StoreTrueAction) else (a.type or str)(value)
            assert parsed == expected, (name, value, parsed)
        if a.choices:
            assert p["paramType"] == "ENUM" and [o["value"] for o in p["enumOptions"]] == list(a.choices)
            assert not any(r.match("bogus") for r in regexes)
        if a.type is int:
            assert not any(r.match("1.5") for r in regexes), name
        if isinstance(a, argparse._StoreTrueAction):
            assert p["paramType"] == "BOOLEAN" and not any(r.match("maybe") for r in regexes)
    assert not any(re.match(r, "/local/path") for r in params["output"]["regexes"])


def dockerfile() -> str:
    with open(os.path.join(FLEX, "Dockerfile")) as f:
        return f.read()


def test_dockerfile_matches_the_constraints_and_the_checkout():
    text = dockerfile()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    sdk = [f for f in froms if f.startswith("apache/beam_python")]
    assert sdk == [f"apache/beam_python{sys.version_info.major}.{sys.version_info.minor}_sdk:{beam_pin()}"], froms
    # The image's install keeps that Beam (and says so), and it is inside setup.py's range.
    assert f"assert apache_beam.__version__ == '{beam_pin()}'" in text
    with open(os.path.join(ROOT, "setup.py")) as f:
        lo, hi = re.search(r'"apache-beam\[gcp\]>=([0-9.]+),<([0-9.]+)"', f.read()).groups()
    version = tuple(int(x) for x in beam_pin().split("."))
    assert tuple(int(x) for x in lo.split(".")) <= version < tuple(int(x) for x in hi.split(".")), (lo, hi)
    assert "/opt/google/dataflow/python_template_launcher" in text
    assert re.search(r"pip install .*-c constraints\.txt \.", text)
    assert 'ENTRYPOINT ["/opt/apache/beam/boot"]' in text
    # Every file copied from the build context exists in the checkout.
    sources = []
    for line in re.findall(r"^COPY\s+(?!--from)(.+)$", text, re.M):
        sources += line.split()[:-1]
    assert {"setup.py", "constraints.txt", "pipelines", "transforms", "launch/flex_template/main.py"} <= set(sources)
    for s in sources:
        assert os.path.exists(os.path.join(ROOT, s)), s
    workdir = re.search(r"^ARG WORKDIR=(\S+)", text, re.M).group(1)
    py_file = re.search(r"^ENV FLEX_TEMPLATE_PYTHON_PY_FILE=(\S+)", text, re.M).group(1)
    rel = py_file.replace("${WORKDIR}/", "")
    assert rel in sources and os.path.isfile(os.path.join(ROOT, rel))
    assert not re.search(r"^ENV FLEX_TEMPLATE_PYTHON_SETUP_FILE", text, re.M)  # installed instead (see the Dockerfile)
    main = load_module("flex_main_docker", os.path.join(FLEX, "main.py"))
    assert main.DEFAULT_SETUP_FILE == f"{workdir}/setup.py"


FAKE_GCLOUD = r"""#!/usr/bin/env bash
# Records each call (one argument per line, then a blank line) and what it points at.
log="$FAKE_LOG"
printf '%s\n' "$@" >> "$log/calls"; echo >> "$log/calls"
case "$1 $2 $3" in
  "artifacts repositories describe"|"scheduler jobs describe") exit 1 ;;
  "builds submit "*) (cd "$3" && find . -type f | sort) > "$log/context" ;;
esac
prev=""
for a in "$@"; do
  [ "$prev" = --message-body-from-file ] && cp "$a" "$log/body.json"
  prev="$a"
done
exit 0
"""


@pytest.fixture
def fake_gcloud(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(FAKE_GCLOUD)
    os.chmod(bin_dir / "gcloud", 0o755)
    log = tmp_path / "log"
    log.mkdir()

    def calls():
        text = (log / "calls").read_text() if (log / "calls").exists() else ""
        return [c.split("\n") for c in text.split("\n\n") if c]
    return str(bin_dir), log, calls


def flag(call: list, name: str) -> str:
    return call[call.index(name) + 1]


def test_build_and_run_scripts(fake_gcloud):
    bin_dir, log, calls = fake_gcloud
    env = {"PROJECT": PROJECT, "REGION": REGION, "BUCKET": "my-bucket", "TAG": "t1", "FAKE_LOG": str(log)}
    proc = run_script([os.path.join(FLEX, "build.sh")], env, path_prefix=bin_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    image = f"{REGION}-docker.pkg.dev/{PROJECT}/tfrecords/tfrecord-pipelines:t1"
    made = calls()
    assert made[0][:3] == ["artifacts", "repositories", "describe"]
    assert made[1][:3] == ["artifacts", "repositories", "create"]
    build = made[2]
    assert build[:2] == ["builds", "submit"]
    assert flag(build, "--config").endswith("launch/flex_template/cloudbuild.yaml")
    assert f"_IMAGE={image}," in flag(build, "--substitutions")
    context = {p[2:] for p in (log / "context").read_text().split()}
    assert "launch/flex_template/Dockerfile" in context and "launch/flex_template/cloudbuild.yaml" in context
    assert not any(p.startswith((".venv", ".git/", "demo/", "tests/")) or "__pycache__" in p for p in context)
    for line in re.findall(r"^COPY\s+(?!--from)(.+)$", dockerfile(), re.M):
        for src in line.split()[:-1]:
            assert src in context or any(p.startswith(src + "/") for p in context), src
    template = made[3]
    assert template[:4] == ["dataflow", "flex-template", "build", "gs://my-bucket/templates/tfrecords.json"]
    assert flag(template, "--image") == image and flag(template, "--sdk-language") == "PYTHON"
    assert flag(template, "--metadata-file") == os.path.join(FLEX, "metadata.json")
    with open(os.path.join(FLEX, "cloudbuild.yaml")) as f:
        cloudbuild = f.read()
    assert "--file=launch/flex_template/Dockerfile" in cloudbuild and "SDK_CONTAINER_IMAGE=$_IMAGE" in cloudbuild

    (log / "calls").unlink()
    proc = run_script([os.path.join(FLEX, "run.sh"), "input=gs://my-bucket/images", "output=gs://my-bucket/out",
                       "split=train=0.8,validation=0.2", "overwrite=true", "--", "--max-workers", "20"],
                      dict(env, JOB_NAME="tfrecords-run"), path_prefix=bin_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run, = calls()
    assert run[:4] == ["dataflow", "flex-template", "run", "tfrecords-run"]
    assert flag(run, "--template-file-gcs-location") == "gs://my-bucket/templates/tfrecords.json"
    assert [run[i + 1] for i, a in enumerate(run) if a == "--parameters"] == [
        "^~^input=gs://my-bucket/images", "^~^output=gs://my-bucket/out", "^~^split=train=0.8,validation=0.2",
        "^~^overwrite=true"]
    assert run[-2:] == ["--max-workers", "20"]
    proc = run_script([os.path.join(FLEX, "run.sh"), "input=gs://b/i"], env, path_prefix=bin_dir)
    assert proc.returncode == 2 and "output=gs://... is required" in proc.stderr


def test_scheduler_job(fake_gcloud):
    bin_dir, log, calls = fake_gcloud
    env = {"PROJECT": PROJECT, "REGION": REGION, "BUCKET": "my-bucket", "INPUT": "gs://my-bucket/images",
           "OUTPUT": "gs://my-bucket/datasets/Flowers_v1", "SERVICE_ACCOUNT": f"sched@{PROJECT}.iam.gserviceaccount.com",
           "SCHEDULE": "30 2 * * 1", "FAKE_LOG": str(log)}
    proc = run_script([os.path.join(LAUNCH, "scheduler", "create_job.sh")], env, path_prefix=bin_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    describe, create = calls()
    assert describe[:3] == ["scheduler", "jobs", "describe"]
    assert create[:4] == ["scheduler", "jobs", "create", "http"] and create[4] == "tfrecords-flowers-v1"
    assert flag(create, "--uri") == (f"https://dataflow.googleapis.com/v1b3/projects/{PROJECT}/locations/{REGION}"
                                     "/flexTemplates:launch")
    assert flag(create, "--http-method") == "POST" and flag(create, "--schedule") == "30 2 * * 1"
    assert flag(create, "--oauth-service-account-email") == env["SERVICE_ACCOUNT"]
    assert flag(create, "--oauth-token-scope") == "https://www.googleapis.com/auth/cloud-platform"
    assert flag(create, "--headers") == "Content-Type=application/json"

    body = json.loads((log / "body.json").read_text())
    # The Dataflow API's request message takes it (an unknown field would fail) ...
    from google.cloud.dataflow_v1beta3 import types as dataflow
    from google.protobuf import json_format
    json_format.ParseDict(body, dataflow.LaunchFlexTemplateRequest.pb()())
    launch = body["launchParameter"]
    # ... it launches the template build.sh builds, under a valid job name ...
    assert launch["containerSpecGcsPath"] == "gs://my-bucket/templates/tfrecords.json"
    assert re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", launch["jobName"])
    assert launch["environment"]["tempLocation"] == "gs://my-bucket/dataflow/tmp"
    # ... with parameters the template declares, each valid for it.
    params = {p["name"]: p for p in json.load(open(os.path.join(FLEX, "metadata.json")))["parameters"]}
    assert launch["parameters"]["output"] == env["OUTPUT"] and launch["parameters"]["versioned"] == "true"
    for name, value in launch["parameters"].items():
        assert name in params, name
        assert all(re.match(r, value) for r in params[name].get("regexes", [])), (name, value)

    proc = run_script([os.path.join(LAUNCH, "scheduler", "create_job.sh")], dict(env, INPUT="/local/images"),
                      path_prefix=bin_dir)
    assert proc.returncode == 2 and "INPUT must be gs://" in proc.stderr
    proc = run_script([os.path.join(LAUNCH, "scheduler", "create_job.sh")], dict(env, SERVICE_ACCOUNT=""),
                      path_prefix=bin_dir)
    assert proc.returncode == 2 and "set SERVICE_ACCOUNT" in proc.stderr


def closed_port() -> int:
    """A port nothing listens on: a bucket that cannot be reached (refused at once, retried for minutes)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable_gcs(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GOOGLE_APPLICATION_CREDENTIALS",)}
    env.update(STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{closed_port()}", GOOGLE_CLOUD_PROJECT=PROJECT,
               TMPDIR=str(tmp_path))
    return env


def test_a_dataflow_dry_run_needs_no_network(tmp_path):
    """Every bucket unreachable (a closed port, no credentials): the dry run still
    builds the job, in seconds, and says what it could not check. Before, listing
    the input was retried for 120 s and the run ended in BeamIOError."""
    import time
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# extra packages of the workers\nrequests>=2.0\n")
    env = unreachable_gcs(tmp_path)
    b = "gs://unreachable-bucket"
    cases = {
        "tree": ["--input", f"{b}/in", "--output", f"{b}/out", "--split", "folders",
                 "--requirements_file", str(requirements)],
        "table, label map, versioned": ["--label_table", f"{b}/t.csv", "--image_root", f"{b}/img",
                                        "--label_map", f"{b}/map.json", "--output", f"{b}/root", "--versioned"],
    }
    for name, args in cases.items():
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "tfrecord_pipelines.convert", *args, "--runner", "DataflowRunner",
             "--dry_run", "True", "--project", PROJECT, "--region", REGION, "--temp_location", f"{b}/tmp",
             "--setup_file", os.path.join(ROOT, "setup.py")], cwd=str(tmp_path), env=env, capture_output=True,
            text=True, timeout=150)
        seconds = time.monotonic() - started
        assert proc.returncode == 0, (name, proc.stdout[-2000:], proc.stderr[-3000:])
        assert seconds < 60, (name, seconds)  # a listing of the closed port alone is retried for 120 s
        out = proc.stdout
        assert "dry run: the DataflowRunner job was built and not submitted" in out, out
        assert "checked on this machine: the options; the job graph" in out, out
        assert "the package --setup_file" in out and "(its sdist was built)" in out, out
        assert f"the temp and staging locations ({b}/tmp" in out and f"project {PROJECT}" in out, out
        assert "container image" in out, out
        assert f"--output {b}/" in out and "its lock" in out, out
        assert "Traceback" not in proc.stderr and "RetryError" not in proc.stderr, proc.stderr[-2000:]
        if name == "tree":
            assert f"--input {b}/in: that it exists" in out, out
            assert f"--requirements_file {requirements}: that its packages resolve" in out, out
        else:
            assert f"--label_table {b}/t.csv: that it exists, and its header" in out, out
            assert f"--label_map {b}/map.json" in out and "which version LATEST names" in out, out

    # A requirements file that does not parse is refused before anything is built.
    requirements.write_text("requests>=>2\n")
    proc = subprocess.run([sys.executable, "-m", "tfrecord_pipelines.convert", *cases["tree"], "--runner",
                           "DataflowRunner", "--dry_run", "True", "--project", PROJECT, "--region", REGION,
                           "--temp_location", f"{b}/tmp"], env=env, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 2 and "line 1: 'requests>=>2' is not a requirement" in proc.stderr, proc.stderr


def test_dataflow_sh_dry_run_needs_no_network(tmp_path):
    import time
    env = dict(unreachable_gcs(tmp_path), PROJECT=PROJECT, REGION=REGION, BUCKET="unreachable-bucket",
               DRY_RUN="1")
    started = time.monotonic()
    proc = subprocess.run(["bash", os.path.join(LAUNCH, "dataflow.sh"), "--input", "gs://unreachable-bucket/in",
                           "--output", "gs://unreachable-bucket/out"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert time.monotonic() - started < 60
    assert "dry run: the DataflowRunner job was built and not submitted" in proc.stdout
    assert "not checked (that needs the network" in proc.stdout
    assert "gs://unreachable-bucket/dataflow/tmp" in proc.stdout


def test_flex_template_entry_point_dry_run_needs_no_network(tmp_path):
    """The template's entry file with Beam's --dry_run (how to try a template's
    parameters on a workstation): the job is built, no bucket is touched."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import main; "
            "sys.exit(main.main(sys.argv[2:]))")
    args = [f"--project={PROJECT}", f"--region={REGION}", "--temp_location=gs://unreachable-bucket/tmp",
            "--dry_run=True", "--input=gs://unreachable-bucket/images", "--output=gs://unreachable-bucket/ds",
            "--versioned=true", "--extend_label_map=true", f"--setup_file={os.path.join(ROOT, 'setup.py')}"]
    proc = subprocess.run([sys.executable, "-c", code, FLEX, *args], cwd=str(tmp_path), env=unreachable_gcs(tmp_path),
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "dry run: the DataflowRunner job was built and not submitted" in proc.stdout
    assert "--output gs://unreachable-bucket/ds" in proc.stdout


def test_dry_run_with_a_runner_that_would_run_the_job_is_refused(capsys):
    from tfrecord_pipelines.commands.convert import run
    assert run(["--input", "gs://b/in", "--output", "gs://b/out", "--runner", "PortableRunner",
                "--job_endpoint", "localhost:1", "--dry_run", "True"]) == 2
    assert "only DataflowRunner builds a job without running it" in capsys.readouterr().err


SCRIPTS = ["dataflow.sh", "run_local.sh", "flex_template/build.sh", "flex_template/run.sh",
           "scheduler/create_job.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_launch_scripts_print_their_help(script):
    """--help (or -h) prints the usage and exits 0 without any setting; the help
    names every environment variable the script reads, with its default."""
    path = os.path.join(LAUNCH, script)
    text = "\n".join(line for line in open(path).read().splitlines() if not line.lstrip().startswith("#"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PROJECT", "REGION", "BUCKET", "INPUT", "OUTPUT", "SERVICE_ACCOUNT", "TEMPLATE")}
    for flag in ("--help", "-h"):
        proc = subprocess.run(["bash", path, flag], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "error" not in proc.stderr and "set PROJECT" not in proc.stderr + proc.stdout
        shown = proc.stdout
        assert os.path.basename(script) in shown or "launch/" in shown, shown[:500]
    read = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", text))
    for loop in re.findall(r"^\s*for v in ([A-Z_ ]+); do", text, re.M):
        read |= set(loop.split())
    read -= {"CI"}
    missing = sorted(v for v in read if not re.search(rf"\b{v}\b", shown))
    assert not missing, f"{script} --help does not name {missing}"
    for name, default in re.findall(r"\$\{([A-Z][A-Z0-9_]*):-([^}$]+)\}", text):
        assert default in shown, f"{script} --help does not give {name}'s default {default!r}"
    if script == "run_local.sh":
        assert "--num_shards" in shown and "--label_table" in shown  # convert's flags, below its own
