"""An output re-read and held against its manifest: verify_output, behind
`tfrecords verify` (commands/verify.py) and the API's verify()."""
from __future__ import annotations

import collections
import dataclasses
import hashlib
from typing import Optional

import google_crc32c

from tfrecord_pipelines.transforms.core.units import human_bytes
from tfrecord_pipelines.transforms.core.features import tfmd_schema
from tfrecord_pipelines.transforms.core.specs import LabelType, OutputFormat
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression, RecordError, crc32c_text
from tfrecord_pipelines.outputs.finished_output import follow_latest, no_manifest
from tfrecord_pipelines.transforms.core.errors import OutputError
from tfrecord_pipelines.transforms.storage import fsutil, layout, untrusted
from tfrecord_pipelines.transforms.storage.gcs import StorageUnavailable
from tfrecord_pipelines.transforms.storage.array_record_io import records_of

_BATCH = 256


@dataclasses.dataclass
class Report:
    errors: list = dataclasses.field(default_factory=list)
    fatal: bool = False  # nothing could be verified: no manifest, or one that cannot be read
    notes: list = dataclasses.field(default_factory=list)  # not problems of the dataset: files beside it to know of
    shards: int = 0
    records: int = 0
    bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors


class _Hashing:
    """A read() view of a file that checksums and counts the raw bytes read:
    CRC32C, or SHA-256 for a manifest written before 0.3."""

    def __init__(self, f, sha256: bool = False):
        self._f = f
        self.sha = hashlib.sha256() if sha256 else None
        self.crc = 0
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        if self.sha is not None:
            self.sha.update(data)
        else:
            self.crc = google_crc32c.extend(self.crc, data)
        self.size += len(data)
        return data

    def mismatch(self, entry: dict) -> str:
        """Why the checksum differs from the manifest's, or ""."""
        if self.sha is not None:
            got, want, kind = self.sha.hexdigest(), entry["sha256"], "sha256"
        else:
            got, want, kind = crc32c_text(self.crc), entry["crc32c"], "crc32c"
        return "" if got == want else f"{kind} {got} does not match the manifest's {want}"


def example_decoder(features: dict):
    """tfx-bsl's Arrow decoder for Examples with the manifest's features and types."""
    from tfx_bsl.coders import example_coder
    schema = tfmd_schema(features, required=False)
    return example_coder.ExamplesToRecordBatchDecoder(schema.SerializeToString())


@dataclasses.dataclass
class _Checks:
    """What the records are held to beyond their shard: the label map, label
    counts per split, one record per file, and (--decode) a decodable image."""
    roles: dict
    kind: str = LabelType.NONE              # the label map's kind
    classes: dict = dataclasses.field(default_factory=dict)   # name -> id
    offset: int = 0
    deep: bool = True
    decode: bool = False
    split: str = ""
    label_counts: dict = dataclasses.field(default_factory=dict)  # split -> Counter of label ids
    # 8-byte digest of each image/filename -> (shard name, record index): ~100 bytes a record
    seen: dict = dataclasses.field(default_factory=dict)

    @property
    def ids(self) -> Optional[set]:
        return set(self.classes.values()) if self.kind == LabelType.CLASS else None


def _first(col, j):
    v = col[j].as_py() if col is not None else None
    return v[0] if v else None


