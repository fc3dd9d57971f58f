"""What a local run shows: a progress line while it runs, a summary at the end."""
from __future__ import annotations

import sys
import threading
import time

from tfrecord_pipelines.transforms.core.specs import LabelType
from tfrecord_pipelines.transforms.storage import fsutil, layout
from tfrecord_pipelines.transforms.core.units import human_bytes, plural  # noqa: F401 (re-exported)
from tfrecord_pipelines.transforms.storage.progress import read_totals, reporting_pids


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


class ProgressLine:
    """Sums the workers' progress files (transforms/storage/progress.py) into one line
    on stderr: redrawn on a terminal, printed every 10 s otherwise."""

    STALL_SECONDS = 15.0

    def __init__(self, folder: str, mode: str = "auto", source: str = "", io_timeout: float = 0.0):
        self._folder = folder
        self._tty = sys.stderr.isatty() if mode == "auto" else mode == "on"
        self._stop = threading.Event()
        self._thread = None
        self._start = time.monotonic()
        self._source, self._io_timeout = source, io_timeout
        self._seen, self._changed = None, self._start

    def __enter__(self):
        if self._folder:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()
            final = self.line()
            sys.stderr.write(("\r" + final.ljust(100) if self._tty else final) + "\n")
        return False

    def worker_pids(self) -> set:
        return reporting_pids(self._folder) if self._folder else set()

    def line(self) -> str:
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
        stalled = self._stalled((v or {}).get("records", 0) + (v or {}).get("rejected", 0), done["records"])
        if stalled:
            parts.append(stalled)
        return " | ".join(parts)

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
        interval = 0.5 if self._tty else 10.0
        while not self._stop.wait(interval):
            if self._tty:
                sys.stderr.write("\r" + self.line()[:160].ljust(100))
            else:
                sys.stderr.write(self.line() + "\n")
            sys.stderr.flush()


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
