"""The pure rules of incremental versions and resume (transforms/core/provenance.py):
a file's identity and the racy rule, a record's digest, the reuse decision, the
provenance lines and their validation (the previous version is untrusted input),
the writer's units of work, the check of a copied record, done-records and
retention."""
import io
import json
import os
import random
import types

import pytest

from tfrecord_pipelines.transforms.core import provenance as pv
from tfrecord_pipelines.transforms.core.example_codec import encode_example
from tfrecord_pipelines.transforms.core.records import Rec
from tfrecord_pipelines.transforms.core.tfrecord_io import RecordWriter, iter_records

SEC = 1_000_000_000


def stat(size=100, mtime=10 * SEC, ctime=10 * SEC, ino=7):
    return types.SimpleNamespace(st_size=size, st_mtime_ns=mtime, st_ctime_ns=ctime, st_ino=ino)


def rec(rel="cat/1.jpg", **kw):
    base = dict(rel=rel, path="/x/" + rel, size=100, label_text="cat", label_id=0, split="train",
                stamp=pv.local_stamp(stat()))
    base.update(kw)
    return Rec(**base)


def entry(r: Rec, **kw) -> pv.Entry:
    base = dict(rel=r.rel, stamp=r.stamp, digest=pv.record_digest(r), offset=0, length=116, crc=5,
                sha256="ab" * 32, phash=12, width=3, height=2)
    base.update(kw)
    return pv.Entry(**base)


# ---- identity, racy times, digests, the decision per record -------------------------------------------------------

def test_the_racy_rule():
    after = pv.racy_after(100 * SEC)
    assert after == 100 * SEC - pv.RACY_MARGIN_NS
    assert not pv.racy(pv.local_stamp(stat(mtime=after - 1, ctime=after - 1)), after)
    assert pv.racy(pv.local_stamp(stat(mtime=after, ctime=after - 1)), after)
    assert pv.racy(pv.local_stamp(stat(mtime=1, ctime=after + 5)), after)  # a rewrite that restored its mtime
    assert not pv.racy(pv.gcs_stamp(10, 123456789), after)  # a generation is never racy
    assert pv.racy(pv.mtime_stamp(10, 200.0), after)
    assert not pv.racy((), after) and not pv.racy(pv.local_stamp(stat()), 0)
    assert pv.racy_after(0) == 0


def test_the_digest_covers_what_the_example_holds_besides_the_image():
    a = rec()
    assert pv.record_digest(a) == pv.record_digest(rec())
    for changed in (rec(label_id=1), rec(label_text="dog"), rec(target=0.5), rec(label_id=None),
                    rec(features=(("score", "int64", [3]),)), rec(features=(("score", "bytes", [b"3"]),))):
        assert pv.record_digest(changed) != pv.record_digest(a)
    assert pv.record_digest(rec(features=(("s", "float", [0.1]),))) != pv.record_digest(
        rec(features=(("s", "float", [0.1000001]),)))
    # Not what the image decides (its size, format) nor the split: the file's identity covers those.
    assert pv.record_digest(rec(size=5, fmt="png", split="validation")) == pv.record_digest(a)