def _check_batch(decoder, batch: list, name: str, checks: _Checks, report: Report) -> None:
    """Parses a batch of (index, offset, bytes); checks each record."""
    try:
        rb = decoder.DecodeBatch([data for _, _, data in batch])
    except Exception:  # find the record that does not parse
        for index, offset, data in batch:
            try:
                decoder.DecodeBatch([data])
            except Exception as e:
                report.errors.append(f"{_where(name, index, offset)} is not a valid "
                                     f"tf.train.Example with the manifest's features: {e}")
                return
        return
    cols = {rb.schema.field(i).name: rb.column(i) for i in range(rb.num_columns)}
    roles = checks.roles
    col = {role: cols.get(roles.get(role)) for role in ("encoded", "sha256", "label", "text", "filename",
                                                          "height", "width", "channels", "object_label")}
    box_ids = set(checks.classes.values()) if checks.kind == LabelType.BOXES else None
    counts = checks.label_counts.setdefault(checks.split, collections.Counter())
    ids = checks.ids
    for j, (index, offset, _) in enumerate(batch):
        where = _where(name, index, offset)
        img = _first(col["encoded"], j)
        if checks.deep and col["encoded"] is not None and col["sha256"] is not None:
            want = _first(col["sha256"], j)
            if not img or not want or hashlib.sha256(img).hexdigest().encode() != want:
                report.errors.append(f"{where}: image bytes do not match their recorded sha256")
        label = _first(col["label"], j)
        if col["label"] is not None:
            counts[label] += 1
            if ids is not None and label not in ids:
                report.errors.append(f"{where}: label {label} is not in the manifest's label map")
            text = _first(col["text"], j)
            if col["text"] is not None and label is not None and not _label_matches(checks, label, text):
                shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
                report.errors.append(f"{where}: label id {label} does not match its text {shown!r} in the label map")
        if box_ids is not None and col["object_label"] is not None:  # --annotations: each object's class
            unknown = sorted({i for i in (col["object_label"][j].as_py() or []) if i not in box_ids})
            if unknown:
                report.errors.append(f"{where}: object class ids {unknown[:5]} are not in the manifest's label map")
        filename = _first(col["filename"], j)
        if filename is not None:
            key = int.from_bytes(hashlib.blake2b(filename, digest_size=8).digest(), "big")
            first = checks.seen.setdefault(key, (name, index))
            if first != (name, index):
                shown = filename.decode("utf-8", "replace")
                report.errors.append(f"{where}: a duplicate of {first[0]} record {first[1]} (same image/filename "
                                     f"{shown!r})")
        if checks.decode and img is not None:
            problem = _decode_problem(img, [_first(col[k], j) for k in ("height", "width", "channels")])
            if problem:
                report.errors.append(f"{where}: {problem}")


def _where(name: str, index: int, offset: Optional[int]) -> str:
    """A record's place; ArrayRecord shards have no byte offsets to give (None)."""
    return f"{name}: record {index}" + (f" at byte offset {offset}" if offset is not None else "")


def _label_matches(checks: _Checks, label: int, text: Optional[bytes]) -> bool:
    if text is None:
        return False
    try:
        t = text.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if checks.kind == LabelType.CLASS:
        return checks.classes.get(t) == label
    if checks.kind == LabelType.INT:
        try:
            return int(t) + checks.offset == label
        except ValueError:
            return False
    return True


def _decode_problem(img: bytes, shape: list) -> str:
    """What is wrong when TensorFlow decodes the image ("" if nothing)."""
    import tensorflow as tf
    try:
        t = tf.io.decode_image(img, expand_animations=False)
    except Exception as e:  # tf raises InvalidArgumentError and others
        return f"TensorFlow cannot decode the image: {str(e).splitlines()[0][:200]}"
    if t.shape.rank != 3:
        return f"the image decodes to a {t.shape.rank}-D tensor, not 3-D"
    got = list(t.shape)
    if all(v is not None for v in shape) and got != shape:
        return f"the image decodes to height, width, channels {got}, the record says {shape}"
    return ""


def _check_label_counts(m: dict, checks: _Checks, report: Report) -> None:
    if checks.kind not in (LabelType.CLASS, LabelType.INT) or checks.roles.get("label") not in m["features"]:
        return
    names = {i: n for n, i in checks.classes.items()}
    for split, s in m["splits"].items():
        got = {names.get(i, str(i)): c for i, c in checks.label_counts.get(split, {}).items()}
        want = s.get("label_counts")
        if not isinstance(want, dict):
            report.errors.append(f"split {split!r}: the manifest has no label_counts")
        elif got != want:
            diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            shown = ", ".join(f"{k!r}: {got.get(k, 0)} read, {want.get(k, 0)} in the manifest" for k in diff[:5])
            report.errors.append(f"split {split!r}: label counts differ from the manifest's ({shown}"
                                 f"{', ...' if len(diff) > 5 else ''})")


