"""The bad-input corpus (tests/corpus.py): every case ends in its documented
outcome, every written record decodes with tf.io.decode_image to the recorded
shape, counts reconcile, and the docs' table (docs/faults.md) says exactly this."""
import json
import os
import unicodedata

import pytest

import corpus
from conftest import convert, manifest, read_examples, scalar
from docs_text import marked_block


def outcomes(out):
    with open(os.path.join(out, "rejects.jsonl"), encoding="utf-8") as f:
        rejects = [json.loads(line) for line in f]
    m = manifest(out)
    rows = {scalar(r, "image/filename"): r for split in m["splits"] for r in read_examples(out, split)}
    assert m["counts"]["listed"] == m["counts"]["written"] + m["counts"]["rejected"] == len(rows) + len(rejects)
    return m, rows, rejects


def check(path, expected, rows, rejects):
    reasons = [r["reason"] for r in rejects if r["path"] == path]
    if expected[0] == "rejected":
        assert path not in rows and reasons and set(reasons) == {expected[1]}, (path, reasons)
    else:
        assert path in rows and not reasons, (path, reasons)
        assert scalar(rows[path], "image/format") == expected[1], path
        assert scalar(rows[path], "image/channels") == expected[2], path


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("corpus") / "tree")
    return root, corpus.build_tree(root)


@pytest.mark.parametrize("fixed", [False, True], ids=["defaults", "reencode+orientation"])
def test_folder_corpus(tree, tmp_path, fixed):
    root, cases = tree
    out = str(tmp_path / "out")
    extra = ["--reencode", "jpeg", "--exif_orientation", "apply"] if fixed else []
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "1", *extra) == 0
    m, rows, rejects = outcomes(out)
    for case in cases:
        check(case.path, case.fixed if fixed else case.default, rows, rejects)
    assert m["counts"]["excluded"] == {"hidden": 1, "symlink_loop": 1}
    assert set(m["label_map"]["classes"]) == {"c", "d"}  # the empty class folder gives no class
    # What is stored as-is is the source's bytes, unchanged: the NFC and NFD café.jpg are
    # two files with different bytes, and each record holds its own file's bytes.
    reencoded = {"c/anim.gif", "c/photo.webp", "c/photo.bmp", "c/photo.tiff", "c/photo.avif", "c/rotated.jpg"}
    # --color_convert rgb (the default): the CMYK JPEG and the palette PNG, whose channels PIL and
    # torchvision count otherwise than TensorFlow, are re-encoded in their own format.
    converted = {"c/cmyk.jpg": "jpeg-cmyk", "c/palette.png": "png-palette"}
    assert {rel: scalar(r, "image/source_format") for rel, r in rows.items()
            if "-" in scalar(r, "image/source_format")} == converted
    for case in cases:
        if case.path in rows and not (fixed and case.path in reencoded) and case.path not in converted:
            with open(os.path.join(root, case.path), "rb") as f:
                assert rows[case.path]["image/encoded"][0] == f.read(), case.path
    nfc, nfd = (rows[f"c/{corpus.NFC}.jpg"]["image/encoded"][0], rows[f"c/{corpus.NFD}.jpg"]["image/encoded"][0])
    assert nfc != nfd
    for rel in (f"c/{corpus.NFC}.jpg", f"c/{corpus.NFD}.jpg"):
        with open(os.path.join(root, rel), "rb") as f:
            assert rows[rel]["image/encoded"][0] == f.read(), rel
        assert scalar(rows[rel], "image/class/text") == "c"
    rotated = rows["c/rotated.jpg"]
    size = (scalar(rotated, "image/width"), scalar(rotated, "image/height"))
    assert size == ((30, 50) if fixed else (50, 30))  # stored 50x30, displayed upright as 30x50
    with open(os.path.join(root, "c", "rotated.jpg"), "rb") as f:
        assert (rotated["image/encoded"][0] == f.read()) is not fixed
    pixels = decode(rotated)
    brightest = corner_means(pixels)
    # The white block: stored top-left; rotated clockwise (orientation 6) it is top-right.
    assert max(brightest, key=brightest.get) == ("top-right" if fixed else "top-left"), brightest
    gif = rows.get("c/anim.gif")
    if fixed:
        (w, h), colour = corpus.GIF_FRAMES[0]
        assert scalar(gif, "image/height") == h and scalar(gif, "image/width") == w  # the first frame's size
        mean = decode(gif).reshape(-1, 3).mean(axis=0)
        assert all(abs(m - c) < 40 for m, c in zip(mean, colour)), mean  # and its colour, not a later frame's


