"""Run one command and measure its whole process tree, from /proc (Linux only).

What is measured, and how:

* wall: from just before the fork to the moment the root process is reaped
  (a blocking `os.wait4` in the main thread, so the end is exact).
* CPU seconds (user + sys) of the root and every descendant: the delta of
  `getrusage(RUSAGE_CHILDREN)` of this process around the run. The kernel
  folds a reaped child's times, and those of the children it reaped, into its
  parent, so everything that was waited for is in there. This process makes
  itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so a descendant
  orphaned by its parent is re-parented here instead of to init; we reap it
  after the root exits, so its CPU time is counted too.
* peak memory of the tree: a sampler thread scans /proc every `interval`
  seconds (default 25 ms), finds every descendant of this process through the
  ppid links in /proc/<pid>/stat, sums their RSS and keeps the maximum of that
  sum. RSS counts shared pages (libraries, fork copy-on-write pages) once per
  process, so it is an upper bound of the physical memory the tree holds.
* CPU use over time: at every scan, the tree's cumulative CPU time is
  sum(utime + stime + cutime + cstime) over the tree's processes (zombies
  included: an orphan stays visible until we reap it at the end; a child
  reaped by its parent moves into that parent's cutime/cstime). Differences
  of that series give busy cores over time:
    - busy_cores_mid: CPU seconds / wall seconds over the middle 80% of the
      run (the first and last 10% of the wall time left out); this is the
      "steady state" figure the bench reports;
    - busy_cores_active: the same over the 100 ms slots in which the tree
      used more than 0.5 core;
    - parallel_fraction: the fraction of the wall time in which the tree used
      more than (cores - 0.5) cores, i.e. kept every core busy.
  The same is computed from /proc/stat for the whole machine (sys_busy_*),
  which also includes this sampler and anything else running.
* foreign CPU: the machine's busy time over the run (/proc/stat, all CPUs)
  minus the tree's and this monitor's CPU time: other programs and kernel
  threads (e.g. page-cache writeback). A run with a lot of it was disturbed.
"""
from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import threading
import time
from typing import Optional

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
NPROC = os.cpu_count() or 1
SLOT = 0.1  # seconds; the resolution of the CPU-use series

_subreaper_set = False


def become_subreaper() -> bool:
    """Orphaned descendants get re-parented to this process (so we can reap
    them and count their CPU time). Linux only; harmless elsewhere."""
    global _subreaper_set
    if _subreaper_set:
        return True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER = 36
        _subreaper_set = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except Exception:
        _subreaper_set = False
    return _subreaper_set


