"""report.html: what a person looks at after (or before) a conversion, built
from data alone (no Beam, no I/O): the manifest's figures, a few thumbnails,
the first rejects. transforms/storage/report_data.py gathers those inputs.

The page is one self-contained file: charts are SVG documents written by
transforms/core/svg_charts.py (labels are escaped text, never markup or math)
and, like the thumbnails, embedded as data: URIs. A Content-Security-
Policy meta tag forbids every load that is not such a data: URI, every
script, every form submission and any <base>, so the page cannot reach the
network even if a file name or label smuggled markup past the escaping.

The manifest it shows may come from anyone (`tfrecords report` on a shared
output): every value is escaped (control and bidirectional characters shown
as escapes, long text cut), every figure is formatted as a number only if it
is one, and a section of the wrong type is shown as empty. No CSP directive
stops a navigation (`<meta http-equiv="refresh">`, a link): the page holds no
such element by construction, and check_markup() refuses to return a page
with any element or attribute the builder does not write.

Every section degrades: a manifest without a "quality" section (written
before it existed) gets a report without duplicates, and its size charts come
from the sampled records, said as such.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import io
import math
from html.parser import HTMLParser
from typing import Iterable, NamedTuple, Optional

from PIL import Image, ImageOps

from tfrecord_pipelines.transforms.core import findings, images, quality, svg_charts
from tfrecord_pipelines.transforms.core.units import human_bytes, plural

THUMB_PX = 112               # a thumbnail's longer side
THUMB_BOXES_PX = 224         # a thumbnail with its boxes drawn (--annotations): boxes need room
MAX_THUMB_SOURCE_PIXELS = 50_000_000   # larger images get no thumbnail (decompression bombs)
MAX_THUMB_SCAN_PIXELS = 200_000_000    # progressive scans x pixels: 20 scans of 10 MP (encoders write ~10)
MAX_CLASS_BARS = 40          # more classes: one count curve per split instead of labelled bars
MAX_SHOWN_GROUPS = 12        # duplicate groups and near-duplicate pairs shown
MAX_FILES_PER_GROUP = 4
DPI = 96                     # px per inch of the chart sizes below (they were matplotlib figures)
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; form-action 'none'; base-uri 'none'"
MAX_TEXT = 4000              # characters of one value shown (a path, a detail, an option)
MAX_BARS = 40                # bars of a bar chart (reject reasons): the largest, then "others"
MAX_BINS = 64                # bins of a size histogram (the manifest's have 11)
_COLORS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")  # Paul Tol's, colour-blind safe


class Sample(NamedTuple):
    """A record shown on the contact sheet."""
    label: str       # class name, or the target/label as text ("" when unlabelled)
    split: str
    path: str        # image/filename
    thumb: bytes     # JPEG thumbnail bytes (b"" when it could not be made)


class ShownReject(NamedTuple):
    path: str
    reason: str
    detail: str
    split: str
    thumb: bytes     # b"" when the file is gone, unreadable, or does not decode


@dataclasses.dataclass
class ReportInputs:
    """Everything the page shows besides the manifest."""
    samples: list = dataclasses.field(default_factory=list)     # [Sample]
    rejects: list = dataclasses.field(default_factory=list)     # [ShownReject]
    thumbs: dict = dataclasses.field(default_factory=dict)      # {path: thumbnail} for duplicate pairs
    sampled_sizes: list = dataclasses.field(default_factory=list)  # [(width, height)] of the records scanned
    notes: list = dataclasses.field(default_factory=list)       # how the inputs were gathered (caps, failures)


class Stopped(OSError):
    """A thumbnail's decode ended by its `stop` (the report's deadline):
    not made in time, which the caller counts apart from bad bytes."""


class _Stoppable(io.BytesIO):
    """The bytes of an image for Pillow, read 64 KiB at a time as it decodes:
    a read after `stop()` turns true fails, which ends the decode there (a
    thread cannot be stopped from outside)."""

    def __init__(self, data: bytes, stop):
        super().__init__(data)
        self._stop = stop

    def read(self, size=-1):
        if self._stop is not None and self._stop():
            raise Stopped("stopped: the report's deadline passed")
        return super().read(size)


def thumbnail(data: bytes, px: int = THUMB_PX, stop=None, boxes: Optional[list] = None) -> bytes:
    """A JPEG thumbnail (longer side px) of an image as stored, not rotated
    by EXIF (TensorFlow decodes it unrotated too); b"" if it does not decode
    or claims too many pixels, or would cost far more to decode than any real
    photo (images.decode_cost_problem: a JPEG of thousands of progressive
    scans took 45 s): each decode's work is bounded before it starts, and
    `stop` (a callable: true when it is time to give up) ends it between
    reads, raising Stopped. `boxes`: [(xmin, ymin, xmax, ymax)] normalized, drawn on it."""
    if images.decode_cost_problem(data, MAX_THUMB_SCAN_PIXELS):
        return b""
    try:
        with Image.open(_Stoppable(data, stop)) as im:
            if im.width * im.height > MAX_THUMB_SOURCE_PIXELS:
                return b""
            # JPEG: decode at the smallest scale still twice the thumbnail (as
            # Image.thumbnail does); a square request would keep most photos at full scale.
            k = px / max(im.width, im.height)
            im.draft("RGB", (max(1, int(im.width * k * 2)), max(1, int(im.height * k * 2))))
            im.seek(0)
            im.load()
            small = im.copy()
    except Exception as e:  # anything Pillow may raise on bad bytes: no thumbnail
        if stop is not None and (isinstance(e, Stopped) or isinstance(e.__context__, Stopped) or stop()):
            raise Stopped("stopped: the report's deadline passed") from None  # late, not bad bytes
        return b""
    small.thumbnail((px, px))
    if small.mode in ("RGBA", "LA", "PA") or (small.mode == "P" and "transparency" in small.info):
        rgba = small.convert("RGBA")
        small = Image.new("RGB", rgba.size, (255, 255, 255))
        small.paste(rgba, mask=rgba.getchannel("A"))
    elif small.mode in ("I;16", "I;16B", "I", "F"):
        small = ImageOps.autocontrast(small.convert("F").convert("L"))
    small = small.convert("RGB")
    if boxes:
        _draw_boxes(small, boxes)
    buf = io.BytesIO()
    small.save(buf, "JPEG", quality=82)
    return buf.getvalue()


def _draw_boxes(im: Image.Image, boxes: list) -> None:
    from PIL import ImageDraw
    draw = ImageDraw.Draw(im)
    w, h = im.size
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        draw.rectangle([x0 * w, y0 * h, max(x0 * w, x1 * w - 1), max(y0 * h, y1 * h - 1)],
                       outline=_COLORS[i % 6], width=2)


# ---- charts ------------------------------------------------------------------------------------------------------


def _svg_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def _short(text: str, n: int = 18) -> str:
    return text if len(text) <= n else text[:n - 1] + "\u2026"


def _tick(text: str, n: int = 18) -> str:
    """A name as a chart label: one printable line (control and bidirectional
    characters shown as escapes), shortened; svg_charts escapes it as XML text."""
    return _short(_plain(text), n)


def class_chart(classes: list, per_split: dict) -> str:
    """Records per class and split: labelled bars for a few classes, else one
    curve per split of its class counts sorted (where imbalance shows)."""
    splits = list(per_split)
    colours = [_COLORS[i % len(_COLORS)] for i in range(len(splits))]
    if len(classes) <= MAX_CLASS_BARS:
        width = min(12.0, 2.5 + 0.32 * len(classes) * max(1, len(splits)) ** 0.5) * DPI
        series = [(_tick(split, 40), [per_split[split].get(c, 0) for c in classes], colour)
                  for split, colour in zip(splits, colours)]
        return _svg_uri(svg_charts.grouped_bars("records per class", [_tick(c) for c in classes], series,
                                                "records", width, 3.6 * DPI))
    series = []
    for split, colour in zip(splits, colours):
        ys = sorted((per_split[split].get(c, 0) for c in classes), reverse=True)
        series.append((f"{_tick(split, 40)} (min {ys[-1]:,}, median {ys[len(ys) // 2]:,}, max {ys[0]:,})", ys, colour))
    return _svg_uri(svg_charts.sorted_curves("records per class", series,
                                             f"{len(classes):,} classes, each split's sorted by its count",
                                             "records", 10.0 * DPI, 3.6 * DPI))


def bars_chart(title: str, names: list, values: list, xlabel: str = "records") -> str:
    if len(names) > MAX_BARS:  # the largest, and the rest as one bar
        order = sorted(range(len(names)), key=lambda i: -values[i])
        keep = order[:MAX_BARS - 1]
        rest = sum(values[i] for i in order[MAX_BARS - 1:])
        names = [names[i] for i in keep] + [f"{len(order) - len(keep):,} others"]
        values = [values[i] for i in keep] + [rest]
    return _svg_uri(svg_charts.horizontal_bars(title, [_tick(n, 28) for n in names], values, xlabel, _COLORS[1],
                                               7.0 * DPI))


def _bin_labels(edges: list, fmt) -> list:
    out = []
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        out.append(f"<{fmt(hi)}" if i == 0 else f"\u2265{fmt(lo)}" if i == len(edges) - 2
                   else f"{fmt(lo)}\u2013{fmt(hi)}")
    return out


def sizes_chart(sizes: dict) -> str:
    """Width, height and aspect (width / height) histograms, side by side."""
    panels = []
    for key, name in (("width", "width (px)"), ("height", "height (px)"), ("aspect", "aspect (width / height)")):
        h = obj(sizes.get(key))
        edges, counts = numbers(h.get("edges")), numbers(h.get("counts"))
        if len(edges) != len(counts) + 1 or not counts or len(counts) > MAX_BINS:
            counts = []
        panels.append((name, _bin_labels(edges, lambda v: f"{v:g}") if counts else [], counts,
                       _COLORS[0 if key != "aspect" else 2]))
    return _svg_uri(svg_charts.histograms(panels, 12.0 * DPI, 3.4 * DPI))


# ---- the page ----------------------------------------------------------------------------------------------------


def obj(v) -> dict:
    """A section of the manifest that should be an object ({} if it is not)."""
    return v if isinstance(v, dict) else {}


def items(v) -> list:
    """A part of the manifest that should be a list ([] if it is not)."""
    return v if isinstance(v, list) else []


def _count(v) -> int:
    """A count of the manifest for arithmetic (0 if it is not one)."""
    return v if type(v) is int and v >= 0 else 0  # noqa: E721 (bool is no count)


def numbers(v) -> list:
    """A list of finite numbers ([] if it is anything else)."""
    ok = isinstance(v, list) and all(type(x) in (int, float) and math.isfinite(x) for x in v)  # noqa: E721
    return v if ok else []


def _plain(v) -> str:
    """A value as one line of printable text: control, format and bidirectional
    characters (a NUL, an RTL override that would show a name reversed, a
    newline) become visible escapes; cut to MAX_TEXT characters."""
    text = v if isinstance(v, str) else str(v)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT - 1] + "\u2026"
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text


def _e(v) -> str:
    return html.escape(_plain(v), quote=True)


def _n(v) -> str:
    """A figure of the manifest: as a number if it is one, else as escaped text."""
    if type(v) is int:  # noqa: E721 (a bool is shown as text)
        return f"{v:,}"
    if type(v) is float and math.isfinite(v):  # noqa: E721
        return f"{v:,g}"
    return _e(v)


def _img(thumb: bytes, alt: str, cls: str = "thumb") -> str:
    if not thumb:
        return f'<div class="nothumb" title="{_e(alt)}">no preview</div>'
    uri = "data:image/jpeg;base64," + base64.b64encode(thumb).decode("ascii")
    return f'<img class="{cls}" src="{uri}" alt="{_e(alt)}" title="{_e(alt)}">'


def _chart(uri: str, alt: str) -> str:
    return f'<img class="chart" src="{uri}" alt="{_e(alt)}">'


def _table(head: list, rows: Iterable[list], cls: str = "") -> str:
    out = [f'<table class="{cls}"><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>")
    return "".join(out) + "</table>"


def _classes(m: dict, per_split: dict) -> list:
    """Class names in id order (the label map's), then any others by name."""
    lm = obj(m.get("label_map"))
    ids = {n: i for n, i in obj(lm.get("classes")).items() if type(i) is int}  # noqa: E721
    ordered = [n for n, _ in sorted(ids.items(), key=lambda p: (p[1], p[0]))]
    seen = set(ordered)
    others = sorted({c for counts in per_split.values() for c in counts if c not in seen})
    present = {c for counts in per_split.values() for c in counts}
    return [c for c in ordered if c in present or not present] + others


def _per_split(m: dict) -> dict:
    """{split: {class: count}}: the quality figures', else the splits' label
    counts; anything but a count is left out."""
    per = obj(obj(obj(m.get("quality")).get("balance")).get("per_split"))
    if not per:
        per = {s: obj(v).get("label_counts") for s, v in obj(m.get("splits")).items()}
    return {s: {c: n for c, n in obj(counts).items() if type(n) is int and n >= 0}  # noqa: E721
            for s, counts in per.items()}


def _warnings(m: dict, check: bool) -> list:
    """The "Look at these" items: the findings (transforms/core/findings.py), escaped."""
    return [_e(f.text) for f in findings.findings(m, check)]


def _summary(m: dict, check: bool) -> str:
    c = obj(m.get("counts"))
    done = c.get("valid", c.get("written", 0))
    parts = [f"listed <b>{_n(c.get('listed', 0))}</b> = {'valid' if check else 'written'} <b>{_n(done)}</b> "
             f"+ rejected <b>{_n(c.get('rejected', 0))}</b>"]
    if c.get("not_selected"):
        parts[0] += f" + not selected <b>{_n(c['not_selected'])}</b>"
    excluded = obj(c.get("excluded"))
    if excluded:
        parts.append("not listed: " + ", ".join(f"{_e(k)} {_n(v)}" for k, v in excluded.items()))
    lm = obj(m.get("label_map"))
    kind = lm.get("kind", "")
    if kind in ("class", "int"):
        parts.append(f"labels: {len(obj(lm.get('classes'))):,} classes ({_e(kind)})")
    elif kind == "boxes":
        parts.append(f"objects of {len(obj(lm.get('classes'))):,} classes (boxes; see Boxes)")
    elif kind == "float":
        parts.append("labels: float regression targets")
    elif kind:
        parts.append("unlabelled")
    rows = []
    for name, s in obj(m.get("splits")).items():
        s = obj(s)
        row = [_e(name), _n(s.get("records", 0)), f"{len(obj(s.get('label_counts'))):,}"]
        if not check:
            size = s.get("bytes", 0)
            row += [_n(s.get("num_shards", 0)), human_bytes(size) if _count(size) else _e(size),
                    _e(s.get("pattern", ""))]
        rows.append(row)
    head = ["split", "records" if not check else "valid records", "classes"]
    if not check:
        head += ["shards", "bytes", "files"]
    return ("<p>" + "<br>".join(parts) + "</p>" + _table(head, rows, "num")
            + _table(["option", "value"], _option_rows(m), "opts"))


def _option_rows(m: dict) -> list:
    o = obj(m.get("options"))
    inputs, shards = obj(o.get("inputs")), obj(o.get("shards"))
    rows = [("input", inputs.get("table") or inputs.get("root", "")), ("image root", inputs.get("root", "")),
            ("output format", m.get("output_format", shards.get("output_format", "tfrecord"))),
            ("compression", m.get("compression", shards.get("compression", ""))),
            ("run", m.get("run_id", "")), ("tool version", m.get("tool_version", "")),
            ("created", m.get("created", ""))]
    return [[_e(k), _e(v)] for k, v in rows if v not in ("", None)]


def _balance(m: dict) -> str:
    if isinstance(m.get("detection"), dict):
        return "<p>Classes are given per object: boxes per class are under Boxes.</p>"
    per_split = _per_split(m)
    classes = _classes(m, per_split)
    if not classes:
        splits = obj(m.get("splits"))
        if not splits:
            return "<p>No records.</p>"
        return _chart(bars_chart("records per split", list(splits), [_count(obj(s).get("records"))
                                                                      for s in splits.values()]),
                      "records per split")
    return _chart(class_chart(classes, per_split), "records per class and split")


def _contact_sheet(samples: list, classes: list, kind: str = "") -> str:
    if not samples:
        return "<p>No thumbnails: no records could be sampled.</p>"
    by_label: dict = {}
    for s in samples:
        by_label.setdefault(s.label, []).append(s)
    order = [c for c in classes if c in by_label] + sorted(k for k in by_label if k not in set(classes))
    rows = []
    for label in order:
        cells = "".join(f'<figure>{_img(s.thumb, s.path)}<figcaption>{_e(_short(s.path.rsplit("/", 1)[-1], 24))}'
                        f"<br><small>{_e(s.split)}</small></figcaption></figure>" for s in by_label[label])
        name = _e(label) if label else "regression targets" if kind == "float" else \
            "with their boxes" if kind == "boxes" else "(unlabelled)"
        rows.append(f'<div class="sheetrow"><div class="cls">{name}</div>{cells}</div>')
    return "".join(rows)


def _rejects(m: dict, shown: list, check: bool, rejects_file: str) -> str:
    by_reason = {r: n for r, n in obj(m.get("rejects_by_reason")).items() if _count(n)}
    if not by_reason:
        return "<p>No rejects.</p>"
    names = sorted(by_reason, key=lambda r: (-by_reason[r], r))
    out = [_chart(bars_chart("rejects by reason", names, [by_reason[r] for r in names]), "rejects by reason")]
    total = sum(by_reason.values())
    out.append(f"<p>Showing {len(shown):,} of {total:,} rejects (a few of each reason); every one is in "
               f"<code>{_e(rejects_file)}</code>.</p>")
    rows = [[_img(r.thumb, r.path), _e(r.path), f"<code>{_e(r.reason)}</code>", _e(r.split), _e(r.detail)]
            for r in shown]
    out.append(_table(["image", "path", "reason", "split", "detail"], rows, "rejects"))
    return "".join(out)


def _file_card(f, thumbs: dict, extra: str = "") -> str:
    f = obj(f)
    path = _plain(f.get("path", ""))
    thumb = thumbs.get(f.get("path"), b"") if isinstance(f.get("path"), str) else b""
    return (f'<figure>{_img(thumb, path)}<figcaption>{_e(_short(path, 28))}<br>'
            f'<small>{_e(f.get("split", ""))} \u00b7 {_e(f.get("label"))}{extra}</small></figcaption></figure>')


def _duplicates(m: dict, thumbs: dict) -> str:
    if "quality" in m and m["quality"] is None:
        return "<p>The quality checks were off (<code>--quality off</code>).</p>"
    q = m.get("quality")
    if not isinstance(q, dict):
        return "<p>This manifest has no quality figures (it was written by an earlier version).</p>"
    out = []
    d = obj(q.get("duplicates"))
    if d:
        out.append(f"<p>Exact duplicates (same bytes): {_n(d.get('groups', 0))} groups, "
                   f"{_n(d.get('extra_copies', 0))} extra copies; {_n(d.get('within_split', 0))} within a split, "
                   f"{_n(d.get('across_splits', 0))} across splits, {_n(d.get('conflicting_labels', 0))} with "
                   f"conflicting labels (policy: <code>{_e(d.get('policy', ''))}</code>).</p>")
        for g in items(d.get("examples"))[:MAX_SHOWN_GROUPS]:
            g = obj(g)
            files = items(g.get("files"))
            count = g.get("count", len(files))  # outputs written before groups were capped have no count
            flags = [t for t, on in (("across splits", g.get("across_splits")),
                                     ("conflicting labels", g.get("conflicting_labels"))) if on]
            more = f'<div class="more">+{_count(count) - MAX_FILES_PER_GROUP:,} more</div>' \
                if _count(count) > MAX_FILES_PER_GROUP else ""
            out.append(f'<div class="pair"><div class="flags">{_e(", ".join(flags) or "same split")}<br>'
                       f'<small>sha256 {_e(str(g.get("sha256", ""))[:12])}</small></div>'
                       + "".join(_file_card(f, thumbs) for f in files[:MAX_FILES_PER_GROUP]) + more + "</div>")
    nd = obj(q.get("near_duplicates"))
    if nd.get("hash"):
        out.append(f"<p>Near duplicates ({_e(nd['hash'])} hash, Hamming distance \u2264 {_n(nd.get('max_distance'))} "
                   f"of {_n(nd.get('bits'))} bits): {_n(nd.get('pairs', 0))} pairs, {_n(nd.get('across_splits', 0))} "
                   "across splits.</p>")
        for p in items(nd.get("examples"))[:MAX_SHOWN_GROUPS]:
            p = obj(p)
            a, b = obj(p.get("a")), obj(p.get("b"))
            flag = "across splits" if a.get("split") != b.get("split") else "same split"
            out.append(f'<div class="pair"><div class="flags">distance {_n(p.get("distance"))}<br>'
                       f"<small>{flag}</small></div>{_file_card(a, thumbs)}{_file_card(b, thumbs)}</div>")
    elif nd:
        out.append(f"<p>Near duplicates were not searched: {_e(nd.get('why_not', 'no reason given'))}.</p>")
    return "".join(out) or "<p>No duplicate figures.</p>"


def _detection(m: dict) -> str:
    """--annotations: boxes by outcome (they reconcile), per class, per image and by size."""
    d = m.get("detection")
    if not isinstance(d, dict):
        return ""
    b = obj(d.get("boxes"))
    dropped = obj(b.get("dropped"))
    rows = [["listed", _n(b.get("listed", 0))], ["written", _n(b.get("written", 0))],
            ["of which clipped to the image", _n(b.get("clipped", 0))]]
    rows += [[f"dropped: <code>{_e(r)}</code>", _n(n)] for r, n in sorted(dropped.items())[:MAX_BARS]]
    rows.append(["in rejected images", _n(b.get("in_rejected_images", 0))])
    if "in_images_not_selected" in b:
        rows.append(["in images not selected", _n(b["in_images_not_selected"])])
    images = obj(d.get("images"))
    out = [f"<p>Images written with boxes: <b>{_n(images.get('with_boxes', 0))}</b>, without: "
           f"<b>{_n(images.get('without_boxes', 0))}</b>. The thumbnails above show each record's boxes.</p>",
           _table(["boxes", "count"], rows, "num")]
    per_class = {str(k): _count(v) for k, v in obj(d.get("per_class")).items()}
    if per_class:
        names = sorted(per_class, key=lambda n: -per_class[n])[:MAX_CLASS_BARS]
        title = "boxes per class" + (f" (the {len(names)} commonest of {len(per_class):,})"
                                     if len(per_class) > len(names) else "")
        out.append(_chart(bars_chart(title, names, [per_class[n] for n in names], "boxes"), "boxes per class"))
    hists = [(title, items(obj(d.get(key)).get("bins")), numbers(obj(d.get(key)).get("counts")))
             for title, key in (("boxes per image", "per_image"),
                                ("box size (\u221aarea, px of the image as annotated)", "box_sizes"))]
    if any(c for _, _, c in hists):
        out.append(_chart(_hist_chart(hists), "boxes per image and box sizes"))
    return "".join(out)


def _hist_chart(hists: list) -> str:
    """Histograms side by side, from (title, bin labels, counts)."""
    panels = []
    for title, bins, counts in hists:
        if len(bins) != len(counts) or not counts or len(counts) > MAX_BINS:
            bins, counts = [], []
        panels.append((title, [_tick(x) for x in bins], counts, _COLORS[0]))
    return _svg_uri(svg_charts.histograms(panels, 12.0 * DPI, 3.2 * DPI))


def _sizes(m: dict, sampled: list) -> str:
    sizes = obj(obj(m.get("quality")).get("sizes"))
    counts = numbers(obj(sizes.get("width")).get("counts"))
    if sizes and counts:
        return (f"<p>Image sizes of all {_n(sum(counts))} records.</p>"
                + _chart(sizes_chart(sizes), "image size histograms"))
    if not sampled:
        return "<p>No size figures.</p>"
    return (f"<p>Image sizes of {len(sampled):,} sampled records (there are no size figures for all of them).</p>"
            + _chart(sizes_chart(sample_sizes(sampled)), "image size histograms"))


def sample_sizes(sizes: list) -> dict:
    """Histograms of [(width, height)] with the manifest's bins."""
    acc = quality.empty_sizes()
    for w, h in sizes:
        quality.add_sizes(acc, w, h)
    return quality.sizes_output(acc)


_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1240px;
padding:16px 24px;color:#222;background:#fff}
h1{font-size:22px;margin:4px 0}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
table.num td:nth-child(n+2){text-align:right}table.rejects td{max-width:420px;word-break:break-all}
th{background:#f4f4f4}.warn{background:#fff4e5;border:1px solid #f0b46a;padding:8px 14px;border-radius:4px}
.ok{background:#edf7ed;border:1px solid #8cc98c;padding:8px 14px;border-radius:4px}
img.chart{max-width:100%;display:block;margin:8px 0}
img.thumb{display:block;width:112px;height:112px;object-fit:contain;margin:auto;background:#fafafa;
border:1px solid #ccc}
.nothumb{width:96px;height:72px;display:flex;align-items:center;justify-content:center;background:#f2f2f2;color:#888;
font-size:12px;border:1px dashed #bbb;margin:auto}
.sheetrow,.pair{display:flex;flex-wrap:wrap;align-items:flex-start;gap:6px;padding:6px 0;border-bottom:1px solid #eee}
.cls,.flags{width:150px;font-weight:600;word-break:break-all}.flags{font-weight:400}
figure{margin:0;width:124px;text-align:center}figcaption{font-size:11px;color:#555;word-break:break-all}
.more{align-self:center;color:#666}.sub{color:#666}code{background:#f4f4f4;padding:0 3px}
"""


def build_html(m: dict, inputs: Optional[ReportInputs] = None, *, check: bool = False, title: str = "") -> str:
    """The whole page. `m` is a manifest (or, for `tfrecords check`, the
    check's figures in the manifest's shape, counts with "valid")."""
    inputs = inputs or ReportInputs()
    per_split = _per_split(m)
    classes = _classes(m, per_split)
    warnings = _warnings(m, check)
    heading = ("Pre-flight check: nothing was written" if check else "Dataset report")
    rejects_file = m.get("rejects_file", "rejects.jsonl")
    body = [f"<h1>{_e(heading)}</h1>",
            f'<p class="sub">{_e(title)}</p>' if title else "",
            "<h2>Summary</h2>", _summary(m, check),
            ('<div class="warn"><b>Look at these</b><ul>' + "".join(f"<li>{w}</li>" for w in warnings) + "</ul></div>"
             if warnings else '<div class="ok">No warnings.</div>'),
            "<h2>Class balance</h2>", _balance(m),
            "<h2>Samples</h2>", _contact_sheet(inputs.samples, classes, obj(m.get("label_map")).get("kind", "")),
            *(["<h2>Boxes</h2>", _detection(m)] if isinstance(m.get("detection"), dict) else []),
            "<h2>Rejects</h2>", _rejects(m, inputs.rejects, check, rejects_file),
            "<h2>Duplicates and near duplicates</h2>", _duplicates(m, inputs.thumbs),
            "<h2>Image sizes</h2>", _sizes(m, inputs.sampled_sizes)]
    if inputs.notes:
        body.append("<h2>About this report</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in inputs.notes) + "</ul>")
    # The policy comes first in <head>: a meta CSP governs only what follows it.
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(heading + (': ' + title if title else ''))}</title><style>{_STYLE}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")
    check_markup(page)
    return page


class MarkupError(ValueError):
    """The page holds markup its builder never writes: it is not written."""


# What the builder writes, and nothing else: {tag: attributes it may carry}.
_TAGS = {"html": {"lang"}, "head": set(), "meta": {"charset", "http-equiv", "content", "name"}, "title": set(),
         "style": set(), "body": set(), "h1": set(), "h2": set(), "p": {"class"}, "b": set(), "br": set(),
         "ul": set(), "li": set(), "div": {"class", "title"}, "table": {"class"}, "tr": set(), "th": set(),
         "td": set(), "code": set(), "small": set(), "figure": set(), "figcaption": set(),
         "img": {"class", "src", "alt", "title"}}
_METAS = [(("charset", "utf-8"),), (("http-equiv", "Content-Security-Policy"), ("content", _CSP)),
          (("name", "viewport"), ("content", "width=device-width, initial-scale=1"))]
_IMAGE_URIS = ("data:image/png;base64,", "data:image/jpeg;base64,")
_SVG_URI = "data:image/svg+xml;base64,"
# What svg_charts writes, and nothing else: a chart is shapes and escaped text.
_SVG_TAGS = {"svg": {"xmlns", "width", "height", "viewbox", "font-family", "fill"},
             "rect": {"x", "y", "width", "height", "fill", "fill-opacity", "stroke", "stroke-width", "rx"},
             "line": {"x1", "y1", "x2", "y2", "stroke", "stroke-width"},
             "path": {"d", "fill", "fill-opacity", "stroke"},
             "text": {"x", "y", "font-size", "text-anchor", "transform", "font-weight", "dominant-baseline"}}


class _AllowList(HTMLParser):
    """What a document holds beyond `tags` ({tag: attributes it may carry}):
    any other element or attribute, a comment, a processing instruction, a
    declaration; `problems` says each, `where` after it."""

    def __init__(self, tags: dict, where: str = ""):
        super().__init__(convert_charrefs=True)
        self.tags, self.where, self.problems = tags, where, []

    def attribute(self, tag: str, name: str, value) -> None:
        """An allowed attribute's value (a subclass holds it to more)."""

    def handle_starttag(self, tag, attrs):
        allowed = self.tags.get(tag)
        if allowed is None:
            self.problems.append(f"a <{tag}> element{self.where}")
            return
        for k, v in attrs:
            if k not in allowed:
                self.problems.append(f"a {k!r} attribute on <{tag}>{self.where}")
            else:
                self.attribute(tag, k, v)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_comment(self, data):
        self.problems.append(f"a comment{self.where}")

    def handle_pi(self, data):
        self.problems.append(f"a processing instruction{self.where}")

    def unknown_decl(self, data):
        self.problems.append(f"a declaration{self.where}")


def _svg_problems(uri: str) -> list:
    """What a chart's SVG holds beyond the shapes and text svg_charts writes
    (a script, a link, an external load, an event handler)."""
    try:
        svg = base64.b64decode(uri[len(_SVG_URI):], validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return ["an SVG chart that is not base64 UTF-8"]
    check = _AllowList(_SVG_TAGS, " in an SVG chart")
    check.feed(svg)
    return check.problems


class _PageCheck(_AllowList):
    """The page's own allow-list: images only from data: URIs (an SVG chart
    held to its own list), and the <meta> elements noted."""

    def __init__(self):
        super().__init__(_TAGS)
        self.metas: list = []

    def attribute(self, tag, name, value):
        if name == "src" and (value or "").startswith(_SVG_URI):
            self.problems.extend(_svg_problems(value))
        elif name == "src" and not (value or "").startswith(_IMAGE_URIS):
            self.problems.append(f"an image source {str(value)[:40]!r}")

    def handle_starttag(self, tag, attrs):
        super().handle_starttag(tag, attrs)
        if tag == "meta":
            self.metas.append(tuple((k, v) for k, v in attrs))


def check_markup(page: str) -> None:
    """Raises MarkupError if the page holds an element or attribute the
    builder does not write: a navigation (<meta http-equiv="refresh">, a
    link, a form), a script, an event handler, a load other than an embedded
    image, a comment. The escaping should make this impossible; this holds
    the page to it, whatever a manifest smuggles in."""
    check = _PageCheck()
    check.feed(page)
    problems, metas = check.problems, check.metas
    if metas != _METAS:
        problems.append(f"<meta> elements {metas[:6]!r}")
    if problems:
        raise MarkupError(f"the report's page would hold {problems[0]}, which it never writes: not written")
