"""The elements that flow between stages, and the vocabulary of reject reasons.

Records are NamedTuples (cheap to pickle between worker processes); a stage
fills in its fields with `_replace`. They carry metadata only: image bytes are
read in the step that writes each shard, never shuffled through the runner.
"""
from __future__ import annotations

import enum
import functools
import json
import pickle
from typing import NamedTuple, Optional

import google_crc32c


class Reason(str, enum.Enum):
    """Why a listed record was not written. Documented in the README."""
    MISSING = "missing"                        # no such file (or a table id matched no file)
    UNREADABLE = "unreadable"                  # exists but cannot be read (permissions, I/O error)
    EMPTY = "empty"                            # zero bytes
    NOT_AN_IMAGE = "not_an_image"              # no known image signature (text, HTML, ...)
    TRUNCATED = "truncated"                    # the stream ends early (no end marker, cut data)
    CORRUPT = "corrupt"                        # an image signature, but it does not parse or decode
    UNSUPPORTED_FORMAT = "unsupported_format"  # a format not stored as-is, and re-encoding is off
    TOO_MANY_PIXELS = "too_many_pixels"        # header claims more than --max_pixels
    UNSAFE_PATH = "unsafe_path"                # a table path escaping the image root
    NO_LABEL = "no_label"                      # empty label cell, or --label_regex did not match
    BAD_LABEL = "bad_label"                    # does not parse as the label type (int, float)
    UNKNOWN_LABEL = "unknown_label"            # not in the frozen --label_map
    BAD_SPLIT = "bad_split"                    # split name not allowed
    DUPLICATE = "duplicate"                    # the same file named again with the same label
    CONFLICTING_LABELS = "conflicting_labels"  # the same file named with different labels
    AMBIGUOUS = "ambiguous"                    # a table id matching several files, or a CSV path with two readings
    CHANGED = "changed"                        # the file changed between validation and writing
    NOT_A_FILE = "not_a_file"                  # a FIFO, device, socket or folder where a file was expected
    TOO_LARGE = "too_large"                    # more bytes than --max_file_bytes
    TOO_COMPLEX = "too_complex"                # costs far more to decode than any real image (scans, metadata)
    BAD_ROW = "bad_row"                        # a label table row that cannot be read (encoding, JSON, size caps)
    DUPLICATE_CONTENT = "duplicate_content"    # the same bytes as another file kept (--duplicates reject)
    MISSING_IMAGE = "missing_image"            # an annotation naming an image file that does not exist
    BAD_ANNOTATION = "bad_annotation"          # an image's annotation cannot be read (XML, text, COCO entry)
    SIZE_MISMATCH = "size_mismatch"            # the image's real size is not the annotation's width and height
    EXIF_ROTATED = "exif_rotated"              # the annotation's size is the image's turned by its EXIF orientation
    BAD_BOX = "bad_box"                        # --bad_boxes reject_image: the image has a box that does not fit it
    NO_BOXES = "no_boxes"                      # --images_without_boxes drop: no box left to write


class Batch(list):
    """A batch of records. Beam's coder pickles a list subclass in one call,
    about twice as fast as element by element for a plain list."""


def pack(items: list) -> bytes:
    """A batch as opaque bytes, for a shuffle or a spill file. The local runner holds every
    grouped value in memory, decoded; as bytes a record costs ~150 bytes
    there instead of ~1 KB of Python objects, and is decoded once, not twice.

    A batch of records (or of (key, record) pairs) is pickled as plain tuples:
    pickle builds a NamedTuple through a Python call per record, which made
    packing and unpacking cost 11 us a record instead of 3-5."""
    items = list(items)
    types = set(map(type, items))
    cls = types.pop() if len(types) == 1 else None
    if cls in _PACKED:
        return pickle.dumps((cls.__name__, False, list(map(tuple, items))), protocol=pickle.HIGHEST_PROTOCOL)
    if cls is tuple and set(map(len, items)) == {2}:
        inner = {type(v) for _, v in items}
        cls = inner.pop() if len(inner) == 1 else None
        if cls in _PACKED:
            return pickle.dumps((cls.__name__, True, [(k, tuple(v)) for k, v in items]),
                                protocol=pickle.HIGHEST_PROTOCOL)
    return pickle.dumps(("", False, items), protocol=pickle.HIGHEST_PROTOCOL)


def unpack(data: bytes) -> Batch:
    name, pairs, rows = pickle.loads(data)
    if not name:
        return Batch(rows)
    make = functools.partial(tuple.__new__, _BY_NAME[name])
    return Batch([(k, make(v)) for k, v in rows] if pairs else map(make, rows))


