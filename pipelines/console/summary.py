"""What the commands print when a run ends: a conversion's summary (splits,
counts, labels, warnings), the --dry_run preview, and a check's summary
(the progress line while it runs: progress_line.py)."""
from __future__ import annotations

import json
import os
import posixpath
import sys
from typing import TYPE_CHECKING

from tfrecord_pipelines.run import runtime
from tfrecord_pipelines.options.config import ConvertConfig
from tfrecord_pipelines.outputs.versions import FULL_GIVEN
from tfrecord_pipelines.transforms.core import findings
from tfrecord_pipelines.transforms.core.specs import LabelType
from tfrecord_pipelines.transforms.core.units import human_bytes, plural
from tfrecord_pipelines.transforms.storage import fsutil, layout, report_data

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions


def print_summary(output: str, seconds: float, out=None) -> None:
    out = out or sys.stdout
    m = layout.read_manifest(output)
    c = m["counts"]
    rate = c["written"] / seconds if seconds > 0 else 0
    print(f"\nConverted in {seconds:.1f} s ({rate:,.0f} records/s) into {output}", file=out)
    print(f"{'split':<14}{'records':>10}{'shards':>8}{'bytes':>12}  files", file=out)
    for name, s in m["splits"].items():
        print(f"{name:<14}{s['records']:>10,}{s['num_shards']:>8}{human_bytes(s['bytes']):>12}  "
              f"{fsutil.join(output, s['pattern'])}", file=out)
    for line in findings_lines(m, output):
        print(line, file=out)
    for name, s in m["splits"].items():
        empty = sum(1 for e in s["shards"] if not e["records"])
        if empty:
            # The count asked for is kept (file names promise -of-N), but say so.
            print(f"warning: split {name}: {plural(s['num_shards'], 'shard')} for {plural(s['records'], 'record')}; "
                  f"{plural(empty, 'shard')} {'is' if empty == 1 else 'are'} empty", file=sys.stderr)
    reader = ((m.get("options") or {}).get("output") or {}).get("reader") or []
    if isinstance(reader, list) and reader and all(isinstance(r, str) for r in reader):
        print(f"for {reader[0]}: {' '.join(reader[1:]) or 'nothing to set'} (a flag you give wins)", file=out)
    for line in count_lines(c, "written", m["rejects_by_reason"], fsutil.join(output, layout.REJECTS)):
        print(line, file=out)
    for line in report_lines(m.get("report")):
        print(line, file=sys.stderr)
    excluded = c.get("excluded") or {}
    if excluded:
        print("not listed: " + ", ".join(f"{k} {v:,}" for k, v in excluded.items()), file=out)
    for line in made_lines(m, posixpath.dirname(output) if m.get("version") else ""):
        print(line, file=out)
    lm = m["label_map"]
    if lm["kind"] in (LabelType.CLASS, LabelType.INT):
        print(f"labels: {plural(len(lm['classes']), 'class', 'classes')} ({lm['kind']}), map in "
              f"{fsutil.join(output, layout.LABEL_MAP)}", file=out)
    elif lm["kind"] == LabelType.FLOAT:
        print("labels: float regression targets (image/target)", file=out)
    elif lm["kind"] == LabelType.BOXES and isinstance(m.get("detection"), dict):
        b = m["detection"]["boxes"]
        dropped = b.get("dropped") or {}
        print(f"boxes: listed {b['listed']:,} = written {b['written']:,} (clipped {b['clipped']:,}) + dropped "
              f"{sum(dropped.values()):,} + in rejected images {b['in_rejected_images']:,}"
              + (f" + in images not selected {b['in_images_not_selected']:,}" if "in_images_not_selected" in b
                 else ""), file=out)
        if dropped:
            print("boxes dropped by reason: " + ", ".join(f"{k} {v:,}" for k, v in dropped.items()), file=out)
        print(f"classes: {plural(len(lm['classes']), 'category', 'categories')}, map in "
              f"{fsutil.join(output, layout.LABEL_MAP)} and {layout.LABEL_MAP_PBTXT}", file=out)
    if not c["written"]:
        print("warning: the dataset is EMPTY: no record was written (published with --allow_empty)", file=sys.stderr)
    _print_warnings(m)


