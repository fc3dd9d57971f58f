"""`tfrecords check`: the pre-flight. It lists and validates like convert,
with the same flags, and writes only report.html, check.json and
check-rejects.jsonl: no shard, no manifest, no lock or staging left. Its
figures are held to those of a real conversion of the same input."""
from __future__ import annotations

import json
import os

from conftest import ROOT, convert, image_bytes, make_tree, manifest, shard_files, write
from gcs_emulator import BUCKET, gcs, list_names, upload_tree  # noqa: F401 (fixture)
from test_dataflow import PROJECT, REGION, capture_jobs, check_functions_unpickle, stage_names  # noqa: F401 (fixture)
from test_report_html import assert_renders

CHECK_FILES = {"report.html", "check.json", "check-rejects.jsonl"}


def check(*args) -> int:
    from tfrecord_pipelines.commands.check import run
    return run([str(a) for a in args] + ["--progress", "off", "--direct_running_mode", "in_memory"])


def planted(root: str) -> dict:
    labels = make_tree(root, per_class=6)
    write(os.path.join(root, "cat", "cut.jpg"), image_bytes(40, 30, seed=7)[:300])
    write(os.path.join(root, "dog", "notes.jpg"), b"just text")
    with open(os.path.join(root, "cat", "2.jpg"), "rb") as f:
        write(os.path.join(root, "dog", "copy_of_cat.jpg"), f.read())
    labels["dog/copy_of_cat.jpg"] = "dog"
    return labels


def rejects(path: str) -> set:
    with open(path, encoding="utf-8") as f:
        return {(r["path"], r["reason"], r.get("split")) for r in map(json.loads, f)}


def test_check_writes_its_report_and_nothing_else_and_agrees_with_a_conversion(tmp_path, capsys):
    root = str(tmp_path / "images")
    labels = planted(root)
    out, converted = str(tmp_path / "out"), str(tmp_path / "converted")
    flags = ["--input", root, "--split", "train=0.7,validation=0.3", "--max_reject_fraction", "1"]
    assert check(*flags, "--output", out) == 0
    printed = capsys.readouterr().out
    assert set(os.listdir(out)) == CHECK_FILES  # no shard, manifest, lock, staging or temp file
    f = json.load(open(os.path.join(out, "check.json")))
    c = f["counts"]
    assert c["listed"] == c["valid"] + c["rejected"] + c["not_selected"] == len(labels) + 2
    assert c["valid"] == len(labels) and c["rejected"] == 2
    assert f"listed {c['listed']} = valid {c['valid']} + rejected 2" in printed
    assert f["would_publish"] is True and f["report"] == {"file": "report.html"}

    # The conversion of the same input with the same flags finds the same.
    assert convert(*flags, "--output", converted) == 0
    m = manifest(converted)
    assert {s: (v["records"], v["label_counts"]) for s, v in f["splits"].items()} == \
        {s: (v["records"], v["label_counts"]) for s, v in m["splits"].items()}
    assert f["rejects_by_reason"] == m["rejects_by_reason"] == {"not_an_image": 1, "truncated": 1}
    assert rejects(os.path.join(out, "check-rejects.jsonl")) == rejects(os.path.join(converted, "rejects.jsonl"))
    assert f["label_map"] == m["label_map"]
    for key in ("duplicates", "balance", "sizes", "near_duplicates"):
        assert f["quality"][key] == m["quality"][key], key
    assert f["quality"]["duplicates"]["conflicting_labels"] == 1

    # The check's files do not stand in the way of converting into the same folder.
    assert convert(*flags, "--output", out) == 0
    assert manifest(out)["counts"]["written"] == len(labels) and shard_files(out)
    assert "Pre-flight check" not in open(os.path.join(out, "report.html"), encoding="utf-8").read()


def test_the_check_report_renders_in_headless_chromium(tmp_path):
    root = str(tmp_path / "images")
    planted(root)
    out = str(tmp_path / "out")
    assert check("--input", root, "--output", out, "--max_reject_fraction", "1") == 0
    page = assert_renders(os.path.join(out, "report.html"), min_charts=3, min_thumbs=3 * 4 + 2)
    assert "Pre-flight check: nothing was written" in page["text"]
    assert "listed 21 = valid 19 + rejected 2" in page["text"]
    alts = {i["alt"] for i in page["images"] if i["cls"] == "thumb"}
    assert {"cat/2.jpg", "dog/copy_of_cat.jpg"} <= alts  # the duplicate pair, from the input files


