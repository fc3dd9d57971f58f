"""Provenance: what a version records of each record it wrote, so that a later
version takes an unchanged record's bytes from this one's shards instead of
reading its image again (incremental versions); and the pure rules of that
reuse, and of a killed run's resume.

A record's Example bytes depend only on its image's bytes, its metadata (path,
label, target, typed extra features) and the run's options (and, for
re-encoded bytes, the image libraries' versions). So a later run may copy a
record's framed bytes when:
- the previous version was written by the same tool version, with the same
  shard-shaping options and image libraries, as uncompressed TFRecord shards
  (`why_full` says what differs otherwise);
- its file has the same identity (`Rec.stamp`: size, modification and change
  times and inode on local disk; size and generation on GCS), and that
  identity was not racy when the previous run listed it (`racy`);
- its metadata has the same digest (`record_digest`).
Each record's entry also holds the shard's running CRC32C before and after
it, chained from 0 to the shard's CRC32C in the manifest. A run of records
copied whole is checked by one CRC pass over its bytes, continued from the
running CRC before its first record, against the one after its last
(`run_problem`), and the file name inside each Example; the new shard's own
running CRC moves by a shift (transforms/core/crc_shift.py), without a second
pass. A run that fails is checked record by record (`check_framed`: both
framing CRCs, the CRC the provenance recorded, the file name); a record that
fails is read from its source instead.

Provenance files hold one JSON array per line (`encode_entry`), in the order
of the shard's records, contiguous from byte 0; the manifest lists each with
its size and CRC32C. The previous version is untrusted input: `parse_entries`
refuses a file that is not exactly that.
"""
from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import re
from typing import Iterable, NamedTuple, Optional

import google_crc32c

from tfrecord_pipelines.transforms.core import quality
from tfrecord_pipelines.transforms.core.example_codec import bytes_entry
from tfrecord_pipelines.transforms.core.records import Reason, Rec, Reject
from tfrecord_pipelines.transforms.core.tfrecord_io import mask

FORMAT = "tfrecord-pipelines/provenance/v2"
RESUME_FORMAT = "tfrecord-pipelines/resume/v1"
FOLDER = "provenance"        # in a version folder: provenance/<shard name>.jsonl
SUFFIX = ".jsonl"
# A file whose modification or change time is this close to (or after) the
# previous run's listing start is treated as changed: a rewrite within one
# timestamp tick after that listing could otherwise keep every field of its
# identity (git's "racy clean" entries). 2 s covers ext4/xfs/btrfs (ns, a
# jiffy of clock lag), 1 s filesystems (ext3, HFS+) and FAT's 2 s.
RACY_MARGIN_NS = 2_000_000_000
MAX_LINE = 1 << 20           # bytes of one provenance line
MAX_REL = 4096               # characters of a relative path
MAX_DETAIL = 2000            # characters of a carried reject's detail
# Framed bytes of reused records read from a previous shard at once (one
# request on GCS): contiguous records, and gaps up to MAX_GAP bytes between
# them (removed or changed records) read and dropped rather than split.
MAX_SEGMENT = 8 << 20
MAX_GAP = 256 << 10

# Stamp kinds: how a source file's identity was taken.
LOCAL, GCS, MTIME = 0, 1, 2   # (0, size, mtime_ns, ctime_ns, inode), (1, size, generation), (2, size, mtime_ns)
NONE = 3                      # (3,): not known (a record so recorded is never taken again)
NO_STAMP = (NONE,)
_STAMP_LEN = {LOCAL: 5, GCS: 3, MTIME: 3, NONE: 1}
INT64 = 1 << 63

# Rejects decided by a file's bytes alone (and the options): carried to the
# next version while the file's identity stays. Not those about its state
# (missing, unreadable, not_a_file, changed), which may pass.
CARRIED_REASONS = frozenset(r.value for r in (
    Reason.EMPTY, Reason.NOT_AN_IMAGE, Reason.TRUNCATED, Reason.CORRUPT, Reason.UNSUPPORTED_FORMAT,
    Reason.TOO_MANY_PIXELS, Reason.TOO_COMPLEX, Reason.TOO_LARGE))

# Rec.prev kinds (its first field): PrevCopy, PrevReject
COPY, REJECT = 0, 1
READ = 2                      # a writer's unit: read the image from its source


