"""What a local run shows: a progress line while it runs, a summary at the end."""
from __future__ import annotations

import sys
import threading
import time

from transforms import fsutil, layout
from transforms.progress import read_totals


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class ProgressLine:
    """Sums the workers' progress files (transforms/progress.py) into one line
    on stderr: redrawn on a terminal, printed every 10 s otherwise."""

    def __init__(self, folder: str, mode: str = "auto"):
        self._folder = folder
        self._tty = sys.stderr.isatty() if mode == "auto" else mode == "on"
        self._stop = threading.Event()
        self._thread = None
        self._start = time.monotonic()

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
        return " | ".join(parts)

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
    line = (f"listed {c['listed']:,} = written {c['written']:,} + rejected {c['rejected']:,}"
            + (f" + not selected {c['not_selected']:,}" if c["not_selected"] else ""))
    print(line, file=out)
    if m["rejects_by_reason"]:
        reasons = ", ".join(f"{k} {v:,}" for k, v in m["rejects_by_reason"].items())
        print(f"rejected by reason: {reasons} (details: {fsutil.join(output, layout.REJECTS)})", file=out)
    excluded = c.get("excluded") or {}
    if excluded:
        print("not listed: " + ", ".join(f"{k} {v:,}" for k, v in excluded.items()), file=out)
    lm = m["label_map"]
    if lm["kind"] in ("class", "int"):
        print(f"labels: {len(lm['classes']):,} classes ({lm['kind']}), map in "
              f"{fsutil.join(output, layout.LABEL_MAP)}", file=out)
    elif lm["kind"] == "float":
        print("labels: float regression targets (image/target)", file=out)
