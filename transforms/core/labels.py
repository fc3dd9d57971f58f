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
import unicodedata
from typing import Iterable, Optional, Union

from tfrecord_pipelines.transforms.core.errors import ConversionError
from tfrecord_pipelines.transforms.core.example_codec import BYTES, FLOAT, INT64
from tfrecord_pipelines.transforms.core.records import Reason, Rec, Reject, reject
from tfrecord_pipelines.transforms.core.specs import LabelSource, LabelSpec, LabelType

MAX_CLASSES = 1_000_000
# Numbers by a strict ASCII grammar: Python's int()/float() also accept `1_1`,
# non-ASCII digits, surrounding whitespace, `inf` and `nan`, which would turn
# class folders `1_1/ 1_2/` into targets 11.0, 12.0 and an id column into floats.
# inf and nan are not numbers here (a regression target must be finite).
_INT = re.compile(r"[+-]?[0-9]{1,40}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]{1,400}(?:\.[0-9]{0,400})?|\.[0-9]{1,400})(?:[eE][+-]?[0-9]{1,5})?")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class LabelError(ConversionError, ValueError):
    pass


def is_int(s: str) -> bool:
    """An integer that fits an int64 feature, in plain ASCII digits."""
    return bool(_INT.fullmatch(s)) and INT64_MIN <= int(s) <= INT64_MAX


def is_float(s: str) -> bool:
    """A finite decimal number in plain ASCII (`1.5`, `-2`, `.5`, `1e-3`)."""
    return bool(_FLOAT.fullmatch(s)) and math.isfinite(float(s))


def nfc(text: Optional[str]) -> Optional[str]:
    """Labels are compared in one Unicode normal form: macOS writes folder
    names in NFD, most other systems in NFC."""
    return unicodedata.normalize("NFC", text) if text else text


def raw_label(rec: Rec, spec: LabelSpec) -> Optional[str]:
    """The label text of a record before mapping (in NFC), or None (also for
    a folder name that is not valid UTF-8: it cannot be a class name)."""
    text = _raw_label(rec, spec)
    return text if text is None or is_utf8(text) else None


class LabelDeriver:
    """(raw_label, label_folder) of records. A folder's label is derived once
    for all its records (they are listed together), not once each."""

    def __init__(self, spec: LabelSpec):
        self._spec = spec
        self._folder, self._got = None, (None, None)

    def __call__(self, rec: Rec) -> tuple[Optional[str], Optional[str]]:
        if self._spec.source is not LabelSource.FOLDER:
            return raw_label(rec, self._spec), None
        folder = rec.rel.rpartition("/")[0]  # both depend on the folders only
        if folder != self._folder:
            self._folder, self._got = folder, (raw_label(rec, self._spec), label_folder(rec, self._spec))
        return self._got