class PrevCopy(NamedTuple):
    """Rec.prev of a record the previous version wrote: where its framed
    bytes lie in the previous shard, and what they must be to be copied."""
    kind: int = COPY
    shard: str = ""          # the previous version's shard holding it
    offset: int = 0          # of the framed record in that shard
    length: int = 0          # framed bytes
    crc: int = 0             # masked CRC32C of its data, as framed
    sha256: str = ""         # hex sha256 of the stored image bytes
    crc_before: int = 0      # the shard's running CRC32C before the record
    crc_after: int = 0       # and after it
    digest: str = ""         # record_digest of the record it was matched as


class PrevReject(NamedTuple):
    """Rec.prev of a record the previous version rejected for its bytes: the reject, carried."""
    kind: int = REJECT
    reason: str = ""         # a Reason value (CARRIED_REASONS)
    detail: str = ""


class ProvenanceError(ValueError):
    """A provenance file, done-record or manifest section that is not what we write."""


class Entry(NamedTuple):
    """One record of a shard (or one carried reject) as its provenance file holds it."""
    rel: str
    stamp: tuple          # the source's identity when it was listed (Rec.stamp)
    digest: str           # record_digest of its metadata
    offset: int = -1      # the framed record's offset in the shard; -1: a reject
    length: int = 0       # framed length (12 + Example + 4)
    crc: int = 0          # the framing's masked CRC32C of the Example bytes
    sha256: str = ""      # hex, of the stored image bytes (the quality checks' and image/key/sha256)
    phash: int = -1       # perceptual hash (-1: none)
    width: int = 0
    height: int = 0
    src_sha256: str = ""  # hex, of the file's bytes when --duplicates hashed them
    reason: str = ""      # a reject: its reason and detail
    detail: str = ""
    crc_before: int = 0   # the shard's running CRC32C (unmasked) before this record, and after it
    crc_after: int = 0


# ---- a source file's identity ----------------------------------------------------------------------------------


