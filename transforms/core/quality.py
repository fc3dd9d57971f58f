"""Data-quality checks, as pure functions: exact duplicates (same sha256),
near duplicates (a perceptual hash within a Hamming distance), class balance
and split health, image-size histograms; and stratified ratio splits.

The perceptual hash is computed from the small decode full validation
already does (a JPEG at 1/8 scale, transforms/core/images.py), so it costs a
resize of a ~60x45 image and a 32x32 DCT (~40 us), not a decode. It is the
classic DCT hash ("pHash"): grey levels at 32x32, 2-D DCT, the 8x8 lowest
frequencies compared with their median: 64 bits. Measured choices (README,
"Data-quality checks"; tests/unit/test_quality.py prints the distributions):
resizing and re-compressing keep the hash within a few bits, a small crop
within ~10, a mirror image and distinct photos far apart.

Near-duplicate candidates are found without comparing all pairs: the hash is
cut into BANDS bands of 10-11 bits and only records sharing a band value are
compared (locality-sensitive hashing), with numpy, a block of the distance
matrix at a time. A pair within distance < BANDS always shares a band
(pigeonhole); a pair at a larger distance up to the threshold is found when
its differing bits leave one band whole (for 8 random bits, 89% of the time;
README gives the measured recall on variants).
"""
from __future__ import annotations

import bisect
import hashlib
from typing import Iterable, NamedTuple, Optional

import numpy as np
from PIL import Image

HASH_NAME = "dct64"
BITS = 64
BAND_WIDTHS = (11, 11, 11, 11, 10, 10)  # bits of each band, high bits first
BANDS = len(BAND_WIDTHS)
DEFAULT_MAX_DISTANCE = 8
MAX_EXAMPLES = 1000      # groups or pairs listed in the manifest; all are counted
MAX_BUCKET = 20000       # members of one band bucket compared pairwise (flat images can share one hash)
TRAIN = "train"

_SIZE = 32
_k = np.arange(_SIZE)
# Orthonormal DCT-II matrix: dct(x) = D @ x, so the 2-D DCT is D @ X @ D.T.
_DCT = (np.sqrt(2.0 / _SIZE) * np.cos(np.pi * (2 * _k[None, :] + 1) * _k[:, None] / (2 * _SIZE))).astype(np.float32)
_DCT[0] /= np.sqrt(2.0)
_DCT8 = np.ascontiguousarray(_DCT[:8])


def perceptual_hash(im: Image.Image) -> int:
    """The 64-bit DCT hash of a decoded image (any mode, any size)."""
    if im.mode not in ("L", "RGB"):
        im = im.convert("RGBA").convert("RGB") if "A" in im.mode or im.mode == "P" else im.convert("RGB")
    grey = np.asarray(im.convert("L").resize((_SIZE, _SIZE), Image.BILINEAR), dtype=np.float32)
    low = (_DCT8 @ grey @ _DCT8.T).ravel()
    mid = np.partition(low, (31, 32))[31:33].mean()  # the median, without np.median's overhead
    return int.from_bytes(np.packbits(low > mid).tobytes(), "big")


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def _band_shifts() -> list:
    out, used = [], 0
    for w in BAND_WIDTHS:
        used += w
        out.append((BITS - used, (1 << w) - 1))
    return out


_SHIFTS = _band_shifts()


def bands(h: int) -> list:
    """[(band index, band value)] of a hash, high bits first."""
    return [(i, (h >> shift) & mask) for i, (shift, mask) in enumerate(_SHIFTS)]


def band_value(h: int, band: int) -> int:
    shift, mask = _SHIFTS[band]
    return (h >> shift) & mask


def first_shared_band(a: int, b: int) -> Optional[int]:
    """The lowest band where two hashes agree: a pair is reported from that
    band's bucket only, so it is reported once."""
    for (i, va), (_, vb) in zip(bands(a), bands(b)):
        if va == vb:
            return i
    return None


class Row(NamedTuple):
    """What the checks need of one written record (emitted by the writer)."""
    rel: str
    split: str
    label: Optional[str]      # the label as found (text), None when unlabelled
    label_id: Optional[int]   # class id (class labels only: balance is about classes)
    sha256: str               # of the stored bytes
    phash: int                # perceptual_hash, -1 when the image was not decoded
    width: int
    height: int


def row_file(r) -> dict:
    return {"path": r.rel, "split": r.split, "label": r.label}


# ---- exact duplicates ---------------------------------------------------------------------------------------------


def keeper(files: Iterable) -> str:
    """The copy keep_one keeps: the smallest relative path (code-point
    order), the same on every runner. With split folders that is the train
    copy (train/ < validation/)."""
    return min(f.rel for f in files)