def is_utf8(text: str) -> bool:
    """False for a name holding undecodable bytes (os.fsdecode's surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def label_name(text: Optional[str]) -> Optional[str]:
    """A label as it is compared and stored, wherever it comes from (a table
    cell, a folder name, a --label_regex match): white space at either end
    is not part of it (`cat ` is `cat`: a trailing space is a typo or a
    table's layout, never a class of its own), and it is in NFC. None for
    nothing left."""
    text = nfc(text.strip()) if text else None
    return text or None


def _raw_label(rec: Rec, spec: LabelSpec) -> Optional[str]:
    if spec.source is LabelSource.TABLE:
        return label_name(rec.label_text)
    if spec.source is LabelSource.FOLDER:
        folder = label_folder(rec, spec)
        return label_name(folder.rsplit("/", 1)[-1]) if folder else None
    if spec.source is LabelSource.REGEX:
        m = re.search(spec.regex, posixpath.basename(rec.rel))
        if not m:
            return None
        if "label" in m.re.groupindex:
            return label_name(m.group("label"))
        return label_name(m.group(1) if m.re.groups else m.group(0))
    return None


def label_folder(rec: Rec, spec: LabelSpec) -> Optional[str]:
    """The relative path of the folder naming a record's class, as listed
    (folder labels only), or None."""
    if spec.source is not LabelSource.FOLDER:
        return None
    dirs = rec.rel.split("/")[:-1]
    skip = 1 if spec.split_folders else 0
    n = len(dirs) - skip
    d = spec.depth
    if d > 0:
        end = skip + d if n >= d else None
    else:
        end = len(dirs) + d + 1 if n >= -d else None
    return "/".join(dirs[:end]) if end else None


class Stats:
    """What the labels and extra columns of the whole dataset look like.
    Mergeable, so it can be computed by a Beam combiner."""

    def __init__(self):
        self.names: Optional[set] = set()  # None once there are too many to be classes
        self.all_int = True
        self.all_float = True
        self.columns: dict = {}            # column -> [all_int, all_float]
        self.folders: set = set()          # class folders as listed, to find NFC/NFD twins

    def add(self, rec: Rec, folder: Optional[str] = None) -> "Stats":
        return self.add_label(rec.label_text, rec.extras, folder)

    def add_label(self, t: Optional[str], extras: tuple = (), folder: Optional[str] = None) -> "Stats":
        """A record's label text, its table's extra cells and its class folder."""
        if folder is not None:
            self.folders.add(folder)
        if t:
            if self.names is not None:
                self.names.add(t)
                if len(self.names) > MAX_CLASSES:
                    self.names = None
            if self.all_int and not is_int(t):
                self.all_int = False
            if self.all_float and not is_float(t):
                self.all_float = False
        for col, v in extras:
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
        self.folders |= other.folders
        self.all_int &= other.all_int
        self.all_float &= other.all_float
        for col, (i, f) in other.columns.items():
            kinds = self.columns.setdefault(col, [True, True])
            kinds[0] &= i
            kinds[1] &= f
        return self


@dataclasses.dataclass(frozen=True)
class LabelMap:
    kind: LabelType           # CLASS, INT, FLOAT or NONE (never AUTO)
    ids: tuple = ()           # ((name, id), ...) sorted by id then name
    extra_kinds: tuple = ()   # ((column, feature kind), ...)
    offset: int = 0
    new_names: tuple = ()     # names added to a frozen map by --extend_label_map
    unlisted: tuple = ()      # names of a frozen map that no listed record has (not in to_json: not a label)

    def as_dict(self) -> dict:
        return dict(self.ids)

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "offset": self.offset, "classes": dict(self.ids),
                "extended_with": list(self.new_names)}


def check_folder_twins(folders: Iterable[str]) -> None:
    """Two folders whose names differ only in Unicode form (NFC vs NFD), or
    only in white space at their ends (`cat` and `cat `), would be one class
    under two spellings: a true collision, refused by name."""
    seen: dict = {}
    for f in sorted(folders):
        key = "/".join(unicodedata.normalize("NFC", part).strip() for part in f.split("/"))
        if key in seen and seen[key] != f:
            a, b = seen[key], f
            if unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b):
                why = f"the same name in different Unicode forms ({_form(a)} and {_form(b)})"
            else:
                why = "names that differ only in white space at their ends (not part of a label)"
            raise LabelError(f"folders {a!r} and {b!r} have {why}, so they would be one class; merge or rename "
                             "one of them")
        seen[key] = f


def _form(text: str) -> str:
    return "NFC" if unicodedata.is_normalized("NFC", text) else "NFD" if unicodedata.is_normalized(
        "NFD", text) else "mixed"


def build_label_map(stats: Stats, spec: LabelSpec, extra_columns: Iterable[str] = ()) -> LabelMap:
    check_folder_twins(stats.folders)
    extra_kinds = []
    for col in extra_columns:
        i, f = stats.columns.get(col, [False, False])
        extra_kinds.append((col, INT64 if i else FLOAT if f else BYTES))
    extra_kinds = tuple(extra_kinds)
    if spec.source is LabelSource.NONE:
        return LabelMap(LabelType.NONE, extra_kinds=extra_kinds)
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
        return LabelMap(LabelType.FLOAT, extra_kinds=extra_kinds)
    if stats.names is None:
        raise LabelError(f"more than {MAX_CLASSES:,} distinct labels: too many to be classes; "
                         "use --label_type float for regression targets")
    if kind is LabelType.INT:
        ids = sorted(((n, int(n) + spec.offset) for n in stats.names if is_int(n)), key=lambda x: (x[1], x[0]))
        return LabelMap(LabelType.INT, tuple(ids), extra_kinds, spec.offset)
    if spec.frozen_map is not None:
        mapping = {nfc(n): i for n, i in spec.frozen_map}
        new = ()
        if spec.extend_map:
            new = tuple(sorted(set(stats.names) - set(mapping)))
            start = max(mapping.values(), default=spec.offset - 1) + 1
            mapping.update({n: start + i for i, n in enumerate(new)})
        ids = sorted(mapping.items(), key=lambda x: (x[1], x[0]))
        unlisted = tuple(sorted(set(mapping) - set(stats.names)))
        return LabelMap(LabelType.CLASS, tuple(ids), extra_kinds, spec.offset, new, unlisted)
    ids = [(n, spec.offset + i) for i, n in enumerate(sorted(stats.names))]
    return LabelMap(LabelType.CLASS, tuple(ids), extra_kinds, spec.offset)


def _typed(kind: str, raw: str) -> list:
    if not raw:
        return []
    if kind == INT64:
        return [int(raw)]
    if kind == FLOAT:
        return [float(raw)]
    return [raw.encode("utf-8")]


_OWN = object()


def assign_label(rec: Rec, lm: LabelMap, lookup: dict, text=_OWN) -> Union[Rec, Reject]:
    """The record with its label text, label id or target and typed extra
    features, or a Reject. `text`: the label derived (LabelDeriver), if not
    the record's own `label_text`."""
    features = tuple((col, kind, _typed(kind, raw)) for (col, raw), (_, kind) in zip(rec.extras, lm.extra_kinds))
    if text is _OWN:
        text = rec.label_text
    if lm.kind is LabelType.NONE:
        return rec._replace(label_text=text, features=features)
    if not text:
        if not is_utf8(rec.rel):
            return reject(rec, Reason.NO_LABEL, "no label: the path is not valid UTF-8, so its folder name "
                          "cannot be a class name")
        return reject(rec, Reason.NO_LABEL, "no label: the label cell is empty, the path is too shallow "
                      "for the label folder level, or --label_regex did not match")
    if lm.kind is LabelType.FLOAT:
        if not is_float(text):
            return reject(rec, Reason.BAD_LABEL, f"label {text!r} is not a finite number (regression target)")
        return rec._replace(label_text=text, target=float(text), features=features)
    if lm.kind is LabelType.INT:
        if not is_int(text):
            return reject(rec, Reason.BAD_LABEL, f"label {text!r} is not an integer class id")
        if not INT64_MIN <= int(text) + lm.offset <= INT64_MAX:
            return reject(rec, Reason.BAD_LABEL, f"label {text!r} plus --label_offset {lm.offset} does not fit "
                          "an int64")
        return rec._replace(label_text=text, label_id=int(text) + lm.offset, features=features)
    label_id = lookup.get(text)
    if label_id is None:
        return reject(rec, Reason.UNKNOWN_LABEL, f"label {text!r} is not in the frozen label map "
                      "(pass --extend_label_map to add new classes)")
    return rec._replace(label_text=text, label_id=label_id, features=features)