def verify_shard(output: str, entry: dict, compression: Compression, decoder, checks: _Checks,
                 report: Report, output_format: OutputFormat = OutputFormat.TFRECORD) -> None:
    name = entry["name"]
    path = fsutil.join(output, name)
    count = 0
    framing: list = []  # (offset, framed length) of each record, for the index
    try:
        raw = untrusted.open_stream(path, within=output)
    except OSError as e:  # a FIFO or a device in its place, a link out of the output, unreadable
        report.errors.append(f"{name}: cannot be read: {e}")
        return
    with raw:
        f = _Hashing(raw, sha256="crc32c" not in entry)
        batch: list = []
        try:
            for offset, data in records_of(f, path, output_format, compression):
                framing.append((offset, 12 + len(data) + 4))
                batch.append((count, offset, data))
                count += 1
                if len(batch) >= _BATCH:
                    _check_batch(decoder, batch, name, checks, report)
                    batch = []
        except RecordError as e:
            report.errors.append(f"{name}: {e}")
        if batch:
            _check_batch(decoder, batch, name, checks, report)
        while f.read(1 << 20):  # hash any bytes left after damage
            pass
    if count != entry["records"]:
        report.errors.append(f"{name}: {count} records read, the manifest says {entry['records']} "
                             "(a shard cut at a record boundary, or records added)")
    if f.size != entry["bytes"]:
        report.errors.append(f"{name}: {f.size} bytes, the manifest says {entry['bytes']}")
    why = f.mismatch(entry)
    if why:
        report.errors.append(f"{name}: {why}")
    if isinstance(entry.get("index"), str):
        _check_index(output, entry["index"], name, framing, report)
    report.shards += 1
    report.records += count
    report.bytes += f.size


def _check_index(output: str, index: str, shard: str, framing: list, report: Report) -> None:
    """The index holds one line `<offset> <length>` per record of the shard,
    in order (what DALI and the tfrecord package seek by)."""
    # `index` is index/<shard>.idx (or <shard>.idx beside it, from earlier versions: layout.check_manifest);
    # at most one short line per record.
    cap = untrusted.MAX_INDEX_LINE_BYTES * (len(framing) + 1)
    try:
        lines = untrusted.read(fsutil.join(output, index), cap, within=output).decode("ascii").splitlines()
    except Exception as e:  # missing (reported with the listing), not a file, too long for the shard, not text
        if not isinstance(e, FileNotFoundError):
            report.errors.append(f"{index}: cannot be read as an index: {str(e)[:200]}")
        return
    for i, line in enumerate(lines):
        want = framing[i] if i < len(framing) else None
        parts = line.split(" ")
        got = tuple(int(p) for p in parts) if len(parts) == 2 and all(p.isdigit() for p in parts) else None
        if got != want:
            shown = f"offset {want[0]}, length {want[1]}" if want else "no record"
            report.errors.append(f"{index}: line {i + 1} is {line[:80]!r}, {shard} has {shown} there")
            return
    if len(lines) < len(framing):
        report.errors.append(f"{index}: {len(lines)} lines, {shard} holds {len(framing)} records")


def failed_rejects_notes(names: list, run_id: str) -> list:
    """The rejects refused runs kept beside this dataset (failed-<run>.rejects.jsonl):
    no part of it, told so it is not mistaken for its rejects."""
    notes = []
    for name in names:
        m = layout.FAILED_RUN_REJECTS_RE.match(name)
        if m:
            when = "an earlier" if m.group(1) < run_id else "a later"
            notes.append(f"{name}: the rejects of {when} conversion into this folder, which was refused; they are "
                         f"not this dataset's (run {run_id}, whose rejects are {layout.REJECTS}). Remove it, or "
                         "the next conversion that publishes here does")
    return notes


