"""Where a killed run's complete shards wait for its rerun (resume).

A run stages its shards in a resume area named after its identity: the
run's fingerprint (the listing with every file's identity, the options, the
label map) and the tool version, `<parent>/.tfrecords-resume-<16 hex>/`, where
the parent is the dataset root of a --versioned run and the output folder
otherwise. A relaunched run of the same inputs and options (a rerun of the
same command, a relaunched Dataflow job) computes the same name, so it finds
them; any other run, another name. Next to each complete shard the writer
leaves a done-record (`<shard>.done`: its size, CRC32C, counts, rejects and
quality rows, transforms/core/provenance.py), written after the shard file is
complete; a rerun keeps a shard only if its staged files still have the
recorded sizes and CRC32Cs and, on local disk, the done-record and the
staged files are the ones a run on this machine pinned as it wrote them
(transforms/storage/copy_trust.py: sizes and CRCs are no secret).

The publish step writes a journal (`publishing.json`: what it moves where)
before it moves the shards into the output; a run killed while publishing
leaves it, and the next run into that root or output moves the shards back
(`recover`) before anything else, so the killed run's shards are kept and the
output does not hold a half-published dataset. A successful publish removes
every resume area of its parent (this run's, and those of other inputs or
options, which can never be used).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
from typing import Optional

import google_crc32c

from tfrecord_pipelines.transforms.core import provenance
from tfrecord_pipelines.transforms.core.records import Reject, ShardResult
from tfrecord_pipelines.transforms.core.tfrecord_io import crc32c_text
from tfrecord_pipelines.transforms.storage import copy_trust, fsutil, gcs, layout

JOURNAL = "publishing.json"
DONE_SUFFIX = ".done"
MAX_DONE = 256 << 20     # bytes of one done-record (its quality rows grow with the shard's records)
MAX_JOURNAL = 256 << 20
JOURNAL_FORMAT = "tfrecord-pipelines/publishing/v1"
_BLOCK = 8 << 20

log = logging.getLogger(__name__)


def area(parent: str, fingerprint: str, tool_version: str) -> str:
    key = hashlib.sha256(f"{fingerprint}\0{tool_version}".encode()).hexdigest()[:16]
    return fsutil.join(parent, layout.RESUME_PREFIX + key)


def areas(parent: str) -> list:
    """The resume areas under `parent` (full paths)."""
    return [fsutil.join(parent, d) for d in fsutil.list_subdirs(parent) if d.startswith(layout.RESUME_PREFIX)]


def remove_all(parent: str) -> None:
    for a in areas(parent):
        fsutil.delete_tree(a)
        copy_trust.unpin_folder(a)


# ---- done-records ---------------------------------------------------------------------------------------------


def write_done(where: str, result: ShardResult, rejects: list, rows: list, index_crc: str,
               boxes: tuple = ()) -> None:
    """`boxes`: the shard's box statistics ((key, count), ...) of a detection run."""
    shard = {"name": result.name, "temp": _base(result.temp_path), "records": result.records, "bytes": result.bytes,
             "crc32c": result.crc32c, "label_counts": [list(p) for p in result.label_counts],
             "index_temp": _base(result.index_temp_path), "index_bytes": result.index_bytes,
             "index_crc32c": index_crc, "prov_temp": _base(result.prov_temp_path), "prov_bytes": result.prov_bytes,
             "prov_crc32c": result.prov_crc32c, "copied": result.copied, "read": result.read,
             "repaired": result.repaired}
    fsutil.write_bytes(fsutil.join(where, result.name + DONE_SUFFIX),
                       provenance.done_record(shard, rejects, rows, boxes))


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1] if path else ""


def load_done(where: str, name: str, split: str, index: int, num_shards: int) -> Optional[tuple]:
    """(ShardResult marked resumed, rejects, quality rows, box statistics) of the shard `name`
    a killed run completed in this area, or None: no done-record, or it or a
    staged file is damaged (then the shard is written again)."""
    path = fsutil.join(where, name + DONE_SUFFIX)
    try:
        data = _read_capped(path, MAX_DONE)
    except gcs.StorageUnavailable:
        raise
    except Exception as e:  # none (the usual case), or unreadable: written again
        if fsutil.error_reason(e) != "missing":
            log.warning("resume: %s cannot be read (%s); the shard is written again", path, e)
        return None
    if data is None:
        return None
    if fsutil.is_local(path) and not copy_trust.pinned(path):  # checked after the read: a change before it shows
        log.warning("resume: %s is not the done-record a run on this machine wrote (edited, replaced or copied "
                    "since); the shard is written again", path)
        return None
    try:
        shard, rejects, rows, boxes = provenance.parse_done(data, name)
    except provenance.ProvenanceError as e:
        log.warning("resume: %s is damaged (%s); the shard is written again", path, e)
        return None
    files = [(shard["temp"], shard["bytes"], shard["crc32c"])]
    if shard["index_temp"]:
        files.append((shard["index_temp"], shard["index_bytes"], shard["index_crc32c"]))
    if shard["prov_temp"]:
        files.append((shard["prov_temp"], shard["prov_bytes"], shard["prov_crc32c"]))
    for base, size, crc in files:
        staged = fsutil.join(where, base)
        if not staged_ok(staged, size, crc):
            log.warning("resume: the staged %s is missing or damaged; the shard is written again", base)
            return None
        if fsutil.is_local(staged) and not copy_trust.pinned(staged):
            log.warning("resume: the staged %s is not the file a run on this machine wrote (edited, replaced or "
                        "copied since); the shard is written again", base)
            return None
    join = lambda b: fsutil.join(where, b) if b else ""  # noqa: E731
    result = ShardResult(split, index, num_shards, name, join(shard["temp"]), shard["records"], shard["bytes"],
                         shard["crc32c"], tuple(tuple(p) for p in shard["label_counts"]), join(shard["index_temp"]),
                         shard["index_bytes"], join(shard["prov_temp"]), shard["prov_bytes"], shard["prov_crc32c"],
                         shard["copied"], shard["read"], shard["repaired"], resumed=True)
    return result, [Reject(*r) for r in rejects], rows, boxes


