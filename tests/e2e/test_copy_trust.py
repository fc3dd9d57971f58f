"""What a run copies without reading its source (transforms/storage/copy_trust.py):
a previous version, or a staged shard in a resume area, edited consistently
(one record's image swapped, its sha256, framing CRCs, provenance, manifest
or done-record recomputed, so every check that reads only the dataset root
passes, `verify --decode` too) is never copied: the records concerned are
read from their sources, and the output is byte-identical to a fresh
conversion. The files a run publishes are pinned again, so the next version
copies as before."""
import hashlib
import io
import json
import os

import google_crc32c
from PIL import Image

from conftest import check_against_source, convert, files_of, image_bytes, make_tree, manifest, settle, write

OPTS = ["--num_shards", "3", "--split", "train=0.75,validation=0.25"]


# ---- a consistent forger -----------------------------------------------------------------------------------------

def framed_records(data: bytes) -> list:
    """The framed records of an uncompressed TFRecord file, in order."""
    out, pos = [], 0
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 8], "little")
        out.append(data[pos:pos + 16 + n])
        pos += 16 + n
    assert pos == len(data)
    return out


def frame(example: bytes) -> bytes:
    from tfrecord_pipelines.transforms.core.tfrecord_io import mask
    head = len(example).to_bytes(8, "little")
    return (head + mask(google_crc32c.value(head)).to_bytes(4, "little") + example
            + mask(google_crc32c.value(example)).to_bytes(4, "little"))


def plant(framed: bytes) -> tuple:
    """The record with another image of the same size and format in it, its
    image/key/sha256 and both framing CRCs recomputed: (framed, its file name,
    the planted image)."""
    import tensorflow as tf
    ex = tf.train.Example.FromString(framed[12:-4])
    f = ex.features.feature
    old = f["image/encoded"].bytes_list.value[0]
    w, h = Image.open(io.BytesIO(old)).size
    planted = image_bytes(w, h, seed=4242)
    assert planted != old
    f["image/encoded"].bytes_list.value[0] = planted
    f["image/key/sha256"].bytes_list.value[0] = hashlib.sha256(planted).hexdigest().encode()
    return frame(ex.SerializeToString(deterministic=True)), f["image/filename"].bytes_list.value[0].decode(), planted


def crc_text(data: bytes) -> str:
    from tfrecord_pipelines.transforms.core.tfrecord_io import crc32c_text
    return crc32c_text(google_crc32c.value(data))


def forge_version(version_dir: str) -> tuple:
    """Swaps the image of the first record of the first non-empty shard and
    recomputes everything the dataset root holds about it: the shard's
    records' framing, the provenance file's offsets, CRCs, running CRCs and
    sha256, the manifest's sizes and CRC32Cs. Returns (shard entry, file name, planted image)."""
    mpath = os.path.join(version_dir, "manifest.json")
    m = json.load(open(mpath))
    split, entry = next((sp, e) for sp, s in m["splits"].items() for e in s["shards"] if e["records"])
    path = os.path.join(version_dir, entry["name"])
    recs = framed_records(open(path, "rb").read())
    recs[0], rel, planted = plant(recs[0])
    data = b"".join(recs)
    with open(path, "wb") as f:
        f.write(data)
    ppath = os.path.join(version_dir, "provenance", entry["name"] + ".jsonl")
    rows = [json.loads(line) for line in open(ppath, "rb").read().splitlines()]
    pos, running, k = 0, 0, 0
    for row in rows:
        if row[3] < 0:  # a carried reject
            continue
        r = recs[k]
        k += 1
        row[3], row[4], row[5] = pos, len(r), int.from_bytes(r[-4:], "little")
        if row[0] == rel:
            row[6] = hashlib.sha256(planted).hexdigest()
        row[13], running = running, google_crc32c.extend(running, r)
        row[14] = running
        pos += len(r)
    prov = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    with open(ppath, "wb") as f:
        f.write(prov)
    m["splits"][split]["bytes"] += len(data) - entry["bytes"]
    for e in m["splits"][split]["shards"]:
        if e["name"] == entry["name"]:
            e["bytes"], e["crc32c"] = len(data), crc_text(data)
    m["incremental"]["provenance"][entry["name"]] = {"bytes": len(prov), "crc32c": crc_text(prov)}
    with open(mpath, "w") as f:
        json.dump(m, f, indent=1)
    return entry, rel, planted


def holds(folder: str, planted: bytes) -> list:
    """The files under `folder` whose bytes contain `planted`."""
    return [n for n, data in files_of(folder).items() if planted in data]


def published(out: str) -> dict:
    """files_of(out) but the rejects a refused run kept for inspection (failed-<run>.rejects.jsonl)."""
    return {n: v for n, v in files_of(out).items() if not n.startswith("failed-")}


