"""tfrecord_pipelines.ToRecords and WriteDataset in a pipeline built as a Beam
user would (their own Create, then ours), on TestPipeline and on Beam's
multi-process local runner: the shards are byte-identical to the command's
on the same rows as a label table."""
from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

import tfrecord_pipelines as tfp
from conftest import check_against_source, convert, make_tree, manifest, shard_files, write

# Run again on the oldest Beam of setup.py's range (make test-beam-oldest).
pytestmark = pytest.mark.beam_range


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Images, the rows a user's pipeline would hold, and the command's output
    for the same rows written as a CSV table."""
    tmp = tmp_path_factory.mktemp("ptransforms")
    root = str(tmp / "images")
    labels = make_tree(root, per_class=5)
    write(os.path.join(root, "cat", "broken.jpg"), b"not an image")
    rows = [{"path": rel, "label": lab, "weight": i * 0.5} for i, (rel, lab) in enumerate(sorted(labels.items()))]
    rows += [{"path": "cat/broken.jpg", "label": "cat", "weight": 1.0},
             {"path": "dog/missing.jpg", "label": "dog", "weight": 2.0},
             {"path": "cat/0.jpg", "label": "dog", "weight": 0.0}]  # conflicts with cat/0.jpg's row
    table = tmp / "rows.csv"
    table.write_text("path,label,weight\n" + "".join(f"{r['path']},{r['label']},{r['weight']!r}\n" for r in rows))
    command = str(tmp / "command")
    assert convert("--label_table", table, "--image_root", root, "--output", command, "--num_shards", "3",
                   "--split", "train=0.7,validation=0.3", "--max_reject_fraction", "1") == 0
    return root, labels, rows, command


OPTIONS = {"num_shards": 3, "split": {"train": 0.7, "validation": 0.3}, "max_reject_fraction": 1,
           "extra_columns": ["weight"]}


def _users_pipeline(p, rows, cfg):
    records = p | "MyRows" >> beam.Create(rows) | "ToRecords" >> tfp.ToRecords(cfg)
    reasons = records["rejects"] | beam.FlatMap(lambda batch: batch) | beam.Map(lambda r: r.reason)
    assert_that(reasons, equal_to(["conflicting_labels", "conflicting_labels"]), label="RejectsSoFar")
    return records | "WriteDataset" >> tfp.WriteDataset(cfg)


def _same_as_the_command(out: str, command: str) -> None:
    names = [os.path.basename(f) for f in shard_files(command)]
    assert names == [os.path.basename(f) for f in shard_files(out)] and len(names) == 6
    for name in names + ["label_map.json", "rejects.jsonl"]:
        with open(os.path.join(out, name), "rb") as a, open(os.path.join(command, name), "rb") as b:
            assert a.read() == b.read(), name
    assert manifest(out)["counts"] == manifest(command)["counts"]
    assert manifest(out)["rejects_by_reason"] == {"conflicting_labels": 2, "missing": 1, "not_an_image": 1}


def test_on_test_pipeline(dataset, tmp_path):
    root, labels, rows, command = dataset
    out = str(tmp_path / "out")
    cfg = tfp.beam_config(output=out, image_root=root, **OPTIONS)
    with TestPipeline() as p:
        _users_pipeline(p, rows, cfg)
    _same_as_the_command(out, command)
    expected = {k: v for k, v in labels.items() if k != "cat/0.jpg"}
    check_against_source(out, expected, root)
    assert not os.path.exists(os.path.join(out, ".tfrecords.lock"))  # the publish step released it
    assert manifest(out)["options"]["inputs"]["table"] == "<Beam PCollection>"


def test_on_the_multi_process_local_runner(dataset, tmp_path):
    root, _, rows, command = dataset
    out = str(tmp_path / "out")
    cfg = tfp.beam_config(output=out, image_root=root, **OPTIONS)
    options = PipelineOptions(["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    with beam.Pipeline(options=options) as p:
        _users_pipeline(p, rows, cfg)
    _same_as_the_command(out, command)


def test_pairs_absolute_paths_and_a_pipeline_built_but_never_run(dataset, tmp_path):
    """Building the graph takes no lock and writes nothing; the run takes the
    lock in its first step and its publish step releases it."""
    root, labels, _, _ = dataset
    out = str(tmp_path / "out")
    pairs = [(os.path.join(root, rel), lab) for rel, lab in sorted(labels.items())]
    first = TestPipeline()
    cfg = tfp.beam_config(output=out, image_root=root)
    first | beam.Create(pairs) | tfp.ToRecords(cfg) | tfp.WriteDataset(cfg)  # built, never run
    assert not os.path.exists(out)
    cfg = tfp.beam_config(output=out, image_root=root)
    with TestPipeline() as p:
        p | beam.Create(pairs) | tfp.ToRecords(cfg) | tfp.WriteDataset(cfg)
    assert not os.path.exists(os.path.join(out, ".tfrecords.lock"))
    check_against_source(out, labels, root)


def test_what_the_config_refuses(tmp_path):
    with pytest.raises(tfp.UsageError, match="no input= here"):
        tfp.beam_config(output=str(tmp_path), input="x")
    with pytest.raises(tfp.UsageError, match="no versioned= here"):
        tfp.beam_config(output=str(tmp_path), versioned=True)
    with pytest.raises(tfp.UsageError, match="name the columns"):
        tfp.beam_config(output=str(tmp_path), extra_columns="*")
    with pytest.raises(TypeError, match="did you mean 'num_shards'"):
        tfp.beam_config(output=str(tmp_path), num_shard=2)
