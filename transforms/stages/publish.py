"""Stage Publish (WriteManifest): once every shard is complete, move the shards
under their final names, write the rejects and label map, and write the
manifest last, create-only: a manifest means a complete output.

It runs once, on one worker, over small inputs (shard results, counts, and
the rejects' batches or spill references, which transforms/storage/reject_log.py
counts and streams into rejects.jsonl without holding them all). It is idempotent, because a runner may replay it: a replay finds its
own manifest and stops.

First, before anything is touched: is this the dataset asked for? Too many
rejects, no record, a --versioned fall against LATEST, undecodable table rows
refuse it; lost classes and splits and the fixes rejects name are noted
(transforms/core/publishable.py).

Order, so an old dataset is never mixed with a new one: remove the old
manifest (the folder stops claiming to be complete), remove stale shards (any
shard name not in this run: another count, split or compression), rename the
new shards in, check they are all there, write the manifest (complete or not
at all), read it back, move LATEST (--versioned: only if it still names the
version this run started from), remove the versions beyond --keep_versions
and the version folders killed runs left (transforms/storage/retention.py),
remove the staging folder and the lock. Once the manifest is written, the
rejects earlier refused runs kept in the folder (failed-<run>.rejects.jsonl)
go.

Fencing: a run publishes only while the lock names it. One whose lock was
taken over (--break_lock, or the TTL) stops before touching the output; the
check is repeated before the manifest and before LATEST. (A takeover between
a check and the next write is not excluded: files have no fencing tokens.)
"""
from __future__ import annotations

import collections
import contextlib
import datetime
import errno
import json
import logging
import os
from typing import Iterable, NamedTuple

import apache_beam as beam

from tfrecord_pipelines.transforms.core import fingerprint, provenance, publishable, resize, sharding, tfds_metadata
from tfrecord_pipelines.transforms.core.annotations import boxes
from tfrecord_pipelines.transforms.core.annotations.categories import label_map_pbtxt
from tfrecord_pipelines.transforms.core.errors import ConversionError
from tfrecord_pipelines.transforms.core.features import feature_roles, feature_schema, tfmd_schema
from tfrecord_pipelines.transforms.core.records import ShardResult
from tfrecord_pipelines.transforms.core.specs import PublishSpec
from tfrecord_pipelines.transforms.storage import confined, copy_trust, fsutil, layout, report_data, resume, retention, run_lock
from tfrecord_pipelines.transforms.storage.reject_log import RejectLog


class PublishError(ConversionError, RuntimeError):
    pass


class TooManyRejects(PublishError):
    pass


def collect_shards(shards: Iterable[ShardResult], plans: dict) -> dict:
    """{split: [ShardResult by index]}; every planned shard exactly once."""
    by_name: dict = {}
    for s in shards:
        seen = by_name.get(s.name)
        if seen is not None and (seen.crc32c, seen.records) != (s.crc32c, s.records):
            raise PublishError(f"shard {s.name} was written twice with different contents")
        by_name.setdefault(s.name, s)
    out = {}
    for split, plan in sorted(plans.items()):
        got = sorted((s for s in by_name.values() if s.split == split), key=lambda s: s.index)
        if [s.index for s in got] != list(range(plan.num_shards)):
            raise PublishError(f"split {split!r}: {plan.num_shards} shards planned, got indices "
                               f"{[s.index for s in got]}")
        out[split] = got
    return out