def verify_output(output: str, deep: bool = True, log=None, decode: bool = False) -> Report:
    """`output` (a --versioned root: the version its LATEST names) against its manifest."""
    output = fsutil.normalize_root(output)
    report = Report()
    try:
        output = follow_latest(output)[0]
        m = layout.read_manifest(output)
    except FileNotFoundError:
        report.errors.append(no_manifest(output))
        report.fatal = True
        return report
    except StorageUnavailable:
        raise
    except OutputError as e:  # a LATEST that cannot be followed safely
        report.errors.append(str(e))
        report.fatal = True
        return report
    except Exception as e:  # malformed (layout.ManifestError), not a file, too large, unreadable
        report.errors.append(f"{layout.MANIFEST} cannot be read: {e}")
        report.fatal = True
        return report
    c = m["counts"]
    if c["listed"] != c["written"] + c["rejected"] + c["not_selected"]:
        report.errors.append(f"manifest counts do not reconcile: listed {c['listed']} != written {c['written']} + "
                             f"rejected {c['rejected']} + not selected {c['not_selected']}")
    entries = [e for s in m["splits"].values() for e in s["shards"]]
    if sum(e["records"] for e in entries) != c["written"]:
        report.errors.append("manifest: shard record counts do not add up to the written count")
    names = fsutil.list_dir(output)
    report.notes += failed_rejects_notes(names, str(m["run_id"]))
    present = {n for n in names if layout.SHARD_RE.match(n)}
    index_files = layout.list_indexes(output)
    for e in entries:
        if e["name"] not in present:
            report.errors.append(f"{e['name']}: missing (listed in the manifest)")
    indexes = {e["index"] for e in entries if isinstance(e.get("index"), str)}
    for n in sorted(indexes - set(index_files)):
        report.errors.append(f"{n}: missing (the manifest lists it as a shard's index)")
    for n in sorted(n for n in index_files if n not in indexes):
        report.errors.append(f"{n}: a shard index not in the manifest (stale, or from another run); DALI or the "
                             "tfrecord package would read wrong offsets from it")
    for n in sorted(present - {e["name"] for e in entries}):
        report.errors.append(f"{n}: a shard file not in the manifest (stale, or from another run); a glob would "
                             "read it")
    _check_rejects(output, c["rejected"], report)
    try:
        compression = Compression(m.get("compression", "none"))
    except ValueError:
        report.errors.append(f"{layout.MANIFEST}: unknown compression {m.get('compression')!r}")
        return report
    try:
        output_format = OutputFormat(m.get("output_format", "tfrecord"))
    except ValueError:
        report.errors.append(f"{layout.MANIFEST}: unknown output_format {m.get('output_format')!r}")
        return report
    decoder = example_decoder(m["features"])
    lm = m.get("label_map", {})
    offset = lm.get("offset", 0)
    checks = _Checks(roles=m.get("feature_roles", {}), kind=lm.get("kind", LabelType.NONE), classes=lm.get("classes", {}),
                     offset=offset if type(offset) is int else 0, deep=deep, decode=decode)  # noqa: E721
    for split, s in m["splits"].items():
        checks.split = split
        for e in s["shards"]:
            if e["name"] in present:
                verify_shard(output, e, compression, decoder, checks, report, output_format)
                if log:
                    log(f"  {e['name']}: {e['records']:,} records, {human_bytes(e['bytes'])}")
    _check_label_counts(m, checks, report)
    return report


def _check_rejects(output: str, expected: int, report: Report) -> None:
    try:
        lines = untrusted.count_lines(fsutil.join(output, layout.REJECTS), within=output)
    except StorageUnavailable:
        raise
    except Exception as e:  # gone; not a file, a link out of the output, unreadable
        why = "missing" if fsutil.error_reason(e) == "missing" else f"cannot be read: {str(e)[:200]}"
        report.errors.append(f"{layout.REJECTS}: {why}")
        return
    if lines != expected:
        report.errors.append(f"{layout.REJECTS}: {lines} lines, the manifest counts {expected} rejects")