def local_stamp(st) -> tuple:
    return (LOCAL, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def gcs_stamp(size: int, generation: int) -> tuple:
    return (GCS, size, generation)


def mtime_stamp(size: int, mtime_seconds: float) -> tuple:
    return (MTIME, size, int(mtime_seconds * 1e9))


def racy(stamp: tuple, after_ns: int) -> bool:
    """Whether a file's times are too close to a listing that started at
    `after_ns` + RACY_MARGIN_NS to trust (a GCS generation never is racy)."""
    if not stamp or not after_ns:
        return False
    if stamp[0] == LOCAL:
        return stamp[2] >= after_ns or stamp[3] >= after_ns
    if stamp[0] == MTIME:
        return stamp[2] >= after_ns
    return False


def racy_after(listed_at_ns: int) -> int:
    """The threshold of `racy` for files a run listed from `listed_at_ns` on."""
    return max(1, listed_at_ns - RACY_MARGIN_NS) if listed_at_ns else 0


def stamp_text(stamp: tuple) -> str:
    """The stamp as the listing's fingerprint hashes it."""
    return ",".join(map(str, stamp))


# ---- a record's metadata ------------------------------------------------------------------------------------------


def _plain(v):
    return v.hex() if isinstance(v, bytes) else v


def record_digest(rec: Rec) -> str:
    """Everything of a record's Example that is not its image: label id, text
    and target, typed extra features (the path is the join key). Records of
    one class share it: remembered for the last DIGESTS_KEPT metadata seen
    (a class's records are digested once, not once each: ~13 us a record)."""
    if not rec.features:
        return _digest_of(rec.label_id, rec.label_text, rec.target)
    return _digest(rec.label_id, rec.label_text, rec.target, rec.features)


DIGESTS_KEPT = 4096


@functools.lru_cache(maxsize=DIGESTS_KEPT, typed=True)  # typed: 1 and 1.0 are digested apart
def _digest_of(label_id, label_text, target) -> str:
    return _digest(label_id, label_text, target, ())


def _digest(label_id, label_text, target, features: tuple) -> str:
    body = [label_id, label_text, target,
            [[col, kind, [_plain(v) for v in values]] for col, kind, values in features]]
    return hashlib.blake2b(json.dumps(body, ensure_ascii=True).encode("ascii"), digest_size=16).hexdigest()


def reusable(rec: Rec, entry: Entry, after_ns: int) -> bool:
    """Whether the previous version's `entry` may stand for `rec`."""
    if not rec.stamp or rec.stamp[0] == NONE or tuple(rec.stamp) != tuple(entry.stamp) or racy(rec.stamp, after_ns):
        return False
    return entry.offset < 0 or entry.digest == record_digest(rec)


def annotate(rec: Rec, entry: Entry, shard: str) -> Rec:
    """`rec`, to be taken from the previous version: where its bytes are (or
    its reject), and what the quality checks and planning need of it."""
    if entry.offset < 0:
        return rec._replace(prev=PrevReject(REJECT, entry.reason, entry.detail))
    return rec._replace(prev=PrevCopy(COPY, shard, entry.offset, entry.length, entry.crc, entry.sha256,
                                      entry.crc_before, entry.crc_after, entry.digest),
                        size=rec.stamp[1], phash=entry.phash, width=entry.width, height=entry.height,
                        sha256=entry.src_sha256)


# ---- provenance lines ---------------------------------------------------------------------------------------------


def encode_entry(e: Entry) -> bytes:
    """One line: the JSON array of the entry's fields (json.dumps of the
    strings that are not ours, the rest formatted directly: a third of the cost)."""
    return (f'[{json.dumps(e.rel)},[{",".join(map(str, e.stamp))}],"{e.digest}",{e.offset},{e.length},{e.crc},'
            f'"{e.sha256}",{e.phash},{e.width},{e.height},"{e.src_sha256}",{json.dumps(e.reason)},'
            f'{json.dumps(e.detail)},{e.crc_before},{e.crc_after}]\n').encode("ascii")


_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")


def _int(v, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi  # noqa: E721 (not bool)


_U32_MAX, _U64_MAX, _I31_MAX = 2**32 - 1, 2**64 - 1, 2**31 - 1
_FIELDS = len(Entry._fields)
_INT = {int}


def _check_entry(row) -> Entry:
    """An Entry from a parsed line, every field checked (a plain type check
    first: bool is not an int here)."""
    if type(row) is not list or len(row) != _FIELDS:
        raise ProvenanceError(f"a line is not an array of {_FIELDS} fields")
    rel, s, digest, offset, length, crc, sha, phash, width, height, src, reason, detail, before, after = row
    if type(rel) is not str or not 0 < len(rel) <= MAX_REL:
        raise ProvenanceError("a path is missing or too long")
    n = _STAMP_LEN.get(s[0]) if type(s) is list and s and type(s[0]) is int else None
    if (n is None or len(s) != n or set(map(type, s)) != _INT or min(s) < -INT64 or max(s) >= INT64
            or (n > 1 and s[1] < 0)):
        raise ProvenanceError(f"{rel!r}: a malformed file identity")
    if type(digest) is not str or not _HEX32.fullmatch(digest):
        raise ProvenanceError(f"{rel!r}: a malformed digest")
    if offset == -1 and type(offset) is int:
        ok = (length == 0 and crc == 0 and sha == "" and phash == -1 and width == 0 and height == 0 and src == ""
              and before == 0 and after == 0
              and type(length) is type(crc) is type(phash) is type(width) is type(height) is type(before) is int
              and type(after) is int
              and type(reason) is str and reason in CARRIED_REASONS and type(detail) is str
              and len(detail) <= MAX_DETAIL)
    else:
        ok = (type(offset) is type(length) is type(crc) is type(phash) is type(width) is type(height) is int
              and type(before) is type(after) is int and 0 <= before <= _U32_MAX and 0 <= after <= _U32_MAX
              and 0 <= offset <= INT64 and 16 <= length <= INT64 and 0 <= crc <= _U32_MAX
              and -1 <= phash <= _U64_MAX and 0 <= width <= _I31_MAX and 0 <= height <= _I31_MAX
              and type(sha) is str and _HEX64.fullmatch(sha) is not None
              and type(src) is str and (src == "" or _HEX64.fullmatch(src) is not None)
              and reason == "" and detail == "")
    if not ok:
        raise ProvenanceError(f"{rel!r}: a malformed field")
    return Entry(rel, tuple(s), digest, offset, length, crc, sha, phash, width, height, src, reason, detail, before,
                 after)


def parse_entries(data: bytes, shard_bytes: int, shard_records: int, shard_crc: int) -> list:
    """The entries of one shard's provenance file, checked whole: every line
    well-formed, each path once, the records contiguous from byte 0 to the
    shard's size, as many as the manifest says, their running CRC32Cs chained
    from 0 to the shard's (`shard_crc`, unmasked)."""
    if not data:
        lines = []
    elif not data.endswith(b"\n"):
        raise ProvenanceError("the file does not end with a line end")
    else:
        lines = data[:-1].split(b"\n")
    if lines and max(map(len, lines)) > MAX_LINE:
        raise ProvenanceError("a line is too long")
    try:  # one parse of the whole file (a C call, not one per line); one value per line is checked below
        rows = json.loads(b"[" + b",".join(lines) + b"]")
    except (ValueError, RecursionError):
        raise ProvenanceError("a line is not JSON") from None
    if len(rows) != len(lines):
        raise ProvenanceError("a line holds more or less than one entry")
    out, seen, pos, running = [], set(), 0, 0
    for row in rows:
        e = _check_entry(row)
        if e.rel in seen:
            raise ProvenanceError(f"{e.rel!r} is listed twice")
        seen.add(e.rel)
        if e.offset >= 0:
            if e.offset != pos:
                raise ProvenanceError(f"{e.rel!r}: offset {e.offset}, expected {pos}")
            if e.crc_before != running:
                raise ProvenanceError(f"{e.rel!r}: its running CRC does not follow the record's before it")
            pos += e.length
            running = e.crc_after
        out.append(e)
    records = sum(1 for e in out if e.offset >= 0)
    if pos != shard_bytes or records != shard_records:
        raise ProvenanceError(f"{records} records, {pos:,} bytes: the manifest says {shard_records} records, "
                              f"{shard_bytes:,} bytes")
    if running != shard_crc:
        raise ProvenanceError("the records' running CRC does not end at the shard's CRC32C in the manifest")
    return out


# ---- the previous version -----------------------------------------------------------------------------------------


class PrevShard(NamedTuple):
    split: str
    name: str             # the shard's file name (checked against the shard name pattern)
    bytes: int
    records: int
    prov_bytes: int       # its provenance file, provenance/<name>.jsonl
    prov_crc32c: str
    crc: int = 0          # the shard's CRC32C (unmasked), as the manifest gives it
    # (shard identity, provenance file identity) pinned when this machine published them
    # (transforms/storage/copy_trust.py); () when not pinned, or the manifest is not the one pinned
    trust: tuple = ()


@dataclasses.dataclass(frozen=True)
class PreviousVersion:
    """The version LATEST named, as far as a run may take records from it."""
    version: str
    folder: str           # its folder (local path or gs://...)
    listed_at_ns: int     # when its run started listing
    shards: tuple = ()    # PrevShard, every shard of every split
    pinned: bool = False  # a local version: a shard is copied from only if its files are those pinned (trust)

    @property
    def after_ns(self) -> int:
        return racy_after(self.listed_at_ns)


def provenance_name(shard: str) -> str:
    return f"{FOLDER}/{shard}{SUFFIX}"


# An uncompressed TFRecord shard, whatever its naming (--shard_suffix, --shard_template).
_SHARD = re.compile(r"^(?:[A-Za-z0-9_]{1,64}-\d{5,}-of-\d{5,}(?:\.tfrecords?)?"
                    r"|[A-Za-z][A-Za-z0-9_]{0,63}-[A-Za-z0-9_]{1,64}\.tfrecord-\d{5,}-of-\d{5,})$")
_CRC = re.compile(r"[A-Za-z0-9+/]{6}==")


def why_full(manifest: Optional[dict], expect: dict) -> str:
    """Why the previous version's records cannot be reused ("" if they can).
    `expect`: this run's tool_version, fingerprint_options (the dict), image_library,
    compression and output_format."""
    if not manifest:
        return "no previous version"
    if expect["compression"] != "none" or expect["output_format"] != "tfrecord":
        return ("records are copied from uncompressed TFRecord shards only (--compression none, --output_format "
                "tfrecord)")
    inc = manifest.get("incremental")
    if not isinstance(inc, dict) or not isinstance(inc.get("format"), str):
        return f"it was written without provenance (tool version {str(manifest.get('tool_version'))[:40]})"
    if inc["format"] != FORMAT:
        return f"its provenance is {inc['format'][:60]!r}; this tool reads {FORMAT!r}"
    if manifest.get("tool_version") != expect["tool_version"]:
        return (f"it was written by tool version {str(manifest.get('tool_version'))[:40]}, this is "
                f"{expect['tool_version']}")
    changed = changed_options(inc.get("options"), expect["options"])
    if changed:
        return "options changed: " + ", ".join(changed[:8]) + (", ..." if len(changed) > 8 else "")
    if manifest.get("image_library") != expect["image_library"]:
        return "the image libraries changed (Pillow, libjpeg-turbo or zlib)"
    return ""


def changed_options(before, after: dict) -> list:
    """Dotted names of the settings that differ (the previous ones as recorded)."""
    if not isinstance(before, dict):
        return ["(not recorded)"]
    out = []
    for k in sorted(set(before) | set(after)):
        a, b = before.get(k), after.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += [f"{k}.{sub}" for sub in changed_options(a, b)]
        elif a != b:
            out.append(k)
    return out


def previous_version(manifest: dict, version: str, folder: str) -> PreviousVersion:
    """The previous version's shards and provenance files from its manifest
    (which why_full accepted), every field checked."""
    inc = manifest["incremental"]
    listed = inc.get("listed_at_ns")
    files = inc.get("provenance")
    if not _int(listed, 1, INT64) or not isinstance(files, dict):
        raise ProvenanceError("the manifest's incremental section is malformed")
    shards = []
    for split, s in sorted(manifest["splits"].items()):
        for e in s["shards"]:
            p = files.get(e["name"])
            if not (isinstance(p, dict) and _int(p.get("bytes"), 0, INT64) and isinstance(p.get("crc32c"), str)
                    and _CRC.fullmatch(p["crc32c"]) and _SHARD.match(e["name"]) and "crc32c" in e):
                raise ProvenanceError(f"shard {str(e.get('name'))[:100]!r} has no well-formed provenance entry")
            if not (isinstance(e["crc32c"], str) and _CRC.fullmatch(e["crc32c"])):
                raise ProvenanceError(f"shard {str(e.get('name'))[:100]!r} has a malformed CRC32C")
            shards.append(PrevShard(split, e["name"], e["bytes"], e["records"], p["bytes"], p["crc32c"],
                                    int.from_bytes(base64.b64decode(e["crc32c"]), "big")))
    return PreviousVersion(version, folder, listed, tuple(shards))


# ---- the writer's work: read, carry a reject, or copy a run of records ---------------------------------------------


class Unit(NamedTuple):
    kind: int             # READ, REJECT or COPY
    recs: tuple           # the records, in shard order
    shard: str = ""       # COPY: the previous shard, and the byte range to read from it
    start: int = 0
    end: int = 0


def plan_units(recs: Iterable[Rec], max_segment: int = MAX_SEGMENT, max_gap: int = MAX_GAP) -> list:
    """The records of one shard, in order, as units of work: each record to
    read alone; runs of records to copy from one previous shard, grouped
    while they lie close together there (in shard order they do: both
    versions order a split by the same key)."""
    units: list = []
    run: list = []  # the records of the copy being grouped, and its shard, start and end
    shard, start, end = "", 0, 0
    for rec in recs:
        kind = rec.prev.kind if rec.prev else READ
        if kind == COPY:
            s, offset, length = rec.prev.shard, rec.prev.offset, rec.prev.length
            if run and s == shard and end <= offset and offset - end <= max_gap \
                    and offset + length - start <= max_segment:
                run.append(rec)
                end = offset + length
                continue
        if run:
            units.append(Unit(COPY, tuple(run), shard, start, end))
            run = []
        if kind == COPY:
            run, shard, start, end = [rec], s, offset, offset + length
        else:
            units.append(Unit(kind, (rec,)))
    if run:
        units.append(Unit(COPY, tuple(run), shard, start, end))
    return units


def check_framed(framed: bytes, rec: Rec, needle: bytes) -> str:
    """Why the framed record read for `rec` must not be copied ("" if it may):
    its length, both framing CRCs, the CRC the provenance recorded, and (when
    the Example carries the file name: `needle`, its encoded feature entry)
    that name inside it."""
    length, crc = rec.prev.length, rec.prev.crc
    crc_value = google_crc32c.value
    if len(framed) != length:
        return f"{len(framed)} of {length} bytes present"
    data_len = int.from_bytes(framed[:8], "little")
    if data_len != length - 16:
        return "its length field does not match"
    if mask(crc_value(framed[:8])) != int.from_bytes(framed[8:12], "little"):
        return "length CRC mismatch"
    stored = int.from_bytes(framed[-4:], "little")
    if stored != crc or mask(crc_value(framed[12:-4])) != stored:
        return "data CRC mismatch"
    if needle and framed.rfind(needle, 12, len(framed) - 4) < 0:
        return "it holds another file's record"
    return ""


def contiguous(recs: tuple) -> bool:
    """Whether a unit's records lie back to back in their previous shard."""
    return all(a.prev.offset + a.prev.length == b.prev.offset for a, b in zip(recs, recs[1:]))


def run_problem(data: bytes, recs: tuple, needles: list) -> str:
    """Why `data`, read for records lying back to back in one previous shard
    (`recs`, in order), must not be copied as it is ("" if it may): it is not
    exactly the bytes that took the shard's running CRC32C from the one
    recorded before the first record to the one after the last (one CRC pass),
    or a record does not hold its own file name (`needles`, filename_needle
    per record: b"" when the feature is dropped)."""
    first, last = recs[0].prev, recs[-1].prev
    span = last.offset + last.length - first.offset
    if len(data) != span:
        return f"{len(data)} of {span} bytes present"
    if google_crc32c.extend(first.crc_before, data) != last.crc_after:
        return "its bytes are not those recorded (running CRC mismatch)"
    base = first.offset
    for rec, needle in zip(recs, needles):
        start = rec.prev.offset - base
        if needle and data.rfind(needle, start + 12, start + rec.prev.length - 4) < 0:
            return f"the record of {rec.rel!r} holds another file's record"
    return ""


# ---- what the writer records of each shard ----------------------------------------------------------------------


class Written(NamedTuple):
    """A record written, waiting for its perceptual hash (computed a batch at a time)."""
    rec: Rec
    sha256_hex: str      # of the stored bytes
    hash_input: object   # quality.hash_input of its decode, or None (the hash is rec.phash)
    where: tuple         # (offset, framed length, masked data CRC, shard CRC before, shard CRC after) in the shard
    digest: str = ""     # record_digest(rec) when known (a record copied: the previous version's, matched)


def flush_written(split: str, waiting: list, rows, entries) -> None:
    """The quality rows (if `rows` is a list) and provenance entries (if
    `entries` is) of written records (Written), in shard order."""
    if not waiting:
        return
    phashes = (quality.hashes([w.hash_input for w in waiting]) if any(w.hash_input is not None for w in waiting)
               else [w.rec.phash for w in waiting])
    for w, ph in zip(waiting, phashes):
        rec = w.rec
        phash = rec.phash if w.hash_input is None else ph
        if rows is not None:
            rows.append(quality.Row(rec.rel, split, rec.label_text, rec.label_id, w.sha256_hex, phash,
                                    rec.width, rec.height))
        if entries is not None:
            offset, length, crc, before, after = w.where
            entries.append(Entry(rec.rel, rec.stamp or NO_STAMP, w.digest or record_digest(rec), offset, length, crc,
                                 w.sha256_hex, phash, rec.width, rec.height, rec.sha256, crc_before=before,
                                 crc_after=after))


def reject_entry(rec: Rec, r: Reject):
    """The provenance entry carrying a reject to the next version, or None
    (a reason about the file's state, or a file without identity)."""
    if r.reason not in CARRIED_REASONS or not rec.stamp or len(r.detail) > MAX_DETAIL:
        return None
    return Entry(rec.rel, rec.stamp, record_digest(rec), reason=r.reason, detail=r.detail)


def filename_needle(keys: dict, rel: str) -> bytes:
    """The Example's encoded file-name entry: a copied record must hold its
    own (b"" when --feature_keys drops the feature)."""
    key = keys.get("image/filename", "image/filename")
    if not key:
        return b""
    chunks, _ = bytes_entry(key, rel.encode("utf-8", "surrogateescape"))
    return b"".join(chunks)


# ---- resume: a shard's done-record --------------------------------------------------------------------------------


def done_record(shard: dict, rejects: list, rows: list, boxes: tuple = ()) -> bytes:
    """What a rerun needs to keep a complete staged shard without rewriting
    it: its ShardResult's fields (staged file names, sizes, CRC32Cs, label
    counts, counts), its rejects, its quality rows (quality.Row) and, in a
    detection run, its box statistics ((key, count), ...: the manifest's
    detection section is summed from them)."""
    # The rows as columns: a list per field costs a quarter of a list per row to write (~2 us a row).
    return json.dumps({"format": RESUME_FORMAT, "shard": shard, "rejects": [list(r) for r in rejects],
                       "rows": list(map(list, quality.Columns.of(rows))), "boxes": [list(b) for b in boxes]},
                      ensure_ascii=True, separators=(",", ":")).encode("ascii")


BOX_STAT_PREFIXES = ("boxes/", "images/")  # the keys transforms/core/annotations/boxes.py counts
_DONE_FIELDS = {"name": str, "temp": str, "records": int, "bytes": int, "crc32c": str, "label_counts": list,
                "index_temp": str, "index_bytes": int, "index_crc32c": str, "prov_temp": str, "prov_bytes": int,
                "prov_crc32c": str, "copied": int, "read": int, "repaired": int}


def parse_done(data: bytes, name: str) -> tuple:
    """(shard fields, rejects, rows, box statistics) of a done-record for shard `name`."""
    try:
        d = json.loads(data)
    except (ValueError, RecursionError):
        raise ProvenanceError("not JSON") from None
    shard = d.get("shard") if isinstance(d, dict) else None
    if not isinstance(shard, dict) or d.get("format") != RESUME_FORMAT or shard.get("name") != name:
        raise ProvenanceError("not a done-record of this shard")
    for k, t in _DONE_FIELDS.items():
        if type(shard.get(k)) is not t or (t is int and shard[k] < 0):  # noqa: E721
            raise ProvenanceError(f"field {k!r} is malformed")
    for k in ("temp", "index_temp", "prov_temp"):
        if shard[k] and not shard[k].startswith(name + "."):
            raise ProvenanceError(f"field {k!r} names another file")
    if not all(isinstance(p, list) and len(p) == 2 and all(_int(x, -INT64, INT64) for x in p)
               for p in shard["label_counts"]):
        raise ProvenanceError("label counts are malformed")
    rejects, rows = d.get("rejects"), d.get("rows")
    if not (isinstance(rejects, list) and all(isinstance(r, list) and len(r) == 4 and all(isinstance(x, str) for x in r)
                                              for r in rejects)):
        raise ProvenanceError("rejects are malformed")
    if not (isinstance(rows, list) and len(rows) == len(quality.Row._fields)
            and all(isinstance(c, list) and len(c) == len(rows[0]) for c in rows)):
        raise ProvenanceError("quality rows are malformed")
    boxes = d.get("boxes", [])
    if not (isinstance(boxes, list) and all(isinstance(b, list) and len(b) == 2 and isinstance(b[0], str)
                                            and b[0].startswith(BOX_STAT_PREFIXES) and _int(b[1], 0, INT64)
                                            for b in boxes)):
        raise ProvenanceError("box statistics are malformed")
    return shard, rejects, [list(r) for r in zip(*rows)], [tuple(b) for b in boxes]


# ---- retention ------------------------------------------------------------------------------------------------


def versions_beyond(newest_first: list, keep: int, protect: Iterable[str]) -> list:
    """The versions --keep_versions removes: of `newest_first` (complete
    version names, in LATEST's history: the newest first), all but the `keep`
    newest, oldest first, never one in `protect` (then one newer goes)."""
    protect = set(protect)
    excess = len(newest_first) - keep
    out = []
    for name in reversed(newest_first):
        if excess <= 0:
            break
        if name not in protect:
            out.append(name)
            excess -= 1
    return out
