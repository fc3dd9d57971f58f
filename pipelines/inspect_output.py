"""`tfrecords inspect OUT`: print the first records of a converted dataset
(every feature but the image bytes) and optionally save their images."""
from __future__ import annotations

import argparse
import itertools
import os
import sys
from typing import Optional

from tfrecord_pipelines.verify import add_io_timeout, example_decoder
from tfrecord_pipelines.transforms.storage.gcs import StorageUnavailable
from tfrecord_pipelines.transforms.core.specs import SPLIT_NAME, OutputFormat
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression
from tfrecord_pipelines.transforms.storage import fsutil, layout, untrusted
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


def _show(value) -> str:
    if value is None:
        return "(absent)"
    shown = []
    for v in value:
        if isinstance(v, bytes):
            try:
                text = v.decode("utf-8")
                shown.append(repr(text) if len(v) <= 200 and text.isprintable() else f"<{len(v):,} bytes>")
            except UnicodeDecodeError:
                shown.append(f"<{len(v):,} bytes>")
        else:
            shown.append(repr(v))
    return shown[0] if len(shown) == 1 else "[" + ", ".join(shown) + "]"


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="tfrecords inspect", description=__doc__.split("\n\n")[0])
    ap.add_argument("output", help="output folder of a conversion (local or gs://)")
    ap.add_argument("--split", default="", help="split to show (default: every split)")
    ap.add_argument("-n", "--num", type=int, default=3, help="records to show per split")
    ap.add_argument("--save_images", default="", help="folder to write the shown images to")
    add_io_timeout(ap)
    args = ap.parse_args(argv)
    if args.num < 0:
        ap.error(f"-n {args.num}: give a number of records >= 0")
    try:
        return _inspect(args)
    except StorageUnavailable as e:  # a bucket that stopped answering: one line, not a traceback
        print(f"error: {e}", file=sys.stderr)
        return 1


def _inspect(args) -> int:
    output = fsutil.normalize_root(args.output)
    try:
        m = layout.read_manifest(output)
    except FileNotFoundError:
        from tfrecord_pipelines.verify import _no_manifest
        print(f"error: {_no_manifest(output).replace('tfrecords verify', 'tfrecords inspect')}", file=sys.stderr)
        return 1
    except StorageUnavailable:
        raise
    except Exception as e:  # a malformed manifest (layout.ManifestError), an unreadable file
        print(f"error: {layout.MANIFEST} of {output} cannot be read: {e}", file=sys.stderr)
        return 1
    splits = [args.split] if args.split else list(m["splits"])
    unknown = [s for s in splits if s not in m["splits"]]
    if unknown:
        print(f"error: no split {printable(unknown[0])!r}; splits are {list(m['splits'])}", file=sys.stderr)
        return 2
    roles = m.get("feature_roles", {})
    for split in splits:
        print(f"== {split}: {m['splits'][split]['records']:,} records in {m['splits'][split]['num_shards']} shards")
        try:
            records = first_records(output, m, split, args.num)
        except StorageUnavailable:
            raise  # a bucket that stopped answering: said once, by main()
        except Exception as e:  # a shard that is not a file, damaged, or not Examples of the manifest's features
            print(f"error: the records of split {split} cannot be read: {printable(str(e), 300)}", file=sys.stderr)
            return 1
        for i, rec in enumerate(records):
            print(f"-- record {i}")
            for key in sorted(rec):
                print(f"   {printable(key)}: {_show(rec[key])}")
            image = (rec.get(roles.get("encoded")) or [None])[0]
            if args.save_images and isinstance(image, bytes):
                # Never a name from the data: the split is one of layout's names, the extension from a fixed set.
                name = image_file_name(split, i, (rec.get(roles.get("format")) or [None])[0])
                path = os.path.join(args.save_images, name)
                os.makedirs(args.save_images, exist_ok=True)
                fsutil.write_bytes(path, image)  # a new file under that name (a link there is replaced, not followed)
                print(f"   saved {path}")
    return 0
