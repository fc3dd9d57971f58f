"""The data-quality logic without Beam (transforms/core/quality.py): the
perceptual hash on generated variants of generated photos, measured (run with
-s to see the distributions), band candidates, duplicate grouping, class
balance, histograms and stratified splits."""
from __future__ import annotations

import collections
import io
import itertools
import random

import numpy as np
import pytest
from PIL import Image

from photos import jpeg, photo
from tfrecord_pipelines.transforms.core import quality
from tfrecord_pipelines.transforms.core.images import ImagePolicy, probe_image
from tfrecord_pipelines.transforms.core.quality import Row


def variants(im: Image.Image) -> dict:
    """{name: JPEG bytes} of the edits a near-duplicate check meets."""
    w, h = im.size
    return {"resize 50%": jpeg(im.resize((w // 2, h // 2), Image.LANCZOS)),
            "resize 75%": jpeg(im.resize((w * 3 // 4, h * 3 // 4), Image.LANCZOS)),
            "recompress q60": jpeg(im, 60),
            "crop 2.5%/side": jpeg(im.crop((w // 40, h // 40, w - w // 40, h - h // 40))),
            "crop 5%/side": jpeg(im.crop((w // 20, h // 20, w - w // 20, h - h // 20))),
            "mirror": jpeg(im.transpose(Image.FLIP_LEFT_RIGHT))}


POLICY = ImagePolicy(perceptual_hash=True)


def phash(data: bytes) -> int:
    """The hash as a conversion computes it: from full validation's decode."""
    return probe_image(data, POLICY).phash


def found(a: int, b: int, max_distance: int = quality.DEFAULT_MAX_DISTANCE) -> bool:
    """Whether the check reports the pair: within the distance and sharing a band."""
    return quality.hamming(a, b) <= max_distance and quality.first_shared_band(a, b) is not None


@pytest.fixture(scope="module")
def measured():
    photos = [photo(s) for s in range(60)]
    base = [phash(jpeg(p)) for p in photos]
    dist, hit = collections.defaultdict(list), collections.defaultdict(list)
    for p, h0 in zip(photos, base):
        for name, data in variants(p).items():
            h1 = phash(data)
            dist[name].append(quality.hamming(h0, h1))
            hit[name].append(found(h0, h1))
    more = [phash(jpeg(photo(s))) for s in range(60, 200)]
    distinct = [quality.hamming(a, b) for a, b in itertools.combinations(base + more, 2)]
    print(f"\nHamming distance to the original (64-bit {quality.HASH_NAME}), 60 photos; found = within "
          f"{quality.DEFAULT_MAX_DISTANCE} and sharing a band")
    for name in dist:
        d = np.array(dist[name])
        print(f"  {name:16s} median {np.median(d):4.1f}  p90 {np.percentile(d, 90):4.1f}  max {d.max():2d}  "
              f"found {np.mean(hit[name]):.1%}")
    d = np.array(distinct)
    print(f"  distinct photos: {len(d)} pairs, min {d.min()}, median {np.median(d):.0f}, "
          f"within {quality.DEFAULT_MAX_DISTANCE}: {(d <= quality.DEFAULT_MAX_DISTANCE).sum()}")
    return dist, hit, d


def test_resized_and_recompressed_copies_are_found(measured):
    _, hit, _ = measured
    for name in ("resize 50%", "resize 75%", "recompress q60"):
        assert all(hit[name]), name
    assert np.mean(hit["crop 2.5%/side"]) >= 0.85


def test_mirror_images_and_distinct_photos_do_not_match(measured):
    dist, hit, distinct = measured
    assert not any(hit["mirror"])  # by design: a mirror image is an augmentation, not a copy
    assert min(dist["mirror"]) > quality.DEFAULT_MAX_DISTANCE
    # 19,900 pairs of distinct photos: no false positive at the default threshold
    assert (distinct <= quality.DEFAULT_MAX_DISTANCE).sum() == 0
    assert np.median(distinct) >= 28  # ~32 for independent bits


def test_hash_is_computed_from_every_decodable_mode():
    modes = {"L": "PNG", "RGBA": "PNG", "P": "PNG", "RGB": "PNG", "I;16": "PNG", "CMYK": "JPEG"}
    rgb = photo(3, 64, 48)
    hashes = {}
    for mode, fmt in modes.items():
        im = rgb.convert("L").convert(mode) if mode == "I;16" else rgb.convert(mode)
        buf = io.BytesIO()
        im.save(buf, fmt)
        hashes[mode] = probe_image(buf.getvalue(), POLICY).phash
        assert 0 <= hashes[mode] < 2 ** 64, mode
    # Colour modes of the same picture hash alike (the hash is of grey levels).
    assert quality.hamming(hashes["RGB"], hashes["RGBA"]) <= 2
    assert quality.hamming(hashes["RGB"], hashes["L"]) <= 4


def test_a_png_and_a_jpeg_of_one_photo_hash_alike_at_any_size():
    # A JPEG is hashed from its 1/8 decode, a PNG from its full decode box-reduced:
    # the same picture must still land within the threshold, small or large.
    for size in ((64, 48), (320, 240), (1280, 960)):
        for s in range(3):
            im = photo(s, *size)
            buf = io.BytesIO()
            im.save(buf, "PNG")
            got = quality.hamming(phash(buf.getvalue()), phash(jpeg(im)))
            assert got <= 4, (size, s, got)


def test_the_folded_resize_is_pillows_bilinear_resize_then_the_dct():
    rng = np.random.default_rng(0)
    for w, h in ((63, 47), (47, 63), (40, 30), (127, 64), (20, 15), (1, 9), (2, 500)):
        im = Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
        grey = np.asarray(im, dtype=np.float64)
        folded = quality._axis(h) @ grey @ quality._axis(w).T
        # Resized in float ("F"), so Pillow does not round to whole grey levels on the way.
        small = np.asarray(im.convert("F").resize((32, 32), Image.BILINEAR), dtype=np.float64)
        explicit = quality._DCT8 @ small @ quality._DCT8.T
        assert np.abs(folded - explicit).max() < 0.05, (w, h)
        assert np.abs(explicit).max() > 100


def test_no_hash_without_a_decode():
    assert probe_image(jpeg(photo(1)), ImagePolicy(perceptual_hash=False)).phash == -1
    from tfrecord_pipelines.transforms.core.images import Validation
    header = ImagePolicy(validation=Validation.HEADER, perceptual_hash=True)
    assert probe_image(jpeg(photo(1)), header).phash == -1


def test_hashes_of_a_batch_are_those_of_one_image_at_a_time():
    """The stages that decode hash a batch of records at once (quality.hashes);
    each hash is the one perceptual_hash gives that image alone."""
    big = photo(7, 900, 700)  # box-reduced first
    ims = [Image.open(io.BytesIO(jpeg(photo(s)))) for s in range(4)] + [
        big, big.convert("L"), big.convert("RGBA"), big.convert("P"), Image.new("L", (1, 1), 9),
        photo(8).resize((40, 30)).convert("LA")]
    want = [quality.perceptual_hash(im) for im in ims]
    assert len(set(want)) >= len(ims) - 2  # distinct images, distinct hashes
    inputs = [quality.hash_input(im) for im in ims]
    assert quality.hashes(inputs[:3] + [None] + inputs[3:]) == want[:3] + [-1] + want[3:]
    assert quality.hashes([]) == [] and quality.hashes([None, None]) == [-1, -1]
    # As a stage asks for it: the decode's hash input left in the probe's answer, hashed later.
    data = jpeg(photo(5))
    later = probe_image(data, ImagePolicy(perceptual_hash=True, hash_later=True))
    assert later.phash == -1 and quality.hashes([later.hash_input]) == [phash(data)]


def test_pairs_within_fewer_bits_than_bands_always_share_a_band():
    rng = random.Random(0)
    for _ in range(2000):
        a = rng.getrandbits(64)
        b = a
        for bit in rng.sample(range(64), rng.randint(0, quality.BANDS - 1)):
            b ^= 1 << bit
        assert quality.first_shared_band(a, b) is not None
    assert sum(quality.BAND_WIDTHS) == quality.BITS


def row(rel, split="train", label="cat", label_id=0, sha="s", phash=0, w=10, h=10):
    return Row(rel, split, label, label_id, sha, phash, w, h)


def test_band_pairs_reports_each_pair_once_and_skips_exact_copies():
    a = row("a", phash=0b1011 << 60, sha="1")
    b = row("b", phash=(0b1011 << 60) ^ 0b111, sha="2")       # 3 bits apart: shares bands 0..4
    c = row("c", phash=(0b1011 << 60) ^ 0b111, sha="2")       # same content as b: exact duplicate
    far = row("far", phash=(0b1011 << 60) ^ ((1 << 40) - 1), sha="3")
    members = quality.Columns.of([far, c, b, a])
    got = []
    for band in range(quality.BANDS):
        pairs, across, skipped, examples = quality.near_summary(members, band, 8)
        assert (pairs, across, skipped) == (len(examples), 0, 0)
        got += [(d, x.rel, y.rel) for d, x, y in examples]
    assert sorted(got) == [(3, "a", "b"), (3, "a", "c")]


def brute_force_pairs(rows, max_distance):
    """Every pair within max_distance that does not share its content, once."""
    return sorted((quality.hamming(a.phash, b.phash), a.rel, b.rel)
                  for a, b in itertools.combinations(sorted(rows), 2)
                  if quality.hamming(a.phash, b.phash) <= max_distance and a.sha256 != b.sha256
                  and quality.first_shared_band(a.phash, b.phash) is not None)


def test_near_summary_finds_what_comparing_every_pair_finds(monkeypatch):
    # Clusters of hashes a few bits apart (many share band values), some exact copies, two splits.
    rng = random.Random(1)
    rows = []
    for cluster in range(12):
        base = rng.getrandbits(64)
        for k in range(rng.randint(1, 40)):
            h = base
            for bit in rng.sample(range(64), rng.randint(0, 12)):
                h ^= 1 << bit
            split = "validation" if k % 5 == 4 else "train"
            rows.append(row(f"{split}/{cluster}/{k}.jpg", split, sha=f"{cluster}-{k // 7 if k % 7 else k}", phash=h))
    rng.shuffle(rows)
    cols = quality.Columns.of(rows)
    want = brute_force_pairs(rows, 8)
    assert len(want) > 100
    monkeypatch.setattr(quality, "MAX_EXAMPLES", 10**6)
    monkeypatch.setattr(quality, "PAIR_CHUNK", 97)  # many chunks
    parts = [quality.near_summary(cols, band, 8) for band in range(quality.BANDS)]
    got = quality.NearSummary.merge(parts)
    assert sorted((d, a.rel, b.rel) for d, a, b in got[3]) == want
    assert got[0] == len(want)
    assert got[1] == sum(a.split != b.split for _, a, b in got[3])
    monkeypatch.setattr(quality, "MAX_EXAMPLES", 25)  # the first 25 in the manifest's order, whatever the chunks
    capped = quality.NearSummary.merge([quality.near_summary(cols, band, 8) for band in range(quality.BANDS)])
    assert capped[:3] == got[:3]
    assert capped[3] == sorted(got[3], key=quality._pair_order)[:25]
    monkeypatch.setattr(quality, "MAX_BUCKET", 3)  # buckets above it are counted as skipped, not compared
    assert sum(quality.near_summary(cols, band, 8)[2] for band in range(quality.BANDS)) > 0


def test_many_exact_copies_in_one_bucket_are_never_held_as_pairs():
    """6,000 copies of one image (a placeholder): 18 M candidate pairs within the
    distance, all exact copies, left to the duplicate check. Filtered chunk by
    chunk, they are never held: holding them took 923 MB."""
    import tracemalloc
    cols = quality.Columns.of([row(f"c/{i:05d}.jpg", sha="same", phash=12345) for i in range(6000)])
    tracemalloc.start()  # numpy reports its arrays to tracemalloc
    try:
        got = quality.near_summary(cols, 0, 8)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got[:3] == (0, 0, 0) and len(got[3]) == 0
    assert peak < 150e6, f"{peak / 1e6:.0f} MB"


def test_columns_and_vectorised_figures_match_the_row_functions():
    rows = [row(f"t/{i}", label_id=i % 3, w=w, h=h) for i, (w, h) in
            enumerate([(500, 375), (375, 500), (31, 31), (32, 32), (10**6, 1), (64, 48), (1, 10**6)])]
    cols = quality.Columns.of(rows)
    assert cols.row(3) == rows[3] and type(cols.row(3)) is Row
    assert quality.Columns.concat([cols.take([0, 1]), cols.take([]), cols.take([2])]) == cols.take([0, 1, 2])
    acc = quality.empty_sizes()
    for r in rows:
        quality.add_sizes(acc, r.width, r.height)
    assert quality.size_counts(cols.width, cols.height) == acc
    dup = quality.Columns.of([row("t/b", sha="x"), row("t/a", sha="x"), row("v/c", "validation", sha="x"),
                              row("t/d", sha="y")])
    out = quality.DupSummary.output(quality.dup_summary(dup), "keep_all")
    assert (out["groups"], out["extra_copies"], out["across_splits"]) == (1, 2, 1)
    assert [f["path"] for f in out["examples"][0]["files"]] == ["t/a", "t/b", "v/c"]
    assert quality.dup_summary(cols)[:2] == (1, 6)  # all seven share sha "s"
    assert quality.dup_summary(quality.Columns.of([row("a", sha="1"), row("b", sha="2")])) == \
        quality.DupSummary.empty()


def test_a_group_of_many_copies_lists_the_first_files_and_counts_all():
    n = quality.MAX_GROUP_FILES + 150
    copies = [row(f"t/{i:04d}.jpg", sha="same") for i in reversed(range(n))]
    g = quality.dup_group("same", copies)
    assert g["count"] == n and [f["path"] for f in g["files"]] == [f"t/{i:04d}.jpg" for i in range(quality.MAX_GROUP_FILES)]
    out = quality.DupSummary.output(quality.dup_summary(quality.Columns.of(copies)), "keep_all")
    assert (out["groups"], out["extra_copies"]) == (1, n - 1)
    assert len(out["examples"][0]["files"]) == quality.MAX_GROUP_FILES


def test_duplicates_across_blocks_match_one_block_and_survive_hash_collisions(monkeypatch):
    rng = random.Random(3)
    rows = [row(f"t/{i:05d}.jpg", rng.choice(["train", "validation"]), rng.choice(["cat", "dog"]),
                sha=str(rng.randrange(400))) for i in range(3 * quality.MAX_GROUP_FILES + 500)]
    rng.shuffle(rows)
    blocks = [quality.Columns.of(rows[i:i + 97]) for i in range(0, len(rows), 97)]
    whole = quality.dup_summary(quality.Columns.of(rows))
    assert whole[0] > 0 and quality.dup_summary_of(lambda: iter(blocks)) == whole
    many = [row(f"t/{i:04d}.jpg", sha="same") for i in reversed(range(5 * quality.MAX_GROUP_FILES))]
    many.append(row("alone.jpg", sha="other"))
    monkeypatch.setattr(quality, "_sha_hashes", lambda cols: np.zeros(len(cols.sha256), np.int64))
    out = quality.DupSummary.output(quality.dup_summary_of(
        lambda: (quality.Columns.of(many[i:i + 50]) for i in range(0, len(many), 50))), "keep_all")
    assert (out["groups"], out["extra_copies"]) == (1, len(many) - 2)  # "alone" collides, but is no group
    assert [f["path"] for f in out["examples"][0]["files"]] == \
        [f"t/{i:04d}.jpg" for i in range(quality.MAX_GROUP_FILES)]


def test_duplicate_groups_and_summary():
    g1 = quality.dup_group("s1", [row("v/x.jpg", "validation", "dog", 1), row("t/x.jpg", "train", "cat", 0)])
    assert g1["across_splits"] and g1["conflicting_labels"]
    assert [f["path"] for f in g1["files"]] == ["t/x.jpg", "v/x.jpg"]
    g2 = quality.dup_group("s2", [row("t/b.jpg"), row("t/a.jpg"), row("t/c.jpg")])
    assert not g2["across_splits"] and not g2["conflicting_labels"]
    acc = quality.DupSummary.merge([quality.DupSummary.add(quality.DupSummary.empty(), g1),
                                    quality.DupSummary.add(quality.DupSummary.empty(), g2)])
    out = quality.DupSummary.output(acc, "keep_all")
    assert (out["groups"], out["extra_copies"], out["within_split"], out["across_splits"],
            out["conflicting_labels"]) == (2, 3, 1, 1, 1)
    assert [e["sha256"] for e in out["examples"]] == ["s2", "s1"]  # by first path: t/a.jpg < t/x.jpg
    assert quality.keeper([row("t/b.jpg"), row("t/a.jpg")]) == "t/a.jpg"


def test_examples_are_capped_but_everything_is_counted(monkeypatch):
    monkeypatch.setattr(quality, "MAX_EXAMPLES", 3)
    acc = quality.DupSummary.empty()
    for i in reversed(range(10)):
        acc = quality.DupSummary.add(acc, quality.dup_group(f"s{i}", [row(f"{i}a"), row(f"{i}b")]))
    out = quality.DupSummary.output(acc, "keep_all")
    assert out["groups"] == 10 and out["extra_copies"] == 10
    assert [e["files"][0]["path"] for e in out["examples"]] == ["0a", "1a", "2a"]


def test_balance_flags_classes_missing_from_train_and_rare_ones():
    counts = {("train", "cat"): 50, ("train", "dog"): 3, ("validation", "cat"): 5, ("validation", "owl"): 2}
    b = quality.balance(counts, min_count=4)
    assert b["per_split"] == {"train": {"cat": 50, "dog": 3}, "validation": {"cat": 5, "owl": 2}}
    assert b["missing_from_train"] == {"validation": ["owl"]}
    assert b["below_min"] == {"train": ["dog", "owl"], "validation": ["dog", "owl"]}
    assert quality.balance({("all", "x"): 1}, 1)["missing_from_train"] == {}  # no train split: nothing to compare


def test_size_histograms_have_fixed_edges_and_count_everything():
    acc = quality.empty_sizes()
    for w, h in [(500, 375), (375, 500), (31, 31), (32, 32), (10**6, 1)]:
        quality.add_sizes(acc, w, h)
    out = quality.sizes_output(quality.merge_sizes([acc, quality.empty_sizes()]))
    for key in ("width", "height", "aspect"):
        assert len(out[key]["edges"]) == len(out[key]["counts"]) + 1
        assert sum(out[key]["counts"]) == 5
    assert out["width"]["counts"][0] == 1 and out["width"]["counts"][1] == 1  # 31 < 32 <= 32
    assert out["width"]["counts"][-1] == 1                                   # 10**6: the last bin


def test_stratified_split_gives_each_class_its_fractions_and_moves_few_when_it_grows():
    ratios = (("train", 0.8), ("validation", 0.2))

    def assign(rels):
        cuts = quality.stratified_cuts([quality.unit_hash(r, "") for r in rels], ratios)
        return {r: quality.stratified_split(quality.unit_hash(r, ""), ratios, cuts) for r in rels}

    for n in (1, 2, 5, 10, 37, 1000):
        got = collections.Counter(assign([f"c/{i}.jpg" for i in range(n)]).values())
        assert got["validation"] == round(0.2 * n), (n, got)
    before = assign([f"c/{i}.jpg" for i in range(1000)])
    after = assign([f"c/{i}.jpg" for i in range(1100)])
    moved = sum(before[r] != after[r] for r in before)
    print(f"\nstratified 80/20, a class grown from 1,000 to 1,100 images: {moved} of the 1,000 changed split")
    assert moved <= 20
    assert assign([f"c/{i}.jpg" for i in range(1000)]) == before  # deterministic


def test_near_summary_counts_every_pair_and_lists_cross_split_ones_first(monkeypatch):
    monkeypatch.setattr(quality, "MAX_EXAMPLES", 2)
    acc = quality.NearSummary.empty()
    for i in range(5):
        acc = quality.NearSummary.add(acc, (i, row(f"t/{i}"), row(f"t/{i}b")))
    acc = quality.NearSummary.merge([acc, quality.NearSummary.add(
        quality.NearSummary.empty(), (7, row("t/x"), row("v/x", split="validation")))])
    acc = quality.NearSummary.skip(acc, 30000)
    out = quality.NearSummary.output(acc, 8)
    assert (out["pairs"], out["across_splits"], out["skipped_records"]) == (6, 1, 30000)
    assert [(e["distance"], e["a"]["path"], e["b"]["path"]) for e in out["examples"]] == [
        (7, "t/x", "v/x"), (0, "t/0", "t/0b")]
    assert set(out["examples"][0]["a"]) == {"path", "split", "label", "sha256"}
