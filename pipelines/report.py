"""What a local run shows: a progress line while it runs, a summary at the end."""
from __future__ import annotations

import os
import sys
import threading
import time

from tfrecord_pipelines.transforms.core.specs import LabelType
from tfrecord_pipelines.transforms.storage import fsutil, layout
from tfrecord_pipelines.transforms.core.units import human_bytes, plural  # noqa: F401 (re-exported)
from tfrecord_pipelines.transforms.storage.progress import TOTAL, read_totals, reporting_pids
from tfrecord_pipelines.transforms.storage.report_data import DEADLINE_SECONDS as REPORT_DEADLINE


class TracebackFilter:
    """A stderr that drops the tracebacks Beam's in-process SDK worker prints
    for a failed bundle (the failure reaches the caller as an exception and is
    reported once); everything else passes through."""

    def __init__(self, stream):
        self._stream = stream
        self._dropped = False

    def write(self, text: str) -> int:
        if text.startswith("Traceback (most recent call last):"):
            self._dropped = True
            return len(text)
        if self._dropped and text == "\n":  # print()'s line end after the dropped text
            self._dropped = False
            return len(text)
        self._dropped = False
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def interactive(stream=None) -> bool:
    """Whether a person is watching: `stream` (stderr) is a terminal, or this
    runs in a Jupyter kernel (whose stderr is no terminal)."""
    stream = stream or sys.stderr
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):
        pass
    ipython = sys.modules.get("IPython")
    try:  # as tqdm.autonotebook tells a notebook from a terminal IPython
        return ipython is not None and "IPKernelApp" in ipython.get_ipython().config
    except Exception:
        return False


