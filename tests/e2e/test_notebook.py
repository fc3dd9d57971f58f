"""examples/quickstart.ipynb runs headless, every cell, in a folder of its own
(it generates its images with tfrecord_pipelines.sample_data): a notebook
that fails a cell fails here, so it cannot rot."""
from __future__ import annotations

import os
import re
import shutil

from conftest import ROOT


def test_quickstart_notebook_runs(tmp_path):
    import nbformat
    from nbclient import NotebookClient
    path = os.path.join(ROOT, "examples", "quickstart.ipynb")
    shutil.copy(path, tmp_path)
    nb = nbformat.read(str(tmp_path / "quickstart.ipynb"), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "listed 48 = written 48 + rejected 0" in text
    # convert()'s default progress=None: a person watches a notebook, so the bar is drawn there (tqdm's text
    # bar where ipywidgets is missing, as here), with its total and rate, and no warning about the widget.
    cell = next(c for c in nb.cells if c.cell_type == "code" and "tfp.convert(" in c.source)
    err = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream" and o["name"] == "stderr")
    assert re.search(r"writing: 100%\|[^|]*\| 48/48 \[[\d:]+<[\d:]+, *[\d.]+ img/s", err), err
    assert "Warning" not in err and "IProgress" not in err, err
    html = [o for o in outputs if "text/html" in o.get("data", {})]
    assert any("<iframe srcdoc=" in o["data"]["text/html"] for o in html)  # the report, inline
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the grid of images
    assert os.path.exists(tmp_path / "out" / "manifest.json")
