"""Data-quality checks, as pure functions: exact duplicates (same sha256),
near duplicates (a perceptual hash within a Hamming distance), class balance
and split health, image-size histograms; and stratified ratio splits.

The perceptual hash is computed from the small decode full validation
already does (a JPEG in grey at 1/8 scale, or larger to keep 32 pixels a
side: transforms/core/images.py), so it costs ~12 us, not a decode; the
stages that decode hash HASH_BATCH records at a time (hashes()), since right
after each decode the same steps cost three times as much. It is the
classic DCT hash ("pHash"): grey levels at 32x32, 2-D DCT, the 8x8 lowest
frequencies compared with their median: 64 bits. The 32x32 image is never
made: the resize is folded into the DCT's matrices, one per side length.
Measured choices (README, "Data-quality checks"; tests/unit/test_quality.py
prints the distributions):
resizing and re-compressing keep the hash within a few bits, a small crop
within ~10, a mirror image and distinct photos far apart.

Near-duplicate candidates are found without comparing all pairs: the hash is
cut into BANDS bands of 10-11 bits and only records sharing a band value are
compared (locality-sensitive hashing), with numpy, all the pairs of a group
of rows at once (in chunks), the rows travelling as columns (Columns). A pair
within distance < BANDS always shares a band (pigeonhole); a pair at a larger
distance up to the threshold is found when its differing bits leave one band
whole (for 8 random bits, 89% of the time; README gives the measured recall
on variants).
"""
from __future__ import annotations

import bisect
import collections
import functools
import hashlib
import heapq
import itertools
import operator
from typing import Callable, Iterable, NamedTuple, Optional

import numpy as np
from PIL import Image

HASH_NAME = "dct64"
BITS = 64
BAND_WIDTHS = (11, 11, 11, 11, 10, 10)  # bits of each band, high bits first
BANDS = len(BAND_WIDTHS)
DEFAULT_MAX_DISTANCE = 8
MAX_EXAMPLES = 1000      # groups or pairs listed in the manifest; all are counted
MAX_GROUP_FILES = 100    # files listed for one duplicate group (its "count" counts them all)
MAX_BUCKET = 20000       # members of one band bucket compared pairwise (flat images can share one hash)
PAIR_CHUNK = 1 << 20     # candidate pairs compared in one numpy step (a few tens of MB of arrays)
TRAIN = "train"

HASH_SIDE = 32           # the hash's grid; a decode for the hash keeps at least this many pixels a side (images.py)
HASH_BATCH = 256         # records hashed together by the stages that decode (hashes(): warm caches, vector steps)
_GRID = 64               # images at least twice this on their short side are box-reduced first (PNGs, large JPEGs)
_k = np.arange(HASH_SIDE)
# Orthonormal DCT-II matrix: dct(x) = D @ x, so the 2-D DCT is D @ X @ D.T.
_DCT = np.sqrt(2.0 / HASH_SIDE) * np.cos(np.pi * (2 * _k[None, :] + 1) * _k[:, None] / (2 * HASH_SIDE))
_DCT[0] /= np.sqrt(2.0)
_DCT8 = _DCT[:8]
_HALF = np.float32(0.5)


def _bilinear(n: int) -> np.ndarray:
    """Pillow's BILINEAR resampling of n samples to HASH_SIDE, as a HASH_SIDE x n
    matrix (a triangle filter widened by the scale when shrinking, so every
    sample counts, and normalised: Pillow's precompute_coeffs)."""
    scale = n / HASH_SIDE
    width = max(scale, 1.0)
    m = np.zeros((HASH_SIDE, n))
    for i in range(HASH_SIDE):
        center = (i + 0.5) * scale
        lo, hi = max(int(center - width + 0.5), 0), min(int(center + width + 0.5), n)
        x = np.arange(lo, hi)
        w = np.maximum(0.0, 1.0 - np.abs((x - center + 0.5) / width))
        m[i, lo:hi] = w / w.sum()
    return m


