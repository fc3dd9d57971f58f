"""What report.html shows besides the manifest, gathered from an output folder
(local or gs://), in bounded work: thumbnails of the first records of the
shards for at most MAX_CLASSES classes (PER_CLASS each), the first rejects of
each reason with thumbnails of their source files where readable, and
thumbnails of the duplicate pairs the manifest lists. Every loop is capped
(records scanned, bytes read, source files opened, a deadline), so a
1,000-class, 1 M-image output builds its report in seconds; what a cap cut
short is said in the report's notes.

The output is read as untrusted input (transforms/storage/untrusted.py): its
shards and rejects only as regular files inside it, and no other file that
its manifest names. Input files (thumbnails of rejects, and of duplicates
the shards do not hold) are read only under `sources`: the publishing run
passes its own input root; `tfrecords report` only a folder its user names
(--sources), never the root the manifest records, which anyone may have
edited to point at the reader's own files (the page is written into the
output, which others read).

The page itself is transforms/core/report_html.py. `write_report` writes it
beside the manifest (the Publish step calls it before writing the manifest,
and `tfrecords report OUT` rebuilds it).
"""
from __future__ import annotations

import concurrent.futures
import itertools
import json
import logging
import math
import time
from typing import Iterable, Optional

from tfrecord_pipelines.transforms.core import example_decode, report_html
from tfrecord_pipelines.transforms.core.records import Reason
from tfrecord_pipelines.transforms.core.report_html import (THUMB_BOXES_PX, THUMB_PX, ReportInputs, Sample,
                                                            ShownReject, Stopped, thumbnail)
from tfrecord_pipelines.transforms.core.specs import OutputFormat, ReadPolicy
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression, iter_records
from tfrecord_pipelines.transforms.storage import fsutil, layout, progress, reads, untrusted

REPORT = "report.html"
MAX_CLASSES = 24                 # classes on the contact sheet
PER_CLASS = 4                    # thumbnails per class
MAX_SCAN_RECORDS = 2000          # records read from the shards for thumbnails and sampled sizes
MAX_SCAN_BYTES = 96 << 20
MAX_REJECT_LINES = 20_000        # lines of rejects.jsonl read to pick the rejects shown
MAX_REJECT_BYTES = 32 << 20      # ... and at most these bytes of it
MAX_REJECT_LINE = 64 << 10       # a longer line is cut (and then is not JSON: skipped)
PER_REASON = 3
MAX_REJECTS = 30
MAX_SOURCE_READS = 200           # input files opened for thumbnails (samples of a check, rejects, duplicates)
MAX_SOURCE_BYTES = 32 << 20
DEADLINE_SECONDS = 60.0          # after this, no more reads: the report is built from what was gathered
# Reasons whose file cannot give a picture, or must not be opened at all
# (a path outside the root, a FIFO, a decompression bomb, a 71 s decode).
NO_PREVIEW = {Reason.MISSING, Reason.UNSAFE_PATH, Reason.NOT_A_FILE, Reason.TOO_LARGE, Reason.TOO_MANY_PIXELS,
              Reason.TOO_COMPLEX, Reason.BAD_ROW, Reason.AMBIGUOUS, Reason.EMPTY}
_BATCH = 64
BOX_ROLES = ("bbox_xmin", "bbox_ymin", "bbox_xmax", "bbox_ymax")  # --annotations: drawn on the thumbnails
MAX_BOXES_DRAWN = 200
THREADS = 8                      # thumbnails made at once (Pillow decodes without the GIL; bucket reads wait)

log = logging.getLogger(__name__)