class ProgressLine:
    """Sums the workers' progress files (transforms/storage/progress.py) into a
    progress bar on stderr (tqdm: a text bar in a terminal, a widget in a
    notebook): the images listed so far, then, once the listing is counted
    and the shards are planned, the images done out of their total, with the
    rate and the time left. `mode`: on, off, or auto (on where a person is
    watching: a terminal or a notebook; elsewhere, only a line when the run
    stalls, and none at all with off)."""

    STALL_SECONDS = 15.0
    INTERVAL = 0.5

    def __init__(self, folder: str, mode: str = "auto", source: str = "", io_timeout: float = 0.0):
        self._folder = folder
        self._show = interactive() if mode == "auto" else mode == "on"
        self._stop = threading.Event()
        self._thread = None
        self._start = time.monotonic()
        self._source, self._io_timeout = source, io_timeout
        self._seen, self._changed = None, self._start
        self._bar, self._phase, self._told_stall = None, "", False

    def __enter__(self):
        if self._folder:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()
            if self._show:
                self._update()
                if self._bar is not None:
                    self._bar.close()
                sys.stderr.write(self.line() + "\n")
                sys.stderr.flush()
        return False

    def worker_pids(self) -> set:
        return reporting_pids(self._folder) if self._folder else set()

    def line(self) -> str:
        """The figures as one line of text (the last line a shown run prints)."""
        t = read_totals(self._folder)
        secs = max(time.monotonic() - self._start, 1e-9)
        parts = [f"{secs:5.0f}s"]
        v, w = t.get("validate"), t.get("write")
        if v:
            parts.append(f"validated {v['records']:,} images ({v['rejected']:,} rejected), "
                         f"{human_bytes(v['bytes'])}")
        if w:
            parts.append(f"written {w['records']:,} records, {human_bytes(w['bytes'])}")
        done = (w or v or {"records": 0, "bytes": 0})
        parts.append(f"{done['records'] / secs:,.0f} rec/s, {human_bytes(done['bytes'] / secs)}/s")
        if "report" in t:  # the publish step builds report.html (transforms/storage/report_data.py)
            parts.append(f"building report.html (thumbnails, charts; at most {REPORT_DEADLINE:g} s)")
            return " | ".join(parts)
        stalled = self._stalled((v or {}).get("records", 0) + (v or {}).get("rejected", 0), done["records"])
        if stalled:
            parts.append(stalled)
        return " | ".join(parts)

    def state(self) -> tuple:
        """(phase, done, total or None, note) from the progress files: listing
        (no total yet), validating (two reads per image: the images that reached
        validation), writing (the records the shard plans hold; with one read
        per image the writer's rejects count as done)."""
        t = read_totals(self._folder)
        zero = {"records": 0, "bytes": 0, "rejected": 0}
        listed, v, w = t.get("list", zero), t.get("validate", zero), t.get("write", zero)
        to_validate, to_write = t.get(TOTAL + "validate"), t.get(TOTAL + "write")
        if to_validate and not (to_write and w["records"]):
            return "validating", v["records"] + v["rejected"], to_validate["records"], \
                f"{v['rejected']:,} rejected, {human_bytes(v['bytes'])}"
        if to_write:
            done = w["records"] + (0 if to_validate else v["rejected"])
            return "writing", done, to_write["records"], \
                f"{v['rejected']:,} rejected, {human_bytes(w['bytes'])} written"
        return "listing", listed["records"], None, ""

    def _update(self) -> None:
        phase, done, total, note = self.state()
        if "report" in read_totals(self._folder):  # the publish step builds report.html: not a stall
            phase, note = "report.html", "building report.html (thumbnails, charts)"
        stalled = "" if phase == "report.html" else self._stalled(done, phase)
        if not self._show:
            if stalled and not self._told_stall:  # where nobody watches a bar, a stall is still worth a line
                sys.stderr.write(f"{time.monotonic() - self._start:5.0f}s | {stalled}\n")
                sys.stderr.flush()
            self._told_stall = bool(stalled)
            return
        if self._bar is None:
            from tqdm.auto import tqdm
            # A terminal that reports no size (0 x 0: some CI ptys, a fresh pty) would hide the bar.
            try:
                size = os.get_terminal_size(sys.stderr.fileno())
                sized = size.columns > 0 and size.lines > 0
            except (AttributeError, OSError, ValueError):
                sized = False
            self._bar = tqdm(desc=phase, total=total, unit=" img", dynamic_ncols=sized, ncols=None if sized else 100,
                             nrows=None if sized else 24, file=sys.stderr, leave=True, mininterval=self.INTERVAL,
                             miniters=1)  # we update in jumps: tqdm's dynamic miniters would skip redraws
        elif phase != self._phase and phase != "report.html":
            self._bar.set_description(phase, refresh=False)
            self._bar.reset(total=total)  # the rate and time left of this phase only
        self._phase = phase
        self._bar.set_postfix_str(stalled or note, refresh=False)
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)  # redraws at most every INTERVAL; tqdm keeps the rate
        elif stalled or phase == "report.html":
            self._bar.refresh()

    def _stalled(self, *counts) -> str:
        """Says what the run waits on when nothing has moved for a while: a
        bucket that stops answering is otherwise minutes of silence."""
        now = time.monotonic()
        if counts != self._seen:
            self._seen, self._changed = counts, now
            return ""
        idle = now - self._changed
        if idle < self.STALL_SECONDS or not self._source:
            return ""
        text = f"nothing new for {idle:.0f} s: reading {self._source}"
        if "://" in self._source and self._io_timeout:
            text += f" (unanswered requests are retried for up to --io_timeout {self._io_timeout:g} s)"
        return text

    def _loop(self):
        while not self._stop.wait(self.INTERVAL):
            try:
                self._update()
            except Exception:  # progress is best-effort: it never ends a run
                pass


