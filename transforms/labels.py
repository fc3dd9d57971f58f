"""Labels as pure functions: derive the raw label of a record, collect what
the whole dataset's labels look like, turn that into a label map, apply it.

Class names map to ids 0..N-1 in sorted order (plus --label_offset), unless a
frozen label map is given, which wins so ids never shift between runs.
Integer labels keep their values (plus the offset); numeric labels that are
not all integers are regression targets.
"""
from __future__ import annotations

import dataclasses
import math
import posixpath
import re
from typing import Iterable, Optional, Union

from pipelines.config import LabelSource, LabelSpec, LabelType
from transforms.example_codec import BYTES, FLOAT, INT64
from transforms.records import Reason, Rec, Reject, reject

MAX_CLASSES = 1_000_000
_INT = re.compile(r"[+-]?\d+")


class LabelError(ValueError):
    pass


def is_int(s: str) -> bool:
    return bool(_INT.fullmatch(s))


def is_float(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


def raw_label(rec: Rec, spec: LabelSpec) -> Optional[str]:
    """The label text of a record before mapping, or None."""
    if spec.source is LabelSource.TABLE:
        return rec.label_text.strip() if rec.label_text else None
    if spec.source is LabelSource.FOLDER:
        dirs = rec.rel.split("/")[:-1]
        if spec.split_folders:
            dirs = dirs[1:]
        d = spec.depth
        if d > 0:
            return dirs[d - 1] if len(dirs) >= d else None
        return dirs[d] if len(dirs) >= -d else None
    if spec.source is LabelSource.REGEX:
        m = re.search(spec.regex, posixpath.basename(rec.rel))
        if not m:
            return None
        if "label" in m.re.groupindex:
            return m.group("label")
        return m.group(1) if m.re.groups else m.group(0)
    return None


class Stats:
    """What the labels and extra columns of the whole dataset look like.
    Mergeable, so it can be computed by a Beam combiner."""

    def __init__(self):
        self.names: Optional[set] = set()  # None once there are too many to be classes
        self.all_int = True
        self.all_float = True
        self.columns: dict = {}            # column -> [all_int, all_float]

    def add(self, rec: Rec) -> "Stats":
        t = rec.label_text
        if t:
            if self.names is not None:
                self.names.add(t)
                if len(self.names) > MAX_CLASSES:
                    self.names = None
            if self.all_int and not is_int(t):
                self.all_int = False
            if self.all_float and not is_float(t):
                self.all_float = False
        for col, v in rec.extras:
            kinds = self.columns.setdefault(col, [True, True])
            if v:
                kinds[0] = kinds[0] and is_int(v)
                kinds[1] = kinds[1] and is_float(v)
        return self

    def merge(self, other: "Stats") -> "Stats":
        if self.names is None or other.names is None:
            self.names = None
        else:
            self.names |= other.names
            if len(self.names) > MAX_CLASSES:
                self.names = None
        self.all_int &= other.all_int
        self.all_float &= other.all_float
        for col, (i, f) in other.columns.items():
            kinds = self.columns.setdefault(col, [True, True])
            kinds[0] &= i
            kinds[1] &= f
        return self


@dataclasses.dataclass(frozen=True)
class LabelMap:
    kind: str                 # "class", "int", "float" or "none"
    ids: tuple = ()           # ((name, id), ...) sorted by id then name
    extra_kinds: tuple = ()   # ((column, feature kind), ...)
    offset: int = 0
    new_names: tuple = ()     # names added to a frozen map by --extend_label_map

    def as_dict(self) -> dict:
        return dict(self.ids)

    def to_json(self) -> dict:
        return {"kind": self.kind, "offset": self.offset, "classes": dict(self.ids),
                "extended_with": list(self.new_names)}


def build_label_map(stats: Stats, spec: LabelSpec, extra_columns: Iterable[str] = ()) -> LabelMap:
    extra_kinds = []
    for col in extra_columns:
        i, f = stats.columns.get(col, [False, False])
        extra_kinds.append((col, INT64 if i else FLOAT if f else BYTES))
    extra_kinds = tuple(extra_kinds)
    if spec.source is LabelSource.NONE:
        return LabelMap("none", extra_kinds=extra_kinds)
    kind = spec.label_type
    if kind is LabelType.AUTO:
        if spec.frozen_map is not None:
            kind = LabelType.CLASS
        elif stats.all_int and (stats.names is None or stats.names):
            kind = LabelType.INT
        elif stats.all_float and (stats.names is None or stats.names):
            kind = LabelType.FLOAT
        else:
            kind = LabelType.CLASS
    if kind is LabelType.FLOAT:
        return LabelMap("float", extra_kinds=extra_kinds)
    if stats.names is None:
        raise LabelError(f"more than {MAX_CLASSES:,} distinct labels: too many to be classes; "
                         "use --label_type float for regression targets")
    if kind is LabelType.INT:
        ids = sorted(((n, int(n) + spec.offset) for n in stats.names if is_int(n)), key=lambda x: (x[1], x[0]))
        return LabelMap("int", tuple(ids), extra_kinds, spec.offset)
    if spec.frozen_map is not None:
        mapping = dict(spec.frozen_map)
        new = ()
        if spec.extend_map:
            new = tuple(sorted(set(stats.names) - set(mapping)))
            start = max(mapping.values(), default=spec.offset - 1) + 1
            mapping.update({n: start + i for i, n in enumerate(new)})
        ids = sorted(mapping.items(), key=lambda x: (x[1], x[0]))
        return LabelMap("class", tuple(ids), extra_kinds, spec.offset, new)
    ids = [(n, spec.offset + i) for i, n in enumerate(sorted(stats.names))]
    return LabelMap("class", tuple(ids), extra_kinds, spec.offset)


def _typed(kind: str, raw: str) -> list:
    if not raw:
        return []
    if kind == INT64:
        return [int(raw)]
    if kind == FLOAT:
        return [float(raw)]
    return [raw.encode("utf-8")]


def assign_label(rec: Rec, lm: LabelMap, lookup: dict) -> Union[Rec, Reject]:
    """The record with its label id or target and typed extra features, or a Reject."""
    features = tuple((col, kind, _typed(kind, raw)) for (col, raw), (_, kind) in zip(rec.extras, lm.extra_kinds))
    if lm.kind == "none":
        return rec._replace(features=features)
    text = rec.label_text
    if not text:
        return reject(rec, Reason.NO_LABEL, "no label: the label cell is empty, the path is too shallow "
                      "for the label folder level, or --label_regex did not match")
    if lm.kind == "float":
        if not is_float(text):
            return reject(rec, Reason.BAD_LABEL, f"label {text!r} is not a finite number (regression target)")
        return rec._replace(target=float(text), features=features)
    if lm.kind == "int":
        if not is_int(text):
            return reject(rec, Reason.BAD_LABEL, f"label {text!r} is not an integer class id")
        return rec._replace(label_id=int(text) + lm.offset, features=features)
    label_id = lookup.get(text)
    if label_id is None:
        return reject(rec, Reason.UNKNOWN_LABEL, f"label {text!r} is not in the frozen label map "
                      "(pass --extend_label_map to add new classes)")
    return rec._replace(label_id=label_id, features=features)
