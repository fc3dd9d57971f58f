"""Stage ListInputs: the image tree or label table, listed inside the pipeline
(or the rows a user's own pipeline gives, read as a table's rows).

Output (a tagged tuple):
  records  [Rec, ...]     batches of listed records (rel, path, size, raw label/split/extras)
  rejects  [Reject, ...]  rows refused already (unsafe paths, duplicates, ids matching no file);
                          label tables only
  stats    (name, count)  "listed" and the excluded counts by reason
  fingerprint (unit, hex) the listing's digests (transforms/core/fingerprint.py)
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from typing import Iterable, Iterator

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfrecord_pipelines.transforms.core import tables
from tfrecord_pipelines.transforms.core.fingerprint import FINGERPRINT, RACY
from tfrecord_pipelines.transforms.core.labels import nfc
from tfrecord_pipelines.transforms.core.records import Batch, Reason, Rec, Reject, reject
from tfrecord_pipelines.transforms.core.specs import DEFAULT_IO_TIMEOUT, RECORDS, REJECTS, STATS, InputKind, InputSpec
from tfrecord_pipelines.transforms.storage import fsutil, listing, spill
from tfrecord_pipelines.transforms.storage.progress import Progress

BATCH = 500
_EMPTY = hashlib.sha256().hexdigest()


def batched(items: Iterable, size: int = BATCH) -> Iterator[list]:
    batch = Batch()
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = Batch()
    if batch:
        yield batch


class _WalkFn(beam.DoFn):
    def __init__(self, root: str, include: tuple, name: str, progress_dir: str = "", racy_after_ns: int = 0,
                 io_timeout: float = DEFAULT_IO_TIMEOUT):
        self._root, self._include, self._name, self._racy = root, include, name, racy_after_ns
        self._progress_dir, self._timeout = progress_dir, io_timeout

    def setup(self):
        self._progress = Progress(self._progress_dir, "list")

    def process(self, unit_bytes: bytes):
        unit = listing.unit_from_bytes(unit_bytes)
        counts = collections.Counter()
        digest, racy = hashlib.sha256(), hashlib.sha256()
        n = 0
        for batch in batched(listing.walk_unit(self._root, unit, self._include, counts, digest, self._racy, racy,
                                                     self._timeout)):
            n += len(batch)
            self._progress.add(len(batch))
            yield batch
        # Beam's str coder refuses undecodable bytes; the key is the same for a valid name.
        key = unit_bytes.decode("utf-8", "backslashreplace")
        yield beam.pvalue.TaggedOutput(FINGERPRINT, (f"{self._name}/{key}", digest.hexdigest()))
        if racy.hexdigest() != _EMPTY:
            yield beam.pvalue.TaggedOutput(FINGERPRINT, (f"{RACY}{self._name}/{key}", racy.hexdigest()))
        yield beam.pvalue.TaggedOutput(STATS, ("listed", n))
        for name, count in counts.items():
            yield beam.pvalue.TaggedOutput(STATS, ("excluded/" + name, count))

    def finish_bundle(self):
        self._progress.flush(force=True)


def table_row_to_rec(n: int, row, spec: InputSpec, where: str = ""):
    """A Rec for the table row on line `n` (`where`: how a row without a line
    is named), or a Reject (a row that cannot be read, an empty or unsafe path)."""
    where = where or f"line {n}"
    if isinstance(row, tables.BadRow):
        return Reject(f"({where})", Reason.BAD_ROW.value, row.detail)
    raw = row.get(spec.path_column, "")
    if spec.table_format == tables.LIST_FORMAT or spec.kind is InputKind.ROWS:
        raw = tables.under_root(raw, spec.root)  # full paths or URIs below the root
    extras = tuple((c, row.get(c, "")) for c in spec.extra_columns)
    # NFC, so that rows naming one label in two Unicode forms are not "conflicting".
    label = nfc(row.get(spec.label_column)) if spec.label_column else None
    split = row.get(spec.split_column) if spec.split_column else None
    if not raw:
        return Reject(f"({where})", Reason.MISSING.value, f"{where} has an empty {spec.path_column!r} cell")
    try:
        rel, path = tables.resolve_path(raw, spec.root, spec.allow_absolute_paths)
    except tables.UnsafePath as e:
        return Reject(raw, Reason.UNSAFE_PATH.value, str(e))
    return Rec(rel=rel, path=path, label_text=label, split=split, extras=extras)


class _ReadTableFn(beam.DoFn):
    def __init__(self, spec: InputSpec, progress_dir: str = ""):
        self._spec = spec
        self._progress_dir = progress_dir

    def setup(self):
        self._progress = Progress(self._progress_dir, "list")

    def process(self, table: str):
        n = 0
        digest = hashlib.sha256()

        def hashed(rows):
            for i, row in rows:
                digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogateescape")
                              + b"\n")
                yield i, row

        with FileSystems.open(table, compression_type=CompressionTypes.AUTO) as f:
            # Python rows (a DataFrame) and JSON Lines give paths as typed strings: taken exactly (`x/a.jpg ` is
            # not `x/a.jpg`); a hand-written CSV's cells are stripped, as its spaces around values are layout,
            # unless a file of the name as written exists too (padded_path_check)
            spec = self._spec
            typed = spec.kind is InputKind.ROWS or bool(spec.source) or spec.table_format == "jsonl"
            padded: dict = {}
            _, rows = tables.open_rows(tables.text_stream(f, self._spec.table_encoding), self._spec.table_format,
                                       exact=(spec.path_column,) if typed or spec.table_format in ("csv", "tsv")
                                       else ())
            if not typed and spec.table_format in ("csv", "tsv"):
                rows = tables.strip_path_cells(rows, spec.path_column, padded)
            rows = (padded_path_check(table_row_to_rec(i, row, self._spec), padded.pop(i, ""), self._spec)
                    for i, row in hashed(rows))
            for batch in batched(rows):
                n += len(batch)
                self._progress.add(len(batch))
                recs = Batch(r for r in batch if isinstance(r, Rec))
                if len(recs) < len(batch):
                    yield beam.pvalue.TaggedOutput(REJECTS, Batch(r for r in batch if isinstance(r, Reject)))
                if recs:
                    yield recs
        self._progress.flush(force=True)
        yield beam.pvalue.TaggedOutput(FINGERPRINT, ("table", digest.hexdigest()))
        yield beam.pvalue.TaggedOutput(STATS, ("listed", n))


def padded_path_check(item, written: str, spec: InputSpec):
    """`item` (table_row_to_rec's), or an `ambiguous` Reject when its CSV path
    cell was `written` with white space at its ends and a file of that name, as
    written, exists beside the one the stripped name gives: which one the row
    means cannot be told, and neither image may stand in for the other."""
    if not written or not isinstance(item, Rec):
        return item
    try:
        rel, path = tables.resolve_path(written, spec.root, spec.allow_absolute_paths)
    except tables.UnsafePath:
        return item
    if rel == item.rel or not fsutil.exists(path):
        return item
    both = fsutil.exists(item.path)
    return reject(item, Reason.AMBIGUOUS, f"the path cell {written!r} has white space at its ends: a CSV cell "
                  f"without it names {item.rel!r}{'' if both else ' (no such file)'}, and a file {rel!r} exists"
                  f"{' too' if both else ''}; rename {'one of them' if both else 'it'}, or give the table as JSON "
                  "Lines, whose paths are taken exactly")


def _row_digest(row, spec: InputSpec) -> int:
    cells = tables.row_cells(row, spec.path_column, spec.label_column)
    text = json.dumps(cells if isinstance(cells, dict) else {"bad_row": cells.detail}, sort_keys=True,
                      ensure_ascii=False)
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest(), "big")


def resolve_id(stem: str, grouped: dict) -> Iterator:
    """Table rows naming `stem` without an extension, joined with the files
    whose path minus extension is `stem`: the Rec, or a Reject."""
    files = sorted(grouped["files"], key=lambda r: r.rel)
    for row in grouped["rows"]:
        if len(files) == 1:
            f = files[0]
            yield row._replace(rel=f.rel, path=f.path, size=f.size, generation=f.generation, stamp=f.stamp)
        elif not files:
            yield reject(row, Reason.MISSING, f"no image file named {stem!r} with any image extension")
        else:
            yield reject(row, Reason.AMBIGUOUS, f"{stem!r} matches {len(files)} files: "
                         + ", ".join(f.rel for f in files[:5]))


def dedupe(rel: str, recs: Iterable[Rec]) -> Iterator:
    """One Rec per file: repeated rows with one label keep one (the others are
    `duplicate`); rows giving one file different labels are all refused."""
    recs = sorted(recs, key=lambda r: (r.label_text or "", r.split or "", r.extras))
    labels = {r.label_text for r in recs}
    if len(labels) > 1:
        shown = ", ".join(repr(x) for x in sorted(labels, key=str)[:5])
        for r in recs:
            yield reject(r, Reason.CONFLICTING_LABELS, f"the table gives this file labels {shown}")
        return
    yield recs[0]
    for r in recs[1:]:
        yield reject(r, Reason.DUPLICATE, f"the table names this file {len(recs)} times")


def with_stamp(rel: str, values: Iterable) -> Iterator:
    """dedupe() of the rows naming `rel`, each given the identity of the file
    the image root's listing found under that path (Rec.stamp; values that
    are not Recs are those stamps), for the next version's reuse."""
    rows, stamps = [], []
    for v in values:
        (rows if isinstance(v, Rec) else stamps).append(v)
    if not rows:
        return
    stamp = tuple(stamps[0]) if len(stamps) == 1 else ()
    yield from dedupe(rel, (r if r.stamp or not stamp else r._replace(stamp=stamp) for r in rows))


