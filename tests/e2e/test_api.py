"""The Python API (tfrecord_pipelines/api.py): the command's options as
keywords, read from the same declarations; results read from what the run
wrote; typed errors instead of exit codes; nothing printed unless asked; the
same shards as the command; `import tfrecord_pipelines` without Beam or
TensorFlow."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tfrecord_pipelines as tfp
from conftest import ROOT, check_against_source, convert, make_tree, manifest, settle, shard_files, write

LOCAL = {"direct_running_mode": "in_memory"}


@pytest.fixture
def images(tmp_path):
    root = str(tmp_path / "images")
    return root, make_tree(root, per_class=4)


def test_importing_the_package_imports_neither_beam_nor_tensorflow():
    code = ("import sys, tfrecord_pipelines as t; t.ConversionError; t.UsageError; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('apache_beam', 'tensorflow', 'pandas')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_convert_returns_the_result_and_prints_nothing(images, tmp_path, capfd):
    root, labels = images
    out = str(tmp_path / "out")
    r = tfp.convert(input=root, output=out, num_shards=2, split={"train": 0.75, "validation": 0.25}, **LOCAL)
    assert capfd.readouterr() == ("", "")  # nothing on stdout or stderr
    m = manifest(out)
    assert r.outcome == "published" and r.output == out and r.version == ""
    assert r.manifest == m and r.splits == {s: v["records"] for s, v in m["splits"].items()}
    assert sum(r.splits.values()) == 12 and set(r.splits) == {"train", "validation"}
    assert r.counts == {"listed": 12, "written": 12, "rejected": 0, "not_selected": 0}
    assert r.rejects_by_reason == {} and list(r.rejects()) == []
    assert r.report == os.path.join(out, "report.html") and os.path.getsize(r.report) > 1000
    with pytest.raises(Exception):
        r.outcome = "x"  # frozen
    check_against_source(out, labels, root)
    assert "listed 12 = written 12 + rejected 0" in r.summary()


def test_the_same_shards_as_the_command(images, tmp_path):
    root, _ = images
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert convert("--input", root, "--output", a, "--num_shards", "3", "--seed", "7") == 0
    tfp.convert(input=root, output=b, num_shards=3, seed=7, **LOCAL)
    files = [os.path.basename(f) for f in shard_files(a)]
    assert files == [os.path.basename(f) for f in shard_files(b)] and len(files) == 3
    for f in files:
        with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
            assert x.read() == y.read(), f


def test_rejects_are_streamed_from_the_rejects_file(images, tmp_path):
    root, labels = images
    write(os.path.join(root, "cat", "broken.jpg"), b"not an image")
    write(os.path.join(root, "dog", "empty.jpg"), b"")
    r = tfp.convert(input=root, output=str(tmp_path / "out"), max_reject_fraction=0.5, **LOCAL)
    assert r.rejects_by_reason == {"empty": 1, "not_an_image": 1}
    assert r.counts == {"listed": 14, "written": 12, "rejected": 2, "not_selected": 0}
    got = r.rejects()
    assert iter(got) is got  # an iterator, read as it goes
    assert sorted((x["path"], x["reason"]) for x in got) == [("cat/broken.jpg", "not_an_image"),
                                                             ("dog/empty.jpg", "empty")]


def test_verbose_prints_the_commands_summary(images, tmp_path, capsys):
    root, _ = images
    tfp.convert(input=root, output=str(tmp_path / "out"), verbose=True, **LOCAL)
    assert "listed 12 = written 12 + rejected 0" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, error, message", [
    ({"num_shard": 3}, TypeError, "unexpected keyword argument 'num_shard'; did you mean 'num_shards'?"),
    ({"compresion": "gzip"}, TypeError, "did you mean 'compression'?"),
    ({"overwrite": "yes"}, TypeError, "overwrite= takes True or False"),
    ({"compression": "bz2"}, tfp.UsageError, "invalid choice: 'bz2'"),
    ({"seed": 1.5}, tfp.UsageError, "seed=1.5: invalid int value: '1.5'"),  # the caller's spelling
    ({"seed": True}, tfp.UsageError, "invalid int value: 'True'"),
    ({"seed": "1_0"}, tfp.UsageError, "seed='1_0' is not an integer"),
    ({"num_shards": 0}, tfp.UsageError, "num_shards=0: expected N >= 1"),
    ({"allow_shrink": True}, tfp.UsageError, "allow_shrink=True needs versioned=True"),
    ({"split": {"train": 0.5, "validation": 0.4}}, tfp.UsageError, "fractions add up to 0.9"),
    ({"direct_running_mode": "multi_threading"}, tfp.UsageError, "multi_threading is refused"),
])
def test_bad_keywords_are_typed_errors_before_anything_runs(images, tmp_path, kwargs, error, message):
    root, _ = images
    out = tmp_path / "out"
    with pytest.raises(error) as e:
        tfp.convert(input=root, output=str(out), **kwargs)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError) or error is TypeError
    assert not out.exists()


def test_python_values_become_the_flags_text(images, tmp_path):
    root, labels = images
    out = tmp_path / "out"
    r = tfp.convert(input=root, output=out, include=["*.jpg", "*.png"], num_shards={"train": 2, "validation": 1},
                    split={"train": 0.5, "validation": 0.5}, label_offset=1, **LOCAL)
    m = r.manifest
    assert {s: v["num_shards"] for s, v in m["splits"].items()} == {"train": 2, "validation": 1}
    assert m["options"]["inputs"]["include"] == ["*.jpg", "*.png"]
    assert sorted(m["label_map"]["classes"].values()) == [1, 2, 3]


def test_run_failures_are_conversion_errors(images, tmp_path):
    root, _ = images
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        write(os.path.join(root, "cat", name), b"text")
    out = str(tmp_path / "out")
    with pytest.raises(tfp.TooManyRejects) as e:
        tfp.convert(input=root, output=out, **LOCAL)
    assert isinstance(e.value, tfp.ConversionError) and "above --max_reject_fraction 0.05" in str(e.value)
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    tfp.convert(input=root, output=out, max_reject_fraction=1, **LOCAL)
    with pytest.raises(tfp.UsageError, match="already holds a complete dataset"):
        tfp.convert(input=root, output=out, **LOCAL)
    with pytest.raises(tfp.UsageError, match="no such folder"):
        tfp.convert(input=str(tmp_path / "nowhere"), output=str(tmp_path / "o2"))


def test_a_held_lock_is_a_typed_error(images, tmp_path):
    root, _ = images
    out = tmp_path / "out"
    out.mkdir()
    (out / ".tfrecords.lock").write_text('{"run_id": "other", "host": "elsewhere", "pid": 1, '
                                         '"expires": "2999-01-01T00:00:00+00:00"}')
    with pytest.raises(tfp.LockHeld, match="another conversion is writing"):
        tfp.convert(input=root, output=str(out), **LOCAL)


def test_a_failure_not_of_ours_is_a_run_error_with_its_cause(images, tmp_path, monkeypatch):
    root, _ = images
    from tfrecord_pipelines.run import lifecycle

    def boom(self, *a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "out" / "x"))
    monkeypatch.setattr(lifecycle.Run, "execute", boom)
    with pytest.raises(tfp.RunError) as e:
        tfp.convert(input=root, output=str(tmp_path / "out"), **LOCAL)
    assert "No space left on device" in str(e.value) and "nothing was published" in str(e.value)
    assert isinstance(e.value.__cause__, OSError)


def test_check_verify_report_and_spec_return_results(images, tmp_path):
    root, _ = images
    write(os.path.join(root, "cat", "broken.jpg"), b"not an image")
    c = tfp.check(input=root, output=str(tmp_path / "chk"), max_reject_fraction=0.5, **LOCAL)
    assert c.would_publish and c.counts == {"listed": 13, "valid": 12, "rejected": 1, "not_selected": 0}
    assert [x["reason"] for x in c.rejects()] == ["not_an_image"] and os.path.exists(c.report)
    refused = tfp.check(input=root, output=str(tmp_path / "chk2"), max_reject_fraction=0.01, **LOCAL)
    assert not refused.would_publish  # a check reports; it does not raise
    out = str(tmp_path / "out")
    tfp.convert(input=root, output=out, num_shards=2, max_reject_fraction=0.5, **LOCAL)
    v = tfp.verify(out)
    assert (v.shards, v.records) == (2, 12)
    rep = tfp.report(out, to=str(tmp_path / "r.html"))
    assert rep.path == str(tmp_path / "r.html") and os.path.getsize(rep.path) == rep.bytes
    code = tfp.spec(out)
    assert "def dataset(split, training=True)" in code and out in code
    shard = shard_files(out, "train")[0]
    with open(shard, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(tfp.VerificationError) as e:
        tfp.verify(out)
    assert e.value.problems and os.path.basename(shard) in e.value.problems[0]
    for fn in (tfp.verify, tfp.spec, tfp.report):
        with pytest.raises(tfp.OutputError, match="no manifest.json"):
            fn(str(tmp_path / "chk"))


def test_verify_report_and_spec_take_their_commands_flags(tmp_path):
    """The other functions' keywords are their commands' flags (verify's
    --quiet is verbose=False), and a misspelled one names the nearest."""
    import inspect

    from tfrecord_pipelines.commands import report as report_cmd, spec as spec_cmd, verify as verify_cmd

    def flags(command) -> set:
        return {a.dest for a in command.parser()._actions if a.dest != "help"}
    assert set(inspect.signature(tfp.verify).parameters) == flags(verify_cmd) - {"quiet"} | {"verbose"}
    assert set(inspect.signature(tfp.report).parameters) == flags(report_cmd)
    assert set(inspect.signature(tfp.spec).parameters) == flags(spec_cmd)
    with pytest.raises(TypeError, match="verify\\(\\) got an unexpected keyword argument 'fsat'; did you mean 'fast'"):
        tfp.verify(str(tmp_path), fsat=True)
    with pytest.raises(TypeError, match="did you mean 'sources'"):
        tfp.report(str(tmp_path), source=str(tmp_path))
    with pytest.raises(TypeError, match="did you mean 'io_timeout'"):
        tfp.verify(str(tmp_path), **{"io-timeout": 5})
    with pytest.raises(tfp.UsageError, match="io_timeout 0 must be a positive number"):
        tfp.verify(str(tmp_path), io_timeout=0)


def test_the_keywords_are_the_declared_flags():
    """Every flag options.py declares is a keyword of convert() (with its
    default in the signature); nothing else is."""
    import inspect

    from tfrecord_pipelines.options import help_parser
    declared = {a.dest: a.default for a in help_parser("x")._actions if a.option_strings and a.dest != "help"}
    params = inspect.signature(tfp.convert).parameters
    assert {n: p.default for n, p in params.items() if n in declared and n != "progress"} == \
        {n: d for n, d in declared.items() if n != "progress"}
    assert params["progress"].default is None  # None|True|False; the flag's words work too
    assert set(params) - set(declared) == {"verbose", "beam_options"}
    assert "file_list" in declared


def test_progress_setting_goes_through_the_flag(images, tmp_path, capfd):
    root, _ = images
    tfp.convert(input=root, output=str(tmp_path / "a"), progress=True, **LOCAL)
    err = capfd.readouterr().err
    assert "written 12 records" in err
    tfp.convert(input=root, output=str(tmp_path / "b"), progress=None, **LOCAL)  # not a terminal: off
    assert capfd.readouterr().err == ""


def test_versioned_unchanged_run_returns_the_published_version(images, tmp_path):
    root, _ = images
    out = str(tmp_path / "ds")
    settle()  # files changed just before a listing are treated as changed by the next run
    first = tfp.convert(input=root, output=out, versioned=True, version="v1", **LOCAL)
    assert first.outcome == "published" and first.version == "v1" and first.output == os.path.join(out, "v1")
    again = tfp.convert(input=root, output=out, versioned=True, version="v2", **LOCAL)
    assert again.outcome == "unchanged" and again.version == "v1" and again.output == os.path.join(out, "v1")
    assert again.manifest["run_id"] == first.manifest["run_id"]
    assert not os.path.exists(os.path.join(out, "v2"))