@functools.lru_cache(maxsize=1024)
def _axis(n: int) -> np.ndarray:
    """The 8 lowest DCT frequencies of a row (or column) of n samples resized
    to HASH_SIDE: the resize folded into the DCT, so no 32x32 image is made."""
    return (_DCT8 @ _bilinear(n)).astype(np.float32)


def perceptual_hash(im: Image.Image) -> int:
    """The 64-bit DCT hash of a decoded image (any mode, any size): grey
    levels (a JPEG arrives grey from its decode, transforms/core/images.py),
    box-reduced to under 2 x _GRID on the short side, resized to 32x32
    (BILINEAR) and transformed by a 2-D DCT in one product of three small
    matrices; the 8x8 lowest frequencies against their median."""
    return _bits(_low(hash_input(im)).reshape(1, 64))[0]


def hash_input(im: Image.Image) -> Image.Image:
    """The part of the hash that reads the decode: its grey levels, box-reduced."""
    if im.mode != "L":
        if im.mode != "RGB":
            im = im.convert("RGBA").convert("RGB") if "A" in im.mode or im.mode == "P" else im.convert("RGB")
        im = im.convert("L")
    factor = min(im.size) // _GRID
    return im.reduce(factor) if factor > 1 else im


def hashes(inputs: list) -> list:
    """perceptual_hash of each hash_input (None: -1), the medians and bits of
    all at once. The shard writer hashes a few hundred records together: right
    after a decode the same steps cost about three times as much (the decode
    leaves the caches cold for them)."""
    lows = [_low(im) for im in inputs if im is not None]
    values = iter(_bits(np.stack(lows)) if lows else ())
    return [-1 if im is None else next(values) for im in inputs]


def _low(im: Image.Image) -> np.ndarray:
    """The 8x8 lowest DCT frequencies of the image resized to 32x32, from the
    folded matrices."""
    w, h = im.size
    return _axis(h) @ np.frombuffer(im.tobytes(), np.uint8).reshape(h, w) @ _axis(w).T


def _bits(low: np.ndarray) -> list:
    """Each row's 64 frequencies against their median, as an int (first frequency: the high bit)."""
    low = low.reshape(len(low), 64)
    part = np.partition(low, (31, 32), axis=1)
    mid = (part[:, 31] + part[:, 32]) * _HALF  # the median, as np.median (float32), without its overhead
    return np.packbits(low > mid[:, None], axis=1).view(">u8").ravel().tolist()


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


class Columns(NamedTuple):
    """Rows as columns, one list per Row field: a group of rows crosses the
    runner or a spill file pickled in a few calls (a list of Rows costs a
    Python call per Row each way), and the checks work on whole columns."""
    rel: list
    split: list
    label: list
    label_id: list
    sha256: list
    phash: list
    width: list
    height: list

    @classmethod
    def of(cls, rows: Iterable) -> "Columns":
        rows = list(rows)
        return cls(*map(list, zip(*rows))) if rows else cls(*([] for _ in cls._fields))

    @classmethod
    def concat(cls, blocks: Iterable) -> "Columns":
        blocks = list(blocks)
        return cls(*(list(itertools.chain.from_iterable(b[i] for b in blocks)) for i in range(len(cls._fields))))

    def take(self, idx) -> "Columns":
        idx = list(idx)
        if len(idx) < 2:
            return Columns(*([c[i] for i in idx] for c in self))
        get = operator.itemgetter(*idx)
        return Columns(*(list(get(c)) for c in self))

    def row(self, i: int) -> Row:
        return _new_row([c[i] for c in self])


_new_row = functools.partial(tuple.__new__, Row)


# ---- exact duplicates ---------------------------------------------------------------------------------------------


def keeper(files: Iterable) -> str:
    """The copy keep_one keeps: the smallest relative path (code-point
    order), the same on every runner. With split folders that is the train
    copy (train/ < validation/)."""
    return min(f.rel for f in files)


def dup_group(sha: str, files: Iterable) -> dict:
    """One manifest example for the files sharing `sha` (>= 2 of them): how
    many, and the first MAX_GROUP_FILES by path (a placeholder image copied
    100,000 times must not make the manifest, or the memory of the steps that
    carry it, grow with its copies)."""
    copies = _Copies()
    for f in files:
        copies.add(f)
    return copies.group(sha)