class Budget:
    """The caps of one gathering, and the threads that make its thumbnails:
    a thumbnail is a future until resolve() (a report on a bucket waits for
    each source file it opens; locally the decodes use every core). The
    deadline holds for real: resolve() waits for no thumbnail past it. A
    thread cannot be stopped, so each decode's work is bounded before it
    starts (report_html.thumbnail's pixel and cost caps) and one still
    running at the deadline ends in the background, its result unused."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.start = time.monotonic()
        self.end = self.start + seconds
        self.source_reads = 0
        self.late = 0                  # thumbnails not made by the deadline
        self.spent: dict = {}          # {what: seconds} of the gathering, for the notes and the log
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None

    def out_of_time(self) -> bool:
        return time.monotonic() > self.end

    def later(self, fn, *args) -> concurrent.futures.Future:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(THREADS, thread_name_prefix="thumbnail")
        return self._pool.submit(fn, *args)

    def resolve(self, inputs: ReportInputs) -> ReportInputs:
        """The inputs with every thumbnail made by the deadline (b"" for one
        that failed or was late); the threads are let go."""
        inputs.samples = [s._replace(thumb=self._made(s.thumb)) for s in inputs.samples]
        inputs.rejects = [r._replace(thumb=self._made(r.thumb)) for r in inputs.rejects]
        inputs.thumbs = {p: self._made(t) for p, t in inputs.thumbs.items()}
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        return inputs

    def _made(self, thumb) -> bytes:
        if not isinstance(thumb, concurrent.futures.Future):
            return thumb
        try:
            return thumb.result(timeout=max(self.end - time.monotonic(), 0.0))
        except (concurrent.futures.TimeoutError, Stopped):  # still decoding, or its decode cut by the deadline
            thumb.cancel()
            self.late += 1
            return b""
        except Exception:  # thumbnail() returns b"" for bad bytes; anything else: no preview either
            return b""

    def timed(self, what: str):
        """A context that adds its seconds to spent[what]."""
        budget = self

        class _Timer:
            def __enter__(self):
                self.t = time.monotonic()

            def __exit__(self, *exc):
                budget.spent[what] = budget.spent.get(what, 0.0) + time.monotonic() - self.t
                return False
        return _Timer()

    def summary(self) -> str:
        """Where the gathering's time went, e.g. for the log and the page's notes."""
        total = time.monotonic() - self.start
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in self.spent.items())
        return f"gathered in {total:.1f} s ({parts})" + (
            f"; {self.late:,} thumbnails not made by the {self.seconds:g} s deadline" if self.late else "")


def _roles(m: dict) -> dict:
    roles = dict(m.get("feature_roles") or {})
    features = m.get("features") or {}
    return {r: k for r, k in roles.items() if k in features}


def _decoder(m: dict, roles: dict):
    """records -> rows ({feature: values or None}) of the few features the
    report reads (transforms/core/example_decode.py: no TensorFlow, no tfx-bsl)."""
    wanted = [roles[r] for r in ("encoded", "text", "label", "target", "filename", "sha256", "width", "height",
                                 *BOX_ROLES) if r in roles]
    return lambda batch: example_decode.decode_rows(batch, wanted)


def _records(output: str, m: dict, entry: dict) -> Iterable[bytes]:
    path = fsutil.join(output, entry["name"])  # a shard name of layout.SHARD_RE (check_manifest)
    fmt = OutputFormat(m.get("output_format", OutputFormat.TFRECORD.value))
    compression = Compression(m.get("compression", "none"))
    f = untrusted.open_stream(path, within=output)
    try:
        if fmt is OutputFormat.ARRAY_RECORD:
            from tfrecord_pipelines.transforms.storage import array_record_io
            it = array_record_io.records_of(f, path, fmt, compression, drain=False)
        else:
            it = iter_records(f, compression)
        for _, data in it:
            yield data
    finally:
        f.close()


def _first(row: dict, key: Optional[str]):
    v = row.get(key) if key else None
    return v[0] if v else None


def _text(v) -> str:
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else "" if v is None else str(v)


def scan_shards(output: str, m: dict, inputs: ReportInputs, wanted: set, budget: Budget) -> None:
    """Samples per class from the first records of each split's shards (in
    shuffle order, so a fair sample), the sizes of every record scanned, and
    thumbnails of the `wanted` paths met on the way. A damaged shard ends
    the scan (and raises); what was sampled before it is kept."""
    roles = _roles(m)
    if "encoded" not in roles:
        inputs.notes.append("no thumbnails: the shards hold no image feature (renamed away with --feature_keys)")
        return
    decoder = _decoder(m, roles)
    lm = m.get("label_map") or {}
    names = {i: n for n, i in (lm.get("classes") or {}).items()}
    classed = lm.get("kind") in ("class", "int")
    per_label: dict = {}
    limit = PER_CLASS if classed else PER_CLASS * 6  # unlabelled or regression: one row of a few more

    def accept(label: str) -> bool:
        if label in per_label:
            return len(per_label[label]) < limit
        return len(per_label) < (MAX_CLASSES if classed else 1)

    def done() -> bool:
        return wanted <= inputs.thumbs.keys() and (len(per_label) >= (min(MAX_CLASSES, max(len(names), 1)) if classed else 1)
                               and all(len(v) >= limit for v in per_label.values()))

    scanned = nbytes = 0
    cut = ""
    try:
        for split, s in (m.get("splits") or {}).items():
            for entry in s.get("shards") or []:
                if cut or done():
                    break
                if not entry.get("records"):
                    continue
                batch: list = []
                for data in itertools.chain(_records(output, m, entry), [None]):
                    if data is not None:
                        batch.append(data)
                        scanned += 1
                        nbytes += len(data)
                        if scanned >= MAX_SCAN_RECORDS:
                            cut = f"{MAX_SCAN_RECORDS:,} records"
                        elif nbytes >= MAX_SCAN_BYTES:
                            cut = f"{MAX_SCAN_BYTES >> 20} MB of records"
                        elif budget.out_of_time():
                            cut = f"the {budget.seconds:g} s deadline"
                    if batch and (data is None or len(batch) >= _BATCH or cut):
                        for row in decoder(batch):
                            _take(row, roles, split, names, classed, per_label, accept, wanted, inputs, budget)
                        batch = []
                    if cut or data is None or done():
                        break
    finally:
        for samples in per_label.values():
            inputs.samples += samples
        inputs.notes.append(f"thumbnails and sampled sizes from the first {scanned:,} records of the shards"
                            + (f" (stopped at {cut})" if cut else ""))
    if classed and len(names) > MAX_CLASSES:
        inputs.notes.append(f"the contact sheet shows {len(per_label):,} of {len(names):,} classes: the first met in "
                            "the shuffled shards")


def _take(row: dict, roles: dict, split: str, names: dict, classed: bool, per_label: dict, accept,
          wanted: set, inputs: ReportInputs, budget: Budget) -> None:
    path = _text(_first(row, roles.get("filename")))
    w, h = _first(row, roles.get("width")), _first(row, roles.get("height"))
    if w is not None and h is not None:
        inputs.sampled_sizes.append((int(w), int(h)))
    data = _first(row, roles["encoded"])
    if data is None:
        return
    if path in wanted and path not in inputs.thumbs:
        inputs.thumbs[path] = budget.later(thumbnail, data, THUMB_PX, budget.out_of_time)
    boxes = _boxes(row, roles) if all(r in roles for r in BOX_ROLES) else None  # detection: drawn on the thumbnail
    if classed:
        text = _first(row, roles.get("text"))
        lid = _first(row, roles.get("label"))
        label = _text(text) if text is not None else names.get(lid, "" if lid is None else str(lid))
        caption = path
    else:
        label = ""
        target = _first(row, roles.get("target"))
        caption = f"{path} (target {target:g})" if target is not None else path
    if accept(label):
        px = THUMB_PX if boxes is None else THUMB_BOXES_PX
        per_label.setdefault(label, []).append(Sample(label, split, caption,
                                                      budget.later(thumbnail, data, px, budget.out_of_time, boxes)))


def _boxes(row: dict, roles: dict) -> list:
    """A record's boxes [(xmin, ymin, xmax, ymax)], normalized: at most
    MAX_BOXES_DRAWN, each coordinate a finite number clamped to 0..1 (a
    shard is not trusted to hold what the writer wrote)."""
    cols = [row.get(roles[r]) or [] for r in BOX_ROLES]
    out = []
    for box in zip(*cols):
        if len(out) >= MAX_BOXES_DRAWN:
            break
        if all(type(v) in (int, float) and math.isfinite(v) for v in box):  # noqa: E721
            out.append(tuple(min(max(float(v), 0.0), 1.0) for v in box))
    return out


def source_path(root: str, rel: str) -> Optional[str]:
    """Where a record's source file is, if it may be opened: a plain relative
    path under the input root (never an absolute path, a URL or a '..'
    escape, which a table may hold and the run rejected as unsafe_path)."""
    if not root or not rel or "://" in rel or rel.startswith(("/", "\\")) or "\\" in rel:
        return None
    if any(p in ("..", "") for p in rel.split("/")):
        return None
    return fsutil.join(root, rel)


def source_thumbnail(root: str, rel: str, budget: Budget):
    path = source_path(root, rel)
    return file_thumbnail(path, budget) if path else b""


def file_thumbnail(path: str, budget: Budget):
    """A thumbnail of an input file, made on the budget's threads (b"" if it
    cannot be read or decoded, or the budget is spent): only regular files,
    at most MAX_SOURCE_BYTES."""
    if budget.out_of_time():  # not made by the deadline: the page says how many
        budget.late += 1
        return b""
    if budget.source_reads >= MAX_SOURCE_READS:
        return b""
    budget.source_reads += 1
    return budget.later(_file_thumbnail, path, budget)


def _file_thumbnail(path: str, budget: Budget) -> bytes:
    if budget.out_of_time():
        raise Stopped("the report's deadline passed before this file was read")
    try:
        data, _, _ = reads.read_input(path, 0, -1, ReadPolicy(timeout=30.0, max_file_bytes=MAX_SOURCE_BYTES))
    except Exception:  # gone, unreadable, not a file, too large: no preview
        return b""
    return thumbnail(data, THUMB_PX, budget.out_of_time)


def pick_rejects(rows: Iterable) -> list:
    """A few rejects of each reason, in the order given, from reject dicts
    ({"path", "reason", "detail", "split"}); at most MAX_REJECTS."""
    shown: list = []
    per: dict = {}
    for r in rows:
        if len(shown) >= MAX_REJECTS:
            break
        if not isinstance(r, dict):
            continue
        reason = str(r.get("reason", ""))
        if per.get(reason, 0) >= PER_REASON:
            continue
        per[reason] = per.get(reason, 0) + 1
        shown.append(r)
    return shown


def first_rejects(output: str) -> list:
    """pick_rejects of the first MAX_REJECT_LINES lines (MAX_REJECT_BYTES) of
    the output's rejects.jsonl ([] if there is none, or it is not a file)."""
    lines = untrusted.read_lines(fsutil.join(output, layout.REJECTS), MAX_REJECT_BYTES, MAX_REJECT_LINE,
                                 within=output)

    def rows():
        for n, line in enumerate(lines):
            if n >= MAX_REJECT_LINES:
                return
            try:
                yield json.loads(line)
            except (ValueError, RecursionError):
                continue

    try:
        return pick_rejects(rows())
    except Exception:  # no rejects file (nothing was rejected), not a file, or not readable here
        return []


