"""A library call leaves its caller's process as it found it: after
tfp.convert() on a small input (run in the caller's process) and on worker
processes, in a fresh interpreter that ran a plain Beam pipeline of each kind
first (so Beam's own one-time effects are excluded), the functions of Beam's
modules, os.environ, warning filters, logger levels, fd 2, signal handlers,
Pillow's settings, live threads and child processes are what they were. The
idle workers Beam's shared thread pool keeps for reuse are left out of the
threads and checked against that pool's own bound."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT, make_tree

SNAPSHOT = r'''
import json, logging, os, signal, sys, threading, time, warnings

def children():
    me, out = os.getpid(), []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                out.append(int(p))
    return sorted(out)

def idle_pool_workers():
    # Beam's shared thread pool keeps up to 16 idle workers for reuse, and how many depends on the peak
    # concurrency of whatever ran last (load on the machine included): Beam's own bounded cache, not ours.
    from apache_beam.utils import thread_pool_executor as tpe
    pool = tpe.shared_unbounded_instance()
    return set(pool._idle_worker_queue.queue), pool._max_idle_threads

def threads():
    deadline = time.time() + 5  # a thread that is ending may take a moment
    while True:
        idle, _ = idle_pool_workers()
        names = sorted(t.name for t in threading.enumerate() if t not in idle)
        if time.time() > deadline or names == getattr(threads, "last", None):
            return names
        threads.last = names
        time.sleep(0.5)

def pool_within_bound():
    idle, bound = idle_pool_workers()
    return len(idle) <= bound + 1  # a worker re-queues itself after the trim in submit()

def beam_functions():
    out = {}
    for name, m in sorted(sys.modules.items()):
        if not name.startswith("apache_beam") or m is None:
            continue
        for k, v in vars(m).items():
            if callable(v):
                out[f"{name}.{k}"] = id(v)
    from apache_beam.options.pipeline_options import PipelineOptions
    out.update({f"PipelineOptions.{k}": id(v) for k, v in vars(PipelineOptions).items() if callable(v)})
    return out

def snapshot():
    from PIL import Image
    loggers = {n: l.level for n, l in logging.root.manager.loggerDict.items() if isinstance(l, logging.Logger)}
    return {"beam": beam_functions(), "environ": dict(os.environ),
            "warnings": [repr(f) for f in warnings.filters], "loggers": loggers,
            "root": [logging.root.level, len(logging.root.handlers)],
            "fd2": os.readlink("/proc/self/fd/2"), "stderr": id(sys.stderr), "stdout": id(sys.stdout),
            "signals": {int(s): repr(signal.getsignal(s)) for s in signal.valid_signals()
                        if s not in (signal.SIGKILL, signal.SIGSTOP)},
            "pil": [Image.MAX_IMAGE_PIXELS], "threads": threads(), "beam_pool_bounded": pool_within_bound(),
            "children": children()}
'''

CODE = SNAPSHOT + r'''
import apache_beam as beam
import tfrecord_pipelines as tfp
root, out = sys.argv[1], sys.argv[2]
# Beam's one-time effects first: a plain pipeline in this process, and one on worker processes.
for opts in ([], ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]):
    with beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions(opts)) as p:
        _ = p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x + 1) | beam.GroupBy(lambda x: x % 2)
before = snapshot()
results = []
for name, kw in (("small", {}), ("workers", {"direct_num_workers": 2})):
    r = tfp.convert(input=root, output=os.path.join(out, name), num_shards=2, **kw)
    results.append([r.outcome, r.counts["written"]])
after = snapshot()
after["loggers"] = {n: l for n, l in after["loggers"].items() if n in before["loggers"] or l != 0}  # new: unset
diff = {k: [before[k], after[k]] for k in before if k != "beam" and before[k] != after[k]}
changed = sorted(k for k in before["beam"] if after["beam"].get(k) != before["beam"][k])
print(json.dumps({"results": results, "diff": diff, "beam_changed": changed}))
'''


def test_a_library_call_leaves_the_process_as_it_found_it(tmp_path):
    root = str(tmp_path / "images")
    make_tree(root, per_class=8)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFRECORDS_")}
    out = subprocess.run([sys.executable, "-c", CODE, root, str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                         text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-4000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["results"] == [["published", 24], ["published", 24]]
    assert got["beam_changed"] == []
    assert got["diff"] == {}
