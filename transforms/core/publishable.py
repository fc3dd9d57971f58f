"""Whether a run's output is the dataset the user asked for, decided before
the publish step touches the output (pure: transforms/stages/publish.py
gathers the facts, transforms/storage/reject_log.py counts the rejects).

Refused, nothing published, one line naming the cause and the fix:
- no record written (an unmounted share, empty class folders, every file
  rejected), unless --allow_empty;
- a --versioned run whose record count fell by more than MAX_SHRINK against
  the version LATEST names, unless --allow_shrink (an empty version after a
  non-empty one is such a fall too: --allow_empty alone does not move LATEST
  to it);
- label table rows that do not decode in --table_encoding, unless
  --max_reject_fraction 1. Such rows are not a random few damaged records: a
  table read in the wrong encoding loses exactly the rows with non-ASCII
  characters, i.e. whole classes or folders whose names carry accents, and
  their class cannot even be named (the row was never read). The fix is
  certain (--table_encoding), so the run stops whatever the fraction.

Named on the console (the manifest's "warnings", which the launcher prints),
whether the run publishes or not:
- a class or a split that lost all its records: every record of it listed
  and rejected; for a --versioned run also a class or split the previous
  version had and this one has not (a folder deleted on purpose is named
  too: the run cannot tell);
- a split asked for by --split (a ratio, or a single name) that got no record;
- each reject reason whose detail names a fix (a flag), with its count; a
  label table's `missing` files name --image_root, where they were looked for.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

from tfrecord_pipelines.transforms.core.errors import ConversionError
from tfrecord_pipelines.transforms.core.units import plural

# A --versioned run whose record count falls by more than half against the
# version LATEST names is refused. What the guard is for is the catastrophic
# partial input: half a share mounted, a listing cut short, a prefix synced to
# an empty bucket; such a run loses most of the data. Curation removes less at
# once, and what it removes is named on the console anyway (lost classes and
# splits, below). The costs are unequal but both real: a false refusal leaves
# LATEST on the previous, complete version until someone reruns with
# --allow_shrink; a tighter bound (10-20%) would stop routine removals of a
# class from small datasets (one class of three is a third of the records).
MAX_SHRINK = 0.5

FLAG = re.compile(r"--[a-z][a-z0-9_]*")
TABLE_ENCODING = "--table_encoding"
MISSING = "missing"
_SHOWN = 10  # names listed in one warning


class NotPublishable(ConversionError, RuntimeError):
    """The output would not be the dataset asked for: nothing was published."""


class RejectFacts:
    """What the publish step needs to know of the rejects beyond their count
    by reason: their count by split, and for each reject reason whose detail
    names a flag (and for `missing`) its count and an example (the smallest
    path, so the manifest does not depend on the order rejects arrive in)."""

    def __init__(self):
        self.by_split: dict = {}
        self.fixes: dict = {}  # (reason, flags) -> [count, (rel, detail)]

    def add(self, rel: str, reason: str, detail: str, split: str) -> None:
        if split:
            self.by_split[split] = self.by_split.get(split, 0) + 1
        if "--" in detail:
            key = (reason, tuple(dict.fromkeys(FLAG.findall(detail))))
        elif reason == MISSING and not rel.startswith("(line "):  # not an empty path cell: a file not found
            key = (reason, ())
        else:
            return
        seen = self.fixes.get(key)
        if seen is None:
            self.fixes[key] = [1, (rel, detail)]
        else:
            seen[0] += 1
            if rel < seen[1][0]:
                seen[1] = (rel, detail)


@dataclasses.dataclass(frozen=True)
class Previous:
    """The version LATEST names (--versioned), as its manifest counts it."""
    version: str
    written: int
    split_records: dict   # {split: records}
    class_records: dict   # {class name: records}, summed over splits


@dataclasses.dataclass(frozen=True)
class RunFacts:
    listed: int
    written: int
    rejected: int
    not_selected: int = 0
    by_reason: dict = dataclasses.field(default_factory=dict)
    split_records: dict = dataclasses.field(default_factory=dict)      # {split: records written}
    rejected_by_split: dict = dataclasses.field(default_factory=dict)  # {split: rejects after the split was known}
    requested_splits: tuple = ()          # split names --split asks for by name (ratios, a single name)
    class_records: dict = dataclasses.field(default_factory=dict)      # {class: written}; class and int labels only
    unlisted_classes: frozenset = frozenset()  # names of a frozen label map that no listed record has
    fixes: dict = dataclasses.field(default_factory=dict)  # RejectFacts.fixes
    table_root: str = ""                  # a label table's --image_root ("" for a folder tree)
    table_encoding: str = "utf-8"
    previous: Optional[Previous] = None   # --versioned: the version LATEST names, if any


@dataclasses.dataclass(frozen=True)
class Guards:
    """What the user allowed (--allow_empty, --allow_shrink, --max_reject_fraction)."""
    allow_empty: bool = False
    allow_shrink: bool = False
    max_reject_fraction: float = 0.05


@dataclasses.dataclass(frozen=True)
class Verdict:
    refusal: str       # "" when the output may be published
    warnings: tuple    # lines for the console and the manifest


def check_publishable(f: RunFacts, guards: Guards) -> Verdict:
    warnings = tuple(fix_lines(f) + lost_lines(f))
    return Verdict(_refusal(f, guards), warnings)


def _refusal(f: RunFacts, guards: Guards) -> str:
    undecoded = sum(n for (reason, flags), (n, _) in f.fixes.items() if TABLE_ENCODING in flags)
    if undecoded and guards.max_reject_fraction < 1:
        first = min((ex for (_, flags), (_, ex) in f.fixes.items() if TABLE_ENCODING in flags), key=_line_order)
        return undecodable_rows(f"{undecoded:,} row(s) of the label table", f.table_encoding,
                                first[0].strip("()")) + \
            "; nothing was published (--max_reject_fraction 1 publishes without those rows)"
    if not f.written and not guards.allow_empty:
        return f"no record was written: {_why_empty(f)}; nothing was published. Pass --allow_empty to publish " \
               "an empty dataset on purpose"
    p = f.previous
    if p is not None and p.written and not guards.allow_shrink and f.written < p.written * (1 - MAX_SHRINK):
        return (f"{f.written:,} records written, down {1 - f.written / p.written:.0%} from {p.written:,} in version "
                f"{p.version}, which LATEST names: more than a {MAX_SHRINK:.0%} fall looks like missing input (a "
                "share not mounted, a listing cut short); nothing was published and LATEST still names "
                f"{p.version}. If the inputs did shrink, rerun with --allow_shrink")
    return ""


def undecodable_rows(rows: str, encoding: str, first: str) -> str:
    """Why rows that do not decode stop a run, and the fix (also said before
    the run when the table's first rows show it: pipelines/options/parse.py)."""
    return (f"{rows} do not decode as {encoding} (first: {first}), so every "
            "row with a non-ASCII name would be left out, whole classes with it: pass "
            f"{TABLE_ENCODING} with the table's encoding (e.g. latin-1, cp1252, utf-16)")


def _line_order(example: tuple) -> tuple:
    m = re.search(r"\d+", example[0])  # "(line 12)"
    return (int(m.group()) if m else 0, example[0])


def _why_empty(f: RunFacts) -> str:
    if not f.listed:
        where = "the label table lists no row" if f.table_root else "the input holds no image file"
        return (f"{where} (an unmounted share or bucket prefix, empty class folders, or an --include that matches "
                "nothing?)")
    reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(f.by_reason.items(), key=lambda kv: (-kv[1], kv[0])))
    if f.rejected == f.listed:
        return f"all {f.listed:,} listed records were rejected ({reasons})"
    return (f"of {f.listed:,} listed records, {f.rejected:,} were rejected ({reasons or 'none'}) and "
            f"{f.not_selected:,} not selected")