def print_warnings(output: str) -> None:
    """The manifest's warnings (transforms/core/publishable.py), on stderr."""
    try:
        m = layout.read_manifest(output)
    except Exception:  # no manifest to read: nothing to add
        return
    _print_warnings(m)


def _print_warnings(m: dict) -> None:
    warnings = m.get("warnings")
    for line in warnings if isinstance(warnings, list) else []:
        print(f"warning: {line}", file=sys.stderr)


def findings_lines(m: dict, output: str, check: bool = False) -> list:
    """Where report.html is (when it was written) and its "Look at these"
    findings with their counts (transforms/core/findings.py)."""
    note = m.get("report")
    name = note.get("file") if isinstance(note, dict) else None
    lines = [f"report: {fsutil.join(output, name)}"] if isinstance(name, str) and name else []
    found = findings.findings(m, check)
    if found:
        lines.append("look at these:")
        lines += [f"  {f.text}" for f in found]
    return lines


def report_lines(note) -> list:
    """What the console says of report.html (the manifest's "report"): a page
    that could not be built, or one the deadline cut short, with where its
    time went; nothing when it was built in full."""
    if not isinstance(note, dict):
        return []
    if note.get("error") or not note.get("file"):
        return [f"warning: report.html was not written: {str(note.get('error') or 'no reason given')[:300]} "
                "(`tfrecords report OUTPUT` builds it again)"]
    if note.get("cut"):
        spent = note.get("spent") if isinstance(note.get("spent"), dict) else {}
        where = ", ".join(f"{k} {v} s" for k, v in spent.items())
        return [f"warning: report.html is incomplete: {note['cut']} ({where})"]
    return []


def count_lines(c: dict, kept: str, by_reason: dict, rejects_path: str) -> list:
    """The reconciliation line (listed = kept + rejected [+ not selected])
    and the rejects by reason."""
    lines = [f"listed {c['listed']:,} = {kept} {c[kept]:,} + rejected {c['rejected']:,}"
             + (f" + not selected {c['not_selected']:,}" if c["not_selected"] else "")]
    if by_reason:
        reasons = ", ".join(f"{k} {v:,}" for k, v in by_reason.items())
        lines.append(f"rejected by reason: {reasons} (details: {rejects_path})")
    return lines


def made_lines(m: dict, root: str = "") -> list:
    """How the output was made (the manifest's "made"): copied from which
    version, or why it was a full conversion; what a resume kept; which
    versions --keep_versions removed (those still in `root`, the dataset
    root, are said not removed) or kept, and which folders killed runs left, --keep_versions removed. A field of another type (a damaged
    manifest) reads as absent."""
    made = m.get("made")
    if not isinstance(made, dict):
        return []

    def n(key: str) -> int:
        v = made.get(key)
        return v if type(v) is int else 0  # noqa: E721 (not bool)

    def text(key: str) -> str:
        v = made.get(key)
        return v if isinstance(v, str) else ""

    lines = []
    source = text("from_version")
    if source:
        repaired = n("records_repaired")
        lines.append(f"incremental from version {source}: {n('records_copied'):,} records copied, "
                     f"{n('images_read'):,} images read ({n('new'):,} new, {n('changed'):,} changed"
                     + (f", {repaired:,} whose copy in {source} was damaged" if repaired else "")
                     + f"), {n('removed'):,} removed" + racy_note(n("changed_racy"), source))
        if n("records_of_damaged_provenance"):
            lines.append(f"warning: version {source}: the provenance of {n('records_of_damaged_provenance'):,} "
                         "records is damaged or cannot be read; they were read from their sources and are counted "
                         "as new above (--full rewrites everything)")
        if n("records_of_untrusted_shards"):
            lines.append(f"note: version {source}: {n('records_of_untrusted_shards'):,} records were read from "
                         "their sources, not copied: their shards are not the files a run on this machine "
                         "published (changed, copied or made elsewhere since; a job whose home folder does not "
                         "last from run to run keeps its pins only with XDG_STATE_HOME on a lasting folder)")
    elif text("full_because") and m.get("version"):
        lines.append(f"full conversion: {text('full_because')}")
    if n("shards_resumed"):
        lines.append(f"resumed: {plural(n('shards_resumed'), 'shard')} ({n('records_in_resumed_shards'):,} records) "
                     "kept from a killed run of the same inputs and options")
    removed = made.get("versions_removed")
    if isinstance(removed, list) and removed:
        # The manifest, written before the version became current, lists what was to go: only what went is said
        # removed (a version that could not be removed whole is still there).
        left = [str(v) for v in removed if root and fsutil.exists(fsutil.join(root, str(v)))]
        gone = [str(v) for v in removed if str(v) not in left]
        if gone:
            lines.append("removed versions (--keep_versions): " + ", ".join(gone))
        if left:
            lines.append("warning: versions not removed (--keep_versions): " + ", ".join(left)
                         + " (still in the root: remove them yourself)")
    kept = made.get("versions_not_removed")
    if isinstance(kept, dict):
        lines += [f"warning: version {v} kept (--keep_versions): {why}; remove it yourself" for v, why in kept.items()]
    left = made.get("leftovers_removed")
    left = [(e.get("folder"), e.get("files")) for e in left if isinstance(e, dict)] if isinstance(left, list) else []
    left = [(name, n) for name, n in left if isinstance(name, str) and type(n) is int]  # noqa: E721 (not bool)
    if left:
        from tfrecord_pipelines.transforms.storage.retention import describe_leftovers
        lines.append(f"removed what killed runs left (--keep_versions): {describe_leftovers(left)}; no manifest, "
                     "nothing but a run's own files")
    return lines


