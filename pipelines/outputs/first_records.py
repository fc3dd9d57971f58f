"""The first records of a converted dataset's split, read back as features
(behind `tfrecords inspect`, commands/inspect.py), and the safe text and file
names to show them under."""
from __future__ import annotations

import itertools

from tfrecord_pipelines.outputs.verification import example_decoder
from tfrecord_pipelines.transforms.core.specs import SPLIT_NAME, OutputFormat
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression
from tfrecord_pipelines.transforms.storage import fsutil, untrusted
from tfrecord_pipelines.transforms.storage.array_record_io import records_of


def first_records(output: str, m: dict, split: str, n: int) -> list[dict]:
    """The first n records of a split (in shard order) as {feature: values};
    `m` is the output's manifest."""
    compression = Compression(m.get("compression", "none"))
    output_format = OutputFormat(m.get("output_format", "tfrecord"))
    decoder = example_decoder(m["features"])
    out: list = []
    for entry in m["splits"][split]["shards"]:
        if len(out) >= n:
            break
        path = fsutil.join(output, entry["name"])  # a shard name of layout.SHARD_RE (check_manifest)
        with untrusted.open_stream(path, within=output) as f:
            records = records_of(f, path, output_format, compression, drain=False)
            datas = [d for _, d in itertools.islice(records, n - len(out))]
        if datas:
            out += decoder.DecodeBatch(datas).to_pylist()
    return out


# File extensions of the images saved: the record's image/format picks one of these, never a name of its own.
_EXTENSIONS = {b"jpeg": "jpg", b"png": "png", b"gif": "gif", b"bmp": "bmp", b"webp": "webp", b"tiff": "tiff"}


def printable(text: str, limit: int = 200) -> str:
    """A name from the output as one line of plain text: control, format and
    bidirectional characters (an escape sequence for the terminal, an RTL
    override, a NUL) shown as escapes."""
    text = text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def image_file_name(split: str, i: int, fmt) -> str:
    """The file a shown record's image is saved as: the split (a name of
    layout's pattern), the record's number and an extension from a fixed set."""
    assert SPLIT_NAME.fullmatch(split), split
    ext = _EXTENSIONS.get(fmt, "img") if isinstance(fmt, bytes) else "img"
    return f"{split}-{i}.{ext}"
