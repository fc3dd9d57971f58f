"""What failed and killed runs leave in an output, and who removes it: the
version folders a killed --versioned run left (removed by --keep_versions and
`tfrecords cleanup`, never LATEST's, never one a live run writes), the rejects
a refused run kept (removed by the next successful run into the folder, noted
by verify), and the folder a failed run created (removed when it is empty).
What a person sees: the console lines, the exit codes, the files left."""
import json
import os
import socket
import subprocess

from conftest import convert, image_bytes, make_tree, manifest, settle, write
from test_scratch import TFRECORDS, _env, _held_run, _kill_when_held


def _versions(root: str) -> list:
    return sorted(d for d in os.listdir(root) if not d.startswith("."))


def _live_lock(folder: str) -> None:
    """The lock of a conversion that is writing `folder` now (this process is its live owner)."""
    os.makedirs(folder, exist_ok=True)
    body = {"run_id": "20990101-000000-000000-feedbeef", "host": socket.gethostname(), "pid": os.getpid(),
            "started": "2099-01-01T00:00:00+00:00", "expires": "2099-01-02T00:00:00+00:00"}
    with open(os.path.join(folder, ".tfrecords.lock"), "w") as f:
        json.dump(body, f)


def test_keep_versions_and_cleanup_remove_the_version_folders_killed_runs_left(tmp_path, capsys):
    images, root, tmpdir = str(tmp_path / "images"), str(tmp_path / "ds"), str(tmp_path / "tmpdir")
    make_tree(images, per_class=3)
    os.makedirs(tmpdir)
    base = ["--input", images, "--output", root, "--versioned"]
    assert convert(*base, "--version", "v1") == 0
    # A versioned run killed while it reads: its version folder holds only its staging folder.
    write(os.path.join(images, "cat", "new.jpg"), image_bytes(seed=8))
    settle()
    gate = str(tmp_path / "gate")
    _kill_when_held(_held_run([*base, "--version", "v2"], tmpdir, gate, images), gate)
    assert os.listdir(os.path.join(root, "v2"))[0].startswith(".tfrecords-staging-")
    # Another killed mid-publish, as far as its folder shows: a shard and its rejects, no manifest.
    write(os.path.join(root, "v3", "train-00000-of-00001.tfrecord"), b"partial")
    write(os.path.join(root, "v3", "rejects.jsonl"), b"")
    write(os.path.join(root, "notes", "todo.txt"), b"a file no run writes")  # never removed
    _live_lock(os.path.join(root, "v4-writing"))  # a plain conversion writing ROOT/NAME now: never removed
    write(os.path.join(images, "cat", "new2.jpg"), image_bytes(seed=9))
    settle()
    capsys.readouterr()
    assert convert(*base, "--version", "v5", "--keep_versions", "5", "--dry_run") == 0
    out = capsys.readouterr().out
    assert "would remove what killed runs left (--keep_versions): v2 (no files), v3 (2 files)" in out, out
    assert convert(*base, "--version", "v5", "--keep_versions", "5") == 0
    out = capsys.readouterr().out
    assert ("removed what killed runs left (--keep_versions): v2 (no files), v3 (2 files); no manifest, nothing "
            "but a run's own files") in out, out
    assert _versions(root) == ["LATEST", "notes", "v1", "v4-writing", "v5"]
    assert manifest(os.path.join(root, "v5"))["made"]["leftovers_removed"] == [{"folder": "v2", "files": 0},
                                                                              {"folder": "v3", "files": 2}]

    # cleanup: an empty version folder a killed run left; LATEST's folder stays even without its manifest.
    os.makedirs(os.path.join(root, "v6"))
    os.rename(os.path.join(root, "v5", "manifest.json"), str(tmp_path / "manifest.json"))
    proc = subprocess.run([TFRECORDS, "cleanup", root], env=_env(tmpdir), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (f"{root}: removed the version folders killed runs left unpublished (no manifest, nothing but a run's "
            "own files; never the one LATEST names): v6 (no files)") in proc.stdout, proc.stdout
    assert _versions(root) == ["LATEST", "notes", "v1", "v4-writing", "v5"]
    os.rename(str(tmp_path / "manifest.json"), os.path.join(root, "v5", "manifest.json"))
    proc = subprocess.run([TFRECORDS, "cleanup", root], env=_env(tmpdir), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "version folders" not in proc.stdout, proc.stdout
    assert _versions(root) == ["LATEST", "notes", "v1", "v4-writing", "v5"]


def test_a_successful_run_removes_the_rejects_a_refused_run_kept_and_verify_notes_them(tmp_path, capsys):
    from tfrecord_pipelines.commands.verify import main as verify_main
    images, out = str(tmp_path / "images"), str(tmp_path / "out")
    make_tree(images, per_class=4)
    write(os.path.join(images, "cat", "broken.jpg"), b"<html>not an image</html>")
    assert convert("--input", images, "--output", out, "--max_reject_fraction", "0.5") == 0
    # Refused for its rejects: the dataset before it stays, its rejects are kept beside it.
    assert convert("--input", images, "--output", out, "--overwrite", "--max_reject_fraction", "0") != 0
    failed = [n for n in os.listdir(out) if n.startswith("failed-")]
    assert len(failed) == 1 and failed[0].endswith(".rejects.jsonl")
    capsys.readouterr()
    assert verify_main([out, "--quiet"]) == 0
    text = capsys.readouterr().out
    assert (f"note: {failed[0]}: the rejects of a later conversion into this folder, which was refused; they are not "
            "this dataset's") in text, text
    write(os.path.join(out, "failed-notes.txt"), b"the user's")  # not a name a run gives: left alone
    assert convert("--input", images, "--output", out, "--overwrite", "--max_reject_fraction", "0.5") == 0
    assert sorted(n for n in os.listdir(out) if n.startswith("failed-")) == ["failed-notes.txt"]
    capsys.readouterr()
    assert verify_main([out, "--quiet"]) == 0
    assert "failed-" not in capsys.readouterr().out


def test_a_failed_run_leaves_no_empty_folder_it_created(tmp_path, capsys):
    empty = str(tmp_path / "empty")
    os.makedirs(empty)
    for args in (["--output", str(tmp_path / "new" / "out")],
                 ["--output", str(tmp_path / "root" / "ds"), "--versioned"]):
        capsys.readouterr()
        assert convert("--input", empty, *args) != 0
        assert "error:" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["empty"]
    existing = str(tmp_path / "existing")
    os.makedirs(existing)
    assert convert("--input", empty, "--output", existing) != 0
    assert os.path.isdir(existing) and os.listdir(existing) == []  # it was there before the run: kept
