"""What a person should look at in a dataset, from its manifest alone (or a
check's figures in the manifest's shape): identical images and near
duplicates spanning splits, identical images with different labels, classes
missing from a split or below the minimum count, the rejects by reason,
empty shards. report.html's "Look at these" box and the console's lines
after a conversion (and the Python API's result) are these same findings.

Pure: no Beam, no I/O. Texts are plain (the report escapes them); a part of
the manifest of another type (a damaged manifest) reads as absent."""
from __future__ import annotations

from typing import NamedTuple

MAX_NAMES = 30   # class names listed in a finding before "..."
MAX_REASONS = 5  # reject reasons named in the rejects finding


class Finding(NamedTuple):
    kind: str    # one of KINDS
    count: int   # what the text counts (groups, pairs, classes, records, shards)
    text: str    # one plain line, its count included


KINDS = ("duplicates_across_splits", "conflicting_labels", "near_duplicates_across_splits",
         "classes_missing_from_train", "classes_below_min", "rejected", "empty_shards")


def _obj(v) -> dict:
    return v if isinstance(v, dict) else {}


def _list(v) -> list:
    return v if isinstance(v, list) else []


def _count(v) -> int:
    return v if type(v) is int and v >= 0 else 0  # noqa: E721 (bool is no count)


def _plural(n: int, word: str, many: str = "") -> str:
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def _verb(n: int, verb: str, one: str = "") -> str:
    return verb if n != 1 else one or verb + "s"


def _names(names) -> str:
    names = [str(x) for x in (_list(names) if not isinstance(names, str) else [names])]
    shown = ", ".join(names[:MAX_NAMES])
    return shown + (f", ... ({len(names):,} in all)" if len(names) > MAX_NAMES else "")


def findings(m: dict, check: bool = False) -> list:
    """The findings of manifest `m` ([] when there is nothing to look at).
    check: `m` is a pre-flight check's figures (records "would be" rejected)."""
    m = _obj(m)
    q = _obj(m.get("quality"))
    out = []
    d = _obj(q.get("duplicates"))
    n = _count(d.get("across_splits"))
    if n:
        out.append(Finding("duplicates_across_splits", n,
                           f"{_plural(n, 'group')} of identical images {_verb(n, 'span')} splits: the same image "
                           "is in training and evaluation data"))
    n = _count(d.get("conflicting_labels"))
    if n:
        out.append(Finding("conflicting_labels", n,
                           f"{_plural(n, 'group')} of identical images {_verb(n, 'carry', 'carries')} different labels"))
    n = _count(_obj(q.get("near_duplicates")).get("across_splits"))
    if n:
        out.append(Finding("near_duplicates_across_splits", n,
                           f"{_plural(n, 'near-duplicate pair')} {_verb(n, 'span')} splits: a possible leak from "
                           "training into evaluation data"))
    b = _obj(q.get("balance"))
    for split, names in sorted(_obj(b.get("missing_from_train")).items()):
        n = len(_list(names))
        out.append(Finding("classes_missing_from_train", n,
                           f"split {split} has {_plural(n, 'class', 'classes')} that train lacks: {_names(names)}"))
    for split, names in sorted(_obj(b.get("below_min")).items()):
        n = len(_list(names))
        few = "no records" if b.get("min_count") == 1 else f"fewer than {b.get('min_count', '?')} records"
        out.append(Finding("classes_below_min", n, f"split {split}: {_plural(n, 'class', 'classes')} "
                                                   f"{'has' if n == 1 else 'have'} {few}: {_names(names)}"))
    c = _obj(m.get("counts"))
    listed, rejected = _count(c.get("listed")), _count(c.get("rejected"))
    if listed and rejected:
        by_reason = sorted(((str(k), _count(v)) for k, v in _obj(m.get("rejects_by_reason")).items()),
                           key=lambda kv: (-kv[1], kv[0]))
        reasons = ", ".join(f"{k} {v:,}" for k, v in by_reason[:MAX_REASONS])
        more = f", ... ({len(by_reason):,} reasons)" if len(by_reason) > MAX_REASONS else ""
        out.append(Finding("rejected", rejected,
                           f"{rejected:,} of {listed:,} listed records ({rejected / listed:.1%}) "
                           f"{'would be' if check else 'were'} rejected" + (f" ({reasons}{more})" if reasons else "")))
    empty = [(str(s), sum(1 for e in _list(_obj(v).get("shards")) if not _obj(e).get("records")))
             for s, v in _obj(m.get("splits")).items()]
    empty = [(s, k) for s, k in empty if k]
    if empty:
        out.append(Finding("empty_shards", sum(k for _, k in empty),
                           "empty shards in " + ", ".join(f"{s} ({k})" for s, k in empty)))
    return out