def test_reuse_needs_the_same_identity_and_digest_and_no_racy_times():
    r = rec()
    e = entry(r)
    after = pv.racy_after(100 * SEC)
    assert pv.reusable(r, e, after)
    for other in (stat(size=101), stat(mtime=11 * SEC), stat(ctime=11 * SEC), stat(ino=8)):
        assert not pv.reusable(r._replace(stamp=pv.local_stamp(other)), e, after)
    assert not pv.reusable(r._replace(label_id=3), e, after)  # a label changed: read and encoded again
    assert not pv.reusable(r._replace(stamp=()), e, after)
    assert not pv.reusable(r._replace(stamp=pv.NO_STAMP), e._replace(stamp=pv.NO_STAMP), after)
    late = r._replace(stamp=pv.local_stamp(stat(mtime=99 * SEC, ctime=99 * SEC)))
    assert not pv.reusable(late, entry(late), after)  # changed within the margin of the last listing
    # A carried reject depends on the bytes only: a new label does not matter.
    rej = e._replace(offset=-1, length=0, crc=0, sha256="", phash=-1, width=0, height=0, reason="truncated",
                     detail="cut")
    assert pv.reusable(r._replace(label_id=3), rej, after)
    annotated = pv.annotate(r, e, "train-00000-of-00002.tfrecord")
    assert annotated.prev == (pv.COPY, "train-00000-of-00002.tfrecord", 0, 116, 5, "ab" * 32, 0, 0, e.digest)
    assert (annotated.phash, annotated.width, annotated.height) == (12, 3, 2)
    assert pv.annotate(r, rej, "x").prev == (pv.REJECT, "truncated", "cut")


# ---- provenance lines -------------------------------------------------------------------------------------------

def lines(*entries) -> bytes:
    return b"".join(pv.encode_entry(e) for e in entries)


def chained(*entries) -> tuple:
    """The entries with running CRCs chained as a writer records them (values
    made up: only the chain is checked here), and the shard's CRC they end at."""
    out, running = [], 0
    for i, e in enumerate(entries):
        if e.offset >= 0:
            after = (running * 31 + 7 + i) & 0xFFFFFFFF
            e, running = e._replace(crc_before=running, crc_after=after), after
        out.append(e)
    return out, running


def test_entries_round_trip_and_checks_of_the_whole_file():
    a, b = rec("a.jpg"), rec("b.jpg", stamp=pv.gcs_stamp(5, 2**62))
    ea, eb = entry(a, offset=0, length=100), entry(b, offset=100, length=50, src_sha256="cd" * 32)
    ej = entry(rec("c\udcff.jpg"), offset=-1, length=0, crc=0, sha256="", phash=-1, width=0, height=0,
               reason="not_an_image", detail="no known image signature")
    (ea, ej, eb), crc = chained(ea, ej, eb)
    data = lines(ea, ej, eb)
    assert pv.parse_entries(data, 150, 2, crc) == [ea, ej, eb]
    assert pv.parse_entries(b"", 0, 0, 0) == []
    with pytest.raises(pv.ProvenanceError, match="manifest says"):
        pv.parse_entries(data, 151, 2, crc)  # the shard's size
    with pytest.raises(pv.ProvenanceError, match="manifest says"):
        pv.parse_entries(data, 150, 3, crc)
    with pytest.raises(pv.ProvenanceError, match="expected 100"):
        pv.parse_entries(lines(ea, eb._replace(offset=101)), 151, 2, crc)  # records are contiguous
    with pytest.raises(pv.ProvenanceError, match="twice"):
        pv.parse_entries(lines(ea, eb._replace(rel="a.jpg")), 150, 2, crc)
    with pytest.raises(pv.ProvenanceError, match="line end"):
        pv.parse_entries(data[:-1], 150, 2, crc)
    # The running CRCs chain from 0, record to record, to the shard's CRC32C in the manifest.
    with pytest.raises(pv.ProvenanceError, match="does not follow"):
        pv.parse_entries(lines(ea, eb._replace(crc_before=eb.crc_before ^ 1)), 150, 2, crc)
    with pytest.raises(pv.ProvenanceError, match="does not follow"):
        pv.parse_entries(lines(ea._replace(crc_before=5), eb), 150, 2, crc)
    with pytest.raises(pv.ProvenanceError, match="CRC32C in the manifest"):
        pv.parse_entries(data, 150, 2, crc ^ 1)


