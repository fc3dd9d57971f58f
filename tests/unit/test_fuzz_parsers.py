"""Fuzzing our own parsers with hypothesis: the JPEG/PNG header walk
(transforms/core/images.py), the label-table reader (transforms/core/tables.py) and the
manifest reader (transforms/storage/layout.py, pipelines/outputs/verification.py).

The property: any bytes either parse, or raise our own error (BadImage with a
Reason, TableError, ManifestError, or a verify report with errors); never
another exception, never a hang. Inputs are random bytes and, to get past the
signatures, valid images, tables and manifests mutated at random (bit flips,
cuts, inserted and overwritten bytes, random JSON values at random places).

Bounded for CI: a fixed number of examples per test (the whole file runs in
well under a minute) and a generous per-input deadline that only a runaway
parse would hit. Each test prints how many inputs it tried. FUZZ_SCALE=10
(an environment variable) tries ten times as many.
"""
from __future__ import annotations

import copy
import datetime
import io
import json
import os
import shutil
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import convert, image_bytes, make_tree
from tfrecord_pipelines.transforms.core import images, tables
from tfrecord_pipelines.transforms.core.records import Reason
from tfrecord_pipelines.transforms.storage import layout

SCALE = float(os.environ.get("FUZZ_SCALE", "1"))
FUZZ = settings(database=None, deadline=datetime.timedelta(seconds=10), print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def examples(n: int) -> settings:
    return settings(FUZZ, max_examples=max(1, int(n * SCALE)))


class Tally:
    """Counts the inputs a test tried, and prints them when it ends."""

    def __init__(self, name: str, capsys):
        self.name, self.capsys, self.n, self.started = name, capsys, 0, time.monotonic()

    def report(self) -> None:
        with self.capsys.disabled():
            print(f"\nfuzz {self.name}: {self.n:,} inputs tried in {time.monotonic() - self.started:.1f} s")


# Mutations of a valid input: (kind, position as a fraction of the length, bytes).
_INTERESTING = [b"\x00", b"\xff", b"\x00\x00", b"\xff\xff", b"\xff\xd9", b"\xff\xda", b"\xff\xc0", b"\xff\xc2",
                b"\xff\xd8", b"\x00\x02", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff", b"IEND", b"IHDR", b"tRNS"]
mutation = st.tuples(st.sampled_from(["flip", "cut", "insert", "overwrite", "delete"]),
                     st.floats(0, 1, allow_nan=False),
                     st.one_of(st.sampled_from(_INTERESTING), st.binary(min_size=1, max_size=16)))


def mutate(data: bytes, ops) -> bytes:
    b = bytearray(data)
    for kind, where, extra in ops:
        i = min(int(where * len(b)), max(len(b) - 1, 0))
        if kind == "flip" and b:
            b[i] ^= 1 << (extra[0] % 8)
        elif kind == "cut":
            del b[i:]
        elif kind == "insert":
            b[i:i] = extra
        elif kind == "overwrite":
            b[i:i + len(extra)] = extra
        elif kind == "delete":
            del b[i:i + len(extra)]
    return bytes(b)


def _seed_images() -> list:
    return [image_bytes(16, 12), image_bytes(20, 8, progressive=True), image_bytes(9, 9, mode="L"),
            image_bytes(16, 12, fmt="PNG"), image_bytes(12, 10, fmt="PNG", mode="RGBA"),
            image_bytes(10, 10, fmt="PNG", mode="P"), image_bytes(8, 8, fmt="PNG", mode="I;16")]


def _segment(code: int, payload: bytes, length_delta: int) -> bytes:
    """A JPEG marker segment, its length field sometimes lying."""
    length = max(0, min(0xFFFF, len(payload) + 2 + length_delta))
    return bytes([0xFF, code]) + length.to_bytes(2, "big") + payload


def _png_chunk(tag: bytes, payload: bytes, good_crc: bool) -> bytes:
    import zlib
    crc = zlib.crc32(tag + payload) if good_crc else 0
    return len(payload).to_bytes(4, "big") + tag + payload + crc.to_bytes(4, "big")


# Streams built marker by marker (chunk by chunk), so the walk meets every kind
# of segment, lying lengths, scans with and without frames, and ends anywhere.
jpeg_streams = st.builds(
    lambda segs, tail: b"\xff\xd8" + b"".join(segs) + tail,
    st.lists(st.builds(_segment, st.sampled_from([0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC9, 0xDA, 0xDB, 0xDD, 0xE0, 0xE1,
                                                   0xFE, 0x01, 0xD0, 0xD9, 0xFF, 0x00]),
                       st.binary(max_size=24), st.sampled_from([0, 0, 0, -2, -1, 1, 1000])), max_size=8),
    st.sampled_from([b"", b"\xff\xd9", b"\x12\xff\x00\x34\xff\xd9", b"\xff\xd0\xff"]))
png_streams = st.builds(
    lambda chunks: b"\x89PNG\r\n\x1a\n" + b"".join(chunks),
    st.lists(st.builds(_png_chunk, st.sampled_from([b"IHDR", b"PLTE", b"tRNS", b"IDAT", b"IEND", b"tEXt", b"zzzz"]),
                       st.binary(max_size=20), st.booleans()), max_size=6))

SEED_IMAGES = _seed_images()
image_inputs = st.one_of(
    st.binary(max_size=256),
    jpeg_streams,
    png_streams,
    st.builds(lambda sig, rest: sig + rest, st.sampled_from([b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n"]),
              st.binary(max_size=512)),
    st.builds(mutate, st.sampled_from(SEED_IMAGES), st.lists(mutation, min_size=1, max_size=6)),
)

HEADER_ONLY = images.ImagePolicy(validation=images.Validation.HEADER, max_pixels=1 << 20)
FULL = images.ImagePolicy(max_pixels=1 << 20)


def _probe(data: bytes, policy) -> None:
    try:
        info = images.probe_image(data, policy)
    except images.BadImage as e:
        assert isinstance(e.reason, Reason)
        return
    assert info.fmt in images.STORABLE_FORMATS and info.height > 0 and info.width > 0 and 1 <= info.channels <= 4


def _walk(data: bytes) -> None:
    """The pieces of the header walk, each on its own."""
    fmt = images.sniff_format(data)
    assert fmt is None or isinstance(fmt, str)
    for header in (images.jpeg_header, images.png_header):
        try:
            head = header(data)
        except images.BadImage as e:
            assert isinstance(e.reason, Reason)
            continue
        if header is images.jpeg_header:
            assert isinstance(images.jpeg_has_eoi(data, head.body), bool)
    images.jpeg_eoi_offset(data)


def test_image_header_walk(capsys):
    tally = Tally("image header walk (sniff_format, jpeg_header, jpeg_has_eoi, png_header, probe_image)", capsys)

    @examples(4000)
    @given(image_inputs)
    def check(data):
        tally.n += 1
        _walk(data)
        _probe(data, HEADER_ONLY)

    try:
        check()
    finally:
        tally.report()


def test_image_full_validation(capsys):
    """probe_image with a decode (Pillow) behind the header walk: Pillow's
    errors must come out as BadImage too."""
    tally = Tally("probe_image, full validation", capsys)

    @examples(1000)
    @given(st.builds(mutate, st.sampled_from(SEED_IMAGES), st.lists(mutation, min_size=1, max_size=4)))
    def check(data):
        tally.n += 1
        _probe(data, FULL)

    try:
        check()
    finally:
        tally.report()


# Tables: text made of the characters that matter to CSV, TSV and JSON Lines,
# plus raw bytes (invalid UTF-8, a BOM, NULs).
_TABLE_TEXT = st.text(alphabet=st.sampled_from(list('ab,\t"\'\n\r {}[]:\\0.1-é\ufeff\x00')), max_size=300)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                 max_size=3), max_leaves=8)
table_inputs = st.one_of(
    st.binary(max_size=300),
    _TABLE_TEXT.map(lambda t: t.encode("utf-8")),
    st.builds(lambda head, body, junk: head + body.encode("utf-8") + junk,
              st.sampled_from([b"filename,label\n", b"path\tclass\n", b"\xef\xbb\xbffile,label\r\n", b""]),
              _TABLE_TEXT, st.binary(max_size=8)),
    st.lists(_JSON, max_size=5).map(lambda rows: "\n".join(json.dumps(r) for r in rows).encode("utf-8")),
)


def _read_table(data: bytes, fmt: str) -> None:
    try:
        rows = list(tables.iter_rows(tables.text_stream(io.BytesIO(data)), fmt))
    except tables.TableError:
        return
    for n, row in rows:
        assert isinstance(n, int) and all(isinstance(k, str) and isinstance(v, str) for k, v in row.items())


def _open_rows(data: bytes, fmt: str, encoding: str) -> None:
    """The reader the pipeline uses: a bad row is a BadRow (rejected with its
    line number), never an exception in the middle of a run."""
    try:
        header, rows = tables.open_rows(tables.text_stream(io.BytesIO(data), encoding), fmt)
    except tables.TableError:
        return
    assert all(isinstance(c, str) for c in header)
    for n, row in rows:
        assert isinstance(n, int) and (isinstance(row, tables.BadRow) or isinstance(row, dict))


def _read_columns(data: bytes, fmt: str) -> None:
    try:
        tables.read_columns(tables.text_stream(io.BytesIO(data)), fmt)
    except tables.TableError:
        pass


def test_table_reader(capsys):
    tally = Tally("table reader (open_rows, iter_rows, read_columns; csv, tsv, jsonl)", capsys)

    @examples(2000)
    @given(table_inputs, st.sampled_from(tables.TABLE_FORMATS), st.sampled_from(["utf-8", "latin-1", "utf-16"]))
    def check(data, fmt, encoding):
        tally.n += 1
        _open_rows(data, fmt, encoding)
        _read_table(data, fmt)
        _read_columns(data, fmt)

    try:
        check()
    finally:
        tally.report()


@pytest.fixture(scope="module")
def real_output(tmp_path_factory):
    """A real, small output: its manifest is the seed the mutations start from."""
    base = tmp_path_factory.mktemp("fuzz_manifest")
    images_dir, out = str(base / "images"), str(base / "out")
    make_tree(images_dir, per_class=2)
    assert convert("--input", images_dir, "--output", out, "--num_shards", "2") == 0
    return out


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _replace(obj, path, value):
    """`obj` with the value at `path` replaced by `value`, or removed (_DELETE)."""
    if not path:
        return {} if value is _DELETE else value
    obj = copy.deepcopy(obj)
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    if value is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return obj


_DELETE = object()


def test_manifest_reader(real_output, tmp_path, capsys):
    """Random bytes and damaged manifests: layout.read_manifest accepts a
    well-formed one or raises ManifestError; verify (which reads it) reports
    errors, never raises; the summary prints whatever read_manifest accepts."""
    from tfrecord_pipelines.console.summary import print_summary
    from tfrecord_pipelines.outputs.verification import verify_output
    tally = Tally("manifest reader (layout.read_manifest, verify_output, print_summary)", capsys)
    with open(os.path.join(real_output, "manifest.json"), "rb") as f:
        good_bytes = f.read()
    good = json.loads(good_bytes)
    paths = list(_paths(good))
    folder = str(tmp_path / "out")
    shutil.copytree(real_output, folder)
    manifest_inputs = st.one_of(
        st.binary(max_size=200),
        st.builds(mutate, st.just(good_bytes), st.lists(mutation, min_size=1, max_size=3)),
        st.builds(lambda path, value: json.dumps(_replace(good, path, value)).encode(),
                  st.sampled_from(paths), st.one_of(_JSON, st.just(_DELETE))),
    )

    @examples(1000)
    @given(manifest_inputs)
    def check(data):
        tally.n += 1
        with open(os.path.join(folder, "manifest.json"), "wb") as f:
            f.write(data)
        try:
            layout.read_manifest(folder)
        except layout.ManifestError:
            pass
        else:  # a manifest that reads as well-formed is one the summary can print
            print_summary(folder, 1.0, out=io.StringIO())
        report = verify_output(folder, deep=False)  # must report, not raise
        assert report.ok or report.errors

    try:
        check()
    finally:
        tally.report()