def print_summary(output: str, seconds: float, out=None) -> None:
    out = out or sys.stdout
    m = layout.read_manifest(output)
    c = m["counts"]
    rate = c["written"] / seconds if seconds > 0 else 0
    print(f"\nConverted in {seconds:.1f} s ({rate:,.0f} records/s) into {output}", file=out)
    print(f"{'split':<14}{'records':>10}{'shards':>8}{'bytes':>12}  files", file=out)
    for name, s in m["splits"].items():
        print(f"{name:<14}{s['records']:>10,}{s['num_shards']:>8}{human_bytes(s['bytes']):>12}  "
              f"{fsutil.join(output, s['pattern'])}", file=out)
    for name, s in m["splits"].items():
        empty = sum(1 for e in s["shards"] if not e["records"])
        if empty:
            # The count asked for is kept (file names promise -of-N), but say so.
            print(f"warning: split {name}: {plural(s['num_shards'], 'shard')} for {plural(s['records'], 'record')}; "
                  f"{plural(empty, 'shard')} {'is' if empty == 1 else 'are'} empty", file=sys.stderr)
    for line in count_lines(c, "written", m["rejects_by_reason"], fsutil.join(output, layout.REJECTS)):
        print(line, file=out)
    for line in report_lines(m.get("report")):
        print(line, file=sys.stderr)
    excluded = c.get("excluded") or {}
    if excluded:
        print("not listed: " + ", ".join(f"{k} {v:,}" for k, v in excluded.items()), file=out)
    for line in made_lines(m):
        print(line, file=out)
    lm = m["label_map"]
    if lm["kind"] in (LabelType.CLASS, LabelType.INT):
        print(f"labels: {plural(len(lm['classes']), 'class', 'classes')} ({lm['kind']}), map in "
              f"{fsutil.join(output, layout.LABEL_MAP)}", file=out)
    elif lm["kind"] == LabelType.FLOAT:
        print("labels: float regression targets (image/target)", file=out)
    elif lm["kind"] == LabelType.BOXES and isinstance(m.get("detection"), dict):
        b = m["detection"]["boxes"]
        dropped = b.get("dropped") or {}
        print(f"boxes: listed {b['listed']:,} = written {b['written']:,} (clipped {b['clipped']:,}) + dropped "
              f"{sum(dropped.values()):,} + in rejected images {b['in_rejected_images']:,}"
              + (f" + in images not selected {b['in_images_not_selected']:,}" if "in_images_not_selected" in b
                 else ""), file=out)
        if dropped:
            print("boxes dropped by reason: " + ", ".join(f"{k} {v:,}" for k, v in dropped.items()), file=out)
        print(f"classes: {plural(len(lm['classes']), 'category', 'categories')}, map in "
              f"{fsutil.join(output, layout.LABEL_MAP)} and {layout.LABEL_MAP_PBTXT}", file=out)
    if not c["written"]:
        print("warning: the dataset is EMPTY: no record was written (published with --allow_empty)", file=sys.stderr)
    _print_warnings(m)


def print_warnings(output: str) -> None:
    """The manifest's warnings (transforms/core/publishable.py), on stderr."""
    try:
        m = layout.read_manifest(output)
    except Exception:  # no manifest to read: nothing to add
        return
    _print_warnings(m)


def _print_warnings(m: dict) -> None:
    warnings = m.get("warnings")
    for line in warnings if isinstance(warnings, list) else []:
        print(f"warning: {line}", file=sys.stderr)


def report_lines(note) -> list:
    """What the console says of report.html (the manifest's "report"): a page
    that could not be built, or one the deadline cut short, with where its
    time went; nothing when it was built in full."""
    if not isinstance(note, dict):
        return []
    if note.get("error") or not note.get("file"):
        return [f"warning: report.html was not written: {str(note.get('error') or 'no reason given')[:300]} "
                "(`tfrecords report OUTPUT` builds it again)"]
    if note.get("cut"):
        spent = note.get("spent") if isinstance(note.get("spent"), dict) else {}
        where = ", ".join(f"{k} {v} s" for k, v in spent.items())
        return [f"warning: report.html is incomplete: {note['cut']} ({where})"]
    return []


def count_lines(c: dict, kept: str, by_reason: dict, rejects_path: str) -> list:
    """The reconciliation line (listed = kept + rejected [+ not selected])
    and the rejects by reason."""
    lines = [f"listed {c['listed']:,} = {kept} {c[kept]:,} + rejected {c['rejected']:,}"
             + (f" + not selected {c['not_selected']:,}" if c["not_selected"] else "")]
    if by_reason:
        reasons = ", ".join(f"{k} {v:,}" for k, v in by_reason.items())
        lines.append(f"rejected by reason: {reasons} (details: {rejects_path})")
    return lines