@pytest.mark.parametrize("field,value", [
    ("rel", ""), ("rel", 5), ("rel", "x" * (pv.MAX_REL + 1)), ("stamp", []), ("stamp", [9, 1, 2]),
    ("stamp", [0, 1, 2]), ("stamp", [0, -1, 2, 3, 4]), ("stamp", [0, True, 2, 3, 4]), ("stamp", [1, 2, 2**63]),
    ("digest", "XY" * 16), ("digest", "ab"), ("offset", -2), ("offset", 1.0), ("length", 15), ("crc", 2**32),
    ("crc", -1), ("sha256", "AB" * 32), ("sha256", ""), ("phash", 2**64), ("phash", -2), ("width", -1),
    ("height", True), ("src_sha256", "x"), ("reason", "corrupt"), ("detail", "why"), ("crc_before", -1),
    ("crc_after", 2**32), ("crc_after", 1.0),
])
def test_a_malformed_field_refuses_the_file(field, value):
    e = entry(rec(), offset=0, length=16)
    row = json.loads(pv.encode_entry(e))
    row[pv.Entry._fields.index(field)] = value
    with pytest.raises(pv.ProvenanceError):
        pv.parse_entries(json.dumps(row).encode() + b"\n", 16, 1, 0)


def test_a_carried_reject_is_held_to_its_shape():
    base = entry(rec(), offset=-1, length=0, crc=0, sha256="", phash=-1, width=0, height=0, reason="corrupt",
                 detail="x")
    assert pv.parse_entries(lines(base), 0, 0, 0) == [base]
    for bad in (base._replace(reason="missing"), base._replace(detail="y" * (pv.MAX_DETAIL + 1)),
                base._replace(length=16), base._replace(sha256="ab" * 32), base._replace(crc_after=3)):
        with pytest.raises(pv.ProvenanceError):
            pv.parse_entries(lines(bad), 0, 0, 0)