def build_manifest(spec: PublishSpec, got: RunResults, shards: dict) -> dict:
    """The manifest's content; `shards` is collect_shards' {split: [ShardResult]}."""
    rejects, stats, label_map, keys = got.rejects, got.stats, got.label_map, dict(spec.output.feature_keys)
    written = sum(s.records for ss in shards.values() for s in ss)
    listed = stats.get("listed", 0)
    not_selected = stats.get("not_selected", 0)
    if listed != written + len(rejects) + not_selected:
        raise PublishError(f"counts do not reconcile: listed {listed} != written {written} + rejected "
                           f"{len(rejects)} + not selected {not_selected}")
    names = {i: n for n, i in label_map.ids}
    splits = {}
    for split, ss in shards.items():
        per_label = collections.Counter()
        for s in ss:
            per_label.update(dict(s.label_counts))
        splits[split] = {
            "records": sum(s.records for s in ss),
            "bytes": sum(s.bytes for s in ss),
            "num_shards": len(ss),
            "pattern": sharding.pattern_of(sharding.names_of(spec.options), _output_format(spec.options), split),
            "label_counts": {names.get(i, str(i)): c for i, c in sorted(per_label.items())},
            "shards": [_shard_entry(s) for s in ss],
        }
    by_reason = rejects.by_reason
    schema = feature_schema(label_map.kind, label_map.extra_kinds, keys, resize.enabled_in(spec.options),
                            boxes.masks_in(spec.options), bool(spec.options.get("output", {}).get("source_ids")))
    manifest = {
        "format": layout.MANIFEST_FORMAT,
        "tool_version": spec.tool_version,
        "run_id": spec.output.run_id,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "compression": spec.compression.value,
        "tf_compression_type": spec.compression.tf_name,
        # tfrecord or array_record (--output_format), as the run's settings give it
        "output_format": _output_format(spec.options),
        "counts": {"listed": listed, "written": written, "rejected": len(rejects), "not_selected": not_selected,
                   "excluded": {k.split("/", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("excluded/")}},
        "rejects_by_reason": dict(sorted(by_reason.items())),
        "rejects_file": layout.REJECTS,
        "splits": splits,
        "label_map": label_map.to_json(),
        "features": schema,
        "feature_roles": feature_roles(schema, keys),
        "options": spec.options,
        # Re-encoded (resized) bytes are the same for the same options and these versions.
        "image_library": resize.library_versions(),
        "fingerprint": {"run": fingerprint.recorded(got.fingerprint), "options": spec.options_fingerprint},
        "quality": got.quality,
    }
    if spec.options.get("detection"):  # --annotations: boxes by outcome, class, count and size
        manifest["detection"] = boxes.section(stats, label_map.as_dict(), not_selected)
    tfds_files = tfds_metadata.metadata_files(manifest, "")
    manifest["tfds"] = ({"metadata": sorted(tfds_files)} if tfds_files
                        else {"metadata": [], "why_not": tfds_metadata.unsupported(manifest)})
    if tfds_files and tfds_metadata.names_why_not(manifest):
        manifest["tfds"]["class_names_why_not"] = tfds_metadata.names_why_not(manifest)
    if spec.output.root:
        manifest["version"] = spec.output.version
        manifest["previous_version"] = spec.output.previous_version
        manifest["incremental"] = incremental_section(spec, [s for ss in shards.values() for s in ss])
    manifest["made"] = how_made(spec, got, [s for ss in shards.values() for s in ss])
    return manifest


def incremental_section(spec: PublishSpec, shards: list) -> dict:
    """What a later version needs to take this one's records (--versioned):
    the settings they were made with, when the listing started (files changed
    since are not trusted unchanged: provenance.racy), and each shard's
    provenance file with its size and CRC32C."""
    section = {"options": spec.shard_options, "listed_at_ns": spec.output.listed_at_ns}
    if shards and all(s.prov_temp_path for s in shards):
        section["format"] = provenance.FORMAT
        section["provenance"] = {s.name: {"file": provenance.provenance_name(s.name), "bytes": s.prov_bytes,
                                          "crc32c": s.prov_crc32c} for s in shards}
    elif not shards:
        section.update(format=provenance.FORMAT, provenance={})
    return section


def how_made(spec: PublishSpec, got: RunResults, shards: list) -> dict:
    """How this output was made: from which version records were copied (or
    why none were), how many were copied and read, and what a killed run's
    resume kept. The only part of the manifest (with the run's id, times and
    version names) in which an incremental or resumed run differs from a full one."""
    out, stats = spec.output, got.stats
    fresh = [s for s in shards if not s.resumed]
    made = {"from_version": out.previous.version if out.previous else None,
            "full_because": None if out.previous else (out.why_full or None),
            "records_copied": sum(s.copied for s in fresh),
            "images_read": sum(s.read for s in fresh) + stats.get("incremental/validation_rejects", 0),
            "records_repaired": sum(s.repaired for s in fresh),
            "shards_resumed": len(shards) - len(fresh),
            "records_in_resumed_shards": sum(s.records for s in shards if s.resumed)}
    if out.previous:
        made.update({k: stats.get(f"incremental/{k}", 0) for k in ("unchanged", "new", "changed", "removed")})
        made["records_of_damaged_provenance"] = stats.get("incremental/damaged", 0)
        if stats.get("incremental/racy"):  # only then: other manifests read as they did
            made["changed_racy"] = stats["incremental/racy"]
        made["records_of_untrusted_shards"] = stats.get("incremental/untrusted", 0)
    return made


def _output_format(options: dict) -> str:
    return (options.get("shards") or {}).get("output_format", "tfrecord")


def _shard_entry(s: ShardResult) -> dict:
    entry = {"name": s.name, "records": s.records, "bytes": s.bytes, "crc32c": s.crc32c}
    if s.index_temp_path:
        entry["index"] = layout.index_name(s.name)
    return entry


def label_map_json(label_map) -> bytes:
    return (json.dumps(dict(label_map.ids), indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def schema_pbtxt(features: dict) -> bytes:
    """The features as a TFX (tensorflow_metadata) Schema, for TFX pipelines
    that import a schema instead of inferring one."""
    from google.protobuf import text_format
    return text_format.MessageToString(tfmd_schema(features)).encode("utf-8")


def _read_json(path: str):
    try:
        return json.loads(fsutil.read_bytes(path))
    except Exception:  # missing or unreadable: treated as absent
        return None


class RunResults(NamedTuple):
    """What the pipeline hands the publish step."""
    shards: list        # [ShardResult]
    rejects: RejectLog  # counted; rejects.jsonl streamed from spill files or batches
    stats: dict         # {"listed": n, "not_selected": n, "excluded/<why>": n}
    label_map: object   # LabelMap
    plans: dict         # {split: SplitPlan}
    fingerprint: tuple  # the run's (recorded, compared): transforms/core/fingerprint.py
    quality: object = None  # the manifest's "quality" section (transforms/stages/check_quality.py); None: off


def publish(spec: PublishSpec, got: RunResults) -> dict:
    """Publishes the run's output; returns its manifest. A job the launcher
    does not wait for also ends the run here (staging folder and lock) when
    it publishes or fails for a reason of ours; a transient error is left to
    the runner's retry, which must still hold the lock."""
    try:
        manifest = _publish(spec, got)
    except ConversionError:
        _end(spec)
        raise
    _end(spec)
    return manifest


def _publish(spec: PublishSpec, got: RunResults) -> dict:
    out = spec.output
    manifest_path = fsutil.join(out.output, layout.MANIFEST)
    current = _read_json(manifest_path)
    if isinstance(current, dict) and current.get("run_id") == out.run_id:  # a replay of this step: already published
        if out.root:
            _move_latest(out)
        return current
    run_lock.check(out.lock_dir, out.run_id)
    area = resume.area(out.resume_parent, fingerprint.compared(got.fingerprint), spec.tool_version) \
        if out.resume_parent else ""
    if not out.republish and fingerprint.unchanged(got.fingerprint, out.previous_fingerprint):
        logging.getLogger(__name__).warning(
            "inputs and options unchanged since version %s: nothing published", out.previous_version)
        if out.resume_parent:
            resume.remove_all(out.resume_parent)
        return {"unchanged_since": out.previous_version}
    by_split = collect_shards(got.shards, got.plans)
    # Is this the dataset asked for? (transforms/core/publishable.py; here, so a Dataflow job checks it too)
    verdict = publishable.check_publishable(
        publishable.run_facts(spec.options, got.label_map, by_split, got.stats, len(got.rejects),
                              got.rejects.by_reason, got.rejects.facts, _previous_version(out)),
        publishable.Guards(spec.allow_empty, spec.allow_shrink, spec.max_reject_fraction))
    _refuse_too_many_rejects(spec, got, tuple("note: " + w for w in verdict.warnings))
    if verdict.refusal:
        _keep_failed_rejects(spec, got)
        raise publishable.NotPublishable("\n".join((verdict.refusal, *("note: " + w for w in verdict.warnings))))
    all_shards = [s for ss in by_split.values() for s in ss]
    manifest = build_manifest(spec, got, by_split)
    why = manifest["tfds"].get("class_names_why_not")
    manifest["warnings"] = [*verdict.warnings, *([f"TFDS: {why}"] if why else [])]
    for line in manifest["warnings"]:
        logging.getLogger(__name__).warning("%s", line)
    if out.root and out.keep_versions:
        manifest["made"]["versions_removed"], kept = retention.versions_to_remove(out)
        if kept:  # beyond the newest N, but not removable without leaving the root's filesystem or following a link
            manifest["made"]["versions_not_removed"] = kept
        left = retention.leftovers(out.root, {out.version, out.previous_version})
        if left:  # only then: a manifest without leftovers reads as it did
            manifest["made"]["leftovers_removed"] = [{"folder": name, "files": n} for name, n in left]
    if out.root:
        _check_version_folder(out)
    companions = _companions(got, manifest)
    run_lock.check(out.lock_dir, out.run_id)  # the last moment before the old output is touched
    rerun = _rerun_hint(out, bool(area))
    with _writing(out.output, rerun):
        if area:  # what a run killed from here on must undo (transforms/storage/resume.py)
            resume.write_journal(area, out.output, _planned_moves(out.output, all_shards),
                                 sorted(companions) + [report_data.REPORT], versioned=bool(out.root))
        fsutil.delete([manifest_path])
        for folder in (out.output, fsutil.join(out.output, provenance.FOLDER)):
            copy_trust.unpin_folder(folder)  # an earlier run's pins of this folder
        _move_shards_in(out.output, all_shards)
        for name, data in companions.items():
            fsutil.write_chunks(fsutil.join(out.output, name), [data] if isinstance(data, bytes) else data)
        _remove_stale_tfds_files(out.output, manifest["tfds"]["metadata"])
    check_published(out.output, all_shards)  # never a manifest beside missing shards
    # report.html before the manifest (still written last), which notes whether it was written: a report
    # that cannot be built never fails the publish (transforms/storage/report_data.py).
    manifest["report"] = report_data.write_report_safely(out.output, manifest)
    run_lock.check(out.lock_dir, out.run_id)
    with _writing(out.output, rerun):
        try:
            fsutil.create_only(manifest_path, manifest_bytes(manifest))
        except fsutil.AlreadyExists:
            raise PublishError(f"{manifest_path} appeared while publishing: another run wrote this output") from None
    check_published(out.output, all_shards, out.run_id)
    # Published: the rejects earlier refused runs kept here describe no dataset in this folder any more.
    fsutil.delete([fsutil.join(out.output, n) for n in fsutil.list_dir(out.output)
                   if layout.FAILED_RUN_REJECTS_RE.match(n)])
    if out.root and fsutil.is_local(out.output):  # what a later version may copy from: transforms/storage/copy_trust.py
        copy_trust.pin(manifest_path)
    if out.resume_parent:  # published: no run can use a resume area of this root or output any more
        resume.remove_all(out.resume_parent)
    # Only now, with the version complete, may training jobs see it.
    if out.root:
        run_lock.check(out.lock_dir, out.run_id)
        try:
            _move_latest(out)
        except OSError as e:
            if e.errno not in _WRITE_ERRNOS:
                raise
            raise PublishError(_latest_not_written(out, e)) from None
        retention.remove_versions(out.root, manifest["made"].get("versions_removed", []))
        retention.remove_leftovers(out.root, [e["folder"] for e in manifest["made"].get("leftovers_removed", [])])
    copy_trust.prune()
    return manifest


def _check_version_folder(out) -> None:
    """The version folder is still a real folder of the root (made so when
    the run took the lock: transforms/storage/confined.py), so LATEST never
    names a version written elsewhere."""
    try:
        confined.check_version_folder(out.root, out.version)
    except confined.Refused as e:
        raise PublishError(f"{e}: a version is published only from a folder of the dataset root. Nothing was "
                           "published") from None


def _previous_version(out) -> "publishable.Previous | None":
    """The version LATEST names, which must still be the one this run read
    when it started: its class ids were carried from there, and the record
    count is held to it (--allow_shrink)."""
    if not out.root:
        return None
    current = layout.latest_name(out.root)
    if current != out.previous_version:
        raise PublishError(f"{fsutil.join(out.root, layout.LATEST)} names {current or 'no version'}, not "
                           f"{out.previous_version or 'no version'} as when this run started: another run published "
                           "meanwhile, and this run's class ids were carried from the version before. Nothing was "
                           "published; rerun to build on the current version")
    try:
        version, m = layout.read_latest(out.root)
    except ValueError:  # unreadable since the run started: nothing to compare with
        return None
    return publishable.previous_of(version, m) if m is not None else None


def _move_latest(out) -> None:
    """Points LATEST at this version, only if it still names the version this
    run started from (or already this one); else says which it names."""
    if layout.publish_latest(out.root, out.version, out.run_id, expected=out.previous_version):
        return
    raise PublishError(f"version {out.version} is complete in {out.output}, but was not made current: "
                       f"{fsutil.join(out.root, layout.LATEST)} names {layout.latest_name(out.root) or 'no version'}, "
                       f"published by another run after this one read {out.previous_version or 'no version'} "
                       "there (this run's class ids were carried from that one). Training jobs that read LATEST do "
                       "not see this version; rerun to publish one built on the current version")


def _refuse_too_many_rejects(spec: PublishSpec, got: RunResults, notes: tuple = ()) -> None:
    listed, rejects = got.stats.get("listed", 0), got.rejects
    if not listed or len(rejects) / listed <= spec.max_reject_fraction:
        return
    failed = _keep_failed_rejects(spec, got)
    raise TooManyRejects("\n".join((
        f"{len(rejects):,} of {listed:,} listed records ({len(rejects) / listed:.1%}) were rejected, "
        f"above --max_reject_fraction {spec.max_reject_fraction}; nothing was published. The rejects and their "
        f"reasons are in {failed}", *notes)))


def _keep_failed_rejects(spec: PublishSpec, got: RunResults) -> str:
    """A refused run's rejects, kept for inspection as failed-<run>.rejects.jsonl."""
    output = spec.output.output
    failed = fsutil.join(output, layout.failed_rejects_name(spec.output.run_id))
    if not len(got.rejects):
        return failed
    with _writing(output, _rerun_hint(spec.output, bool(spec.output.resume_parent))):
        fsutil.write_chunks(failed, got.rejects.jsonl())
    _prune_failed_rejects(output, spec.output.run_id)
    return failed


def _companions(got: RunResults, manifest: dict) -> dict:
    """{file name: bytes (or its pieces)} written beside the shards, before the manifest."""
    files = {layout.REJECTS: got.rejects.jsonl(), layout.LABEL_MAP: label_map_json(got.label_map),
             layout.SCHEMA: schema_pbtxt(manifest["features"])}
    files.update(tfds_metadata.metadata_files(manifest, f"Converted by tfrecord-pipelines {manifest['tool_version']}"))
    if "detection" in manifest:  # the Object Detection API's label map
        files[layout.LABEL_MAP_PBTXT] = label_map_pbtxt(got.label_map)
    return files


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=1, ensure_ascii=False) + "\n").encode("utf-8", "surrogateescape")


# Write errors that a retry will not cure: the run fails with a message, not a traceback.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def _rerun_hint(out, resumable: bool) -> str:
    """What to do after a write error while publishing, once its cause is fixed."""
    if out.root:  # a new version's folder: nothing of it is current, nothing to overwrite
        return (f"{layout.LATEST} still names {out.previous_version or 'no version'}; once this is fixed, the same "
                "command publishes a new version")
    if resumable:  # the next run undoes a publish begun (its journal) and keeps the complete shards
        return (f"{out.output} has no {layout.MANIFEST}; once this is fixed, the same command resumes from the "
                "completed shards")
    return f"{out.output} has no {layout.MANIFEST}; rerun with --overwrite once this is fixed"


def _latest_not_written(out, e: OSError) -> str:
    """The version is complete (its manifest read back): only the pointer to it failed."""
    latest = fsutil.join(out.root, layout.LATEST)
    write = (f"printf '%s\\n' {out.version} > {latest}" if fsutil.is_local(out.root)
             else f"echo {out.version} | gcloud storage cp - {latest}")
    return (f"version {out.version} is complete in {out.output}, but {latest} could not be written "
            f"({e.strerror or e}): training jobs that read LATEST do not see it yet. Once this is fixed, publish it "
            f"with: {write}")


@contextlib.contextmanager
def _writing(output: str, rerun: str = ""):
    try:
        yield
    except OSError as e:
        if e.errno not in _WRITE_ERRNOS:
            raise  # e.g. a lost connection: let the runner retry the step
        where = getattr(e, "filename", None) or output
        rerun = rerun or f"{output} has no {layout.MANIFEST}; rerun with --overwrite once this is fixed"
        raise PublishError(f"writing {where} failed: {e.strerror or e}; nothing was published ({rerun})") from None


def check_published(output: str, shards: list, run_id: str = "") -> None:
    """What was published is there: every shard under its name with its size,
    and (with run_id) this run's manifest, readable. Otherwise the folder was
    changed or removed while publishing; our manifest, if any, is removed so the
    folder does not claim to be complete."""
    sizes = fsutil.list_sizes(output)
    bad = [s.name for s in shards if sizes.get(s.name) != s.bytes]
    if any(s.index_temp_path for s in shards):
        idx = fsutil.list_sizes(fsutil.join(output, layout.INDEX_FOLDER))
        bad += [layout.index_name(s.name) for s in shards
                if s.index_temp_path and idx.get(layout.index_name(s.name).split("/", 1)[1]) != s.index_bytes]
    if any(s.prov_temp_path for s in shards):
        prov = fsutil.list_sizes(fsutil.join(output, provenance.FOLDER))
        bad += [provenance.provenance_name(s.name) for s in shards
                if s.prov_temp_path and prov.get(provenance.provenance_name(s.name).split("/", 1)[1]) != s.prov_bytes]
    problem = ""
    if bad:
        problem = (f"{len(bad)} shards or shard indexes missing after publishing or of the wrong size "
                   f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})")
    elif run_id:
        try:
            if layout.read_manifest(output).get("run_id") != run_id:
                problem = f"{layout.MANIFEST} missing after publishing: another run's manifest is there"
        except Exception as e:  # gone or unreadable
            problem = f"{layout.MANIFEST} missing after publishing or unreadable ({str(e)[:200]})"
    if not problem:
        return
    ours = _read_json(fsutil.join(output, layout.MANIFEST))
    if run_id and isinstance(ours, dict) and ours.get("run_id") == run_id:
        fsutil.delete([fsutil.join(output, layout.MANIFEST)])
    raise PublishError(f"{output}: {problem}; was the output folder changed or removed while publishing? "
                       "Nothing was published")