def test_check_fails_when_a_conversion_would_be_refused_for_its_rejects(tmp_path, capsys):
    root = str(tmp_path / "images")
    planted(root)
    out = str(tmp_path / "out")
    assert check("--input", root, "--output", out) == 1  # 2 of 21 rejected > the default 0.05
    err = capsys.readouterr().err
    assert "above --max_reject_fraction 0.05" in err and "would publish nothing" in err
    assert set(os.listdir(out)) == CHECK_FILES  # the report is there to look at
    f = json.load(open(os.path.join(out, "check.json")))
    assert f["would_publish"] is False and f["counts"]["rejected"] == 2


def test_check_fails_where_publishing_would_be_refused(tmp_path, capsys):
    """What the publish step refuses (an empty dataset; a --versioned one that
    fell by more than half against LATEST's version) the check refuses too,
    with the same cause and fix, and the flags that allow it allow it here."""
    root = str(tmp_path / "images")
    os.makedirs(os.path.join(root, "cat"))
    assert check("--input", root, "--output", str(tmp_path / "empty")) == 1
    err = capsys.readouterr().err
    assert "would be refused: no record was written" in err and "--allow_empty" in err, err
    assert json.load(open(os.path.join(tmp_path / "empty", "check.json")))["would_publish"] is False
    assert check("--input", root, "--output", str(tmp_path / "empty2"), "--allow_empty") == 0
    make_tree(root, per_class=4)
    ds = str(tmp_path / "ds")
    assert convert("--input", root, "--output", ds, "--versioned", "--version", "v1") == 0
    for name in ("dog", "bird"):
        for f in os.listdir(os.path.join(root, name)):
            os.remove(os.path.join(root, name, f))
    capsys.readouterr()
    assert check("--input", root, "--output", ds, "--versioned") == 1
    err = capsys.readouterr().err
    assert "would be refused" in err and "down 67% from 12 in version v1" in err and "--allow_shrink" in err, err
    assert "class(es) that version v1 had and this one has not" in err, err
    assert check("--input", root, "--output", ds, "--versioned", "--allow_shrink") == 0
    assert open(os.path.join(ds, "LATEST")).read().strip() == "v1"  # a check never publishes


def test_check_takes_the_lock_like_a_conversion(tmp_path, capsys):
    from tfrecord_pipelines.transforms.storage import run_lock
    root = str(tmp_path / "images")
    make_tree(root, per_class=2)
    out = str(tmp_path / "out")
    run_lock.acquire(out, "another-run")  # held by a live process (this one)
    assert check("--input", root, "--output", out) == 2
    assert "another-run" in capsys.readouterr().err
    assert os.listdir(out) == [".tfrecords.lock"]  # nothing written
    run_lock.release(out, "another-run")
    assert check("--input", root, "--output", out) == 0
    assert set(os.listdir(out)) == CHECK_FILES  # its own lock released


def test_check_refuses_a_folder_holding_a_dataset_as_convert_does(tmp_path, capsys):
    root = str(tmp_path / "images")
    make_tree(root, per_class=2)
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out) == 0
    before = sorted(os.listdir(out))
    assert check("--input", root, "--output", out) == 2
    assert "already holds a complete dataset" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == before


def test_check_builds_as_a_dataflow_job_without_shard_stages(gcs, tmp_path, capture_jobs, capsys,  # noqa: F811
                                                            installed_package):
    """`tfrecords check --runner DataflowRunner`: Beam's dry run builds the job
    (not submitted): validation and the check's report stage, no shard
    planning, writing or publishing; every DoFn and CombineFn unpickles in a
    fresh interpreter, as on a worker; the output's lock is released."""
    from tfrecord_pipelines.commands.check import run
    local = str(tmp_path / "imgs")
    make_tree(local, per_class=3)
    upload_tree(local, "chk1/in")
    rc = run(["--input", f"gs://{BUCKET}/chk1/in", "--output", f"gs://{BUCKET}/chk1/out",
              "--runner", "DataflowRunner", "--dry_run", "True", "--project", PROJECT, "--region", REGION,
              "--temp_location", f"gs://{BUCKET}/tmp", "--staging_location", f"gs://{BUCKET}/staging",
              "--setup_file", os.path.join(ROOT, "setup.py"), "--job_name", "tfrecords-check-dry-run"])
    assert rc == 0
    assert "dry run: the DataflowRunner job was built and not submitted" in capsys.readouterr().out
    (result, _), = capture_jobs
    pp = result.job.proto_pipeline
    top = stage_names(pp)
    assert [s for s in top if s in ("ListInputs", "AssignLabels", "Split", "ValidateImages", "CheckReport")] == \
        ["ListInputs", "AssignLabels", "Split", "ValidateImages", "CheckReport"], top
    assert not {"PlanShards", "WriteShards", "Publish"} & set(top), top
    check_functions_unpickle(pp, tmp_path, installed_package)
    assert list_names("chk1/out") == []
