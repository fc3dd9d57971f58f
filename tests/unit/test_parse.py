"""pipelines/options/parse.py: the Values and what the resolve step read
(parse.Resolved, written out here) make the run's config without touching
a file, a bucket or the network. Every path below names nothing that exists,
and each parse runs with the file system and sockets made to raise."""
import builtins
import contextlib
import io
import os
import socket
import sys
import threading

import pytest

from tfrecord_pipelines.options import file_list, table  # noqa: F401 (imported before the reads are refused)
from tfrecord_pipelines.options.parse import UsageError, build_config
from tfrecord_pipelines.options.parse import Resolved
from tfrecord_pipelines.transforms.core.specs import InputKind, LabelSource, LabelType, SplitSource
from tfrecord_pipelines.transforms.storage import fsutil

_refusing: set = set()  # the threads running a parse: every file or socket event of theirs is an error


def _audit(event, args):
    if _refusing and threading.get_ident() in _refusing \
            and event.split(".")[0] in ("open", "os", "shutil", "socket", "subprocess", "glob"):
        raise AssertionError(f"parse did I/O: {event} {args!r:.200}")


sys.addaudithook(_audit)  # an audit hook cannot be removed; it does nothing outside no_io()


@contextlib.contextmanager
def no_io(monkeypatch):
    """Refuses, in this thread (other threads of the test process go on), every file system and
    socket call: those with an audit event by the hook, os.stat and friends (which raise none)
    and Beam's and our storage's entry points by hand."""
    def refusing(obj, name):
        original = getattr(obj, name)

        def refuse(*a, **k):
            if threading.get_ident() in _refusing:
                raise AssertionError(f"parse did I/O: {name}{a!r:.200}")
            return original(*a, **k)
        monkeypatch.setattr(obj, name, refuse)
    from apache_beam.io.filesystems import FileSystems
    for obj, name in ((os, "stat"), (os, "lstat"), (os.path, "exists"), (os.path, "isdir"), (os.path, "isfile"),
                      (builtins, "open"), (io, "open"), (socket, "getaddrinfo"),
                      (fsutil, "read_bytes"), (fsutil, "open_read"), (fsutil, "is_dir"), (fsutil, "exists"),
                      (fsutil, "list_subdirs"), (fsutil, "list_dir"),
                      (FileSystems, "open"), (FileSystems, "exists"), (FileSystems, "match")):
        refusing(obj, name)
    _refusing.add(threading.get_ident())
    try:
        yield
    finally:
        _refusing.discard(threading.get_ident())
        monkeypatch.undo()


def _parse(monkeypatch, resolved, **options):
    o = table.Values(output="/nowhere/out", **options)
    with no_io(monkeypatch):
        return build_config(o, resolved, "run-1")


def test_a_table_is_parsed_from_its_header_and_first_rows(monkeypatch):
    head = (["image", "class", "fold", "note"], [{"image": "a.jpg", "class": "cat", "fold": "train", "note": ""}], [])
    cfg = _parse(monkeypatch, Resolved(table_head=head), label_table="gs://nowhere/labels.csv", split="column", split_column="fold",
                 extra_columns="note")
    i = cfg.inputs
    assert (i.kind, i.table, i.root, i.table_format) == (InputKind.TABLE, "gs://nowhere/labels.csv", "gs://nowhere",
                                                         "csv")
    assert (i.path_column, i.label_column, i.split_column, i.extra_columns) == ("image", "class", "fold", ("note",))
    assert not i.resolve_ids and cfg.splits.source is SplitSource.COLUMN and cfg.labels.source is LabelSource.TABLE


def test_a_table_naming_ids_is_joined_with_a_listing(monkeypatch):
    head = (["filename", "label"], [{"filename": "img001", "label": "cat"}], [])
    cfg = _parse(monkeypatch, Resolved(table_head=head), label_table="/nowhere/labels.tsv")
    assert cfg.inputs.resolve_ids and cfg.inputs.table_format == "tsv"


