"""`tfrecords inspect OUT`: print the first records of a converted dataset
(every feature but the image bytes) and optionally save their images. A
--versioned dataset root is read at the version its LATEST names (said first)."""
from __future__ import annotations

import argparse
import os
from typing import Optional

from tfrecord_pipelines.console import process
from tfrecord_pipelines.commands.verify import add_io_timeout
from tfrecord_pipelines.outputs.finished_output import followed, no_manifest
from tfrecord_pipelines.transforms.core.errors import OutputError
from tfrecord_pipelines.outputs.first_records import first_records, image_file_name, printable
from tfrecord_pipelines.transforms.storage import fsutil, layout
from tfrecord_pipelines.transforms.storage.gcs import StorageUnavailable


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
        process.error(str(e))
        return process.FAILED


def _inspect(args) -> int:
    try:
        output, which = followed(args.output)  # a --versioned root: the version LATEST names
    except OutputError as e:
        process.error(str(e))
        return process.FAILED
    if which:
        print(which)
    try:
        m = layout.read_manifest(output)
    except FileNotFoundError:
        process.error(no_manifest(output))
        return process.FAILED
    except StorageUnavailable:
        raise
    except Exception as e:  # a malformed manifest (layout.ManifestError), an unreadable file
        process.error(f"{layout.MANIFEST} of {output} cannot be read: {e}")
        return process.FAILED
    splits = [args.split] if args.split else list(m["splits"])
    unknown = [s for s in splits if s not in m["splits"]]
    if unknown:
        process.error(f"no split {printable(unknown[0])!r}; splits are {list(m['splits'])}")
        return process.USAGE
    roles = m.get("feature_roles", {})
    for split in splits:
        print(f"== {split}: {m['splits'][split]['records']:,} records in {m['splits'][split]['num_shards']} shards")
        try:
            records = first_records(output, m, split, args.num)
        except StorageUnavailable:
            raise  # a bucket that stopped answering: said once, by main()
        except Exception as e:  # a shard that is not a file, damaged, or not Examples of the manifest's features
            process.error(f"the records of split {split} cannot be read: {printable(str(e), 300)}")
            return process.FAILED
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
    return process.OK
