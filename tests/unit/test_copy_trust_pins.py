"""Pins (transforms/storage/copy_trust.py): a file is pinned as it is when a
run wrote it, in the user's state folder; any edit, even one that puts the
size and modification time back, a chmod, or a replacement by a file with the
same bytes, unpins it; a move this package makes carries the pin only for a
file unchanged; pins never fail a run."""
import os
import stat
import time

import pytest

from tfrecord_pipelines.transforms.storage import copy_trust


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return str(tmp_path / "state")


def tick():
    """Past the kernel's timestamp granularity (a clock tick, a few ms): a change
    within the tick of the file's last one may keep its times."""
    time.sleep(0.02)


def made(folder, name="a.tfrecord", data=b"0123456789"):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_a_pin_lives_in_the_state_folder_and_holds_while_the_file_is_untouched(tmp_path, state):
    path = made(str(tmp_path / "ds"))
    assert not copy_trust.pinned(path)
    assert copy_trust.pin(path)
    assert copy_trust.pinned(path)
    assert os.listdir(tmp_path / "ds") == ["a.tfrecord"]  # nothing written beside the file
    assert copy_trust.pins_root().startswith(state)
    open(path, "rb").read()  # reading changes nothing the pin holds
    assert copy_trust.pinned(path)


def test_an_edit_that_puts_size_and_times_back_unpins(tmp_path, state):
    path = made(str(tmp_path / "ds"))
    copy_trust.pin(path)
    st = os.stat(path)
    tick()
    with open(path, "r+b") as f:  # the same size, one byte changed, the modification time put back
        f.seek(3)
        f.write(b"X")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
    assert not copy_trust.pinned(path)


def test_a_chmod_or_a_replacement_with_the_same_bytes_unpins(tmp_path, state):
    folder = str(tmp_path / "ds")
    path = made(folder)
    copy_trust.pin(path)
    tick()
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    assert not copy_trust.pinned(path)
    copy_trust.pin(path)
    other = made(folder, "b", open(path, "rb").read())
    os.replace(other, path)
    assert not copy_trust.pinned(path)


def test_a_link_in_the_files_place_is_not_pinned(tmp_path, state):
    folder = str(tmp_path / "ds")
    path = made(folder)
    copy_trust.pin(path)
    target = made(str(tmp_path / "elsewhere"))
    os.remove(path)
    os.symlink(target, path)
    assert not copy_trust.pinned(path)


def test_a_move_carries_the_pin_only_of_an_unchanged_file(tmp_path, state):
    staged, out = str(tmp_path / "staged"), str(tmp_path / "out")
    good, bad, never = made(staged, "good"), made(staged, "bad"), made(staged, "never")
    copy_trust.pin(good)
    copy_trust.pin(bad)
    tick()
    with open(bad, "ab") as f:
        f.write(b"!")
    os.makedirs(out)
    copy_trust.rename_pinned([(os.path.join(staged, n), os.path.join(out, n)) for n in ("good", "bad", "never")])
    assert [copy_trust.pinned(os.path.join(out, n)) for n in ("good", "bad", "never")] == [True, False, False]
    assert not copy_trust.pinned(good)  # moved away


def test_unpin_and_prune_forget_folders(tmp_path, state):
    a, b = made(str(tmp_path / "a")), made(str(tmp_path / "b"))
    copy_trust.pin(a)
    copy_trust.pin(b)
    copy_trust.unpin_folder(str(tmp_path / "a"))
    assert not copy_trust.pinned(a) and copy_trust.pinned(b)
    copy_trust.pin(a)
    os.remove(b)
    os.rmdir(tmp_path / "b")
    copy_trust.prune()
    assert len(os.listdir(copy_trust.pins_root())) == 1 and copy_trust.pinned(a)


def test_a_state_folder_that_cannot_be_written_never_fails(tmp_path, monkeypatch):
    blocker = made(str(tmp_path), "state")  # a file where the state folder would be
    monkeypatch.setenv("XDG_STATE_HOME", blocker)
    path = made(str(tmp_path / "ds"))
    assert copy_trust.pin(path) is False
    assert not copy_trust.pinned(path)
    copy_trust.rename_pinned([(path, path + ".moved")])
    copy_trust.prune()
    assert os.path.exists(path + ".moved")
