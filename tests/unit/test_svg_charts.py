"""The report's charts as SVG (transforms/core/svg_charts.py): well-formed
documents whose labels are the text they are (markup and math syntax
escaped), bars of the heights asked for, and tick steps a reader expects.
(tests/e2e/test_report_html.py renders them in Chromium.)"""
import base64
import xml.etree.ElementTree as ET

import pytest

from tfrecord_pipelines.transforms.core import report_html, svg_charts

NS = "{http://www.w3.org/2000/svg}"
HOSTILE = ["$$", "$100_$200", "<b>x</b>&amp;", "\\frac{1}{2}", "]]>", "ä ключ"]


def parse(uri_or_svg: str) -> ET.Element:
    if uri_or_svg.startswith("data:image/svg+xml;base64,"):
        uri_or_svg = base64.b64decode(uri_or_svg.split(",", 1)[1]).decode("utf-8")
    return ET.fromstring(uri_or_svg)


def texts(root: ET.Element) -> list:
    return [t.text for t in root.iter(NS + "text")]


@pytest.mark.parametrize("top", [0, 1, 3, 7, 10, 99, 101, 1234, 999_999, 12_345_678])
def test_ticks_cover_the_top_with_round_whole_steps(top):
    ticks = svg_charts.nice_ticks(top)
    assert ticks[0] == 0 and ticks[-1] >= top and len(ticks) <= 8
    step = ticks[1] - ticks[0]
    assert step >= 1 and all(b - a == step for a, b in zip(ticks, ticks[1:]))
    assert str(int(step)).rstrip("0") in ("1", "2", "25", "5")


def test_labels_are_text_never_markup_or_math():
    per_split = {"train": {n: i + 1 for i, n in enumerate(HOSTILE)}, "<val>": {HOSTILE[0]: 2}}
    root = parse(report_html.class_chart(HOSTILE, per_split))
    shown = texts(root)
    for name in HOSTILE:
        assert report_html._short(name) in shown, name
    assert "<val>" in shown and "records per class" in shown
    assert not list(root.iter(NS + "script")) and not list(root.iter(NS + "foreignObject"))


def test_bars_have_the_heights_of_their_counts():
    svg = svg_charts.grouped_bars("t", ["a", "b", "c"], [("s", [10, 20, 5], "#123456")], "records", 400, 300)
    bars = [r for r in parse(svg).iter(NS + "rect") if r.get("fill") == "#123456"]
    assert len(bars) == 4  # the bars, then the legend's swatch
    heights = [float(r.get("height")) for r in bars[:3]]
    assert heights[1] == pytest.approx(2 * heights[0], abs=0.2)
    assert heights[0] == pytest.approx(2 * heights[2], abs=0.2)


def test_every_chart_of_the_page_is_an_svg_image():
    m = {"counts": {"listed": 3, "written": 2, "rejected": 1}, "rejects_by_reason": {"truncated": 1},
         "splits": {"train": {"records": 2, "label_counts": {"a": 1, "b": 1}}},
         "label_map": {"kind": "class", "classes": {"a": 0, "b": 1}},
         "quality": {"sizes": {"width": {"edges": [0, 10, 20], "counts": [1, 1]},
                               "height": {"edges": [0, 10, 20], "counts": [2, 0]},
                               "aspect": {"edges": [0, 1, 2], "counts": [0, 2]}}}}
    page = report_html.build_html(m)
    charts = page.count('class="chart"')
    assert charts == 3 and page.count('src="data:image/svg+xml;base64,') == charts
    for uri in page.split('src="')[1:]:
        uri = uri.split('"', 1)[0]
        if uri.startswith("data:image/svg"):
            assert parse(uri).tag == NS + "svg"


def test_many_classes_make_one_curve_per_split():
    classes = [f"c{i}" for i in range(1000)]
    root = parse(report_html.class_chart(classes, {"train": {c: i % 37 for i, c in enumerate(classes)},
                                                   "validation": {c: 1 for c in classes[:500]}}))
    assert len(list(root.iter(NS + "path"))) == 2
    assert any(t and t.startswith("train (min 0, median") for t in texts(root))
