"""A Dataflow dry run (`--runner DataflowRunner --dry_run True`, or
`DRY_RUN=1 launch/dataflow.sh`) builds the job on this machine and stops
before submitting it: it exists to check a job before paying for one, so it
must not need the network. Without it, listing a bucket that cannot be reached
took 140 s of retries and ended in `BeamIOError ... RetryError`.

Every place that would ask a bucket before the job exists (the input's
listing, a table's header, a --label_map, LATEST, the output's lock and
contents) asks `skip(path, what)` first. During a dry run a remote path is
skipped, with what that leaves unchecked; local files are still read. The
summary then says what was checked (the options, the staged package, the
graph) and what was not (`unchecked()`).
"""
from __future__ import annotations

from typing import Optional

from tfrecord_pipelines.transforms.storage import fsutil

_notes: Optional[list] = None  # None: not a dry run


def begin(enabled: bool) -> None:
    """Starts (or, with False, ends) an offline dry run in this process."""
    global _notes
    _notes = [] if enabled else None


def active() -> bool:
    return _notes is not None


def skip(path: str, what: str) -> bool:
    """True when `path` must not be touched (a dry run, a remote path); `what`
    says what is therefore not checked."""
    if _notes is None or not path or fsutil.is_local(path):
        return False
    note(what)
    return True


def note(what: str) -> None:
    """Records something a dry run leaves unchecked."""
    if _notes is not None and what not in _notes:
        _notes.append(what)


def unchecked() -> list:
    return list(_notes or [])


def prepare(options) -> None:
    """Keeps Beam's staging off the network during a dry run: the packages of
    --requirements_file are not downloaded (Beam would run `pip download`,
    minutes of retries offline), but every line must parse as a requirement."""
    from apache_beam.options.pipeline_options import SetupOptions
    setup = options.view_as(SetupOptions)
    if not setup.requirements_file:
        return
    from packaging.requirements import InvalidRequirement, Requirement
    from tfrecord_pipelines.transforms.core.errors import UsageError
    try:
        with open(setup.requirements_file, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise UsageError(f"--requirements_file {setup.requirements_file!r} cannot be read: {e.strerror or e}") from None
    for n, line in enumerate(lines, 1):
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):  # comments and pip's own options (-r, -c, --index-url)
            continue
        try:
            Requirement(line)
        except InvalidRequirement as e:
            raise UsageError(f"--requirements_file {setup.requirements_file!r} line {n}: {line!r} is not a "
                             f"requirement ({e})") from None
    if setup.requirements_cache is None:
        setup.requirements_cache = "skip"  # Beam's word for: do not download them here
        note(f"--requirements_file {setup.requirements_file}: that its packages resolve on "
             "PyPI (pip download needs the network; each line parsed)")


def summary(options, result) -> list:
    """What a Dataflow dry run checked on this machine, and what it could not."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, SetupOptions
    gc, setup = options.view_as(GoogleCloudOptions), options.view_as(SetupOptions)
    checked = ["the options"]
    job = getattr(result, "job", None)
    pp = getattr(job, "proto_pipeline", None)
    image = ""
    if pp is not None:
        checked.append(f"the job graph ({len(pp.components.transforms)} transforms; every step's code pickled for "
                       "the workers)")
        from apache_beam.portability.api import beam_runner_api_pb2
        for env in pp.components.environments.values():
            staged = [beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(d.role_payload).staged_name
                      for d in env.dependencies]
            if "workflow.tar.gz" in staged:
                checked.append(f"the package --setup_file {setup.setup_file} stages (its sdist was built)")
            try:
                image = beam_runner_api_pb2.DockerPayload.FromString(env.payload).container_image
            except Exception:  # not a Docker environment
                pass
    lines = ["checked on this machine: " + "; ".join(checked),
             "not checked (that needs the network; Dataflow checks it when the job is submitted):"]
    lines += [f"  - {what}" for what in unchecked()]
    where = ", ".join(x for x in (gc.temp_location, gc.staging_location) if x)
    if where:
        lines.append(f"  - the temp and staging locations ({where}): that they exist and this account may write there")
    lines.append(f"  - project {gc.project}: the Dataflow API, this account's permissions, and quota in "
                 f"{gc.region or 'the region'}")
    if image:
        lines.append(f"  - that the workers can pull their container image {image}")
    return lines