def fix_lines(f: RunFacts) -> list:
    """One line per reject reason that names its fix, with its count."""
    lines = []
    for (reason, flags), (n, (rel, detail)) in sorted(f.fixes.items()):
        if flags:
            example = "" if rel.startswith("(line ") else f" (e.g. {rel})"  # a table row: the detail names its line
            lines.append(f"{n:,} rejected as {reason}: {detail}{example}")
        elif reason == MISSING and f.table_root:
            lines.append(f"{n:,} rejected as {reason}: the table's paths were looked for under --image_root "
                         f"{f.table_root} (e.g. {f.table_root.rstrip('/')}/{rel}); if the images are elsewhere, "
                         "pass --image_root with their folder")
    return lines


def lost_lines(f: RunFacts) -> list:
    """The classes and splits that lost all their records (none when nothing
    was written: the refusal, or --allow_empty, says the whole is empty)."""
    lines: list = []
    if not f.written:
        return lines
    p = f.previous
    gone = sorted(s for s, n in f.rejected_by_split.items() if n and not f.split_records.get(s))
    if gone:
        lines.append("split(s) with every record rejected, none written: "
                     + _names([f"{s!r} ({f.rejected_by_split[s]:,} rejected)" for s in gone]))
    unasked = [s for s in f.requested_splits if not f.split_records.get(s) and s not in f.rejected_by_split]
    if unasked:
        lines.append(f"split(s) asked for by --split got no record of the {f.listed:,} listed: "
                     + _names([repr(s) for s in unasked]))
    if p is not None:
        before = sorted(s for s, n in p.split_records.items() if n and not f.split_records.get(s)
                        and s not in gone and s not in unasked)
        if before:
            lines.append(f"split(s) that version {p.version} had and this one has not: "
                         + _names([f"{s!r} ({plural(p.split_records[s], 'record')} then)" for s in before]))
    rejected = sorted(c for c, n in f.class_records.items() if not n and c not in f.unlisted_classes)
    if rejected:
        how = "rejected" if not f.not_selected else "rejected or not selected (--max_examples_per_split, --duplicates)"
        lines.append(f"class(es) whose every listed record was {how}, none written: "
                     + _names([repr(c) for c in rejected]))
    if p is not None:
        dropped = sorted(c for c, n in p.class_records.items() if n and not f.class_records.get(c)
                         and c not in rejected)
        if dropped:
            lines.append(f"class(es) that version {p.version} had and this one has not: "
                         + _names([f"{c!r} ({plural(p.class_records[c], 'record')} then)" for c in dropped]))
    return lines