def _read_capped(path: str, cap: int) -> Optional[bytes]:
    """A file's bytes if it is a regular file of at most `cap` bytes (else None)."""
    from tfrecord_pipelines.transforms.core.specs import ReadPolicy
    from tfrecord_pipelines.transforms.storage import reads
    try:
        data, _, _ = reads.read_input(path, 0, -1, ReadPolicy(max_file_bytes=cap))
    except (reads.TooLarge, reads.NotAFile):
        return None
    return data


def staged_ok(path: str, size: int, crc: str) -> bool:
    """Whether a staged file is there with this size and CRC32C (on GCS, the
    object's own CRC32C; locally, every byte read again)."""
    try:
        if path.startswith("gs://"):
            bucket, name = gcs.split_path(path)
            blob = gcs.client().bucket(bucket).get_blob(name)
            return blob is not None and blob.size == size and blob.crc32c == crc
        if fsutil.is_local(path):
            if not os.path.isfile(path) or os.path.getsize(path) != size:
                return False
        elif fsutil.size(path) != size:
            return False
        value = 0
        with fsutil.open_read(path) as f:
            while block := f.read(_BLOCK):
                value = google_crc32c.extend(value, block)
        return crc32c_text(value) == crc
    except gcs.StorageUnavailable:
        raise
    except Exception:  # gone or unreadable
        return False


# ---- publishing: the journal, and a killed publish's recovery ----------------------------------------------------


def write_journal(where: str, output: str, moves: list, companions: list, versioned: bool) -> None:
    body = {"format": JOURNAL_FORMAT, "output": output, "moves": [list(m) for m in moves],
            "companions": list(companions), "version_folder": versioned}
    fsutil.write_bytes(fsutil.join(where, JOURNAL), json.dumps(body, ensure_ascii=True).encode("ascii"))


def end_journal(where: str) -> None:
    fsutil.delete([fsutil.join(where, JOURNAL)])


def recover(parent: str) -> list:
    """Undoes the publishing of runs killed while publishing into `parent`'s
    output (or a version folder under it): their shards are moved back into
    their resume areas, the files they had written beside them removed, and
    a version folder left with nothing in it removed. Returns one line per
    recovered run."""
    said = []
    for where in areas(parent):
        journal = fsutil.join(where, JOURNAL)
        try:
            data = _read_capped(journal, MAX_JOURNAL)
        except gcs.StorageUnavailable:
            raise
        except Exception as e:  # none (the usual case), or unreadable: nothing to undo from it
            if fsutil.error_reason(e) == "missing":
                continue
            data = None
        body = _parse_journal(data, where, parent)
        if body is not None:
            said.append(_undo(where, body))
        end_journal(where)
    return [s for s in said if s]


def _parse_journal(data: Optional[bytes], where: str, parent: str) -> Optional[dict]:
    """The journal if it is one of ours, moving only between this area and an
    output at or right under `parent`."""
    try:
        body = json.loads(data) if data else None
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("format") != JOURNAL_FORMAT:
        return None
    output, moves = body.get("output"), body.get("moves")
    if not isinstance(output, str) or not isinstance(moves, list) or not isinstance(body.get("companions"), list):
        return None
    sep = "/" if not fsutil.is_local(parent) else os.sep
    if output != parent and not (output.startswith(parent + sep) and sep not in output[len(parent) + 1:]):
        return None
    for m in moves:
        if not (isinstance(m, list) and len(m) == 2 and all(isinstance(p, str) for p in m)
                and _inside(m[0], where) and _inside(m[1], output)):
            return None
    if not all(isinstance(n, str) and layout.is_dataset_file(n) or n == "report.html" for n in body["companions"]):
        return None
    return body


def _inside(path: str, folder: str) -> bool:
    if fsutil.is_local(folder):
        rel = os.path.relpath(path, folder)
        return not rel.startswith("..") and not os.path.isabs(rel) and os.path.abspath(path) == path
    rel = path[len(folder) + 1:] if path.startswith(folder + "/") else ""
    return bool(rel) and ".." not in rel.split("/") and posixpath.normpath(rel) == rel


def _undo(where: str, body: dict) -> str:
    output = body["output"]
    try:
        if layout.read_manifest(output, check=False):
            return ""  # it was published after all (killed while cleaning up): nothing to undo
    except Exception:  # no manifest (or a damaged one, which claims nothing): undo
        pass
    present = set(_list_tree(output))
    staged = set(_list_tree(where))
    back, dropped = [], []
    for src, dst in body["moves"]:
        if dst in present and src not in staged:
            back.append((dst, src))
        elif dst in present:
            dropped.append(dst)  # a rename that copied and did not delete (object stores)
    copy_trust.rename_pinned(back)  # a file moved back is trusted if it was, unchanged, where publish put it
    fsutil.delete(dropped + [fsutil.join(output, n) for n in body["companions"]])
    if body.get("version_folder") and not _list_tree(output):
        fsutil.delete_tree(output)
    return (f"a run killed while publishing into {output} was undone: {len(back)} of its files moved back to be "
            "resumed")


def _list_tree(folder: str) -> list:
    """Full paths of the files in `folder` and its provenance and index folders."""
    out = []
    for sub in ("", provenance.FOLDER, layout.INDEX_FOLDER):
        base = fsutil.join(folder, sub) if sub else folder
        out += [fsutil.join(base, n) for n in fsutil.list_sizes(base)]
    return out