class _Copies:
    """What dup_group reports of the files sharing one sha256, folded as they
    come: the count, the splits and labels seen, and the first
    MAX_GROUP_FILES by path (the list is sorted and cut each time it reaches
    twice that, which keeps the same files as one sort of all)."""

    __slots__ = ("count", "splits", "labels", "first")

    def __init__(self):
        self.count, self.splits, self.labels, self.first = 0, set(), set(), []

    def add(self, f) -> None:
        self.count += 1
        self.splits.add(f.split)
        self.labels.add(f.label)
        self.first.append(f)
        if len(self.first) >= 2 * MAX_GROUP_FILES:
            self._cut()

    def _cut(self) -> None:
        self.first.sort(key=_rel)
        del self.first[MAX_GROUP_FILES:]

    def group(self, sha: str) -> dict:
        self._cut()
        return {"sha256": sha, "count": self.count,
                "across_splits": len(self.splits) > 1,
                "conflicting_labels": len(self.labels) > 1,
                "files": [row_file(f) for f in self.first]}


_rel = operator.attrgetter("rel")


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
        return (groups + 1, extra + g["count"] - 1, within + (not g["across_splits"]),
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


def dup_summary(cols: Columns) -> tuple:
    """The DupSummary of the groups of rows in `cols` that share a sha256."""
    return dup_summary_of(lambda: (cols,))


def dup_summary_of(blocks: Callable[[], Iterable[Columns]]) -> tuple:
    """dup_summary of the rows of many blocks, `blocks()` read twice: first
    only a hash of each sha256 is kept (8 bytes a row), then only the rows
    whose hash another row shares are looked at, each sha256's copies folded
    as they come (_Copies). A group of a million distinct rows so costs ~8 MB,
    not the ~300 MB of its rows, and 100,000 copies of one placeholder image
    cost MAX_GROUP_FILES rows."""
    h = np.concatenate([_sha_hashes(b) for b in blocks()] or [np.zeros(0, np.int64)])
    h.sort()
    shared = np.unique(h[1:][h[1:] == h[:-1]])
    if not len(shared):  # the usual case: nothing to group
        return DupSummary.empty()
    copies = collections.defaultdict(_Copies)
    for b in blocks():
        for i in np.flatnonzero(np.isin(_sha_hashes(b), shared)).tolist():
            copies[b.sha256[i]].add(b.row(i))
    acc = DupSummary.empty()
    for sha, c in sorted(copies.items()):
        if c.count > 1:  # not a row whose hash only collides with another's
            acc = DupSummary.add(acc, c.group(sha))
    return acc


def _sha_hashes(cols: Columns) -> np.ndarray:
    # Python's string hash: equal within the process, which is all one call needs.
    return np.fromiter(map(hash, cols.sha256), dtype=np.int64, count=len(cols.sha256))


def _group_order(g: dict) -> tuple:
    return (g["files"][0]["path"], g["sha256"])


def _capped(items: list, key, lazy: bool = False) -> list:
    """The first MAX_EXAMPLES items in `key` order; `lazy` lets the list grow
    to twice that before sorting, so adding one item is not a sort."""
    if lazy and len(items) <= 2 * MAX_EXAMPLES:
        return items
    return sorted(items, key=key)[:MAX_EXAMPLES]


# ---- near duplicates ----------------------------------------------------------------------------------------------


def near_keys(cols: Columns, sub_bits: int) -> dict:
    """{(band, top sub_bits of the band value): [row index]} of the rows with
    a hash: every row under each band, so rows sharing a band value meet."""
    idx = np.array([i for i, p in enumerate(cols.phash) if p >= 0], dtype=np.int64)
    h = np.array([cols.phash[i] for i in idx.tolist()], dtype=np.uint64)
    out = {}
    for band, ((shift, _), width) in enumerate(zip(_SHIFTS, BAND_WIDTHS)):
        top = (h >> np.uint64(shift + width - sub_bits)) & np.uint64((1 << sub_bits) - 1)
        for value in np.unique(top).tolist():
            out[(band, value)] = idx[top == value].tolist()
    return out


def near_summary(cols: Columns, band: int, max_distance: int) -> tuple:
    """The NearSummary of the rows of `cols` (phash >= 0) whose hashes share
    this band's value: pairs within max_distance, each reported only from its
    first shared band, exact copies (same sha256) left to the duplicate
    check. A band value shared by more than MAX_BUCKET rows is not compared
    pairwise (flat images can share one hash): its rows count as skipped.

    All pairs of one band value are compared at once with numpy, a chunk of
    PAIR_CHUNK candidate pairs at a time, on the hashes sorted by band value
    (each candidate costs a gather, an xor and a bit count); only the pairs
    within the distance (a tenth of the candidates on the bench's tree, whose
    crops of a few photos give ~16 M candidates per 50k images) are mapped
    back to rows and filtered, chunk by chunk, on integer codes of their sha256 and split
    rather than on strings: ~1.0 s for those 50k images' 6 bands where
    comparing the strings of every close pair took ~1.7 s."""
    # Rows in path order: a pair is (smaller path, larger path).
    order = np.array(sorted(range(len(cols.rel)), key=cols.rel.__getitem__), dtype=np.intp)
    h = np.array(cols.phash, dtype=np.uint64)[order]
    shift, mask = _SHIFTS[band]
    values = (h >> np.uint64(shift)) & np.uint64(mask)
    by_value = np.argsort(values, kind="stable")  # rows of a value stay in path order
    sorted_values, hs = values[by_value], h[by_value]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]]) if len(h) else np.zeros(0, int)
    lengths = np.diff(np.r_[starts, len(h)])
    skipped = int(lengths[lengths > MAX_BUCKET].sum())
    # Per sorted position: how many later positions of its value it pairs with.
    later = np.repeat(starts + lengths, lengths) - np.arange(len(h)) - 1
    later[np.repeat(lengths > MAX_BUCKET, lengths)] = 0
    sha = _codes(cols.sha256)[order]
    earlier = [(np.uint64(s), np.uint64(m)) for s, m in _SHIFTS[:band]]
    found_a, found_b, found_d = [], [], []
    cum = np.cumsum(later)
    total = int(cum[-1]) if len(cum) else 0
    begin = done = 0
    while done < total:
        end = max(int(np.searchsorted(cum, done + PAIR_CHUNK, side="right")), begin + 1)
        counts = later[begin:end]
        ends = np.cumsum(counts)
        n = int(ends[-1])
        second = np.repeat(np.arange(begin + 1, end + 1) - (ends - counts), counts)  # each position's later ones
        second += np.arange(n)
        x = np.repeat(hs[begin:end], counts)
        x ^= hs[second]
        d = np.bitwise_count(x)
        close = np.flatnonzero(d <= max_distance)
        ia = by_value[np.repeat(np.arange(begin, end), counts)[close]]
        ib = by_value[second[close]]  # stable order: ia < ib, path order
        d = d[close]
        begin, done = end, done + n
        # Filtered chunk by chunk, so that many exact copies sharing a bucket are never held as pairs.
        keep = sha[ia] != sha[ib]
        ha, hb = h[ia], h[ib]
        for s, m in earlier:  # pairs sharing an earlier band are reported from there
            keep &= ((ha >> s) & m) != ((hb >> s) & m)
        found_a.append(ia[keep])
        found_b.append(ib[keep])
        found_d.append(d[keep])
    ia, ib, d = (np.concatenate(f) if f else np.zeros(0, np.intp) for f in (found_a, found_b, found_d))
    pairs = len(ia)
    split = _codes(cols.split)[order]
    same = split[ia] == split[ib]
    ex = []
    if pairs:
        # The first MAX_EXAMPLES in _pair_order: cross-split first, then the closest, then by paths.
        # Only pairs up to the (same split, distance) class where the first MAX_EXAMPLES end can be among them:
        # the full order is taken of those (a lexsort of every pair took a fifth of the check).
        sel = np.arange(pairs)
        if pairs > MAX_EXAMPLES:
            rank = same.astype(np.int64) * 256 + d.astype(np.int64)
            cut = int(np.searchsorted(np.cumsum(np.bincount(rank)), MAX_EXAMPLES))
            sel = np.flatnonzero(rank <= cut)
        top = sel[np.lexsort((ib[sel], ia[sel], d[sel], same[sel]))][:MAX_EXAMPLES]
        used, side = np.unique(np.concatenate([ia[top], ib[top]]), return_inverse=True)
        ex = Pairs(d[top].tolist(), side[:len(top)].tolist(), side[len(top):].tolist(),
                   cols.take(order[used].tolist()))
    return (pairs, int(pairs - same.sum()), skipped, ex)


