"""bench/api.py at a small scale: it runs, both variants write the same
shards, and it reports the figures README quotes."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def test_api_bench_at_small_scale(tmp_path):
    out = tmp_path / "api.json"
    p = subprocess.run([sys.executable, "-m", "bench.api", "--images", "20", "--repeats", "1", "--calls", "2",
                        "--data-dir", str(tmp_path / "data"), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["same_shards"] is True
    assert res["median"]["api"]["call_s"] > 0 and res["median"]["cli"]["wall_s"] > 0
    # The figure is there; how fast is the bench's to say, not a test's (that the import leaves Beam
    # out is tests/e2e/test_api.py's).
    assert len(res["fixed"]["calls_s"]) == 2 and res["fixed"]["import_s"] > 0
    assert "fixed cost of a call (10 images)" in p.stdout