def _remove_stale_tfds_files(output: str, written: list) -> None:
    """Removes TFDS metadata files of an earlier run that this run does not
    write (another label key, or none at all)."""
    fsutil.delete([fsutil.join(output, n) for n in fsutil.list_dir(output)
                   if layout.is_tfds_file(n) and n not in written])


def _prune_failed_rejects(output: str, run_id: str) -> None:
    """Keeps the rejects of this run and of the latest other failed runs,
    KEEP_FAILED_REJECTS in all: run ids start with their start time, so names
    sort by age (this run's own file is kept even if another started in the
    same second)."""
    mine = layout.failed_rejects_name(run_id)
    older = sorted(n for n in fsutil.list_dir(output) if layout.FAILED_REJECTS_RE.match(n) and n != mine)
    fsutil.delete([fsutil.join(output, n) for n in older[:max(0, len(older) - (layout.KEEP_FAILED_REJECTS - 1))]])


def _side_files(output: str, s: ShardResult) -> list:
    """(staged path, final path) of a shard's index and provenance files."""
    out = []
    if s.index_temp_path:
        out.append((s.index_temp_path, fsutil.join(output, layout.index_name(s.name))))
    if s.prov_temp_path:
        out.append((s.prov_temp_path, fsutil.join(output, provenance.provenance_name(s.name))))
    return out