def _codes(values: list) -> np.ndarray:
    """An int per value, equal for equal values (a dict, not a sort of strings)."""
    ids: dict = {}
    return np.fromiter((ids.setdefault(v, len(ids)) for v in values), dtype=np.int64, count=len(values))


class Pairs:
    """(distance, a, b) examples of near_summary, in _pair_order, as a table
    of the rows they name and two index lists: a Row is built when the pair
    is looked at. Merging the summaries of many groups looks at little more
    than the MAX_EXAMPLES it keeps, so most of the examples each group offers
    never become Rows (on the bench's tree ~88k Rows per 10k images, which
    cost more than finding the pairs), and a summary pickles small."""

    def __init__(self, distances: list, a: list, b: list, rows: Columns):
        self.distances, self.a, self.b, self.rows = distances, a, b, rows

    def __len__(self) -> int:
        return len(self.distances)

    def __getitem__(self, k: int) -> tuple:
        return (self.distances[k], self.rows.row(self.a[k]), self.rows.row(self.b[k]))

    def __iter__(self):
        return map(self.__getitem__, range(len(self.distances)))


def pair_entry(d: int, a, b) -> dict:
    side = lambda r: {**row_file(r), "sha256": r.sha256}  # noqa: E731
    return {"distance": d, "a": side(a), "b": side(b)}


