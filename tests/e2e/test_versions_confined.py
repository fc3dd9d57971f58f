"""A --versioned root that a neighbour can write in: what a run creates,
copies from and removes stays in the root (transforms/storage/confined.py,
transforms/storage/retention.py).

--keep_versions counts LATEST's history only (no stray folder or forged
manifest takes part), never deletes through a link nor into a filesystem
mounted inside a version, and says removed only what it removed; a link or
another user's folder planted under the next version names is refused, never
written through; a previous version (or its provenance folder) linked out of
the root is never copied from. Real runs through the command line, read back
with TensorFlow.

The bind mount needs root (CI runs the tests as root); where this process may
not mount, the mount case is left out and the test says so, and the link cases
lead to /dev/shm, another filesystem, where there is one."""
import datetime
import json
import os
import shutil
import subprocess
import uuid

import pytest

from conftest import check_against_source, convert, files_of, image_bytes, make_tree, manifest, settle, write


def latest(root):
    with open(os.path.join(root, "LATEST")) as f:
        return f.read().strip()


@pytest.fixture
def outside(tmp_path):
    """outside(name): a folder outside the root holding one precious file, on
    /dev/shm (another filesystem) where there is one, else beside the root;
    removed when the test ends, however it ends."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else str(tmp_path)
    made = []

    def make(name):
        folder = os.path.join(base, f"{name}-{uuid.uuid4().hex[:8]}")
        write(os.path.join(folder, "precious.txt"), b"not the dataset's")
        made.append(folder)
        return folder
    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


def precious(folder):
    with open(os.path.join(folder, "precious.txt"), "rb") as f:
        return f.read() == b"not the dataset's"


def bind_mount(source, target):
    """Binds `source` at `target` (the same filesystem: only the mount table tells); False if this process may not."""
    os.makedirs(target)
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    return subprocess.run(["mount", "--bind", source, target], capture_output=True).returncode == 0


def three_versions(tmp_path):
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    truth = make_tree(images, per_class=2)
    base = ["--input", images, "--output", root, "--versioned", "--num_shards", "2"]
    for k in range(1, 4):
        truth[f"cat/n{k}.jpg"] = "cat"
        write(os.path.join(images, "cat", f"n{k}.jpg"), image_bytes(seed=k))
        assert convert(*base, "--version", f"v{k}") == 0
    return images, root, base, truth


def test_keep_versions_never_follows_a_link_nor_enters_a_mount(tmp_path, capsys, outside):
    images, root, base, truth = three_versions(tmp_path)
    linked, mounted = outside("linked"), str(tmp_path / "mounted")
    write(os.path.join(mounted, "precious.txt"), b"not the dataset's")
    os.symlink(linked, os.path.join(root, "v2", "data"))  # a link inside a version: removed, never followed
    os.symlink(linked, os.path.join(root, "v0-link"))  # a version name that is a link: never counted
    v1_files = files_of(os.path.join(root, "v1"))
    is_mounted = bind_mount(mounted, os.path.join(root, "v1", "data"))
    print(f"v1/data: {'a bind mount' if is_mounted else 'an empty folder (this process may not mount)'}; "
          f"the link leads to {linked}")
    try:
        truth["cat/n4.jpg"] = "cat"
        write(os.path.join(images, "cat", "n4.jpg"), image_bytes(seed=4))
        capsys.readouterr()
        assert convert(*base, "--version", "v4", "--keep_versions", "1") == 0
        out = capsys.readouterr().out
        assert precious(linked) and os.path.islink(os.path.join(root, "v0-link"))
        made = manifest(os.path.join(root, "v4"))["made"]
        if is_mounted:  # v1 kept whole (the mount's file too), and said so; only v2 and v3 are said removed
            assert precious(os.path.join(root, "v1", "data"))
            assert {k: v for k, v in files_of(os.path.join(root, "v1")).items() if not k.startswith("data" + os.sep)} \
                == v1_files
            assert made["versions_removed"] == ["v2", "v3"]
            assert "v1/data is another filesystem mounted inside it" in made["versions_not_removed"]["v1"]
            assert "removed versions (--keep_versions): v2, v3\n" in out
            assert "warning: version v1 kept (--keep_versions): " in out and "v1/data is another filesystem" in out
            assert sorted(n for n in os.listdir(root) if not n.startswith(".")) == ["LATEST", "v0-link", "v1", "v4"]
        else:
            assert made["versions_removed"] == ["v1", "v2", "v3"] and "versions_not_removed" not in made
            assert "removed versions (--keep_versions): v1, v2, v3" in out
        assert not os.path.lexists(os.path.join(root, "v2")) and not os.path.lexists(os.path.join(root, "v3"))
        assert latest(root) == "v4"
        check_against_source(os.path.join(root, "v4"), truth, images)
    finally:
        if is_mounted:
            subprocess.run(["umount", "-l", os.path.join(root, "v1", "data")], check=True)
    assert precious(mounted)


def test_a_forged_manifest_in_a_stray_folder_never_costs_a_real_version(tmp_path, capsys):
    images, root, base, truth = three_versions(tmp_path)
    # Stray folders with a copy of a real manifest claiming a run of the far future, under version-like
    # names, one naming itself as its version: none is in LATEST's history.
    real = manifest(os.path.join(root, "v3"))
    for name in ("v99991231-235959", "zz-stray"):
        forged = {**real, "run_id": "99991231-235959-000000-ffffffff", "version": name, "previous_version": "v2"}
        write(os.path.join(root, name, "manifest.json"), json.dumps(forged).encode())
    truth["cat/n4.jpg"] = "cat"
    write(os.path.join(images, "cat", "n4.jpg"), image_bytes(seed=4))
    capsys.readouterr()
    assert convert(*base, "--version", "v4", "--keep_versions", "2") == 0
    assert "removed versions (--keep_versions): v1, v2\n" in capsys.readouterr().out
    assert sorted(n for n in os.listdir(root) if not n.startswith(".")) == \
        ["LATEST", "v3", "v4", "v99991231-235959", "zz-stray"]
    assert manifest(os.path.join(root, "v4"))["made"]["versions_removed"] == ["v1", "v2"]
    check_against_source(os.path.join(root, "v3"), {k: v for k, v in truth.items() if k != "cat/n4.jpg"}, images)
    check_against_source(os.path.join(root, "v4"), truth, images)


def next_names(seconds):
    now = datetime.datetime.now(datetime.timezone.utc)
    return [(now + datetime.timedelta(seconds=k)).strftime("v%Y%m%d-%H%M%S") for k in range(-2, seconds)]


def test_a_path_planted_under_the_next_version_names_is_refused(tmp_path, capsys, outside):
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    make_tree(images, per_class=2)
    settle()
    base = ["--input", images, "--output", root, "--versioned", "--num_shards", "2"]
    assert convert(*base, "--version", "v1") == 0
    victim = outside("victim")
    planted = [os.path.join(root, n) for n in next_names(180)]
    for p in planted:
        os.symlink(victim, p)
    capsys.readouterr()
    assert convert(*base, "--republish_unchanged") == 2
    err = capsys.readouterr().err
    assert "is a symbolic link (to " + victim + ")" in err and "Nothing was written" in err, err
    assert sorted(os.listdir(victim)) == ["precious.txt"] and latest(root) == "v1"
    # A real folder of another user under the name: refused the same way (as root only can one make it).
    if os.geteuid() == 0:
        for p in planted:
            os.remove(p)
            os.mkdir(p)
            os.chown(p, 4242, 4242)
        assert convert(*base, "--republish_unchanged") == 2
        err = capsys.readouterr().err
        assert "belongs to another user (uid 4242)" in err, err
        assert all(os.listdir(p) == [] for p in planted) and latest(root) == "v1"
    for p in planted:
        os.remove(p) if os.path.islink(p) else os.rmdir(p)
    # Once they are gone, the same command publishes, byte for byte as v1.
    assert convert(*base, "--republish_unchanged") == 0
    assert latest(root) != "v1"
    assert files_of(os.path.join(root, latest(root))) == files_of(os.path.join(root, "v1"))


def test_a_previous_version_or_its_provenance_linked_out_is_not_copied_from(tmp_path, capsys, outside):
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    truth = make_tree(images, per_class=3)
    settle()
    base = ["--input", images, "--output", root, "--versioned", "--num_shards", "2"]
    assert convert(*base, "--version", "v1") == 0
    write(os.path.join(images, "dog", "new.jpg"), image_bytes(seed=77))
    truth["dog/new.jpg"] = "dog"
    settle()
    fresh = str(tmp_path / "fresh")
    assert convert("--input", images, "--output", fresh, "--versioned", "--num_shards", "2", "--version", "v2") == 0
    want = files_of(os.path.join(fresh, "v2"))
    # The provenance folder a link to a copy outside the version: not copied from, every record read again.
    v1 = os.path.join(root, "v1")
    elsewhere = outside("provenance")
    shutil.copytree(os.path.join(v1, "provenance"), elsewhere, dirs_exist_ok=True)
    shutil.rmtree(os.path.join(v1, "provenance"))
    os.symlink(elsewhere, os.path.join(v1, "provenance"))
    capsys.readouterr()
    assert convert(*base, "--version", "v2") == 0
    out = capsys.readouterr().out
    assert f"full conversion: {v1}/provenance is a link to {elsewhere}, outside {v1}: not copied from" in out, out
    assert files_of(os.path.join(root, "v2")) == want
    check_against_source(os.path.join(root, "v2"), truth, images)
    # The version LATEST names a link to a version outside the root: refused, unless --full (nothing copied).
    moved = outside("version")
    shutil.copytree(os.path.join(root, "v2"), moved, dirs_exist_ok=True)
    shutil.rmtree(os.path.join(root, "v2"))
    os.symlink(moved, os.path.join(root, "v2"))
    assert convert(*base, "--version", "v3") == 2
    err = capsys.readouterr().err
    assert f"points at 'v2', a link to {moved}, outside {root}: not read" in err and "--full" in err, err
    assert convert(*base, "--version", "v3", "--full") == 0
    assert "full conversion: LATEST names v2, whose manifest cannot be read" in capsys.readouterr().out
    assert files_of(os.path.join(root, "v3")) == want and latest(root) == "v3"