def test_a_table_not_read_takes_the_columns_its_flags_name(monkeypatch):
    # What a Dataflow dry run builds when it may not read a remote table (resolve leaves table_head None).
    cfg = _parse(monkeypatch, Resolved(), label_table="gs://nowhere/labels.csv", path_column="uri")
    assert (cfg.inputs.path_column, cfg.inputs.label_column) == ("uri", "label")


def test_a_header_without_the_named_column_is_the_same_usage_error(monkeypatch):
    head = (["a;b"], [], [])
    with pytest.raises(UsageError, match=r"^--label_table '/nowhere/t.csv': no path column found among \['a;b'\].*"
                       r"hold ';'"):
        _parse(monkeypatch, Resolved(table_head=head), label_table="/nowhere/t.csv")


def test_a_folder_with_split_folders_on_top(monkeypatch):
    cfg = _parse(monkeypatch, Resolved(subdirs=("train", "validation")), input="/nowhere/images")
    assert cfg.inputs.kind is InputKind.FOLDER and cfg.inputs.split_folders
    assert cfg.splits.source is SplitSource.FOLDERS and cfg.labels.source is LabelSource.FOLDER
    with pytest.raises(UsageError, match="--split folders: '/nowhere/images' has no sub-folders"):
        _parse(monkeypatch, Resolved(subdirs=()), input="/nowhere/images", split="folders")


def test_a_listing_from_its_root_and_top_folders(monkeypatch):
    cfg = _parse(monkeypatch, Resolved(listing=("gs://b/images", frozenset({"cat", "dog"}))),
                 file_list="gs://b/listing.txt")
    assert (cfg.inputs.kind, cfg.inputs.root, cfg.inputs.table) == (InputKind.TABLE, "gs://b/images",
                                                                    "gs://b/listing.txt")
    assert not cfg.inputs.split_folders and cfg.labels.source is LabelSource.FOLDER


def test_a_label_map_is_parsed_from_its_text(monkeypatch):
    cfg = _parse(monkeypatch, Resolved(subdirs=("cat", "dog"), label_map_text=" dog\ncat\n\n"),
                 input="/nowhere/images", label_map="/nowhere/map.txt")
    assert cfg.labels.frozen_map == (("dog", 0), ("cat", 1))
    with pytest.raises(UsageError, match=r"--label_map '/nowhere/map.json' is not valid JSON"):
        _parse(monkeypatch, Resolved(subdirs=(), label_map_text="{"), input="/nowhere/images",
               label_map="/nowhere/map.json")


def test_a_new_version_carries_the_class_ids_of_the_version_latest_names(monkeypatch):
    manifest = {"label_map": {"kind": "class", "classes": {"cat": 0, "dog": 1}}, "fingerprint": {"run": "f"}}
    cfg = _parse(monkeypatch, Resolved(subdirs=("cat", "dog"), latest=("v1", manifest)), input="/nowhere/images",
                 versioned=True, version="v2")
    out = cfg.output
    assert (out.root, out.output, out.previous_version, out.previous_fingerprint) == (
        "/nowhere/out", "/nowhere/out/v2", "v1", "f")
    assert cfg.labels.frozen_map == (("cat", 0), ("dog", 1)) and cfg.labels.label_type is LabelType.AUTO
    assert out.why_full.startswith("it was written without provenance")


def test_a_latest_whose_manifest_cannot_be_read(monkeypatch):
    broken = Resolved(subdirs=(), latest_error="/nowhere/out/LATEST points at 'v1', whose manifest cannot be read: x",
                      latest_named="v1")
    with pytest.raises(UsageError, match=r"cannot be read: x\. Pass --full to convert everything again"):
        _parse(monkeypatch, broken, input="/nowhere/images", versioned=True)
    cfg = _parse(monkeypatch, broken, input="/nowhere/images", versioned=True, full=True)
    assert cfg.output.previous_version == "v1" and "manifest cannot be read" in cfg.output.why_full


def test_the_refusal_is_real(monkeypatch):
    """no_io() does refuse a read: the parse above would have failed had it read."""
    with no_io(monkeypatch), pytest.raises(AssertionError, match="parse did I/O"):
        fsutil.read_bytes("/etc/hostname")
    with no_io(monkeypatch), pytest.raises(AssertionError, match="parse did I/O"):
        os.listdir("/")