def _names(items: list) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN:,} more" if len(items) > _SHOWN else "")


def previous_of(version: str, manifest: dict) -> Previous:
    """The figures of a previous version's manifest (read by layout.read_latest,
    so its counts and splits are well-formed)."""
    classes: dict = {}
    for s in manifest["splits"].values():
        counts = s.get("label_counts")
        if isinstance(counts, dict):
            for name, n in counts.items():
                if type(n) is int:  # noqa: E721 (a hand-edited manifest may hold anything)
                    classes[name] = classes.get(name, 0) + n
    return Previous(version, manifest["counts"]["written"],
                    {name: s["records"] for name, s in manifest["splits"].items()}, classes)


def run_facts(options: dict, label_map, shards: dict, stats: dict, rejected: int, by_reason: dict,
              rejects: RejectFacts, previous: Optional[Previous] = None) -> RunFacts:
    """The facts of a run from what the publish step holds: the settings as
    the manifest records them, the LabelMap, collect_shards' {split:
    [ShardResult]}, the summed stats and the rejects' counts."""
    kind = getattr(label_map.kind, "value", label_map.kind)
    classes: dict = {}
    if kind in ("class", "int"):
        names = {i: n for n, i in label_map.ids}
        classes = {n: 0 for n, _ in label_map.ids}
        for ss in shards.values():
            for s in ss:
                for i, n in s.label_counts:
                    name = names.get(i, str(i))
                    classes[name] = classes.get(name, 0) + n
    splits, inputs = options.get("splits", {}), options.get("inputs", {})
    if splits.get("source") == "ratios":
        requested = tuple(name for name, _ in splits.get("ratios", ()))
    elif splits.get("source") == "single":
        requested = (splits.get("name", "train"),)
    else:
        requested = ()
    return RunFacts(
        listed=stats.get("listed", 0), written=sum(s.records for ss in shards.values() for s in ss),
        rejected=rejected, not_selected=stats.get("not_selected", 0), by_reason=dict(by_reason),
        split_records={split: sum(s.records for s in ss) for split, ss in shards.items()},
        rejected_by_split=dict(rejects.by_split), requested_splits=requested, class_records=classes,
        unlisted_classes=frozenset(getattr(label_map, "unlisted", ())), fixes=dict(rejects.fixes),
        table_root=inputs.get("root", "") if inputs.get("kind") == "table" else "",
        table_encoding=inputs.get("table_encoding", "utf-8"), previous=previous)
