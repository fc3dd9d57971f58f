"""CheckReport on its own, on Beam's TestPipeline: validated records of
generated images, rejects and counts in; check.json (the figures, counts
reconciled), check-rejects.jsonl (each reason) and report.html (the sampled
images) out, once; counts that do not reconcile write nothing."""
from __future__ import annotations

import json
import os

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from conftest import image_bytes, write
from tfrecord_pipelines.transforms.core.labels import LabelMap
from tfrecord_pipelines.transforms.core.publishable import Guards
from tfrecord_pipelines.transforms.core.records import Batch, Reason, Rec, Reject
from tfrecord_pipelines.transforms.core.sharding import shuffle_key
from tfrecord_pipelines.transforms.core.specs import LabelType, OutputSpec
from tfrecord_pipelines.transforms.stages.check_report import CHECK_JSON, CHECK_REJECTS, CheckReport, CheckSpec
from tfrecord_pipelines.transforms.storage import layout, report_data, run_lock

RUN = "20261125-171500-0badcafe"
LABELS = LabelMap(LabelType.CLASS, (("cat", 0), ("dog", 1)))


def _records(root: str) -> list:
    recs = []
    for i, (split, label) in enumerate([("train", "cat"), ("train", "cat"), ("train", "dog"), ("test", "dog")]):
        rel = f"{split}/{label}/{i}.jpg"
        path = write(os.path.join(root, rel), image_bytes(seed=i))
        recs.append(Rec(rel=rel, path=path, size=os.path.getsize(path), label_text=label,
                        label_id=dict(LABELS.ids)[label], split=split, key=shuffle_key(0, rel), fmt="jpeg",
                        width=24, height=16, channels=3))
    return recs


def _check(output: str, recs: list, listed: int, quality=None, expect=None) -> None:
    spec = CheckSpec(OutputSpec(output, RUN, check_only=True), {"inputs": {"root": os.path.dirname(output)}},
                     Guards(max_reject_fraction=0.5), tool_version="test")
    with TestPipeline() as p:
        inputs = {"records": p | "Recs" >> beam.Create([Batch(recs[:2]), Batch(recs[2:])]),
                  "rejects": p | "Rejects" >> beam.Create([Batch([Reject("train/cat/x.jpg", Reason.TRUNCATED.value,
                                                                         "the image data ends early", "train")])]),
                  "stats": p | "Stats" >> beam.Create([("listed", listed), ("excluded/hidden", 2)]),
                  "label_map": p | "Once" >> beam.Create([None]) | beam.Map(lambda _: LABELS)}
        if quality is not None:
            inputs["quality"] = p | "OnceQ" >> beam.Create([None]) | "Quality" >> beam.Map(lambda _: quality)
        figures = inputs | CheckReport(spec)
        if expect:
            expect(figures)


def test_the_check_writes_its_figures_rejects_and_report_once(tmp_path):
    output = str(tmp_path / "out")
    os.makedirs(output)
    run_lock.acquire(output, RUN)
    recs = _records(str(tmp_path))
    counts = {"listed": 5, "valid": 4, "rejected": 1, "not_selected": 0, "excluded": {"hidden": 2}}
    _check(output, recs, listed=5, quality={"duplicates": {"groups": 0}}, expect=lambda f: assert_that(
        f | beam.Map(lambda d: (d["counts"], d["would_publish"])), equal_to([(counts, True)])))
    assert set(os.listdir(output)) - {layout.LOCK} == {CHECK_JSON, CHECK_REJECTS, report_data.REPORT}
    with open(os.path.join(output, CHECK_JSON)) as f:
        figures = json.load(f)
    assert figures["counts"] == counts and figures["rejects_by_reason"] == {"truncated": 1}
    assert figures["splits"] == {"test": {"records": 1, "label_counts": {"dog": 1}},
                                 "train": {"records": 3, "label_counts": {"cat": 2, "dog": 1}}}
    assert figures["quality"] == {"duplicates": {"groups": 0}} and figures["report"] == {"file": report_data.REPORT}
    with open(os.path.join(output, CHECK_REJECTS)) as f:
        assert [(j["path"], j["reason"]) for j in map(json.loads, f)] == [("train/cat/x.jpg", "truncated")]
    with open(os.path.join(output, report_data.REPORT), encoding="utf-8") as f:
        page = f.read()
    assert all(r.rel in page for r in recs)  # every record sampled (2 classes, few records each)


def test_counts_that_do_not_reconcile_write_nothing(tmp_path):
    output = str(tmp_path / "out")
    os.makedirs(output)
    run_lock.acquire(output, RUN)
    with pytest.raises(Exception, match=r"counts do not reconcile: listed 9 != valid 4 \+ rejected 1"):
        _check(output, _records(str(tmp_path)), listed=9)
    assert not {CHECK_JSON, CHECK_REJECTS, report_data.REPORT} & set(os.listdir(output))