def fingerprint(data: bytes) -> int:
    """The check that a file still holds exactly the bytes that were
    validated: CRC32C of all of them (~20 us per 116 KB, hardware-accelerated;
    a sample of the file let a same-size rewrite through)."""
    return google_crc32c.value(data)


class Rec(NamedTuple):
    rel: str                          # path relative to the root: identity, image/filename
    path: str                         # what to open (local path or URL)
    size: int = -1                    # bytes; -1 until known
    generation: int = 0               # gs:// object generation seen by the listing; reads are pinned to it
    label_text: Optional[str] = None  # raw label (table cell, folder name, regex group)
    split: Optional[str] = None       # raw split (table cell or split folder)
    extras: tuple = ()                # ((column, raw string), ...) from a label table
    label_id: Optional[int] = None    # class id (class labels)
    target: Optional[float] = None    # regression target (float labels)
    features: tuple = ()              # ((key, kind, values), ...) typed extra features
    fmt: str = ""                     # stored format, set by validation
    height: int = 0
    width: int = 0
    channels: int = 0
    colorspace: str = ""
    source_fmt: str = ""              # format found
    reencode_to: str = ""             # "jpeg"/"png": the writer stores a re-encoding
    crc: int = -1                     # fingerprint() of the bytes validated (-1: not read)
    key: int = 0                      # shuffle key
    phash: int = -1                   # perceptual hash of the decoded image (transforms/core/quality.py; -1: none)
    sha256: str = ""                  # of the file's bytes, when deduplicating before planning (--duplicates)
    orig_height: int = 0              # the input file's size, before --resize_* (0: not known)
    orig_width: int = 0
    orig_sha256: str = ""             # hex sha256 of the input file's bytes (set with --resize_*)
    stamp: tuple = ()                 # the file's identity as listed (transforms/core/provenance.py); (): unknown
    prev: tuple = ()                  # provenance.PrevCopy or PrevReject: what the previous version holds; (): read it
    annotation: tuple = ()            # object annotations (transforms/core/annotations): () for other inputs


class Reject(NamedTuple):
    rel: str
    reason: str      # a Reason value
    detail: str
    split: str = ""  # known once splits are assigned

    def to_json(self) -> dict:
        # A name that is not valid UTF-8 is shown with \xNN escapes: the
        # rejects file stays valid UTF-8 JSON.
        rel = self.rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        out = {"path": rel, "reason": self.reason, "detail": self.detail}
        if self.split:
            out["split"] = self.split
        return out


def reject(rec: Rec, reason: Reason, detail: str) -> Reject:
    return Reject(rec.rel, reason.value, detail, rec.split or "")


class ShardResult(NamedTuple):
    split: str
    index: int
    num_shards: int
    name: str          # final file name, e.g. train-00000-of-00016.tfrecord
    temp_path: str     # where the complete file waits in the staging folder
    records: int
    bytes: int
    crc32c: str        # of the file's bytes, as Cloud Storage writes it (tfrecord_io.crc32c_text)
    label_counts: tuple  # ((label_id, count), ...) sorted
    index_temp_path: str = ""  # --index_files: the shard's index in the staging folder ("" without)
    index_bytes: int = 0
    prov_temp_path: str = ""   # --versioned: the shard's provenance file in the staging folder ("" without)
    prov_bytes: int = 0
    prov_crc32c: str = ""
    copied: int = 0            # records copied from the previous version's shards (incremental runs)
    read: int = 0              # images read from the source (records written or rejected)
    repaired: int = 0          # of those, records the previous version held damaged
    resumed: bool = False      # written by an earlier, killed run of the same inputs (resume)


_PACKED = frozenset({Rec, Reject})  # the NamedTuples pack() stores as plain tuples
_BY_NAME = {cls.__name__: cls for cls in _PACKED}


def reject_order(r: Reject) -> tuple:
    """The order of rejects.jsonl: by path (then reason, detail, split)."""
    return r.rel, r.reason, r.detail, r.split


def reject_line(r: Reject) -> bytes:
    """One line of rejects.jsonl."""
    return (json.dumps(r.to_json(), ensure_ascii=False) + "\n").encode("utf-8", "surrogateescape")


def rejects_jsonl(rejects: list) -> bytes:
    """rejects.jsonl: one JSON object per reject, in path order, all at once
    (transforms/storage/reject_log.py writes it without holding every reject)."""
    return b"".join(reject_line(r) for r in sorted(rejects, key=reject_order))