class NearSummary:
    """Counts every near-duplicate pair; keeps MAX_EXAMPLES of them as
    (distance, a, b) Rows, cross-split pairs first, then the closest (the
    manifest's entries are built for those only). The examples of an
    accumulator are kept in that order, so merging many takes the first
    MAX_EXAMPLES of their merged lists, not a sort of all of them."""

    @staticmethod
    def empty() -> tuple:
        return (0, 0, 0, [])

    @staticmethod
    def add(acc: tuple, pair: tuple) -> tuple:
        pairs, across, skipped, ex = acc
        ex = ex if isinstance(ex, list) else list(ex)
        bisect.insort(ex, pair, key=_pair_order)
        del ex[MAX_EXAMPLES:]
        return (pairs + 1, across + (pair[1].split != pair[2].split), skipped, ex)

    @staticmethod
    def skip(acc: tuple, records: int) -> tuple:
        """A band bucket too large to compare (see MAX_BUCKET)."""
        pairs, across, skipped, ex = acc
        return (pairs, across, skipped + records, ex)

    @staticmethod
    def merge(accs: Iterable[tuple]) -> tuple:
        accs = list(accs)
        return (*[sum(a[i] for a in accs) for i in range(3)],
                list(itertools.islice(heapq.merge(*(a[3] for a in accs), key=_pair_order), MAX_EXAMPLES)))

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


def size_counts(widths: list, heights: list) -> tuple:
    """add_sizes of many images at once (the same bins)."""
    w, h = np.asarray(widths, dtype=np.float64), np.asarray(heights, dtype=np.float64)
    out = []
    for edges, v in ((SIZE_EDGES, w), (SIZE_EDGES, h), (ASPECT_EDGES, w / np.maximum(h, 1))):
        bins = np.clip(np.searchsorted(np.asarray(edges, dtype=np.float64), v, side="right") - 1, 0, len(edges) - 2)
        out.append(np.bincount(bins, minlength=len(edges) - 1).tolist())
    return tuple(out)


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