def decode(row):
    import tensorflow as tf
    return tf.io.decode_image(row["image/encoded"][0], expand_animations=False).numpy()


def corner_means(pixels) -> dict:
    """Mean brightness of each quarter of the image."""
    h, w = pixels.shape[:2]
    quarters = {"top-left": pixels[:h // 2, :w // 2], "top-right": pixels[:h // 2, w // 2:],
                "bottom-left": pixels[h // 2:, :w // 2], "bottom-right": pixels[h // 2:, w // 2:]}
    return {k: float(v.mean()) for k, v in quarters.items()}


def test_pixel_limit_is_configurable(tree, tmp_path):
    root, _ = tree
    out = str(tmp_path / "out")
    assert convert("--input", root, "--output", out, "--max_reject_fraction", "1", "--max_pixels", "1000") == 0
    _, rows, rejects = outcomes(out)
    reasons = {r["path"]: r["reason"] for r in rejects}
    assert reasons["c/gray.jpg"] == "too_many_pixels" and "c/png_named.jpg" in rows  # 48x32 > 1000 >= 30x20


def test_table_corpus(tmp_path):
    table, pool, expected = corpus.build_table(str(tmp_path))
    out = str(tmp_path / "out")
    assert convert("--label_table", table, "--image_root", pool, "--output", out, "--max_reject_fraction", "1") == 0
    m, rows, rejects = outcomes(out)
    for path, (_, outcome) in expected.items():
        if path == "dup.jpg":
            assert path in rows and [r["reason"] for r in rejects if r["path"] == path] == ["duplicate"]
        else:
            check(path, outcome, rows, rejects)
    for path, row in rows.items():  # each record holds its own file's bytes
        on_disk = [n for n in os.listdir(pool) if unicodedata.normalize("NFC", n) == unicodedata.normalize("NFC", path)]
        assert len(on_disk) == 1, path
        with open(os.path.join(pool, on_disk[0]), "rb") as f:
            assert row["image/encoded"][0] == f.read(), path
    assert scalar(rows["b.jpg"], "note") == "a, b\nand c"
    assert scalar(rows["c.jpg"], "image/class/text") == "cat"
    assert scalar(rows["evil.jpg"], "image/class/text") == "../../evil"
    # Labels never become paths: nothing was written outside the output folder.
    assert sorted(os.listdir(tmp_path)) == ["labels.csv", "out", "pool"]
    assert not any("evil" in n for n in os.listdir(out))


def describe(outcome) -> str:
    kind = outcome[0]
    if kind == "written":
        return f"written ({outcome[1]}, {outcome[2]} channel{'s' if outcome[2] > 1 else ''})"
    if kind == "rejected":
        return f"rejected: `{outcome[1]}`"
    if kind == "excluded":
        return f"skipped, counted as excluded `{outcome[1]}`"
    return f"nothing: {outcome[1]}"


def expected_table() -> list[str]:
    rows = [f"| {n} | {describe(d)} | {describe(f)} |" for n, _, _, d, f in corpus.FILES]
    rows += [f"| {n} | {describe(o)} | same |" for n, _, o in corpus.LISTING]
    rows += [f"| label table: {n} | {describe(o)} | same |" for n, o in corpus.TABLE_CASES]
    return rows


def test_readme_table_tells_the_truth():
    rows = [line for line in marked_block("corpus-table").splitlines()
            if line.startswith("| ") and not line.startswith(("| case", "| ---"))]
    assert rows == expected_table()


if __name__ == "__main__":  # prints the table for the docs (docs/faults.md)
    print("| case | default | with `--reencode jpeg --exif_orientation apply` |\n| --- | --- | --- |")
    print("\n".join(expected_table()))