def _read_stat(pid: str) -> Optional[tuple]:
    """(ppid, cpu ticks incl. reaped children, rss pages, state) of one process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: split after the last ')'
    rest = raw[raw.rindex(b")") + 2:].split()
    # rest[0] = state (field 3), rest[1] = ppid (4), utime = field 14 -> rest[11]
    try:
        ticks = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
        return int(rest[1]), ticks, int(rest[21]), rest[0]
    except (IndexError, ValueError):
        return None


def _cmdline(pid: int, limit: int = 120) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return ""
    return " ".join(a.decode("utf-8", "replace") for a in args if a)[:limit]


def _system_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    with open("/proc/stat", "rb") as f:
        line = f.readline().split()
    vals = [int(v) for v in line[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    total = sum(vals[:8])  # guest time is already inside user
    return total - idle, total


class TreeSampler(threading.Thread):
    """Samples the tree under `ancestor` (this process) every `interval` s."""

    def __init__(self, ancestor: int, interval: float = 0.025, rss_limit: float = 0.0):
        super().__init__(daemon=True)
        self.rss_limit = rss_limit  # bytes; over it, the tree is killed (0: no limit)
        self.stopped = ""
        self.ancestor = ancestor
        self.interval = interval
        self.stop_event = threading.Event()
        self.t0 = time.perf_counter()
        self.samples: list[tuple] = []   # (t, tree cpu seconds, tree rss bytes, n procs, sys busy s)
        self.peak_rss = 0
        self.peak_procs = 0
        self.pids_seen: set = set()
        self.breakdown_rss = 0
        self.peak_breakdown: list = []

    def scan(self) -> None:
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = _read_stat(name)
                if st is not None:
                    stats[int(name)] = st
        children: dict = {}
        for pid, st in stats.items():
            children.setdefault(st[0], []).append(pid)
        tree, todo = [], list(children.get(self.ancestor, ()))
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        ticks = sum(stats[p][1] for p in tree)
        rss = sum(stats[p][2] for p in tree) * PAGE
        busy, _ = _system_ticks()
        t = time.perf_counter() - self.t0
        self.samples.append((t, ticks / CLK_TCK, rss, len(tree), busy / CLK_TCK))
        self.pids_seen.update(tree)
        if rss > self.peak_rss:
            self.peak_rss = rss
            if rss > self.breakdown_rss * 1.02:  # who holds the memory at the peak (within 2%)
                self.breakdown_rss = rss
                self.peak_breakdown = [(p, stats[p][0], round(stats[p][2] * PAGE / 1e6, 1), _cmdline(p))
                                       for p in tree]
        if len(tree) > self.peak_procs:
            self.peak_procs = len(tree)
        if self.rss_limit and rss > self.rss_limit and not self.stopped:
            self.stopped = f"stopped: the process tree held {rss / 1e6:,.0f} MB (limit {self.rss_limit / 1e6:,.0f} MB)"
            for pid in tree:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass

    def run(self) -> None:
        next_t = time.perf_counter()
        while not self.stop_event.is_set():
            self.scan()
            next_t += self.interval
            delay = next_t - time.perf_counter()
            if delay < 0:
                next_t = time.perf_counter()
                delay = 0
            self.stop_event.wait(delay)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


def _slots(samples: list, wall: float, final_cpu: Optional[float]) -> list[tuple]:
    """Resamples the cumulative series to SLOT-long slots: [(t_start, dt, tree cpu, sys cpu)]."""
    if not samples:
        return []
    pts = [(0.0, 0.0, samples[0][4])] + [(s[0], s[1], s[4]) for s in samples if s[0] <= wall]
    if final_cpu is not None:
        # the last slice after the last scan: the exact total from rusage
        pts.append((wall, max(final_cpu, pts[-1][1]), pts[-1][2]))

    def at(t: float, k: int) -> float:  # linear interpolation of the cumulative series
        lo, hi = 0, len(pts) - 1
        if t <= pts[0][0]:
            return pts[0][k]
        if t >= pts[hi][0]:
            return pts[hi][k]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if pts[mid][0] <= t:
                lo = mid
            else:
                hi = mid
        (t1, *a), (t2, *b) = pts[lo], pts[hi]
        f = (t - t1) / (t2 - t1) if t2 > t1 else 0.0
        return a[k - 1] + f * (b[k - 1] - a[k - 1])

    out = []
    t = 0.0
    while t < wall - 1e-9:
        dt = min(SLOT, wall - t)
        out.append((t, dt, at(t + dt, 1) - at(t, 1), at(t + dt, 2) - at(t, 2)))
        t += dt
    return out


def cpu_use(samples: list, wall: float, final_cpu: Optional[float], cores: int = NPROC) -> dict:
    slots = _slots(samples, wall, final_cpu)
    if not slots:
        return {}
    lo, hi = 0.1 * wall, 0.9 * wall
    mid = [s for s in slots if s[0] >= lo and s[0] + s[1] <= hi + 1e-9] or slots
    active = [s for s in slots if s[2] / s[1] > 0.5]
    full = [s for s in slots if s[2] / s[1] > cores - 0.5]

    def rate(group, k):
        dt = sum(s[1] for s in group)
        return sum(s[k] for s in group) / dt if dt else 0.0

    return {
        "busy_cores_mid": round(rate(mid, 2), 3),
        "busy_cores_active": round(rate(active, 2), 3) if active else 0.0,
        "active_seconds": round(sum(s[1] for s in active), 3),
        "parallel_fraction": round(sum(s[1] for s in full) / wall, 3) if wall else 0.0,
        "sys_busy_cores_mid": round(rate(mid, 3), 3),
        "timeline_cores": [round(s[2] / s[1], 2) for s in slots],
    }


def reap_orphans(wait_s: float) -> int:
    """Reaps re-parented descendants; waits up to wait_s for live ones."""
    reaped = 0
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid:
            reaped += 1
            continue
        if time.monotonic() > deadline:
            # still running after the root exited: end them so the next run starts clean
            for name in os.listdir("/proc"):
                if name.isdigit():
                    st = _read_stat(name)
                    if st and st[0] == os.getpid():
                        try:
                            os.kill(int(name), 9)
                        except OSError:
                            pass
            deadline = time.monotonic() + 5
        time.sleep(0.01)


def run_measured(cmd: list, cwd: str = None, env: dict = None, interval: float = 0.025,
                 timeout: float = 3600.0, stdout_path: str = None, stderr_path: str = None,
                 rss_limit_mb: float = 0.0) -> dict:
    """Runs cmd, returns the measurements (see the module doc)."""
    become_subreaper()
    me = os.getpid()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    out_f = open(stdout_path, "wb") if stdout_path else subprocess.DEVNULL
    err_f = open(stderr_path, "wb") if stderr_path else subprocess.DEVNULL
    sampler = TreeSampler(me, interval, rss_limit_mb * 1e6)
    try:
        sys0, _ = _system_ticks()
        t0 = time.perf_counter()
        sampler.t0 = t0
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL)
        sampler.start()
        timer = threading.Timer(timeout, lambda: _kill_tree(proc.pid))
        timer.start()
        _, status, _ = os.wait4(proc.pid, 0)  # the root only; blocks without the GIL
        wall = time.perf_counter() - t0
        timer.cancel()
        sys1, _ = _system_ticks()
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.stop()
        orphans = reap_orphans(wait_s=10.0)
    finally:
        for f in (out_f, err_f):
            if hasattr(f, "close"):
                f.close()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    user = ru1.ru_utime - ru0.ru_utime
    system = ru1.ru_stime - ru0.ru_stime
    sampled_cpu = sampler.samples[-1][1] if sampler.samples else 0.0
    result = {
        "returncode": proc.returncode,
        "wall_s": round(wall, 4),
        "cpu_s": round(user + system, 3),
        "cpu_user_s": round(user, 3),
        "cpu_sys_s": round(system, 3),
        "cpu_sampled_s": round(sampled_cpu, 3),  # from /proc, up to one interval short
        "peak_rss_mb": round(sampler.peak_rss / 1e6, 1),
        "peak_procs": sampler.peak_procs,
        "procs_seen": len(sampler.pids_seen),
        "orphans_reaped": orphans,
        "peak_breakdown": [{"pid": p, "ppid": pp, "rss_mb": mb, "cmd": c} for p, pp, mb, c in sampler.peak_breakdown],
        "samples": len(sampler.samples),
        "monitor_cpu_s": round((self1.ru_utime - self0.ru_utime) + (self1.ru_stime - self0.ru_stime), 3),
    }
    if sampler.stopped:
        result["stopped"] = sampler.stopped
    monitor = result["monitor_cpu_s"]
    # CPU time the machine spent on anything else during the run (other programs, kernel
    # writeback threads): all CPUs' busy time from /proc/stat minus the tree and this monitor.
    foreign = (sys1 - sys0) / CLK_TCK - (user + system) - monitor
    result["foreign_cpu_s"] = round(foreign, 3)
    result["foreign_cores"] = round(foreign / wall, 3) if wall > 0 else 0.0
    result.update(cpu_use(sampler.samples, wall, user + system))
    return result


def machine_load(window: float = 0.5) -> float:
    """Busy cores of the whole machine over the next `window` seconds."""
    b0, _ = _system_ticks()
    time.sleep(window)
    b1, _ = _system_ticks()
    return (b1 - b0) / CLK_TCK / window


def wait_quiet(max_cores: float, max_wait: float, quiet_for: float = 2.0,
               window: float = 0.5) -> tuple[float, float]:
    """Waits until the machine has used at most max_cores (other programs) for
    quiet_for seconds in a row, or max_wait seconds have passed. Returns (the
    highest load of the last quiet stretch or the last load, seconds waited)."""
    t0 = time.monotonic()
    quiet, worst = 0.0, 0.0
    while True:
        load = machine_load(window)
        waited = time.monotonic() - t0
        if load <= max_cores:
            quiet += window
            worst = max(worst, load)
            if quiet >= quiet_for:
                return worst, waited
        else:
            quiet, worst = 0.0, 0.0
        if waited >= max_wait:
            return load, waited


def _kill_tree(root: int) -> None:
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _read_stat(name)
            if st and (int(name) == root or st[0] == root):
                try:
                    os.kill(int(name), 9)
                except OSError:
                    pass
