"""`tfrecords verify OUT`: re-read every shard and hold it against the manifest.

Checks, each failure naming the shard and, for record damage, the byte offset:
the manifest exists and its counts reconcile; the folder holds exactly the
manifest's shards (a stale shard would be read by a `train-*` glob); every
record's framing and both CRCs; every Example parses with the manifest's
feature types (tfx-bsl's Arrow decoder, in C++); every image's bytes match its
recorded sha256; each shard's record count, byte size and sha256 match.
"""
from __future__ import annotations

import dataclasses
import hashlib
import sys
from typing import Optional

from pipelines.report import human_bytes
from transforms import fsutil, layout
from transforms.tfrecord_io import Compression, RecordError, iter_records

_BATCH = 256


@dataclasses.dataclass
class Report:
    errors: list = dataclasses.field(default_factory=list)
    shards: int = 0
    records: int = 0
    bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.errors


class _Hashing:
    """A read() view of a file that hashes and counts the raw bytes read."""

    def __init__(self, f):
        self._f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.sha.update(data)
        self.size += len(data)
        return data


def example_decoder(features: dict):
    """tfx-bsl's Arrow decoder for Examples with the manifest's features and types."""
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.coders import example_coder
    kinds = {"bytes": schema_pb2.BYTES, "int64": schema_pb2.INT, "float": schema_pb2.FLOAT}
    schema = schema_pb2.Schema()
    for name, kind in features.items():
        schema.feature.add(name=name, type=kinds[kind])
    return example_coder.ExamplesToRecordBatchDecoder(schema.SerializeToString())


def _check_batch(decoder, batch: list, name: str, roles: dict, labels: Optional[set], report: Report,
                 deep: bool) -> None:
    """Parses a batch of (index, offset, bytes); checks sha256 and labels."""
    try:
        rb = decoder.DecodeBatch([data for _, _, data in batch])
    except Exception:  # find the record that does not parse
        for index, offset, data in batch:
            try:
                decoder.DecodeBatch([data])
            except Exception as e:
                report.errors.append(f"{name}: record {index} at byte offset {offset} is not a valid "
                                     f"tf.train.Example with the manifest's features: {e}")
                return
        return
    cols = {rb.schema.field(i).name: rb.column(i) for i in range(rb.num_columns)}
    enc, key, lab = cols.get(roles.get("encoded")), cols.get(roles.get("sha256")), cols.get(roles.get("label"))
    for j, (index, offset, _) in enumerate(batch):
        if deep and enc is not None and key is not None:
            img, want = enc[j].as_py(), key[j].as_py()
            if not img or not want or hashlib.sha256(img[0]).hexdigest().encode() != want[0]:
                report.errors.append(f"{name}: record {index} at byte offset {offset}: image bytes do not match "
                                     "their recorded sha256")
        if labels is not None and lab is not None:
            v = lab[j].as_py()
            if not v or v[0] not in labels:
                report.errors.append(f"{name}: record {index} at byte offset {offset}: label {v} is not in the "
                                     "manifest's label map")


def verify_shard(output: str, entry: dict, compression: Compression, decoder, roles: dict,
                 labels: Optional[set], report: Report, deep: bool = True) -> None:
    name = entry["name"]
    path = fsutil.join(output, name)
    count = 0
    with fsutil.open_read(path) as raw:
        f = _Hashing(raw)
        batch: list = []
        try:
            for offset, data in iter_records(f, compression):
                batch.append((count, offset, data))
                count += 1
                if len(batch) >= _BATCH:
                    _check_batch(decoder, batch, name, roles, labels, report, deep)
                    batch = []
        except RecordError as e:
            report.errors.append(f"{name}: {e}")
        if batch:
            _check_batch(decoder, batch, name, roles, labels, report, deep)
        while f.read(1 << 20):  # hash any bytes left after damage
            pass
    if count != entry["records"]:
        report.errors.append(f"{name}: {count} records read, the manifest says {entry['records']} "
                             "(a shard cut at a record boundary, or records added)")
    if f.size != entry["bytes"]:
        report.errors.append(f"{name}: {f.size} bytes, the manifest says {entry['bytes']}")
    if f.sha.hexdigest() != entry["sha256"]:
        report.errors.append(f"{name}: sha256 {f.sha.hexdigest()} does not match the manifest's {entry['sha256']}")
    report.shards += 1
    report.records += count
    report.bytes += f.size


def verify_output(output: str, deep: bool = True, log=None) -> Report:
    output = fsutil.normalize_root(output)
    report = Report()
    try:
        m = layout.read_manifest(output)
    except FileNotFoundError:
        report.errors.append(f"{output}: no {layout.MANIFEST}: not a complete output (a conversion that did not "
                             "finish, or not a dataset)")
        return report
    except Exception as e:
        report.errors.append(f"{layout.MANIFEST} cannot be read: {e}")
        return report
    c = m["counts"]
    if c["listed"] != c["written"] + c["rejected"] + c["not_selected"]:
        report.errors.append(f"manifest counts do not reconcile: listed {c['listed']} != written {c['written']} + "
                             f"rejected {c['rejected']} + not selected {c['not_selected']}")
    entries = [e for s in m["splits"].values() for e in s["shards"]]
    if sum(e["records"] for e in entries) != c["written"]:
        report.errors.append("manifest: shard record counts do not add up to the written count")
    present = {n for n in fsutil.list_dir(output) if layout.SHARD_RE.match(n)}
    for e in entries:
        if e["name"] not in present:
            report.errors.append(f"{e['name']}: missing (listed in the manifest)")
    for n in sorted(present - {e["name"] for e in entries}):
        report.errors.append(f"{n}: a shard file not in the manifest (stale, or from another run); a glob would "
                             "read it")
    _check_rejects(output, c["rejected"], report)
    compression = Compression(m.get("compression", "none"))
    decoder = example_decoder(m["features"])
    roles = m.get("feature_roles", {})
    lm = m.get("label_map", {})
    labels = set(lm.get("classes", {}).values()) if lm.get("kind") == "class" else None
    for e in entries:
        if e["name"] in present:
            verify_shard(output, e, compression, decoder, roles, labels, report, deep)
            if log:
                log(f"  {e['name']}: {e['records']:,} records, {human_bytes(e['bytes'])}")
    return report


def _check_rejects(output: str, expected: int, report: Report) -> None:
    try:
        lines = fsutil.read_bytes(fsutil.join(output, layout.REJECTS)).splitlines()
    except Exception:
        report.errors.append(f"{layout.REJECTS}: missing")
        return
    if len(lines) != expected:
        report.errors.append(f"{layout.REJECTS}: {len(lines)} lines, the manifest counts {expected} rejects")


def main(argv: Optional[list] = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="tfrecords verify", description=__doc__.split("\n\n")[0])
    ap.add_argument("output", help="output folder of a conversion (local or gs://)")
    ap.add_argument("--fast", action="store_true", help="skip re-hashing every image (framing, CRCs, parsing, "
                    "counts and shard checksums are still checked)")
    ap.add_argument("--quiet", action="store_true", help="print only problems and the verdict")
    args = ap.parse_args(argv)
    report = verify_output(args.output, deep=not args.fast, log=None if args.quiet else print)
    for err in report.errors:
        print(f"ERROR {err}", file=sys.stderr)
    if report.ok:
        print(f"OK: {report.shards} shards, {report.records:,} records, {human_bytes(report.bytes)} match the "
              "manifest")
        return 0
    print(f"FAILED: {len(report.errors)} problem(s) in {args.output}", file=sys.stderr)
    return 1