def wanted_paths(m: dict) -> list:
    """The files of the duplicate groups and near-duplicate pairs the page shows."""
    d, ls = report_html.obj, report_html.items  # a section of the wrong type is read as empty
    q = d(m.get("quality"))
    out = []
    for g in ls(d(q.get("duplicates")).get("examples"))[:report_html.MAX_SHOWN_GROUPS]:
        out += [d(f).get("path") for f in ls(d(g).get("files"))[:report_html.MAX_FILES_PER_GROUP]]
    for p in ls(d(q.get("near_duplicates")).get("examples"))[:report_html.MAX_SHOWN_GROUPS]:
        out += [d(d(p).get("a")).get("path"), d(d(p).get("b")).get("path")]
    return list(dict.fromkeys(p for p in out if isinstance(p, str) and p))


def _source_root(m: dict) -> str:
    """The input root the manifest records ("" if none)."""
    o = m.get("options")
    inputs = o.get("inputs") if isinstance(o, dict) else None
    root = inputs.get("root") if isinstance(inputs, dict) else None
    return root if isinstance(root, str) else ""


def add_rejects(inputs: ReportInputs, rejects: list, root: str, budget: Budget) -> None:
    for r in rejects:
        reason, path = str(r.get("reason", "")), str(r.get("path", ""))
        previewable = reason not in {x.value for x in NO_PREVIEW}
        thumb = source_thumbnail(root, path, budget) if previewable else b""
        inputs.rejects.append(ShownReject(path, reason, str(r.get("detail", "")), str(r.get("split", "")), thumb))