def without_provenance(folder: str) -> dict:
    return {n: v for n, v in files_of(folder).items() if not n.startswith("provenance/")}


# ---- a previous version ------------------------------------------------------------------------------------------

def test_a_previous_version_edited_consistently_is_not_copied(tmp_path, capsys):
    import tfrecord_pipelines as tfp
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    expected = make_tree(images, per_class=8)
    settle()
    base = ["--input", images, "--output", root, "--versioned", "--extend_label_map", *OPTS]
    assert convert(*base, "--version", "v1") == 0
    v1 = os.path.join(root, "v1")
    entry, rel, planted = forge_version(v1)
    assert holds(v1, planted) == [entry["name"]]
    tfp.verify(v1, decode=True)  # the forgery is consistent: verify finds nothing wrong (it raises otherwise)
    write(os.path.join(images, "dog", "new.jpg"), image_bytes(20, 14, seed=77))
    expected["dog/new.jpg"] = "dog"
    settle()
    capsys.readouterr()
    assert convert(*base, "--version", "v2") == 0
    got = capsys.readouterr()
    v2 = os.path.join(root, "v2")
    assert holds(v2, planted) == []
    check_against_source(v2, expected, images)  # every record holds its source's bytes, rel's too
    made = manifest(v2)["made"]
    # Its manifest is not the one pinned (the forger had to change a shard's CRC32C there): the options,
    # shards and provenance files it lists are not taken on its word, every record is read from its source.
    assert made["records_of_untrusted_shards"] == len(expected) - 1, made
    assert made["images_read"] == len(expected) and made["records_copied"] == 0, made
    assert "not the files a run on this machine published" in got.out
    full = str(tmp_path / "full")
    assert convert("--input", images, "--output", full, *OPTS) == 0
    assert without_provenance(v2) == files_of(full)
    # v2 was published here: pinned, so the next version copies every record of it.
    write(os.path.join(images, "cat", "new.jpg"), image_bytes(18, 13, seed=78))
    settle()
    assert convert(*base, "--version", "v3") == 0
    made = manifest(os.path.join(root, "v3"))["made"]
    assert made["records_of_untrusted_shards"] == 0 and made["images_read"] == 1, made


def test_a_previous_shard_replaced_behind_an_untouched_manifest_is_read_the_rest_copied(tmp_path, capsys):
    """A shard replaced by another file that matches everything the manifest
    says (here its own bytes: what a forger who kept its size and CRC32C would
    leave): that shard's records are read from their sources, the rest copied."""
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    expected = make_tree(images, per_class=8)
    settle()
    base = ["--input", images, "--output", root, "--versioned", "--extend_label_map", *OPTS]
    assert convert(*base, "--version", "v1") == 0
    entry = next(e for s in manifest(os.path.join(root, "v1"))["splits"].values() for e in s["shards"] if e["records"])
    path = os.path.join(root, "v1", entry["name"])
    write(path + ".new", open(path, "rb").read())
    os.replace(path + ".new", path)
    write(os.path.join(images, "dog", "new.jpg"), image_bytes(20, 14, seed=77))
    expected["dog/new.jpg"] = "dog"
    settle()
    capsys.readouterr()
    assert convert(*base, "--version", "v2") == 0
    assert "not the files a run on this machine published" in capsys.readouterr().out
    v2 = os.path.join(root, "v2")
    made = manifest(v2)["made"]
    assert made["records_of_untrusted_shards"] == entry["records"], made
    assert made["images_read"] == entry["records"] + 1, made
    assert made["records_copied"] == len(expected) - entry["records"] - 1, made
    check_against_source(v2, expected, images)
    full = str(tmp_path / "full")
    assert convert("--input", images, "--output", full, *OPTS) == 0
    assert without_provenance(v2) == files_of(full)


def test_a_previous_version_copied_elsewhere_is_read_from_the_sources_once(tmp_path, capsys):
    """A root copied (cp -a, a restore, another machine) holds files no run
    here pinned: its records are read from their sources, once."""
    import shutil
    images, root = str(tmp_path / "images"), str(tmp_path / "ds")
    expected = make_tree(images, per_class=6)
    settle()
    assert convert("--input", images, "--output", root, "--versioned", "--version", "v1", *OPTS) == 0
    moved = str(tmp_path / "moved")
    shutil.copytree(root, moved)
    shutil.rmtree(root)
    capsys.readouterr()
    assert convert("--input", images, "--output", moved, "--versioned", "--version", "v2",
                   "--republish_unchanged", *OPTS) == 0
    made = manifest(os.path.join(moved, "v2"))["made"]
    assert made["records_of_untrusted_shards"] == len(expected) and made["records_copied"] == 0, made
    assert "not the files a run on this machine published" in capsys.readouterr().out
    check_against_source(os.path.join(moved, "v2"), expected, images)
    assert without_provenance(os.path.join(moved, "v2")) == without_provenance(os.path.join(moved, "v1"))
    assert convert("--input", images, "--output", moved, "--versioned", "--version", "v3",
                   "--republish_unchanged", *OPTS) == 0
    made = manifest(os.path.join(moved, "v3"))["made"]
    assert made["records_copied"] == len(expected) and made["records_of_untrusted_shards"] == 0, made