def test_random_bytes_never_parse_as_anything_else():
    rnd = random.Random(7)
    good_entries, crc = chained(entry(rec("a.jpg"), offset=0, length=100), entry(rec("b.jpg"), offset=100, length=50))
    good = lines(*good_entries)
    for i in range(3000):
        data = bytearray(good)
        for _ in range(rnd.randint(1, 4)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        if i % 3 == 0:
            data = bytearray(rnd.randbytes(rnd.randint(0, 300)))
        try:
            got = pv.parse_entries(bytes(data), 150, 2, crc)
        except pv.ProvenanceError:
            continue
        # What parses is well-formed: contiguous records, as many as the manifest says.
        assert sum(e.length for e in got if e.offset >= 0) == 150


def test_a_line_too_long_is_refused():
    e = entry(rec(), offset=0, length=16)
    row = json.loads(pv.encode_entry(e))
    big = json.dumps(row).encode()[:-1] + b"," + b" " * pv.MAX_LINE + b"0]"
    with pytest.raises(pv.ProvenanceError):
        pv.parse_entries(big + b"\n", 16, 1, 0)


# ---- the previous version: whether it can be used, and its manifest section ----------------------------------------

EXPECT = {"tool_version": "1.0", "options": {"shards": {"seed": 0, "num_shards": [["*", 4]]}, "labels": {"x": 1}},
          "image_library": {"pillow": "12"}, "compression": "none", "output_format": "tfrecord"}


def prev_manifest(**kw):
    m = {"tool_version": "1.0", "image_library": {"pillow": "12"},
         "splits": {"train": {"shards": [{"name": "train-00000-of-00001.tfrecord", "records": 2, "bytes": 150,
                                          "crc32c": "AAAAAA=="}]}},
         "incremental": {"format": pv.FORMAT, "options": EXPECT["options"], "listed_at_ns": 5 * SEC,
                         "provenance": {"train-00000-of-00001.tfrecord": {"bytes": 10, "crc32c": "AAAAAA=="}}}}
    m.update(kw)
    return m


def test_why_full_names_what_prevents_reuse():
    assert pv.why_full(prev_manifest(), EXPECT) == ""
    assert pv.why_full(None, EXPECT) == "no previous version"
    assert "without provenance" in pv.why_full(prev_manifest(incremental=None), EXPECT)
    older = prev_manifest(incremental={"format": "tfrecord-pipelines/provenance/v1", "provenance": {}})
    assert pv.why_full(older, EXPECT) == ("its provenance is 'tfrecord-pipelines/provenance/v1'; this tool reads "
                                          f"{pv.FORMAT!r}")
    assert "tool version 0.9" in pv.why_full(prev_manifest(tool_version="0.9"), EXPECT)
    assert "uncompressed TFRecord" in pv.why_full(prev_manifest(), {**EXPECT, "compression": "gzip"})
    assert "uncompressed TFRecord" in pv.why_full(prev_manifest(), {**EXPECT, "output_format": "array_record"})
    changed = {**EXPECT, "options": {"shards": {"seed": 3, "num_shards": [["*", 8]]}, "labels": {"x": 1}}}
    assert pv.why_full(prev_manifest(), changed) == "options changed: shards.num_shards, shards.seed"
    assert "image libraries" in pv.why_full(prev_manifest(image_library={"pillow": "11"}), EXPECT)


def test_the_previous_versions_section_is_checked():
    prev = pv.previous_version(prev_manifest(), "v1", "/root/v1")
    assert prev.shards == (pv.PrevShard("train", "train-00000-of-00001.tfrecord", 150, 2, 10, "AAAAAA==", 0),)
    assert prev.after_ns == 5 * SEC - pv.RACY_MARGIN_NS
    bad_name = prev_manifest()
    bad_name["splits"]["train"]["shards"][0]["name"] = "../../etc/passwd"
    for m in (bad_name, prev_manifest(incremental={"format": pv.FORMAT, "provenance": {}, "listed_at_ns": 1}),
              prev_manifest(incremental={"format": pv.FORMAT, "provenance": {}, "listed_at_ns": "1"})):
        with pytest.raises(pv.ProvenanceError):
            pv.previous_version(m, "v1", "/root/v1")


# ---- the writer's units of work, and the check of a copied record -------------------------------------------------

def copy(r: Rec, shard: str, offset: int, length: int) -> Rec:
    return r._replace(prev=pv.PrevCopy(pv.COPY, shard, offset, length, 0, "", 0, 0))


def test_plan_units_groups_nearby_copies_of_one_shard():
    s0, s1 = "train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"
    recs = [copy(rec("a"), s0, 0, 100), copy(rec("b"), s0, 100, 100),
            copy(rec("c"), s0, 300, 100),                       # a gap of 100 (a removed record): read through
            rec("new"),                                         # read from its source
            copy(rec("d"), s0, 400, 100),
            copy(rec("e"), s1, 0, 100),                         # another shard
            rec("bad", prev=pv.PrevReject(pv.REJECT, "corrupt", "x"))]
    units = pv.plan_units(recs, max_segment=1000, max_gap=150)
    assert [(u.kind, [r.rel for r in u.recs], u.shard, u.start, u.end) for u in units] == [
        (pv.COPY, ["a", "b", "c"], s0, 0, 400), (pv.READ, ["new"], "", 0, 0), (pv.COPY, ["d"], s0, 400, 500),
        (pv.COPY, ["e"], s1, 0, 100), (pv.REJECT, ["bad"], "", 0, 0)]
    # Gaps and segments are bounded.
    assert len(pv.plan_units([copy(rec("a"), s0, 0, 100), copy(rec("b"), s0, 400, 100)], 1000, 150)) == 2
    assert len(pv.plan_units([copy(rec(str(i)), s0, i * 100, 100) for i in range(10)], 300, 0)) == 4


def framed_record(rel: str) -> tuple:
    buf = io.BytesIO()
    chunks, length = encode_example({"image/encoded": ("bytes", [os.urandom(300)]),
                                     "image/filename": ("bytes", [rel.encode()])})
    crc = RecordWriter(buf).write(chunks, length)
    return buf.getvalue(), crc


def needle(rel: str) -> bytes:
    return pv.filename_needle({}, rel)


def test_check_framed_finds_every_damage():
    framed, crc = framed_record("cat/1.jpg")
    assert [d for _, d in iter_records(io.BytesIO(framed))]  # a real record
    r = rec().__class__(rel="cat/1.jpg", path="", prev=pv.PrevCopy(pv.COPY, "s", 0, len(framed), crc, "", 0, 0))
    assert pv.check_framed(framed, r, needle("cat/1.jpg")) == ""
    assert "bytes present" in pv.check_framed(framed[:-1], r, b"")
    for pos, why in ((3, "length field"), (9, "length CRC"), (50, "data CRC"), (len(framed) - 1, "data CRC")):
        bad = bytearray(framed)
        bad[pos] ^= 0x10
        assert why in pv.check_framed(bytes(bad), r, b""), pos
    # Another record, whole and valid, where the provenance points: the recorded CRC differs ...
    other, other_crc = framed_record("dog/2.jpg")
    other_rec = r._replace(prev=pv.PrevCopy(pv.COPY, "s", 0, len(other), crc, "", 0, 0))
    assert "data CRC" in pv.check_framed(other, other_rec, b"")
    # ... and if a forged provenance recorded that CRC too, the file name inside it does not match.
    forged = r._replace(prev=pv.PrevCopy(pv.COPY, "s", 0, len(other), other_crc, "", 0, 0))
    assert "another file's record" in pv.check_framed(other, forged, needle("cat/1.jpg"))


# ---- done-records and retention ----------------------------------------------------------------------------------

def test_done_records_round_trip_and_refuse_what_they_are_not():
    shard = {"name": "train-00000-of-00001.tfrecord", "temp": "train-00000-of-00001.tfrecord.abc", "records": 2,
             "bytes": 10, "crc32c": "AAAAAA==", "label_counts": [[0, 2]], "index_temp": "", "index_bytes": 0,
             "index_crc32c": "", "prov_temp": "train-00000-of-00001.tfrecord.prov.x", "prov_bytes": 3,
             "prov_crc32c": "AAAAAA==", "copied": 1, "read": 1, "repaired": 0}
    rows = [["a", "train", "cat", 0, "ab" * 32, 5, 3, 2], ["b", "train", None, None, "cd" * 32, -1, 7, 9]]
    data = pv.done_record(shard, [("b", "corrupt", "x", "train")], rows)
    assert pv.parse_done(data, shard["name"]) == (shard, [["b", "corrupt", "x", "train"]], rows, [])
    # A detection run's shard keeps its box statistics, which the manifest's detection section sums.
    boxes = (("boxes/class/caf\u00e9", 2), ("boxes/written", 3), ("images/with_boxes", 2))
    assert pv.parse_done(pv.done_record(shard, [], rows, boxes), shard["name"])[3] == list(boxes)
    for bad in ((("boxes/written", -1),), (("records", 3),), (("boxes/written", "3"),), ((1, 3),),
                (("boxes/written", 3, 4),)):
        with pytest.raises(pv.ProvenanceError, match="box statistics"):
            pv.parse_done(pv.done_record(shard, [], rows, bad), shard["name"])
    with pytest.raises(pv.ProvenanceError):
        pv.parse_done(data, "train-00001-of-00002.tfrecord")
    for k, v in (("temp", "../../x"), ("records", -1), ("bytes", "10"), ("label_counts", [[0]]),
                 ("prov_temp", "other.prov")):
        with pytest.raises(pv.ProvenanceError):
            pv.parse_done(pv.done_record({**shard, k: v}, [], rows), shard["name"])
    with pytest.raises(pv.ProvenanceError):
        pv.parse_done(data[:-3], shard["name"])


def test_run_ids_made_in_one_second_still_sort_by_start():
    """LATEST never moves back to an older run's version, by run id: ids made
    within one second (small runs, scripts) must sort in the order they were
    made, not by their random part, and never repeat."""
    import re
    from tfrecord_pipelines.transforms.storage import layout
    ids = [layout.new_run_id() for _ in range(200)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"\d{8}-\d{6}-\d{6}-[0-9a-f]{8}", i) for i in ids)  # [:15]: the start to the second
    assert re.fullmatch(r"\d{8}-\d{6}-\d{6}-cleanup-[0-9a-f]{8}", layout.new_run_id("cleanup-"))