def gather(output: str, m: dict, deadline: float = DEADLINE_SECONDS, sources: str = "",
           budget: Optional[Budget] = None) -> ReportInputs:
    """The report's inputs from a published output and its manifest `m`,
    within `deadline` seconds (a note says what was cut, and where the time
    went); input files are read only under `sources` (none if "")."""
    budget = budget or Budget(deadline)
    inputs = ReportInputs()
    wanted = wanted_paths(m)
    with budget.timed("reading the shards"):
        try:
            scan_shards(output, m, inputs, set(wanted), budget)
        except Exception as e:  # a damaged shard (verify says which), an unreadable format: report without samples
            inputs.notes.append(f"the shards could not be sampled: {type(e).__name__}: {str(e)[:300]}")
    with budget.timed("reading rejects.jsonl"):
        rejects = first_rejects(output)
    add_rejects(inputs, rejects, sources, budget)
    unread = [p for p in wanted if p not in inputs.thumbs]
    for p in unread:
        inputs.thumbs[p] = source_thumbnail(sources, p, budget)
    if not sources and (inputs.rejects or unread):
        inputs.notes.append("rejected files, and duplicates the shards do not hold, are shown without thumbnails: "
                            "`tfrecords report --sources DIR` reads them from the folder DIR the run converted "
                            f"(the manifest says {_source_root(m)[:300]!r})")
    with budget.timed("waiting for thumbnails"):
        budget.resolve(inputs)
    if budget.out_of_time() or budget.late:
        inputs.notes.append(f"gathering stopped at the {budget.seconds:g} s deadline; some thumbnails are missing")
    inputs.notes.append(budget.summary())
    return inputs