def _planned_moves(output: str, shards: list) -> list:
    return [m for s in shards for m in [(s.temp_path, fsutil.join(output, s.name)), *_side_files(output, s)]]


def _move_shards_in(output: str, shards: list) -> None:
    """Removes every shard file that is not this run's (another count, split or
    compression), and every shard index and provenance file that is not,
    then gives this run's shards and their files their final names. A replay
    finds them already moved."""
    keep = {s.name for s in shards} | {layout.index_name(s.name) for s in shards if s.index_temp_path}
    present = fsutil.list_sizes(output)
    # Shards of another run, and indexes (in index/, or beside the shards where earlier versions wrote them).
    fsutil.delete([fsutil.join(output, n) for n in [*(n for n in present if layout.SHARD_RE.match(n)),
                                                     *layout.list_indexes(output)] if n not in keep])
    index_folder = fsutil.join(output, layout.INDEX_FOLDER)
    if fsutil.is_local(output):
        if any(s.index_temp_path for s in shards):
            os.makedirs(index_folder, exist_ok=True)
        elif os.path.isdir(index_folder) and not os.listdir(index_folder):
            os.rmdir(index_folder)  # emptied above: a run without --index_files leaves no index folder
    prov_folder = fsutil.join(output, provenance.FOLDER)
    kept_prov = {provenance.provenance_name(s.name).split("/", 1)[1] for s in shards if s.prov_temp_path}
    present_prov = fsutil.list_sizes(prov_folder)
    fsutil.delete([fsutil.join(prov_folder, n) for n in present_prov if n not in kept_prov])
    if kept_prov and fsutil.is_local(output):
        os.makedirs(prov_folder, exist_ok=True)
    # One listing per staging folder and batched renames, not requests per shard: on GCS a rename
    # is a copy and a delete, and 1,024 shards one by one took minutes.
    staged: dict = {}
    moves = []
    for src, dst in _planned_moves(output, shards):
        folder, base = src.rsplit("/", 1) if "/" in src else ("", src)
        if folder not in staged:
            staged[folder] = fsutil.list_sizes(folder)
        if base in staged[folder]:
            moves.append((src, dst))
        elif not fsutil.exists(dst):
            raise PublishError(f"{dst.rsplit('/', 1)[-1]} is missing from the staging folder {folder}")
    copy_trust.rename_pinned(moves)  # a shard pinned as staged stays pinned where it is published