# ---- a staged shard in a resume area -----------------------------------------------------------------------------

def test_a_staged_shard_edited_consistently_with_its_done_record_is_written_again(tmp_path, capsys, caplog):
    from tfrecord_pipelines.transforms.core import quality
    images, out = str(tmp_path / "images"), str(tmp_path / "out")
    expected = make_tree(images, per_class=8)
    write(os.path.join(images, "cat", "page.jpg"), b"<html>no</html>")
    args = ["--input", images, "--output", out, "--num_shards", "4"]
    # Refused for its reject: nothing published, its complete shards wait in the resume area.
    assert convert(*args, "--max_reject_fraction", "0") == 1
    area = next(os.path.join(out, d) for d in os.listdir(out) if d.startswith(".tfrecords-resume-"))
    dones = sorted(n for n in os.listdir(area) if n.endswith(".done"))
    assert len(dones) == 4, dones
    done_path = os.path.join(area, dones[0])
    d = json.load(open(done_path))
    shard = d["shard"]
    temp = os.path.join(area, shard["temp"])
    recs = framed_records(open(temp, "rb").read())
    recs[0], rel, planted = plant(recs[0])
    data = b"".join(recs)
    with open(temp, "wb") as f:
        f.write(data)
    shard["bytes"], shard["crc32c"] = len(data), crc_text(data)
    fields = quality.Row._fields  # the quality checks' rows hold each record's sha256: made to match too
    at = d["rows"][fields.index("rel")].index(rel)
    d["rows"][fields.index("sha256")][at] = hashlib.sha256(planted).hexdigest()
    with open(done_path, "w") as f:
        json.dump(d, f, separators=(",", ":"))
    capsys.readouterr()
    assert convert(*args, "--max_reject_fraction", "0.5") == 0
    got = capsys.readouterr()
    assert "resumed: 3 shards" in got.out
    assert "is not the done-record a run on this machine wrote" in caplog.text
    assert manifest(out)["made"]["shards_resumed"] == 3
    assert holds(out, planted) == []
    check_against_source(out, expected, images)
    clean = str(tmp_path / "clean")
    assert convert(*args, "--output", clean, "--max_reject_fraction", "0.5") == 0
    assert published(out) == published(clean)


def test_a_staged_done_record_edited_alone_or_a_staged_file_replaced_is_not_resumed(tmp_path, capsys, caplog):
    """A done-record is the shard's rejects and counts: one edited (its reject
    taken out), its staged files untouched, is not kept. Nor is a staged shard
    replaced by another file with the same bytes (what a forger who also kept
    its CRC32C would leave), its done-record untouched."""
    images, out = str(tmp_path / "images"), str(tmp_path / "out")
    expected = make_tree(images, per_class=8)
    write(os.path.join(images, "cat", "page.jpg"), b"<html>no</html>")
    args = ["--input", images, "--output", out, "--num_shards", "4"]
    assert convert(*args, "--max_reject_fraction", "0") == 1
    area = next(os.path.join(out, d) for d in os.listdir(out) if d.startswith(".tfrecords-resume-"))
    dones = {n: json.load(open(os.path.join(area, n))) for n in sorted(os.listdir(area)) if n.endswith(".done")}
    with_reject = [n for n, d in dones.items() if d["rejects"]]
    assert len(with_reject) == 1
    d = dones[with_reject[0]]
    d["rejects"] = []
    with open(os.path.join(area, with_reject[0]), "w") as f:
        json.dump(d, f, separators=(",", ":"))
    other = next(d for n, d in dones.items() if n != with_reject[0])
    temp = os.path.join(area, other["shard"]["temp"])
    data = open(temp, "rb").read()
    write(temp + ".copy", data)
    os.replace(temp + ".copy", temp)  # the same bytes, size and CRC32C; another file
    capsys.readouterr()
    assert convert(*args, "--max_reject_fraction", "0.5") == 0
    got = capsys.readouterr()
    assert "resumed: 2 shards" in got.out
    assert "is not the done-record a run on this machine wrote" in caplog.text
    assert "is not the file a run on this machine wrote" in caplog.text
    assert manifest(out)["rejects_by_reason"] == {"not_an_image": 1}
    check_against_source(out, expected, images)