def dup_group(sha: str, files: Iterable) -> dict:
    """One manifest example for the files sharing `sha` (>= 2 of them)."""
    files = sorted(files, key=lambda f: f.rel)
    return {"sha256": sha,
            "across_splits": len({f.split for f in files}) > 1,
            "conflicting_labels": len({f.label for f in files}) > 1,
            "files": [row_file(f) for f in files]}


class DupSummary:
    """Counts every duplicate group; lists MAX_EXAMPLES of them, smallest
    first path first (an order that does not depend on the runner)."""

    @staticmethod
    def empty() -> tuple:
        return (0, 0, 0, 0, 0, [])

    @staticmethod
    def add(acc: tuple, g: dict) -> tuple:
        groups, extra, within, across, conflict, ex = acc
        ex.append(g)
        ex = _capped(ex, _group_order, lazy=True)
        return (groups + 1, extra + len(g["files"]) - 1, within + (not g["across_splits"]),
                across + g["across_splits"], conflict + g["conflicting_labels"], ex)

    @staticmethod
    def merge(accs: Iterable[tuple]) -> tuple:
        accs = list(accs)
        counts = [sum(a[i] for a in accs) for i in range(5)]
        return (*counts, _capped([e for a in accs for e in a[5]], _group_order, lazy=True))

    @staticmethod
    def output(acc: tuple, policy: str) -> dict:
        groups, extra, within, across, conflict, ex = acc
        return {"policy": policy, "groups": groups, "extra_copies": extra, "within_split": within,
                "across_splits": across, "conflicting_labels": conflict, "examples": _capped(ex, _group_order)}


def _group_order(g: dict) -> tuple:
    return (g["files"][0]["path"], g["sha256"])


def _capped(items: list, key, lazy: bool = False) -> list:
    """The first MAX_EXAMPLES items in `key` order; `lazy` lets the list grow
    to twice that before sorting, so adding one item is not a sort."""
    if lazy and len(items) <= 2 * MAX_EXAMPLES:
        return items
    return sorted(items, key=key)[:MAX_EXAMPLES]


# ---- near duplicates ----------------------------------------------------------------------------------------------


def band_pairs(band: int, members: list, max_distance: int) -> list:
    """Pairs (distance, a, b) within max_distance among the Rows sharing one
    band value, reported only from their first shared band; files with the
    same content are exact duplicates, reported as such. Returns
    (pairs, compared) where compared is False when the bucket was too large
    to compare pairwise (see MAX_BUCKET)."""
    members = sorted(members, key=lambda r: r.rel)
    if len(members) > MAX_BUCKET:
        return [], False
    hashes = np.array([r.phash for r in members], dtype=np.uint64)
    # The bands before this one: a pair sharing one of them is reported from there.
    earlier = np.stack([(hashes >> np.uint64(shift)) & np.uint64(mask) for shift, mask in _SHIFTS[:band]], axis=1) \
        if band else None
    out = []
    for start in range(0, len(members), 256):  # 256 rows of the distance matrix at a time
        block = np.bitwise_count(hashes[start:start + 256, None] ^ hashes[None, :])
        ii, jj = np.nonzero(block <= max_distance)
        ii = ii + start
        keep = jj > ii
        ii, jj = ii[keep], jj[keep]
        if earlier is not None and len(ii):
            keep = ~(earlier[ii] == earlier[jj]).any(axis=1)
            ii, jj = ii[keep], jj[keep]
        for i, j, d in zip(ii.tolist(), jj.tolist(), block[ii - start, jj].tolist()):
            a, b = members[i], members[j]
            if a.sha256 != b.sha256:
                out.append((d, a, b))
    return out, True


def pair_entry(d: int, a, b) -> dict:
    side = lambda r: {**row_file(r), "sha256": r.sha256}  # noqa: E731
    return {"distance": d, "a": side(a), "b": side(b)}


class NearSummary:
    """Counts every near-duplicate pair; keeps MAX_EXAMPLES of them as
    (distance, a, b) Rows, cross-split pairs first, then the closest (the
    manifest's entries are built for those only)."""

    @staticmethod
    def empty() -> tuple:
        return (0, 0, 0, [])

    @staticmethod
    def add(acc: tuple, pair: tuple) -> tuple:
        pairs, across, skipped, ex = acc
        ex.append(pair)
        return (pairs + 1, across + (pair[1].split != pair[2].split), skipped, _capped(ex, _pair_order, lazy=True))

    @staticmethod
    def skip(acc: tuple, records: int) -> tuple:
        """A band bucket too large to compare (see MAX_BUCKET)."""
        pairs, across, skipped, ex = acc
        return (pairs, across, skipped + records, ex)

    @staticmethod
    def merge(accs: Iterable[tuple]) -> tuple:
        accs = list(accs)
        return (*[sum(a[i] for a in accs) for i in range(3)],
                _capped([e for a in accs for e in a[3]], _pair_order, lazy=True))

    @staticmethod
    def output(acc: tuple, max_distance: int) -> dict:
        pairs, across, skipped, ex = acc
        return {"hash": HASH_NAME, "bits": BITS, "bands": BANDS, "max_distance": max_distance, "pairs": pairs,
                "across_splits": across, "skipped_records": skipped,
                "examples": [pair_entry(*p) for p in _capped(ex, _pair_order)]}