def build(output: str, m: dict, deadline: float = DEADLINE_SECONDS, sources: str = "",
          budget: Optional[Budget] = None) -> str:
    """report.html's text for a published output (input files read only under `sources`)."""
    started = time.monotonic()
    budget = budget or Budget(deadline)
    inputs = gather(output, m, deadline, sources, budget)
    with budget.timed("drawing the page"):
        page = report_html.build_html(m, inputs, title=output)
    log.info("report for %s built in %.1f s: %s", output, time.monotonic() - started, budget.summary())
    return page


def write_report(output: str, m: dict, deadline: float = DEADLINE_SECONDS) -> dict:
    """Writes report.html into `output`; returns what the manifest notes of
    it: the file, its seconds, where they went, and what the deadline cut.
    For the run that publishes `output` only: `m` is the manifest it is about
    to write, so the input root it records is the one this run read."""
    started = time.monotonic()
    budget = Budget(deadline)
    progress.mark_stage("report")  # a local run's progress line then says where the time goes
    page = build(output, m, deadline, _source_root(m), budget)
    fsutil.write_bytes(fsutil.join(output, REPORT), page.encode("utf-8"))
    note = {"file": REPORT, "seconds": round(time.monotonic() - started, 2),
            "spent": {k: round(v, 2) for k, v in budget.spent.items()}}
    if budget.late or budget.out_of_time():
        note["cut"] = f"stopped at the {deadline:g} s deadline; {budget.late:,} thumbnails not made"
    return note


def write_report_safely(output: str, m: dict, deadline: float = DEADLINE_SECONDS) -> dict:
    """write_report, for the publish step: a report that cannot be built or
    written never fails the run. The failure is logged and noted (the
    manifest's "report": {"file": null, "error": ...}), and a report.html of
    an earlier run is removed so that it cannot pass for this one's."""
    try:
        return write_report(output, m, deadline)
    except Exception as e:  # any failure of an optional extra: log and go on
        log.warning("report.html of %s not written: %s: %s", output, type(e).__name__, e)
        try:
            fsutil.delete([fsutil.join(output, REPORT)])
        except Exception:  # the folder may be unwritable: the note still says there is no report
            pass
        return {"file": None, "error": f"{type(e).__name__}: {str(e)[:300]}"}
