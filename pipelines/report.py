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


def count_lines(c: dict, kept: str, by_reason: dict, rejects_path: str) -> list:
    """The reconciliation line (listed = kept + rejected [+ not selected])
    and the rejects by reason."""
    lines = [f"listed {c['listed']:,} = {kept} {c[kept]:,} + rejected {c['rejected']:,}"
             + (f" + not selected {c['not_selected']:,}" if c["not_selected"] else "")]
    if by_reason:
        reasons = ", ".join(f"{k} {v:,}" for k, v in by_reason.items())
        lines.append(f"rejected by reason: {reasons} (details: {rejects_path})")
    return lines