def _pair_order(p: tuple) -> tuple:
    # Cross-split pairs (leakage) first, then the closest.
    d, a, b = p
    return (a.split == b.split, d, a.rel, b.rel)


# ---- class balance and sizes --------------------------------------------------------------------------------------


def balance(counts: dict, min_count: int) -> dict:
    """From {(split, label name): count}: per-split class counts, the
    classes of each other split absent from train, and per split the classes
    (of any split) with fewer than min_count records there (0 included)."""
    per_split: dict = {}
    for (split, label), n in sorted(counts.items()):
        per_split.setdefault(split, {})[label] = n
    labels = sorted({label for _, label in counts})
    train = set(per_split.get(TRAIN, {}))
    missing = {s: sorted(set(c) - train) for s, c in per_split.items() if s != TRAIN and TRAIN in per_split}
    below = {s: [lb for lb in labels if c.get(lb, 0) < min_count] for s, c in per_split.items()}
    return {"per_split": per_split, "missing_from_train": {s: v for s, v in missing.items() if v},
            "min_count": min_count, "below_min": {s: v for s, v in below.items() if v}}


# Fixed edges (len(counts) == len(edges) - 1; bin i is edges[i] <= v < edges[i + 1]); the last edge bounds
# every possible value (a side is at most 2**31 - 1 in PNG, 65,535 in JPEG).
SIZE_EDGES = (0, 32, 64, 128, 256, 384, 512, 768, 1024, 2048, 4096, 2**31)
ASPECT_EDGES = (0.0, 0.5, 0.67, 0.8, 0.95, 1.05, 1.25, 1.5, 2.0, 4.0, 2.0**31)


def _bin(edges: tuple, v) -> int:
    return min(max(bisect.bisect_right(edges, v) - 1, 0), len(edges) - 2)


def size_bins(width: int, height: int) -> tuple:
    """(width bin, height bin, aspect bin) of one image."""
    return (_bin(SIZE_EDGES, width), _bin(SIZE_EDGES, height), _bin(ASPECT_EDGES, width / max(height, 1)))


def empty_sizes() -> tuple:
    return ([0] * (len(SIZE_EDGES) - 1), [0] * (len(SIZE_EDGES) - 1), [0] * (len(ASPECT_EDGES) - 1))


def add_sizes(acc: tuple, width: int, height: int) -> tuple:
    for counts, b in zip(acc, size_bins(width, height)):
        counts[b] += 1
    return acc


def merge_sizes(accs: Iterable[tuple]) -> tuple:
    out = empty_sizes()
    for a in accs:
        for counts, more in zip(out, a):
            for i, n in enumerate(more):
                counts[i] += n
    return out


def sizes_output(acc: tuple) -> dict:
    w, h, a = acc
    return {"width": {"edges": list(SIZE_EDGES), "counts": w}, "height": {"edges": list(SIZE_EDGES), "counts": h},
            "aspect": {"edges": list(ASPECT_EDGES), "counts": a}}


# ---- stratified ratio splits --------------------------------------------------------------------------------------


def unit_hash(rel: str, salt: str) -> float:
    """The position in [0, 1) of a record among all: the same hash ratio splits use."""
    digest = hashlib.sha256(f"{salt}\x00{rel}".encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def stratified_cuts(positions: list, ratios: tuple) -> tuple:
    """The cut points of one class: records of the class in order of their
    unit_hash, the first round(n * f1) to the first split, and so on (the
    largest-remainder rounding of cumulative fractions). A cut lies halfway
    between two neighbouring positions, so which split a record goes to
    depends on the class's other records: the price of exact proportions."""
    us = sorted(positions)
    n, acc, cuts = len(us), 0.0, []
    for _, f in ratios[:-1]:
        acc += f
        k = min(n, max(0, round(acc * n)))
        if k == 0:
            cuts.append(0.0)
        elif k >= n:
            cuts.append(1.0)
        else:
            cuts.append((us[k - 1] + us[k]) / 2)
    return tuple(cuts)


def stratified_split(u: float, ratios: tuple, cuts: tuple) -> str:
    for (name, _), cut in zip(ratios, cuts):
        if u < cut:
            return name
    return ratios[-1][0]
