"""A local run's record batches wait in spill files, not in the runner
(transforms/storage/spill.py). The shards, rejects and label map are the same,
byte for byte, whether the metadata waits in files or in the runner (the path
a remote runner takes), for every pipeline shape: one or two reads per image,
a cap per split, stratified splits, a versioned run, a label table."""
from __future__ import annotations

import os

import pytest

from conftest import convert, image_bytes, make_tree, manifest, read_examples, shard_files, write
from tfrecord_pipelines.transforms.core.records import Rec, Reject
from tfrecord_pipelines.transforms.storage import spill


def _files(out: str) -> dict:
    names = [os.path.basename(p) for p in shard_files(out)] + ["rejects.jsonl", "label_map.json"]
    return {n: open(os.path.join(out, n), "rb").read() for n in names}


def test_spill_round_trip(tmp_path):
    recs = [Rec(rel=f"a/{i}.jpg", path=f"/x/a/{i}.jpg", size=i) for i in range(5)]
    ref = spill.spill(recs, str(tmp_path / "s"))
    assert isinstance(ref, spill.Spilled) and ref.count == 5
    assert spill.load(ref) == recs and spill.load(ref) == recs  # read, not consumed
    assert spill.spill(ref, str(tmp_path / "s")) is ref
    assert spill.spill(recs, "") == recs  # no folder: the batch itself
    put = spill.putter(str(tmp_path / "s"))
    a, b = put(recs[:2]), put([Reject("x", "missing", "gone")])
    assert a.path == b.path and spill.load(a) == recs[:2] and spill.load(b)[0].reason == "missing"


def _spill_in_child(folder: str) -> spill.Spilled:
    return spill.spill([Rec(rel="child.jpg", path="/x/child.jpg", size=7)], folder)


def test_a_process_appends_its_batches_to_one_file(tmp_path):
    """A file per batch made ~740 files at 50,000 images, whose removal at the
    end of a run took up to 1.8 s; each process now writes one per folder."""
    import multiprocessing
    folder = str(tmp_path / "s")
    batches = [[Rec(rel=f"{i}/{j}.jpg", path=f"/x/{i}/{j}.jpg", size=j) for j in range(i + 1)] for i in range(40)]
    refs = [spill.spill(b, folder) for b in batches]
    refs.append(spill.put(batches[0], folder))
    assert len({r.path for r in refs}) == 1 and os.listdir(folder) == [os.path.basename(refs[0].path)]
    assert [spill.load(r) for r in refs] == batches + batches[:1]  # each batch read back on its own
    with multiprocessing.get_context("fork").Pool(1) as pool:  # a forked worker writes a file of its own
        child = pool.apply(_spill_in_child, (folder,))
    assert child.path != refs[0].path and spill.load(child)[0].rel == "child.jpg"
    spill.release()  # the run is over: closed, still readable until the folder goes
    assert spill.load(refs[-1]) == batches[0] and len(os.listdir(folder)) == 2
    later = spill.spill(batches[1], folder)  # a later run in the same process starts a new file
    assert later.path not in (refs[0].path, child.path) and spill.load(later) == batches[1]
    spill.release()


def test_a_batch_that_did_not_fit_leaves_the_file_as_the_references_say(tmp_path):
    """A real 64 KB filesystem (we run as root) fills up in the middle of a
    batch: the run gets SpillError, and once there is room again the next
    batch lands where its reference says, every earlier batch intact."""
    import subprocess
    folder = str(tmp_path / "fs")
    os.makedirs(folder)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", folder], check=True, capture_output=True)
    try:
        ballast = os.path.join(folder, "ballast")
        with open(ballast, "wb") as f:
            f.write(b"x" * 24 * 1024)
        spilled = os.path.join(folder, "s")
        batches = [[Rec(rel=f"{i}/{j}.jpg" + "y" * 200, path=f"/x/{i}/{j}.jpg", size=j) for j in range(20)]
                   for i in range(40)]
        refs, failed = [], None
        for b in batches:
            try:
                refs.append(spill.spill(b, spilled))
            except spill.SpillError as e:
                failed = e
                break
        assert failed is not None and "No space left" in str(failed) and 0 < len(refs) < len(batches)
        os.remove(ballast)  # room again
        after = spill.spill(batches[-1], spilled)
        assert after.path == refs[0].path and after.offset == refs[-1].offset + refs[-1].length
        assert [spill.load(r) for r in refs] == batches[:len(refs)] and spill.load(after) == batches[-1]
        assert os.path.getsize(after.path) == after.offset + after.length  # nothing of the batch that failed
    finally:
        spill.release()
        subprocess.run(["umount", "-l", folder], check=True)


@pytest.fixture
def messy_tree(tmp_path):
    root = str(tmp_path / "imgs")
    make_tree(root, classes=("cat", "dog", "bird"), per_class=9)
    write(os.path.join(root, "cat", "broken.jpg"), b"not an image")
    write(os.path.join(root, "dog", "cut.jpg"), image_bytes(seed=5)[:-40])
    return root


@pytest.mark.parametrize("extra", [
    ["--num_shards", "4"],
    ["--num_shards", "3", "--reads_per_image", "2"],
    ["--split", "train=0.7,validation=0.3", "--max_examples_per_split", "7"],
    ["--split", "train=0.6,validation=0.4", "--stratify", "--num_shards", "2"],  # the classes' cut points
])
def test_same_output_whether_metadata_waits_in_files_or_in_the_runner(messy_tree, tmp_path, extra):
    outs = {}
    for mode in ("on", "off"):
        outs[mode] = str(tmp_path / f"out-{mode}")
        assert convert("--input", messy_tree, "--output", outs[mode], "--spill", mode, "--max_reject_fraction", "1", *extra,
                       "--direct_num_workers", "2", in_memory=False) == 0
    assert _files(outs["on"]) == _files(outs["off"])
    m = manifest(outs["on"])
    c = m["counts"]
    assert c["listed"] == c["written"] + c["rejected"] + c["not_selected"] and c["rejected"] >= 1
    assert sum(len(read_examples(outs["on"], s)) for s in m["splits"]) == c["written"]
    assert not [d for d in os.listdir(outs["on"]) if d.startswith(".tfrecords")]  # spill removed with staging


def test_same_output_for_a_table_and_a_versioned_rerun(tmp_path):
    root = str(tmp_path / "imgs")
    labels = make_tree(root, per_class=5)
    table = str(tmp_path / "labels.csv")
    with open(table, "w") as f:
        f.write("filename,label\n" + "".join(f"{rel},{lab}\n" for rel, lab in sorted(labels.items())))
    outs = {}
    for mode in ("on", "off"):
        out = outs[mode] = str(tmp_path / f"ds-{mode}")
        for _ in range(2):  # the second run finds nothing changed: the records wait for the fingerprint
            assert convert("--label_table", table, "--image_root", root, "--output", out, "--versioned",
                           "--num_shards", "2", "--spill", mode, "--direct_num_workers", "2", in_memory=False) == 0
        latest = open(os.path.join(out, "LATEST")).read().strip()
        outs[mode] = os.path.join(out, latest)
    assert _files(outs["on"]) == _files(outs["off"])


def test_spill_on_is_refused_for_a_remote_runner(tmp_path, capsys):
    root = str(tmp_path / "imgs")
    make_tree(root, per_class=2)
    assert convert("--input", root, "--output", str(tmp_path / "o"), "--spill", "on",
                   "--runner", "DataflowRunner", "--project", "p", "--region", "r",
                   "--temp_location", "gs://b/t") == 2
    assert "--spill on is for local runs" in capsys.readouterr().err
