"""The progress line of a local run: the workers' progress files summed into
a bar on stderr while the run goes on (the summary at its end: summary.py)."""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time

from tfrecord_pipelines.transforms.core.units import human_bytes
from tfrecord_pipelines.transforms.storage.progress import TOTAL, read_totals, reporting_pids
from tfrecord_pipelines.transforms.storage.report_data import DEADLINE_SECONDS as REPORT_DEADLINE


def interactive(stream=None) -> bool:
    """Whether a person is watching: `stream` (stderr) is a terminal, or this
    runs in a Jupyter kernel (whose stderr is no terminal)."""
    stream = stream or sys.stderr
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):
        pass
    return in_kernel()


def in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel (as tqdm.autonotebook tells a
    notebook from a terminal IPython)."""
    ipython = sys.modules.get("IPython")
    try:
        return ipython is not None and "IPKernelApp" in ipython.get_ipython().config
    except Exception:
        return False


def bar_class():
    """tqdm's widget in a Jupyter kernel that has ipywidgets, else its text
    bar (which a notebook shows too): tqdm.auto would warn "IProgress not
    found" into the user's cell where ipywidgets is missing."""
    if in_kernel() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm


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
                sys.stderr.write("" if self._bar is not None and in_kernel() else self.line() + "\n")  # the bar says it
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
        # The publish step builds report.html: not a stall. The bar shows the phase that ended (a short run's
        # writing can fall between two polls: it is drawn complete, not left at "listing").
        building = "report" in read_totals(self._folder)
        if building:
            note = "building report.html (thumbnails, charts)"
        stalled = "" if building else self._stalled(done, phase)
        if not self._show:
            if stalled and not self._told_stall:  # where nobody watches a bar, a stall is still worth a line
                sys.stderr.write(f"{time.monotonic() - self._start:5.0f}s | {stalled}\n")
                sys.stderr.flush()
            self._told_stall = bool(stalled)
            return
        if self._bar is None:
            tqdm = bar_class()
            # A terminal that reports no size (0 x 0: some CI ptys, a fresh pty) would hide the bar.
            try:
                size = os.get_terminal_size(sys.stderr.fileno())
                sized = size.columns > 0 and size.lines > 0
            except (AttributeError, OSError, ValueError):
                sized = False
            self._bar = tqdm(desc=phase, total=total, unit=" img", dynamic_ncols=sized, ncols=None if sized else 100,
                             nrows=None if sized else 24, file=sys.stderr, leave=True, mininterval=self.INTERVAL,
                             miniters=1, smoothing=0)  # updates come in jumps: no dynamic miniters; the mean rate
        elif phase != self._phase:
            self._bar.set_description(phase, refresh=False)
            self._bar.reset(total=total)  # the rate and time left of this phase only
        self._phase = phase
        self._bar.set_postfix_str(stalled or note, refresh=False)
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)  # redraws at most every INTERVAL; tqdm keeps the rate
        elif stalled or building:
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
