"""examples/quickstart.ipynb runs headless, every cell, in a folder of its own
(it generates its images with tfrecord_pipelines.sample_data): a notebook
that fails a cell fails here, so it cannot rot. What its cells show is what a
person reads: the bar with a true rate, the summary, the report, the images;
no log noise, no warning, nothing loaded from the network."""
from __future__ import annotations

import json
import os
import re
import shutil

from conftest import ROOT

# TensorFlow's and absl's C++ log lines: "I0000 00:00:1796168830.586903   16248 cudart_stub.cc:31] ..."
LOG_LINE = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\]|absl::InitializeLog|cuda", re.M | re.I)


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

    # Clean output: no C++ log lines, no warning, and nothing a page would load from the network (Beam's
    # interactive environment injects jQuery and DataTables from CDNs into a notebook it runs in).
    stderr = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream" and o["name"] == "stderr")
    assert not LOG_LINE.search(stderr), stderr
    assert "Warning" not in stderr and "WARNING" not in stderr and "IProgress" not in stderr, stderr
    shown = json.dumps([o.get("data", {}) for o in outputs])
    assert "jquery" not in shown.lower() and "application/javascript" not in shown, shown[:3000]
    assert not re.search(r"(?:src|href)=\\?[\"']?(?:https?:)?//", shown), "a cell loads something from the network"

    # convert()'s default progress=None: a person watches a notebook, so the bar is drawn there (tqdm's text
    # bar where ipywidgets is missing, as here), with its total and its rate, once: no status line after it.
    cell = next(c for c in nb.cells if c.cell_type == "code" and "tfp.convert(" in c.source)
    err = "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream" and o["name"] == "stderr")
    frames = re.findall(r"writing: 100%\|[^|]*\| 48/48 \[[\d:]+<[\d:]+, *([\d.]+) img/s", err)
    assert frames, err
    # A true rate: 48 images over the writing phase's time, at least a tenth of a second on this machine, and
    # more than the whole run's mean (listing, planning and the report included); never a jump's rate
    # (825,108 img/s from the last two polls).
    seconds = float(re.search(r"Converted in ([\d.]+) s", text).group(1))
    assert 48 / seconds <= float(frames[-1]) <= 48 / 0.1, (frames[-1], seconds)
    assert "rec/s" not in err and "validated 48 images" not in err, err

    # A small dataset's split keeps every class in every split (stratify=True: 9 and 3 of each class's 12).
    with open(tmp_path / "out" / "manifest.json", encoding="utf-8") as f:
        m = json.load(f)
    assert {s: v["records"] for s, v in m["splits"].items()} == {"train": 36, "validation": 12}
    classes = set(m["label_map"]["classes"])
    assert len(classes) == 4
    import tensorflow as tf
    ids = {split: set() for split in m["splits"]}
    for split in m["splits"]:
        files = sorted(str(p) for p in (tmp_path / "out").glob(f"{split}-*"))
        for raw in tf.data.TFRecordDataset(files):
            ex = tf.train.Example.FromString(raw.numpy())
            ids[split].add(ex.features.feature["image/class/label"].int64_list.value[0])
    assert ids == {"train": set(range(4)), "validation": set(range(4))}, ids

    html = [o for o in outputs if "text/html" in o.get("data", {})]
    assert any("<iframe srcdoc=" in o["data"]["text/html"] for o in html)  # the report, inline
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the grid of images