def made_lines(m: dict) -> list:
    """How the output was made (the manifest's "made"): copied from which
    version, or why it was a full conversion; what a resume kept; which
    versions --keep_versions removed. A field of another type (a damaged
    manifest) reads as absent."""
    made = m.get("made")
    if not isinstance(made, dict):
        return []

    def n(key: str) -> int:
        v = made.get(key)
        return v if type(v) is int else 0  # noqa: E721 (not bool)

    def text(key: str) -> str:
        v = made.get(key)
        return v if isinstance(v, str) else ""

    lines = []
    source = text("from_version")
    if source:
        repaired = n("records_repaired")
        lines.append(f"incremental from version {source}: {n('records_copied'):,} records copied, "
                     f"{n('images_read'):,} images read ({n('new'):,} new, {n('changed'):,} changed"
                     + (f", {repaired:,} whose copy in {source} was damaged" if repaired else "")
                     + f"), {n('removed'):,} removed")
        if n("records_of_damaged_provenance"):
            lines.append(f"warning: version {source}: the provenance of {n('records_of_damaged_provenance'):,} "
                         "records is damaged; they were read from their sources (--full rewrites everything)")
    elif text("full_because") and m.get("version"):
        lines.append(f"full conversion: {text('full_because')}")
    if n("shards_resumed"):
        lines.append(f"resumed: {plural(n('shards_resumed'), 'shard')} ({n('records_in_resumed_shards'):,} records) "
                     "kept from a killed run of the same inputs and options")
    removed = made.get("versions_removed")
    if isinstance(removed, list) and removed:
        lines.append("removed versions (--keep_versions): " + ", ".join(map(str, removed)))
    return lines


def print_preview(got: dict, cfg, out=None) -> None:
    """--dry_run (a local run): what a run would read, write, publish and
    remove, from pipeline.build_preview's figures, before any image is read."""
    from tfrecord_pipelines.transforms.core.sharding import num_shards_for
    out = out or sys.stdout
    o, stats = cfg.output, got["stats"]
    excluded = {k.split("/", 1)[1]: v for k, v in sorted(stats.items()) if k.startswith("excluded/")}
    print(f"dry run: nothing was read, locked or written\nlisted {stats.get('listed', 0):,} files"
          + (f" (not listed: {', '.join(f'{k} {v:,}' for k, v in excluded.items())})" if excluded else "")
          + (f"; {stats['rejected']:,} rejected before reading (labels, paths, splits)" if stats.get("rejected") else ""),
          file=out)
    if o.previous is not None:
        print(f"from version {o.previous.version}: unchanged {stats.get('incremental/unchanged', 0):,}, new "
              f"{stats.get('incremental/new', 0):,}, changed {stats.get('incremental/changed', 0):,}, removed "
              f"{stats.get('incremental/removed', 0):,}", file=out)
        if stats.get("incremental/damaged"):
            print(f"warning: the provenance of {stats['incremental/damaged']:,} records of {o.previous.version} is "
                  "damaged: they would be read from their sources", file=out)
    elif o.root:
        print(f"full conversion: {o.why_full}", file=out)
    print(f"{'split':<14}{'records':>10}{'to read':>10}{'shards':>8}{'bytes':>12}  about each", file=out)
    sized = True
    for split, (count, nbytes, to_read) in got["splits"].items():
        shards = num_shards_for(split, count, nbytes, cfg.shards)
        sized = sized and (nbytes > 0 or not count)
        each = human_bytes(nbytes / shards) if shards else "-"
        print(f"{split:<14}{count:>10,}{to_read:>10,}{shards:>8}{human_bytes(nbytes):>12}  {each}", file=out)
    if not sized:
        print("note: the table gives no file sizes: shard counts come from --num_shards, or from the sizes read "
              "when the images are validated", file=out)
    if got.get("new_classes"):
        print(f"new classes (--extend_label_map): {', '.join(got['new_classes'][:10])}"
              + (", ..." if len(got["new_classes"]) > 10 else ""), file=out)
    for line in _publish_lines(got, cfg):
        print(line, file=out)


def _publish_lines(got: dict, cfg) -> list:
    o = cfg.output
    if o.root:
        if o.previous_fingerprint and not o.republish and got["fingerprint"] == o.previous_fingerprint:
            return [f"would publish nothing: inputs and options are the same as version {o.previous_version}"]
        lines = [f"would publish version {o.version} in {o.root} and point LATEST at it"]
        if o.keep_versions:
            from tfrecord_pipelines.transforms.stages.publish import versions_to_remove
            gone = versions_to_remove(o)
            lines.append(f"would remove versions (--keep_versions {o.keep_versions}): {', '.join(gone) or 'none'}")
        return lines
    names = [n for n in fsutil.list_dir(o.output) if layout.is_dataset_file(n)]
    if not names:
        return [f"would write a new dataset into {o.output}"]
    shards = sum(1 for n in names if layout.SHARD_RE.match(n))
    if not o.overwrite:
        return [f"would be refused: {o.output} already holds a dataset ({shards} shards); pass --overwrite"]
    return [f"would replace the dataset in {o.output}: its manifest and {shards} shards would be removed"]
