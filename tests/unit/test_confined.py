"""transforms/storage/confined.py on local folders: a version folder is made
only where no link, file or other user's folder stands, a removal never
follows a link, and the mount table's escaped paths read as the kernel wrote
them. (A real bind mount: tests/e2e/test_versions_confined.py.)"""
import os

import pytest

from tfrecord_pipelines.transforms.storage import confined


def test_mount_table_paths_are_unescaped():
    assert confined._unescape(r"/data/my\040set\011x\134y") == "/data/my set\tx\\y"
    assert confined._unescape("/plain") == "/plain"
    assert confined.mount_points_under("/") and "/" in confined.mount_points_under("/")


def test_a_version_folder_is_made_only_where_nothing_else_stands(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    confined.make_version_folder(str(root), "v1")
    confined.make_version_folder(str(root), "v1")  # a rerun of `--version v1`: its own folder, kept
    assert os.path.isdir(root / "v1") and not os.path.islink(root / "v1")
    os.symlink(tmp_path / "nowhere", root / "v2")  # dangling: mkdir would not follow it, nor do we
    with pytest.raises(confined.Refused, match=r"v2 is a symbolic link \(to .*nowhere\).*Nothing was written"):
        confined.make_version_folder(str(root), "v2")
    assert not os.path.lexists(tmp_path / "nowhere")
    (root / "v3").write_bytes(b"")
    with pytest.raises(confined.Refused, match="v3 is not a folder"):
        confined.make_version_folder(str(root), "v3")
    if os.geteuid() == 0:
        (root / "v4").mkdir()
        os.chown(root / "v4", 4242, 4242)
        with pytest.raises(confined.Refused, match=r"belongs to another user \(uid 4242\)"):
            confined.make_version_folder(str(root), "v4")


def test_a_removal_never_follows_a_link(tmp_path):
    victim = tmp_path / "victim"
    (victim / "deep").mkdir(parents=True)
    (victim / "deep" / "precious").write_bytes(b"keep")
    version = tmp_path / "root" / "v1"
    (version / "provenance").mkdir(parents=True)
    (version / "provenance" / "a.jsonl").write_bytes(b"{}")
    os.symlink(victim, version / "provenance" / "link")
    os.symlink(victim / "deep" / "precious", version / "file-link")
    os.symlink(victim, tmp_path / "root" / "v2")
    assert confined.remove_tree(str(tmp_path / "root" / "v2")) == f"{tmp_path}/root/v2 is a symbolic link"
    assert confined.remove_tree(str(version)) == ""
    assert not os.path.lexists(version) and os.path.islink(tmp_path / "root" / "v2")
    assert (victim / "deep" / "precious").read_bytes() == b"keep"
    assert confined.remove_tree(str(version)) == f"{version} is gone"


def test_what_leads_out_of_a_previous_version_is_named(tmp_path):
    root = tmp_path / "root"
    (root / "v1" / "provenance").mkdir(parents=True)
    (root / "v1" / "train-00000-of-00001.tfrecord").write_bytes(b"")
    names = ["provenance", "train-00000-of-00001.tfrecord", "missing"]
    assert confined.link_out(str(root / "v1"), names, str(root)) == ""
    os.rename(root / "v1" / "train-00000-of-00001.tfrecord", tmp_path / "other.tfrecord")
    os.symlink(tmp_path / "other.tfrecord", root / "v1" / "train-00000-of-00001.tfrecord")
    assert confined.link_out(str(root / "v1"), names, str(root)) == (
        f"{root}/v1/train-00000-of-00001.tfrecord is a link to {tmp_path}/other.tfrecord, outside {root}/v1")
    os.symlink(root / "v1", root / "v2")  # a link inside the root is not out of it
    assert confined.link_out(str(root / "v2"), ["provenance"], str(root)) == ""
    assert confined.link_out("gs://b/root/v1", names, "gs://b/root") == ""