def _split_recs(items: Iterable) -> Iterator:
    """Routes a mixed stream of Rec/Reject to the records and rejects outputs."""
    for item in items:
        if isinstance(item, Reject):
            yield beam.pvalue.TaggedOutput(REJECTS, Batch([item]))
        else:
            yield item


def _sides(tagged: Iterable) -> dict:
    """CoGroupByKey's {"rows": [...], "files": [...]} from tagged values."""
    sides: dict = {"rows": [], "files": []}
    for side, value in tagged:
        sides[side].append(value)
    return sides


@dataclasses.dataclass(frozen=True)
class ListSpec:
    """ListInputs' settings."""
    inputs: InputSpec        # what is listed: a folder, a table, or a user's rows
    racy_after_ns: int = 0   # files changed since are marked racy (provenance.racy; see listing.walk_unit)
    spill_dir: str = ""      # a local run's spill folder, where a table's rows wait to be grouped by path
                             # (and joined with files by id), not in the runner
    progress_dir: str = ""   # a local run's progress files: the count listed so far
    io_timeout: float = DEFAULT_IO_TIMEOUT  # seconds a bucket's listing may stay silent (--io_timeout)


class ListInputs(beam.PTransform):
    def __init__(self, spec: ListSpec):
        super().__init__()
        self._spec = spec.inputs
        self._spill_dir = spec.spill_dir
        self._progress_dir = spec.progress_dir
        self._racy = spec.racy_after_ns
        self._timeout = spec.io_timeout

    def expand(self, pbegin):
        spec = self._spec
        if spec.kind is InputKind.ROWS:  # pbegin: the rows of a user's pipeline
            return self._rows(pbegin)
        if spec.kind is InputKind.FOLDER:
            walk = self._walk(pbegin, spec.root, "Tree")
            return {RECORDS: walk[RECORDS], STATS: walk[STATS], FINGERPRINT: walk[FINGERPRINT]}
        read = (pbegin | "Table" >> beam.Create([spec.table])
                | "ReadTable" >> beam.ParDo(_ReadTableFn(spec, self._progress_dir)).with_outputs(REJECTS, STATS, FINGERPRINT,
                                                                              main=RECORDS))
        recs = read[RECORDS] | "Unbatch" >> beam.FlatMap(lambda b: b)
        rejects = [read[REJECTS]]
        fingerprints = [read[FINGERPRINT]]
        root_walk = None
        if spec.resolve_ids or spec.fingerprint_root:
            root_walk = self._walk(pbegin, spec.root, "ImageRoot")
            fingerprints.append(root_walk[FINGERPRINT])
        if spec.resolve_ids:
            recs, id_rejects = self._resolve_ids(root_walk[RECORDS], recs)
            rejects.append(id_rejects)
        stamps = None
        if spec.fingerprint_root:  # each row gets its file's identity from the listing, joined by path
            stamps = (root_walk[RECORDS] | "StampsUnbatch" >> beam.FlatMap(lambda b: b)
                      | "Stamps" >> beam.Map(lambda r: (r.rel, r.stamp)))
        return self._one_per_file(recs, rejects, read[STATS], fingerprints, stamps)

    def _one_per_file(self, recs, rejects: list, stats, fingerprints: list, stamps=None) -> dict:
        """A table's rows grouped by file (dedupe), batched; with `stamps`
        ((rel, file identity) from the image root's listing), each row gets
        its file's identity, for the next version's reuse."""
        by_path = recs | "ByPath" >> beam.Map(lambda r: (r.rel, r))
        if stamps is not None:
            by_path = (by_path, stamps) | "RowsAndStamps" >> beam.Flatten()
        deduped = (by_path
                   | "GroupByPath" >> spill.GroupByKey(self._spill_dir)
                   | "Dedupe" >> beam.FlatMapTuple(lambda rel, rs: _split_recs(with_stamp(rel, rs)))
                   .with_outputs(REJECTS, main=RECORDS))
        rejects.append(deduped[REJECTS])
        return {RECORDS: deduped[RECORDS] | "Batch" >> beam.BatchElements(min_batch_size=BATCH, max_batch_size=BATCH)
                   | "AsBatch" >> beam.Map(Batch),
                REJECTS: rejects | "Rejects" >> beam.Flatten(),
                STATS: stats,
                FINGERPRINT: fingerprints | "Fingerprints" >> beam.Flatten()}

    def _rows(self, rows):
        """Rows of a user's pipeline ((path, label) or dicts), as a table's rows."""
        spec = self._spec
        parsed = rows | "ParseRows" >> beam.FlatMap(
            lambda row: _split_recs([table_row_to_rec(0, tables.row_cells(row, spec.path_column, spec.label_column),
                                                      spec, where="a row")])).with_outputs(REJECTS, main=RECORDS)
        stats = (rows | "CountRows" >> beam.combiners.Count.Globally()
                 | "Listed" >> beam.Map(lambda n: ("listed", n)))
        # The rows' digest does not depend on their order, which a PCollection does not have.
        digest = (rows | "RowDigests" >> beam.Map(_row_digest, spec)
                  | "SumDigests" >> beam.CombineGlobally(lambda ds: sum(ds) % (1 << 256))
                  | "AsFingerprint" >> beam.Map(lambda d: ("rows", f"{d:064x}")))
        return self._one_per_file(parsed[RECORDS], [parsed[REJECTS]], stats, [digest])

    def _walk(self, pbegin, root: str, name: str):
        return (pbegin | f"{name}Root" >> beam.Create([root])
                | f"{name}Units" >> beam.FlatMap(lambda r, t: map(listing.unit_to_bytes, listing.folder_units(r, t)),
                                                 self._timeout)
                | f"{name}Spread" >> beam.Reshuffle()
                | f"{name}Walk" >> beam.ParDo(_WalkFn(root, self._spec.include, name,
                                                      self._progress_dir if name == "Tree" else "", self._racy,
                                                      self._timeout))
                .with_outputs(STATS, FINGERPRINT, main=RECORDS))

    def _resolve_ids(self, root_files, recs):
        files = (root_files
                 | "FilesUnbatch" >> beam.FlatMap(lambda b: b)
                 | "FilesByStem" >> beam.FlatMap(
                     lambda r: [(tables.strip_extension(r.rel), r)] if tables.strip_extension(r.rel) else []))
        parts = recs | "HasExtension" >> beam.Partition(
            lambda r, _: 0 if tables.has_image_extension(r.rel) else 1, 2)
        rows = parts[1] | "RowsById" >> beam.Map(lambda r: (r.rel, ("rows", r)))
        files = files | "TagFiles" >> beam.MapTuple(lambda stem, f: (stem, ("files", f)))
        joined = ((rows, files) | "BothSides" >> beam.Flatten()
                  | "JoinIds" >> spill.GroupByKey(self._spill_dir)
                  | "ResolveIds" >> beam.FlatMapTuple(lambda stem, tagged: _split_recs(resolve_id(stem, _sides(tagged))))
                  .with_outputs(REJECTS, main=RECORDS))
        resolved = (parts[0], joined[RECORDS]) | "Resolved" >> beam.Flatten()
        return resolved, joined[REJECTS]
