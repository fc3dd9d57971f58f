"""Stage CheckReport, for `tfrecords check` (pipelines/commands/check.py): in place of
PlanShards, WriteShards and Publish, it counts and samples the validated
records and writes the check's files once: report.html, check.json (the
manifest's figures for a run that wrote nothing) and check-rejects.jsonl.

Input:  {"records": validated [Rec] batches, "rejects": [Reject] batches,
         "stats": (name, count), "label_map": singleton, optionally
         "quality": singleton (CheckQuality's section)}
Output: the check's figures (a singleton), once written
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
import json
import logging
from typing import NamedTuple, Optional

import apache_beam as beam

from tfrecord_pipelines.transforms.core import publishable, quality, report_html
from tfrecord_pipelines.transforms.core.records import Batch
from tfrecord_pipelines.transforms.core.report_html import ReportInputs, Sample
from tfrecord_pipelines.transforms.storage import fsutil, layout, report_data, run_lock, spill
from tfrecord_pipelines.transforms.storage.reject_log import RejectLog

CHECK_FORMAT = "tfrecord-pipelines/check/v1"
CHECK_JSON = "check.json"
CHECK_REJECTS = "check-rejects.jsonl"

log = logging.getLogger(__name__)


# ---- what the graph gathers ----------------------------------------------------------------------------------------


def _order(label_id) -> tuple:
    return (label_id is not None, label_id if label_id is not None else 0)


class SampleCombine(beam.CombineFn):
    """Up to PER_CLASS records of each of the first MAX_CLASSES class ids (one
    group for float or no labels, a few more records): those with the
    smallest shuffle keys, so the sample is random and the same on every
    runner. The accumulator never holds more than MAX_CLASSES groups."""

    def __init__(self, max_classes: int = report_data.MAX_CLASSES, per_class: int = report_data.PER_CLASS):
        self._max, self._per = max_classes, per_class

    def create_accumulator(self):
        return {}

    def _trim(self, acc: dict) -> dict:
        for k in sorted(acc, key=_order)[self._max:]:
            del acc[k]
        per = self._per if any(k is not None for k in acc) else self._per * 6
        return {k: sorted(v)[:per] for k, v in acc.items()}

    def add_input(self, acc, batch):
        for r in spill.load(batch):
            acc.setdefault(r.label_id, []).append((r.key, r.rel, r.path, r.split or "", r.label_text, r.target,
                                                   r.width, r.height))
        return self._trim(acc)

    def merge_accumulators(self, accs):
        out: dict = {}
        for a in accs:
            for k, v in a.items():
                out.setdefault(k, []).extend(v)
        return self._trim(out)

    def extract_output(self, acc):
        return acc


def _count(batch) -> collections.Counter:
    """Valid records per (split, label id); label id None for float or no labels."""
    return collections.Counter((r.split or "", r.label_id) for r in spill.load(batch))


def _sum_counters(counters) -> collections.Counter:
    out = collections.Counter()
    for c in counters:
        out.update(c)
    return out


def quality_rows(batch) -> Batch:
    """quality.Row of each validated record, for CheckQuality (the writer
    emits these in a conversion; here validation's sha256 and hash are used)."""
    return Batch(quality.Row(r.rel, r.split or "", r.label_text, r.label_id, r.sha256, r.phash, r.width, r.height)
                 for r in spill.load(batch))


@dataclasses.dataclass(frozen=True)
class CheckSpec:
    """CheckReport's settings."""
    output: object                   # OutputSpec: where the check's files go; the run's id and lock
    options: dict                    # the settings, as check.json records them
    guards: publishable.Guards = publishable.Guards()  # what a conversion's publish step would hold the run to
    tool_version: str = ""
    remove_at_end: str = ""          # a folder the job removes when it ends the run (rows from Python's table)


class CheckReport(beam.PTransform):
    """Inputs: "records" (validated [Rec] batches, with sha256), "rejects"
    ([Reject] batches), "stats" ((name, count)), "label_map" (singleton), optionally
    "quality" (CheckQuality's section, a singleton). Writes the check's files once."""

    def __init__(self, spec: CheckSpec):
        super().__init__()
        self._spec = spec

    def expand(self, inputs):
        spec, side = self._spec, beam.pvalue
        records = inputs["records"]
        rejects = inputs["rejects"]
        stats = inputs["stats"] | "SumStats" >> beam.CombinePerKey(sum)
        counts = records | "Count" >> beam.Map(_count) | "Counts" >> beam.CombineGlobally(_sum_counters)
        samples = records | "Sample" >> beam.CombineGlobally(SampleCombine())
        extra = [side.AsSingleton(inputs["quality"])] if "quality" in inputs else []
        settings = (spec.output, spec.options, spec.guards, spec.tool_version, spec.remove_at_end)
        return (records.pipeline
                | "Once" >> beam.Create([None])
                | "WriteCheck" >> beam.Map(
                    lambda _, rj, st, lm, ct, sm, q=None: write_check(settings, rj, st, lm, ct, sm, q),
                    side.AsList(rejects), side.AsDict(stats), side.AsSingleton(inputs["label_map"]),
                    side.AsSingleton(counts), side.AsSingleton(samples), *extra))


# ---- the check's files ---------------------------------------------------------------------------------------------


def check_figures(out, options: dict, tool_version: str, rejects: RejectLog, stats: dict, label_map, counts: dict,
                  quality_section: Optional[dict]) -> dict:
    """check.json: the manifest's figures for a run that wrote nothing."""
    names = {i: n for n, i in label_map.ids}
    splits: dict = {}
    for (split, label_id), n in sorted(counts.items(), key=lambda kv: (kv[0][0], _order(kv[0][1]))):
        s = splits.setdefault(split, {"records": 0, "label_counts": {}})
        s["records"] += n
        if label_id is not None:
            s["label_counts"][names.get(label_id, str(label_id))] = n
    valid = sum(counts.values())
    listed, not_selected = stats.get("listed", 0), stats.get("not_selected", 0)
    by_reason = rejects.by_reason
    figures = {
        "format": CHECK_FORMAT,
        "tool_version": tool_version,
        "run_id": out.run_id,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "counts": {"listed": listed, "valid": valid, "rejected": len(rejects), "not_selected": not_selected,
                   "excluded": {k.split("/", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("excluded/")}},
        "rejects_by_reason": dict(sorted(by_reason.items())),
        "rejects_file": CHECK_REJECTS,
        "splits": dict(sorted(splits.items())),
        "label_map": label_map.to_json(),
        "options": options,
    }
    figures["quality"] = quality_section  # None: --quality off
    return figures


class _Counted(NamedTuple):
    """A split's valid records as run_facts reads a shard's (records, label_counts)."""
    records: int
    label_counts: tuple


def check_facts(options: dict, label_map, counts: dict, stats: dict, rejects: RejectLog,
                previous: Optional[publishable.Previous]) -> publishable.RunFacts:
    """publishable.run_facts of a check: the valid records stand for those a
    conversion would write."""
    per_split: dict = {}
    for (split, label_id), n in counts.items():
        per_split.setdefault(split, collections.Counter())[label_id] += n
    shards = {split: [_Counted(sum(c.values()), tuple((i, n) for i, n in sorted(c.items(), key=lambda kv: _order(kv[0]))
                                                      if i is not None))]
              for split, c in sorted(per_split.items())}
    return publishable.run_facts(options, label_map, shards, stats, len(rejects), rejects.by_reason, rejects.facts,
                                 previous)


def _previous(out) -> Optional[publishable.Previous]:
    """--versioned: the version LATEST names, as a conversion would hold the record count to it."""
    if not out.root:
        return None
    try:
        version, m = layout.read_latest(out.root)
    except ValueError:  # unreadable: a conversion would need --full
        return None
    return publishable.previous_of(version, m) if m is not None else None


def reconciles(figures: dict) -> bool:
    c = figures["counts"]
    return c["listed"] == c["valid"] + c["rejected"] + c["not_selected"]


def report_inputs(figures: dict, samples: dict, rejects: RejectLog, label_map) -> ReportInputs:
    """Thumbnails from the input files themselves: the sampled records, the
    first rejects of each reason, the files of the duplicates shown."""
    budget = report_data.Budget(report_data.DEADLINE_SECONDS)
    inputs = ReportInputs()
    names = {i: n for n, i in label_map.ids}
    for label_id in sorted(samples, key=_order):
        for _, rel, path, split, text, target, w, h in samples[label_id]:
            label = names.get(label_id, text or str(label_id)) if label_id is not None else ""
            caption = f"{rel} (target {target:g})" if target is not None else rel
            inputs.samples.append(Sample(label, split, caption, report_data.file_thumbnail(path, budget)))
            inputs.sampled_sizes.append((w, h))
    root = str(figures["options"].get("inputs", {}).get("root", ""))
    # As the publish step's report does: from the first rejects in path order (rejects.jsonl's first lines).
    shown = report_data.pick_rejects(r.to_json() for r in rejects.first(report_data.MAX_REJECT_LINES))
    report_data.add_rejects(inputs, shown, root, budget)
    for p in report_data.wanted_paths(figures):
        inputs.thumbs[p] = report_data.source_thumbnail(root, p, budget)
    budget.resolve(inputs)
    if len(label_map.ids) > report_data.MAX_CLASSES:
        inputs.notes.append(f"the samples show the first {report_data.MAX_CLASSES} of {len(label_map.ids):,} classes "
                            "by id")
    if budget.out_of_time():
        inputs.notes.append(f"reading thumbnails stopped after {report_data.DEADLINE_SECONDS:g} s")
    return inputs


def write_check(settings: tuple, rejects: list, stats: dict, label_map, counts: dict, samples: dict,
                quality_section: Optional[dict] = None) -> dict:
    out, options, guards, tool_version, remove_at_end = settings
    rejects = RejectLog(rejects)
    try:
        figures = check_figures(out, options, tool_version, rejects, stats, label_map, counts, quality_section)
        if not reconciles(figures):
            c = figures["counts"]
            raise RuntimeError(f"counts do not reconcile: listed {c['listed']} != valid {c['valid']} + rejected "
                               f"{c['rejected']} + not selected {c['not_selected']}")
        listed = figures["counts"]["listed"]
        verdict = publishable.check_publishable(check_facts(options, label_map, counts, stats, rejects,
                                                            _previous(out)), guards)
        too_many = bool(listed) and len(rejects) / listed > guards.max_reject_fraction
        # What the publish step of a conversion would decide (transforms/stages/publish.py).
        figures["would_publish"] = not too_many and not verdict.refusal
        figures["max_reject_fraction"] = guards.max_reject_fraction
        figures["refusal"] = verdict.refusal
        figures["warnings"] = list(verdict.warnings)
        try:
            page = report_html.build_html(figures, report_inputs(figures, samples, rejects, label_map), check=True,
                                          title=out.output)
            figures["report"] = {"file": report_data.REPORT}
        except Exception as e:  # the figures and rejects are still worth writing
            log.warning("report.html not built: %s: %s", type(e).__name__, e)
            page, figures["report"] = None, {"file": None, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        run_lock.check(out.lock_dir, out.run_id)  # a run whose lock was taken over writes nothing
        fsutil.write_chunks(fsutil.join(out.output, CHECK_REJECTS), rejects.jsonl())
        if page is not None:
            fsutil.write_bytes(fsutil.join(out.output, report_data.REPORT), page.encode("utf-8"))
        text = json.dumps(figures, indent=1, ensure_ascii=False) + "\n"
        fsutil.write_bytes(fsutil.join(out.output, CHECK_JSON), text.encode("utf-8", "surrogateescape"))
    finally:
        if out.job_ends_run:  # a remote job the launcher does not wait for ends its own run
            if remove_at_end:
                fsutil.delete_tree(remove_at_end)
            run_lock.release(out.lock_dir, out.run_id)
    return figures