def racy_note(racy: int, source: str) -> str:
    """Why unchanged files were read again: modified too close to the
    previous version's listing to trust their times (transforms/core/provenance.py, racy)."""
    if not racy:
        return ""
    from tfrecord_pipelines.transforms.core.provenance import RACY_MARGIN_NS
    return (f"; {racy:,} of the changed {'was' if racy == 1 else 'were'} re-read only because "
            f"{'its file was' if racy == 1 else 'their files were'} modified within {RACY_MARGIN_NS / 1e9:g} s of "
            f"{source}'s listing, too close to trust {'its' if racy == 1 else 'their'} times: the next run does not "
            f"read {'it' if racy == 1 else 'them'} again unless {'it changes' if racy == 1 else 'they change'}")


def print_preview(got: dict, cfg, out=None) -> bool:
    """--dry_run (a local run): what a run would read, write, publish and
    remove, from pipeline.build_preview's figures, before any image is read.
    True when it says the run would be refused (the command then exits 1,
    so a script that previews before it runs stops there)."""
    from tfrecord_pipelines.transforms.core.sharding import num_shards_for
    out = out or sys.stdout
    o, stats = cfg.output, got["stats"]
    excluded = {k.split("/", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("excluded/")}
    print(f"dry run: nothing was read, locked or written\nlisted {stats.get('listed', 0):,} files"
          + (f" (not listed: {', '.join(f'{k} {v:,}' for k, v in excluded.items())})" if excluded else "")
          + (f"; {stats['rejected']:,} rejected before reading (labels, paths, splits)" if stats.get("rejected") else ""),
          file=out)
    if o.previous is not None:
        print(f"from version {o.previous.version}: unchanged {stats.get('incremental/unchanged', 0):,}, new "
              f"{stats.get('incremental/new', 0):,}, changed {stats.get('incremental/changed', 0):,}, removed "
              f"{stats.get('incremental/removed', 0):,}", file=out)
        if stats.get("incremental/damaged"):
            print(f"warning: the provenance of {stats['incremental/damaged']:,} records of {o.previous.version} is "
                  "damaged or cannot be read: they would be read from their sources, as new records", file=out)
        if stats.get("incremental/untrusted"):
            print(f"note: {stats['incremental/untrusted']:,} records of {o.previous.version} are in shards that are "
                  "not the files a run on this machine published: they would be read from their sources", file=out)
    elif o.root:
        print(f"full conversion: {o.why_full}", file=out)
    print(f"{'split':<14}{'records':>10}{'to read':>10}{'shards':>8}{'bytes':>12}  about each", file=out)
    sized = True
    images_to_read = bytes_to_read = records_to_copy = bytes_to_copy = 0
    for split, (count, nbytes, to_read, read_bytes) in got["splits"].items():
        shards = num_shards_for(split, count, nbytes, cfg.shards)
        sized = sized and (nbytes > 0 or not count)
        images_to_read, bytes_to_read = images_to_read + to_read, bytes_to_read + read_bytes
        records_to_copy, bytes_to_copy = records_to_copy + count - to_read, bytes_to_copy + nbytes - read_bytes
        each = human_bytes(nbytes / shards) if shards else "-"
        print(f"{split:<14}{count:>10,}{to_read:>10,}{shards:>8}{human_bytes(nbytes):>12}  {each}", file=out)
    if not sized:
        print("note: the table gives no file sizes: shard counts come from --num_shards, or from the sizes read "
              "when the images are validated", file=out)
    from tfrecord_pipelines.run import cpu_estimate
    if _unchanged(got, o):  # the run would stop before reading or copying anything
        images_to_read = records_to_copy = 0
    cost = cpu_estimate.estimate(images_to_read, bytes_to_read if sized else 0, cfg.images.validation,
                                 cfg.images.resize.enabled, records_to_copy, bytes_to_copy if sized else 0)
    for line in cpu_estimate.describe(cost, remote_input=not fsutil.is_local(cfg.inputs.root)):
        print(line, file=out)
    if got.get("new_classes"):
        print(f"new classes (--extend_label_map): {', '.join(got['new_classes'][:10])}"
              + (", ..." if len(got["new_classes"]) > 10 else ""), file=out)
    refused = False
    for line in _publish_lines(got, cfg):
        print(line, file=out)
        refused = refused or line.startswith("would be refused")
    return refused


def _unchanged(got: dict, o) -> bool:
    """A --versioned run whose inputs and options are those of the version LATEST names: it publishes nothing."""
    return bool(o.root and o.previous_fingerprint and not o.republish and got["fingerprint"] == o.previous_fingerprint)


def _publish_lines(got: dict, cfg) -> list:
    o = cfg.output
    if o.root:
        if _unchanged(got, o):
            return [f"would publish nothing: inputs and options are the same as version {o.previous_version}",
                    *([full_unchanged_line(o.previous_version)] if o.why_full == FULL_GIVEN else [])]
        lines = [f"would publish version {o.version} in {o.root} and point LATEST at it"]
        if o.keep_versions:
            from tfrecord_pipelines.transforms.storage.retention import versions_to_remove
            gone, kept = versions_to_remove(o)
            lines.append(f"would remove versions (--keep_versions {o.keep_versions}): {', '.join(gone) or 'none'}")
            lines += [f"would keep version {v} (--keep_versions): {why}" for v, why in kept.items()]
            from tfrecord_pipelines.transforms.storage.retention import describe_leftovers, leftovers
            left = leftovers(o.root, {o.version, o.previous_version})
            if left:
                lines.append(f"would remove what killed runs left (--keep_versions): {describe_leftovers(left)}")
        return lines
    names = [n for n in fsutil.list_dir(o.output) if layout.is_dataset_file(n)]
    if not names:
        return [f"would write a new dataset into {o.output}"]
    count = sum(1 for n in names if layout.SHARD_RE.match(n))
    shards = f"{count} shard{'' if count == 1 else 's'}"
    if not o.overwrite:
        return [f"would be refused: {o.output} already holds a dataset ({shards}); pass --overwrite"]
    return [f"would replace the dataset in {o.output}: its manifest and {shards} would be removed"]


# ---- after a conversion ----


def print_outcome(options: PipelineOptions, cfg: ConvertConfig, runner, outcome: str, seconds: float) -> int:
    """What the command prints after a conversion (the Python API's
    verbose=True); its exit status."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions
    out = cfg.output
    template = options.view_as(GoogleCloudOptions).template_location
    if outcome == "dry_run":
        name = runner if isinstance(runner, str) else type(runner).__name__
        print(f"dry run: the {name} job was built and not submitted")
    elif not runtime.is_local(options) and template:
        print(f"job description written to {template} for the template launcher; the job's last step publishes "
              "the output")
    elif not runtime.is_local(options):
        print(f"job {outcome} ({options.view_as(StandardOptions).runner}); output {out.output}, complete when "
              f"{layout.MANIFEST} appears")
        if outcome == "done":  # the launcher waited: the job's publish step has written the manifest
            print_warnings(out.output)
    elif out.root and not fsutil.exists(fsutil.join(out.output, layout.MANIFEST)):
        if fsutil.is_local(out.output) and os.path.isdir(out.output) and not os.listdir(out.output):
            os.rmdir(out.output)
        print(f"unchanged: inputs and options are the same as version {out.previous_version}; nothing "
              f"published, {fsutil.join(out.root, layout.LATEST)} still names {out.previous_version}")
        if out.why_full == FULL_GIVEN:
            print(full_unchanged_line(out.previous_version))
    else:
        print_summary(out.output, seconds)
    return _latest_told(out) if out.root and outcome == "done" else 0


def full_unchanged_line(version: str) -> str:
    """--full on inputs and options unchanged since `version`: why nothing was published."""
    return (f"--full converts everything only when something changed: the inputs and options are those of "
            f"{version}, so no image was read; pass --republish_unchanged as well to publish a new version anyway")


def _latest_told(out) -> int:
    """What LATEST names after a --versioned run, as it is (read back, not
    assumed); 1 when this run's version was published but is not current."""
    latest = fsutil.join(out.root, layout.LATEST)
    current = layout.latest_name(out.root)
    if current == out.version:
        print(f"published version {out.version}: {latest} now names it")
        return 0
    if not fsutil.exists(fsutil.join(out.output, layout.MANIFEST)):
        return 0  # nothing published (unchanged inputs): said above
    print(f"error: version {out.version} is complete in {out.output}, but {latest} names "
          f"{current or 'no version'}, not this one: training jobs that read LATEST do not see it", file=sys.stderr)
    return 1


# ---- after a check ----


def print_check_outcome(options: PipelineOptions, cfg: ConvertConfig, outcome: str, seconds: float) -> int:
    """What the launcher prints after a check; its exit status."""
    from tfrecord_pipelines.transforms.stages.check_report import CHECK_JSON
    if not runtime.is_local(options):
        print(f"check job {outcome}; it writes {fsutil.join(cfg.output.output, report_data.REPORT)} and "
              f"{CHECK_JSON} when it ends (no shards, no manifest)")
        return 0
    return print_check_summary(cfg.output.output, seconds)


def print_check_summary(output: str, seconds: float, file=None) -> int:
    """The check's summary from check.json; returns the exit status (1: a
    conversion would be refused: for its rejects, or as publishing would be)."""
    from tfrecord_pipelines.transforms.stages.check_report import CHECK_JSON, CHECK_REJECTS
    file = file or sys.stdout
    f = json.loads(fsutil.read_bytes(fsutil.join(output, CHECK_JSON)))
    c = f["counts"]
    print(f"\nChecked in {seconds:.1f} s; nothing was converted.", file=file)
    print(f"{'split':<14}{'valid':>10}{'classes':>9}", file=file)
    for name, s in f["splits"].items():
        print(f"{name:<14}{s['records']:>10,}{len(s['label_counts']):>9,}", file=file)
    for line in findings_lines(f, output, check=True):
        print(line, file=file)
    for line in count_lines(c, "valid", f["rejects_by_reason"], fsutil.join(output, CHECK_REJECTS)):
        print(line, file=file)
    q = f.get("quality") or {}
    d = q.get("duplicates") or {}
    if d.get("groups"):
        print(f"duplicates: {d['groups']:,} groups of identical files ({d.get('across_splits', 0):,} across splits)",
              file=file)
    nd = q.get("near_duplicates") or {}
    if nd.get("pairs"):
        print(f"near duplicates: {nd['pairs']:,} pairs ({nd.get('across_splits', 0):,} across splits)", file=file)
    if (f.get("report") or {}).get("error"):
        print(f"warning: report.html was not written: {f['report']['error']}", file=sys.stderr)
    for line in f.get("warnings") or []:
        print(f"warning: {line}", file=sys.stderr)
    if not f.get("would_publish", True):
        if c["listed"] and c["rejected"] / c["listed"] > (f.get("max_reject_fraction") or 0):
            print(f"error: {c['rejected']:,} of {c['listed']:,} listed records ({c['rejected'] / c['listed']:.1%}) "
                  f"would be rejected, above --max_reject_fraction {f.get('max_reject_fraction')}: a conversion "
                  "with these options would publish nothing", file=sys.stderr)
        else:  # what the publish step would refuse (an empty or shrunken dataset, undecodable table rows)
            print(f"error: a conversion with these options would be refused: {f.get('refusal')}", file=sys.stderr)
        return 1
    return 0