def _end(spec: PublishSpec) -> None:
    if spec.job_ends_run:
        fsutil.delete_tree(spec.staging)
        if spec.remove_at_end:  # read by the listing, long before: a detached launcher cannot remove it
            fsutil.delete_tree(spec.remove_at_end)
        if spec.output.root:  # the version folder the run made, if it published nothing into it
            confined.remove_if_empty(spec.output.output)
        run_lock.release(spec.output.lock_dir, spec.output.run_id)


class Publish(beam.PTransform):
    """Inputs: a dict with "shards" (ShardResult), "rejects" ([Reject] batches),
    "stats" ((name, count)), "label_map", "plans" and "fingerprint" (singletons)."""

    def __init__(self, spec: PublishSpec):
        super().__init__()
        self._spec = spec

    def expand(self, inputs):
        side, spec = beam.pvalue, self._spec
        rejects = inputs["rejects"]  # batches, or on a local run their spill references
        stats = inputs["stats"] | "SumStats" >> beam.CombinePerKey(sum)
        return (inputs["shards"].pipeline
                | "Once" >> beam.Create([None])
                | "Publish" >> beam.Map(
                    lambda _, shards, rejects, *got: publish(spec, RunResults(
                        shards, RejectLog(rejects), *got)),
                    side.AsList(inputs["shards"]), side.AsList(rejects), side.AsDict(stats),
                    side.AsSingleton(inputs["label_map"]), side.AsSingleton(inputs["plans"]),
                    side.AsSingleton(inputs["fingerprint"]),
                    *([side.AsSingleton(inputs["quality"])] if "quality" in inputs else [])))