def test_versions_beyond_keeps_the_newest_and_never_a_protected_one():
    complete = ["v4", "v3", "v2", "v1"]  # LATEST's history, the newest first
    assert pv.versions_beyond(complete, 2, ("v4",)) == ["v1", "v2"]
    assert pv.versions_beyond(complete, 2, ("v4", "v1")) == ["v2", "v3"]  # LATEST on an old one stays
    assert pv.versions_beyond(complete, 5, ("v4",)) == []
    assert pv.versions_beyond(complete, 1, ("v4",)) == ["v1", "v2", "v3"]
    # The history's order, never the names' (nor any run id a manifest claims).
    assert pv.versions_beyond(["2.0", "v9-forged", "1.0"], 1, ("2.0",)) == ["1.0", "v9-forged"]


def test_only_rejects_decided_by_the_bytes_are_carried():
    from tfrecord_pipelines.transforms.core.records import Reject
    r = rec()
    carried = pv.reject_entry(r, Reject(r.rel, "truncated", "cut", "train"))
    assert carried is not None and (carried.reason, carried.detail, carried.offset) == ("truncated", "cut", -1)
    assert pv.parse_entries(pv.encode_entry(carried), 0, 0, 0) == [carried]
    for reason in ("missing", "unreadable", "not_a_file", "changed", "unknown_label"):
        assert pv.reject_entry(r, Reject(r.rel, reason, "x", "train")) is None
    assert pv.reject_entry(r._replace(stamp=()), Reject(r.rel, "corrupt", "x", "train")) is None
    assert pv.reject_entry(r, Reject(r.rel, "corrupt", "x" * (pv.MAX_DETAIL + 1), "train")) is None


