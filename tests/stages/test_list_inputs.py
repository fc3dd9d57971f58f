"""ListInputs on its own, on Beam's TestPipeline: a generated image tree and
label tables listed in the pipeline; every output it tags (records, rejects
with their reasons, the listed and excluded counts, the fingerprint's
digests); a second listing gives the same digests, a changed file another."""
from __future__ import annotations

import json
import os

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from conftest import image_bytes, make_tree, write
from tfrecord_pipelines.transforms.core.fingerprint import FINGERPRINT
from tfrecord_pipelines.transforms.core.records import Reason
from tfrecord_pipelines.transforms.core.specs import RECORDS, REJECTS, STATS, InputKind, InputSpec
from tfrecord_pipelines.transforms.stages.list_inputs import ListInputs, ListSpec


def _save(path: str, got) -> None:
    with open(path, "w") as f:
        json.dump(sorted(got), f)


def _list(spec: ListSpec, expect, tmp_path) -> list:
    """Runs ListInputs; `expect(outputs)` adds assert_thats; returns the
    fingerprint's (unit, digest) pairs (saved by a matcher: it runs on a copy)."""
    saved = str(tmp_path / "digests.json")
    with TestPipeline() as p:
        out = p | ListInputs(spec)
        expect(out)
        assert_that(out[FINGERPRINT], lambda got: _save(saved, got), label="fingerprint")
    with open(saved) as f:
        return [tuple(x) for x in json.load(f)]


def _recs(out, label="Recs"):
    return out[RECORDS] | label >> beam.FlatMap(lambda b: [(r.rel, r.size, r.label_text) for r in b])


def test_a_tree_lists_every_image_with_its_size_and_counts_what_it_excludes(tmp_path):
    root = str(tmp_path / "tree")
    files = make_tree(root, classes=("cat", "dog"), per_class=3)
    write(os.path.join(root, "top.jpg"), image_bytes(seed=9))  # a file in the root itself: its own unit
    write(os.path.join(root, "cat", "notes.txt"), b"not listed")
    write(os.path.join(root, "dog", ".hidden.jpg"), image_bytes(seed=8))
    want = sorted([(rel, os.path.getsize(os.path.join(root, rel)), None) for rel in [*files, "top.jpg"]])
    spec = ListSpec(InputSpec(InputKind.FOLDER, root, include=("*.jpg",)))

    def expect(out):
        assert_that(_recs(out), equal_to(want))
        assert_that(out[STATS] | beam.CombinePerKey(sum),
                    equal_to([("listed", 7), ("excluded/hidden", 1), ("excluded/not_included", 1)]), label="stats")
        assert REJECTS not in out  # a tree refuses no row: only tables do
    first = _list(spec, expect, tmp_path)
    assert [k for k, _ in first] == ["Tree/", "Tree/cat", "Tree/dog"]  # one digest per listing unit
    assert _list(spec, expect, tmp_path) == first  # the same tree: the same digests
    write(os.path.join(root, "dog", "0.jpg"), image_bytes(seed=77, w=30))  # another size
    changed = _list(spec, lambda out: None, tmp_path)
    assert [d for (k, d) in changed if k != "Tree/dog"] == [d for (k, d) in first if k != "Tree/dog"]
    assert dict(changed)["Tree/dog"] != dict(first)["Tree/dog"]


def test_a_table_keeps_one_row_per_file_and_rejects_the_rest_with_reasons(tmp_path):
    root = str(tmp_path / "images")
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        write(os.path.join(root, name), image_bytes())
    table = tmp_path / "labels.csv"
    table.write_text("path,label\n"
                     "a.jpg,cat\n"
                     "a.jpg,cat\n"          # the same file and label again: a duplicate
                     "b.jpg,cat\n"
                     "b.jpg,dog\n"          # one file, two labels: both refused
                     "../escape.jpg,cat\n"  # outside the root
                     ",dog\n"               # no path
                     "c.jpg,bird\n")
    spec = ListSpec(InputSpec(InputKind.TABLE, root, table=str(table), table_format="csv",
                              path_column="path", label_column="label"), spill_dir=str(tmp_path / "spill"))

    def expect(out):
        assert_that(out[RECORDS] | beam.FlatMap(lambda b: [(r.rel, r.label_text) for r in b]),
                    equal_to([("a.jpg", "cat"), ("c.jpg", "bird")]))
        assert_that(out[REJECTS] | "Why" >> beam.FlatMap(lambda b: [(r.rel, r.reason) for r in b]),
                    equal_to([("a.jpg", Reason.DUPLICATE.value), ("b.jpg", Reason.CONFLICTING_LABELS.value),
                              ("b.jpg", Reason.CONFLICTING_LABELS.value),
                              ("../escape.jpg", Reason.UNSAFE_PATH.value), ("(line 7)", Reason.MISSING.value)]),
                    label="rejects")
        # Counts reconcile: listed = records + rejects.
        assert_that(out[STATS], equal_to([("listed", 7)]), label="stats")
    digests = _list(spec, expect, tmp_path)
    assert [k for k, _ in digests] == ["table"]
    assert os.listdir(tmp_path / "spill")  # the rows waited in spill files to be grouped by path
