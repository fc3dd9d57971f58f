"""Orders and sizes that must not depend on chance: each test fails on a
planted regression that the rest of the suite let through.

- which copy `decide()` keeps when duplicates arrive out of path order;
- label ids and --extend_label_map ids in sorted order whatever the hash
  seed (many classes: a set's order is never sorted by chance);
- the resize target size against values computed independently (exact
  fractions), including rounding, extreme aspect ratios and images already
  within the bound.
(The content hash over images larger than 64 KiB sharing a prefix is in
tests/e2e/test_integrity.py::test_large_images_sharing_a_prefix_are_distinct.)"""
import itertools
import random
from fractions import Fraction

import pytest

from tfrecord_pipelines.transforms.core import resize
from tfrecord_pipelines.transforms.core.labels import Stats, build_label_map
from tfrecord_pipelines.transforms.core.records import Rec
from tfrecord_pipelines.transforms.core.specs import DuplicatePolicy, LabelSource, LabelSpec, LabelType
from tfrecord_pipelines.transforms.stages.drop_duplicates import decide

# ---- (a) duplicates: the smallest relative path is kept, whatever the arrival order ----------------------------


def _recs(paths, sha):
    return [Rec(p, "/x/" + p, size=10, sha256=sha, label_text="c", split="train") for p in paths]


@pytest.mark.parametrize("policy", [DuplicatePolicy.KEEP_ONE, DuplicatePolicy.REJECT])
def test_decide_keeps_the_smallest_path_whatever_the_order(policy):
    a = ["train/cat/b.jpg", "train/cat/a10.jpg", "train/cat/a2.jpg", "validation/cat/a.jpg", "train/cat/a.jpg"]
    b = ["z/1.jpg", "y/2.jpg", "x/3.jpg"]
    for perm in itertools.permutations(range(5)):
        recs = _recs([a[i] for i in perm], "aa" * 32) + _recs(list(reversed(b)), "bb" * 32) + _recs(["solo.jpg"], "cc" * 32)
        random.Random(sum(perm)).shuffle(recs)
        kept, rejects, dropped, groups = decide(recs, policy)
        assert sorted(r.rel for r in kept) == ["solo.jpg", "train/cat/a.jpg", "x/3.jpg"], perm
        if policy is DuplicatePolicy.REJECT:
            assert dropped == 0 and len(rejects) == 6
            named = {r.rel: r.detail for r in rejects}
            assert all("'train/cat/a.jpg'" in named[p] for p in a if p != "train/cat/a.jpg"), named
            assert all("'x/3.jpg'" in named[p] for p in b if p != "x/3.jpg"), named
        else:
            assert dropped == 6 and not rejects
        assert len(groups) == 2


# ---- (c) label ids: sorted order, for any hash seed ---------------------------------------------------------------

NAMES = [f"class_{random.Random(7).randrange(10**6) + i * 7919:07d}_{c}" for i, c in enumerate("qwertyuiopasdfghjklzxcvbnm" * 3)]


def _stats(names) -> Stats:
    s = Stats()
    for n in names:
        s.add_label(n)
    return s


def test_label_ids_are_the_sorted_names_for_many_classes():
    assert len(set(NAMES)) == 78
    for order in (NAMES, list(reversed(NAMES)), random.Random(3).sample(NAMES, len(NAMES))):
        lm = build_label_map(_stats(order), LabelSpec(LabelSource.FOLDER))
        assert lm.kind is LabelType.CLASS
        assert list(lm.ids) == [(n, i) for i, n in enumerate(sorted(NAMES))]
        lm1 = build_label_map(_stats(order), LabelSpec(LabelSource.FOLDER, offset=1))
        assert list(lm1.ids) == [(n, i + 1) for i, n in enumerate(sorted(NAMES))]


def test_extend_label_map_gives_new_classes_sorted_ids_after_the_frozen_ones():
    frozen = (("zebra", 0), ("aardvark", 1), ("mole", 5))  # a frozen map's own ids, in no name order
    new = [n for n in NAMES if n not in dict(frozen)]
    for order in (NAMES, list(reversed(NAMES))):
        lm = build_label_map(_stats(order + ["mole"]),
                             LabelSpec(LabelSource.FOLDER, frozen_map=frozen, extend_map=True))
        want = {"zebra": 0, "aardvark": 1, "mole": 5, **{n: 6 + i for i, n in enumerate(sorted(new))}}
        assert dict(lm.ids) == want
        assert list(lm.new_names) == sorted(new)


# ---- (d) the resize target size against exact arithmetic --------------------------------------------------------


def _expected(w: int, h: int, mode: str, n: int):
    """Computed independently: the bound side becomes n, the other is
    other * n / bound side, rounded half up with exact fractions, at least 1;
    None when within the bound (never upscaled)."""
    if mode == "longest":
        side, other_is_h = (w, True) if w >= h else (h, False)
    else:
        side, other_is_h = (w, True) if w <= h else (h, False)
    if side <= n:
        return None
    other = h if other_is_h else w
    exact = Fraction(other * n, side)
    rounded = max(1, int(exact + Fraction(1, 2)))  # floor(x + 1/2): half up
    return (n, rounded) if other_is_h else (rounded, n)


TABLE = [  # (w, h, mode, n, expected (w, h)), worked by hand
    (4032, 3024, "shorter", 256, (341, 256)),     # 341.33
    (3024, 4032, "shorter", 256, (256, 341)),
    (4032, 3024, "longest", 512, (512, 384)),     # exactly 384
    (300, 200, "longest", 64, (64, 43)),          # 42.67
    (128, 3, "longest", 64, (64, 2)),             # 1.5 rounds up
    (384, 5, "longest", 128, (128, 2)),           # 1.67
    (640, 3, "longest", 128, (128, 1)),           # 0.6: at least 1
    (10000, 1, "longest", 100, (100, 1)),         # 0.01: at least 1
    (1, 10000, "shorter", 100, None),             # the shorter side is already 1
    (100000, 3, "shorter", 2, (66667, 2)),        # 66666.67
    (5, 100001, "shorter", 4, (4, 80001)),        # 80000.8
    (255, 255, "shorter", 128, (128, 128)),
    (256, 256, "longest", 256, None),             # at the bound: kept
    (200, 100, "shorter", 100, None),
    (201, 101, "shorter", 100, (199, 100)),       # 199.01
    (333, 222, "shorter", 111, (167, 111)),       # 166.5: half up
    (222, 333, "longest", 111, (74, 111)),
]


@pytest.mark.parametrize("w,h,mode,n,want", TABLE)
def test_target_size_table(w, h, mode, n, want):
    p = resize.ResizePolicy(resize.ResizeMode(mode), n)
    assert resize.target_size(w, h, p) == want == _expected(w, h, mode, n)


def test_target_size_matches_exact_arithmetic_everywhere():
    rng = random.Random(11)
    sizes = [(rng.randint(1, 9000), rng.randint(1, 9000)) for _ in range(3000)]
    sizes += [(w, h) for w in (1, 2, 3, 7, 255, 256, 257, 511, 512, 513) for h in (1, 2, 255, 256, 257, 4000, 65500)]
    for mode in ("longest", "shorter"):
        for n in (1, 2, 64, 224, 256, 257, 512):
            p = resize.ResizePolicy(resize.ResizeMode(mode), n)
            for w, h in sizes:
                assert resize.target_size(w, h, p) == _expected(w, h, mode, n), (w, h, mode, n)