def test_a_run_is_checked_by_one_crc_pass_and_the_names_inside_it():
    """Records back to back in a previous shard, copied whole: their bytes must
    carry the shard's running CRC from the value recorded before the first to
    the one after the last, and each must hold its own file name."""
    buf = io.BytesIO()
    w = RecordWriter(buf)
    recs, pos = [], 0
    for rel in ("cat/1.jpg", "cat/2.jpg", "dog/3.jpg"):
        chunks, length = encode_example({"image/encoded": ("bytes", [os.urandom(200)]),
                                         "image/filename": ("bytes", [rel.encode()])})
        before = w.crc
        crc = w.write(chunks, length)
        recs.append(rec(rel)._replace(prev=pv.PrevCopy(pv.COPY, "s", pos, length + 16, crc, "", before, w.crc)))
        pos += length + 16
    data = buf.getvalue()
    names = [needle(r.rel) for r in recs]
    assert pv.contiguous(tuple(recs)) and not pv.contiguous((recs[0], recs[2]))
    assert pv.run_problem(data, tuple(recs), names) == ""
    assert pv.run_problem(data[recs[1].prev[2]:], tuple(recs[1:]), names[1:]) == ""  # a run not from byte 0
    assert "bytes present" in pv.run_problem(data[:-1], tuple(recs), names)
    for at in (3, 100, len(data) - 1):  # framing, image bytes, the last CRC
        bad = bytearray(data)
        bad[at] ^= 1
        assert "running CRC mismatch" in pv.run_problem(bytes(bad), tuple(recs), names), at
    # A forged provenance that swapped two names (their CRCs chained anew): the names inside say so.
    assert "another file's record" in pv.run_problem(data, tuple(recs), [names[1], names[0], names[2]])
    assert pv.run_problem(data, tuple(recs), [b"", b"", b""]) == ""  # the file-name feature dropped
