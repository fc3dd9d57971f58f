"""report.html: what a person looks at after (or before) a conversion, built
from data alone (no Beam, no I/O): the manifest's figures, a few thumbnails,
the first rejects. transforms/storage/report_data.py gathers those inputs.

The page is one self-contained file: charts are PNGs drawn by matplotlib
(Agg backend, its object API, so no global pyplot state is shared between
threads) and, like the thumbnails, embedded as data: URIs. A Content-Security-
Policy meta tag forbids every load that is not such a data: URI and every
script, so the page cannot reach the network even if a file name or label
smuggled markup past the escaping (everything shown is escaped as well).

Every section degrades: a manifest without a "quality" section (written
before it existed) gets a report without duplicates, and its size charts come
from the sampled records, said as such.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import io
from typing import Iterable, NamedTuple, Optional

from PIL import Image, ImageOps

from tfrecord_pipelines.transforms.core import quality
from tfrecord_pipelines.transforms.core.units import human_bytes, plural

THUMB_PX = 112               # a thumbnail's longer side
THUMB_BOXES_PX = 224         # a thumbnail with its boxes drawn (--annotations): boxes need room
MAX_THUMB_SOURCE_PIXELS = 50_000_000   # larger images get no thumbnail (decompression bombs)
MAX_CLASS_BARS = 40          # more classes: one count curve per split instead of labelled bars
MAX_SHOWN_GROUPS = 12        # duplicate groups and near-duplicate pairs shown
MAX_FILES_PER_GROUP = 4
MAX_LIST = 30                # names listed in a warning before "..."
DPI = 96
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
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


def thumbnail(data: bytes, px: int = THUMB_PX, boxes: Optional[list] = None) -> bytes:
    """A JPEG thumbnail (longer side px) of an image as stored, not rotated
    by EXIF (TensorFlow decodes it unrotated too); b"" if it does not decode
    or claims too many pixels. `boxes`: [(xmin, ymin, xmax, ymax)] normalized,
    drawn on it."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            if im.width * im.height > MAX_THUMB_SOURCE_PIXELS:
                return b""
            # JPEG: decode at the smallest scale still twice the thumbnail (as
            # Image.thumbnail does); a square request would keep most photos at full scale.
            k = px / max(im.width, im.height)
            im.draft("RGB", (max(1, int(im.width * k * 2)), max(1, int(im.height * k * 2))))
            im.seek(0)
            im.load()
            small = im.copy()
    except Exception:  # anything Pillow may raise on bad bytes: no thumbnail
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


def MaxNLocator(**kw):
    from matplotlib.ticker import MaxNLocator as _MaxNLocator
    return _MaxNLocator(**kw)


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _png_uri(fig, tight: bool = True) -> str:
    buf = io.BytesIO()
    # bbox_inches="tight" fits the labels with one extra draw (a layout engine costs several); a chart
    # whose labels have a known extent sets its margins itself and is drawn once.
    fig.savefig(buf, format="png", metadata={"Software": None}, **({"bbox_inches": "tight", "pad_inches": 0.08}
                                                                    if tight else {}))
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _short(text: str, n: int = 18) -> str:
    return text if len(text) <= n else text[:n - 1] + "\u2026"


def class_chart(classes: list, per_split: dict) -> str:
    """Records per class and split: labelled bars for a few classes, else one
    curve per split of its class counts sorted (where imbalance shows)."""
    splits = list(per_split)
    if len(classes) <= MAX_CLASS_BARS:
        fig = _figure(min(12.0, 2.5 + 0.32 * len(classes) * max(1, len(splits)) ** 0.5), 3.6)
        ax = fig.add_subplot()
        width = 0.8 / max(1, len(splits))
        for i, split in enumerate(splits):
            ys = [per_split[split].get(c, 0) for c in classes]
            ax.bar([x + (i - (len(splits) - 1) / 2) * width for x in range(len(classes))], ys, width,
                   label=split, color=_COLORS[i % len(_COLORS)])
        ax.set_xticks(range(len(classes)), [_short(c) for c in classes], rotation=45 if len(classes) > 6 else 0,
                      ha="right" if len(classes) > 6 else "center")
        ax.set_ylabel("records")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter("{x:,.0f}")
    else:
        fig = _figure(10.0, 3.6)
        ax = fig.add_subplot()
        for i, split in enumerate(splits):
            ys = sorted((per_split[split].get(c, 0) for c in classes), reverse=True)
            ax.fill_between(range(len(ys)), ys, step="mid", alpha=0.55, color=_COLORS[i % len(_COLORS)],
                            label=f"{split} (min {ys[-1]:,}, median {ys[len(ys) // 2]:,}, max {ys[0]:,})")
        ax.set_xlabel(f"{len(classes):,} classes, each split's sorted by its count")
        ax.set_ylabel("records")
        ax.set_xlim(0, len(classes) - 1)
    ax.set_title("records per class")
    ax.grid(axis="y", alpha=0.3)
    if splits:
        ax.legend(fontsize="small")
    return _png_uri(fig)


def bars_chart(title: str, names: list, values: list, xlabel: str = "records") -> str:
    fig = _figure(7.0, 0.9 + 0.28 * len(names))
    ax = fig.add_subplot()
    ax.barh(range(len(names)), values, color=_COLORS[1])
    ax.set_yticks(range(len(names)), [_short(n, 28) for n in names])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(title)
    for y, v in enumerate(values):
        ax.annotate(f"{v:,}", (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize="small")
    ax.margins(x=0.12)
    return _png_uri(fig)


def _bin_labels(edges: list, fmt) -> list:
    out = []
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        out.append(f"<{fmt(hi)}" if i == 0 else f"\u2265{fmt(lo)}" if i == len(edges) - 2
                   else f"{fmt(lo)}\u2013{fmt(hi)}")
    return out


def sizes_chart(sizes: dict) -> str:
    """Width, height and aspect (width / height) histograms, side by side."""
    fig = _figure(12.0, 3.4)
    axes = fig.subplots(1, 3, gridspec_kw={"wspace": 0.3})
    fig.subplots_adjust(left=0.075, right=0.99, top=0.91, bottom=0.27)  # room for counts and rotated bin labels
    for ax, (key, name, fmt) in zip(axes, (("width", "width (px)", lambda v: f"{v:g}"),
                                           ("height", "height (px)", lambda v: f"{v:g}"),
                                           ("aspect", "aspect (width / height)", lambda v: f"{v:g}"))):
        h = sizes.get(key) or {}
        edges, counts = list(h.get("edges", [])), list(h.get("counts", []))
        if len(edges) != len(counts) + 1 or not counts:
            ax.set_axis_off()
            continue
        ax.bar(range(len(counts)), counts, color=_COLORS[0 if key != "aspect" else 2])
        ax.set_xticks(range(len(counts)), _bin_labels(edges, fmt), rotation=60, ha="right", fontsize="small")
        ax.set_title(name)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter("{x:,.0f}")
        ax.grid(axis="y", alpha=0.3)
    return _png_uri(fig, tight=False)


# ---- the page ----------------------------------------------------------------------------------------------------


def _e(v) -> str:
    return html.escape(str(v), quote=True)


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


def _names(items: list) -> str:
    shown = ", ".join(_e(x) for x in items[:MAX_LIST])
    return shown + (f", ... ({len(items):,} in all)" if len(items) > MAX_LIST else "")


def _classes(m: dict, per_split: dict) -> list:
    """Class names in id order (the label map's), then any others by name."""
    lm = m.get("label_map") or {}
    ordered = [n for n, _ in sorted((lm.get("classes") or {}).items(), key=lambda p: (p[1], p[0]))]
    seen = set(ordered)
    others = sorted({c for counts in per_split.values() for c in counts if c not in seen})
    present = {c for counts in per_split.values() for c in counts}
    return [c for c in ordered if c in present or not present] + others


def _per_split(m: dict) -> dict:
    quality = m.get("quality") or {}
    per = (quality.get("balance") or {}).get("per_split")
    if isinstance(per, dict) and per:
        return {s: dict(c) for s, c in per.items()}
    return {s: dict(v.get("label_counts") or {}) for s, v in (m.get("splits") or {}).items()}


def _warnings(m: dict, check: bool) -> list:
    q = m.get("quality") or {}
    out = []
    d = q.get("duplicates") or {}
    if d.get("across_splits"):
        out.append(f"{plural(d['across_splits'], 'group')} of identical images span splits: the same image is in "
                   "training and evaluation data")
    if d.get("conflicting_labels"):
        out.append(f"{plural(d['conflicting_labels'], 'group')} of identical images carry different labels")
    nd = q.get("near_duplicates") or {}
    if nd.get("across_splits"):
        out.append(f"{plural(nd['across_splits'], 'near-duplicate pair')} span splits")
    b = q.get("balance") or {}
    for split, names in sorted((b.get("missing_from_train") or {}).items()):
        out.append(f"split {_e(split)} has {len(names):,} classes that train lacks: {_names(names)}")
    for split, names in sorted((b.get("below_min") or {}).items()):
        few = "no records" if b.get("min_count") == 1 else f"fewer than {b.get('min_count', '?')} records"
        classes = f"{len(names):,} class{'' if len(names) == 1 else 'es'}"
        out.append(f"split {_e(split)}: {classes} {'has' if len(names) == 1 else 'have'} {few}: {_names(names)}")
    c = m.get("counts") or {}
    if c.get("listed") and c.get("rejected"):
        out.append(f"{c['rejected']:,} of {c['listed']:,} listed records ({c['rejected'] / c['listed']:.1%}) "
                   f"{'would be' if check else 'were'} rejected")
    empty = [f"{s} ({sum(1 for e in v.get('shards', []) if not e.get('records'))})"
             for s, v in (m.get("splits") or {}).items() if any(not e.get("records") for e in v.get("shards", []))]
    if empty:
        out.append(f"empty shards in {', '.join(_e(x) for x in empty)}")
    return out


def _summary(m: dict, check: bool) -> str:
    c = m.get("counts") or {}
    done = c.get("valid", c.get("written", 0))
    parts = [f"listed <b>{c.get('listed', 0):,}</b> = {'valid' if check else 'written'} <b>{done:,}</b> "
             f"+ rejected <b>{c.get('rejected', 0):,}</b>"]
    if c.get("not_selected"):
        parts[0] += f" + not selected <b>{c['not_selected']:,}</b>"
    excluded = c.get("excluded") or {}
    if excluded:
        parts.append("not listed: " + ", ".join(f"{_e(k)} {v:,}" for k, v in excluded.items()))
    lm = m.get("label_map") or {}
    kind = lm.get("kind", "")
    if kind in ("class", "int"):
        parts.append(f"labels: {len(lm.get('classes') or {}):,} classes ({_e(kind)})")
    elif kind == "boxes":
        parts.append(f"objects of {len(lm.get('classes') or {}):,} classes (boxes; see Boxes)")
    elif kind == "float":
        parts.append("labels: float regression targets")
    elif kind:
        parts.append("unlabelled")
    rows = []
    for name, s in (m.get("splits") or {}).items():
        row = [_e(name), f"{s.get('records', 0):,}", f"{len(s.get('label_counts') or {}):,}"]
        if not check:
            row += [f"{s.get('num_shards', 0):,}", human_bytes(s.get("bytes", 0)), _e(s.get("pattern", ""))]
        rows.append(row)
    head = ["split", "records" if not check else "valid records", "classes"]
    if not check:
        head += ["shards", "bytes", "files"]
    return ("<p>" + "<br>".join(parts) + "</p>" + _table(head, rows, "num")
            + _table(["option", "value"], _option_rows(m), "opts"))


def _option_rows(m: dict) -> list:
    o = m.get("options") or {}
    inputs, shards = o.get("inputs") or {}, o.get("shards") or {}
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
        splits = m.get("splits") or {}
        if not splits:
            return "<p>No records.</p>"
        return _chart(bars_chart("records per split", list(splits), [s.get("records", 0) for s in splits.values()]),
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
    by_reason = m.get("rejects_by_reason") or {}
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


def _file_card(f: dict, thumbs: dict, extra: str = "") -> str:
    path = str(f.get("path", ""))
    return (f'<figure>{_img(thumbs.get(path, b""), path)}<figcaption>{_e(_short(path, 28))}<br>'
            f'<small>{_e(f.get("split", ""))} \u00b7 {_e(f.get("label"))}{extra}</small></figcaption></figure>')


def _duplicates(m: dict, thumbs: dict) -> str:
    if "quality" in m and m["quality"] is None:
        return "<p>The quality checks were off (<code>--quality off</code>).</p>"
    q = m.get("quality")
    if not isinstance(q, dict):
        return "<p>This manifest has no quality figures (it was written by an earlier version).</p>"
    out = []
    d = q.get("duplicates") or {}
    if d:
        out.append(f"<p>Exact duplicates (same bytes): {d.get('groups', 0):,} groups, {d.get('extra_copies', 0):,} "
                   f"extra copies; {d.get('within_split', 0):,} within a split, {d.get('across_splits', 0):,} across "
                   f"splits, {d.get('conflicting_labels', 0):,} with conflicting labels (policy: "
                   f"<code>{_e(d.get('policy', ''))}</code>).</p>")
        for g in (d.get("examples") or [])[:MAX_SHOWN_GROUPS]:
            files = g.get("files") or []
            count = g.get("count", len(files))  # outputs written before groups were capped have no count
            flags = [t for t, on in (("across splits", g.get("across_splits")),
                                     ("conflicting labels", g.get("conflicting_labels"))) if on]
            more = f'<div class="more">+{count - MAX_FILES_PER_GROUP:,} more</div>' \
                if count > MAX_FILES_PER_GROUP else ""
            out.append(f'<div class="pair"><div class="flags">{_e(", ".join(flags) or "same split")}<br>'
                       f'<small>sha256 {_e(str(g.get("sha256", ""))[:12])}</small></div>'
                       + "".join(_file_card(f, thumbs) for f in files[:MAX_FILES_PER_GROUP]) + more + "</div>")
    nd = q.get("near_duplicates") or {}
    if nd.get("hash"):
        out.append(f"<p>Near duplicates ({_e(nd['hash'])} hash, Hamming distance \u2264 {nd.get('max_distance')} of "
                   f"{nd.get('bits')} bits): {nd.get('pairs', 0):,} pairs, {nd.get('across_splits', 0):,} across "
                   "splits.</p>")
        for p in (nd.get("examples") or [])[:MAX_SHOWN_GROUPS]:
            a, b = p.get("a") or {}, p.get("b") or {}
            flag = "across splits" if a.get("split") != b.get("split") else "same split"
            out.append(f'<div class="pair"><div class="flags">distance {_e(p.get("distance"))}<br>'
                       f"<small>{flag}</small></div>{_file_card(a, thumbs)}{_file_card(b, thumbs)}</div>")
    elif nd:
        out.append(f"<p>Near duplicates were not searched: {_e(nd.get('why_not', 'no reason given'))}.</p>")
    return "".join(out) or "<p>No duplicate figures.</p>"


def _detection(m: dict) -> str:
    """--annotations: boxes by outcome (they reconcile), per class, per image and by size."""
    d = m.get("detection")
    if not isinstance(d, dict):
        return ""
    b = d.get("boxes") or {}
    dropped = b.get("dropped") or {}
    rows = [["listed", f"{b.get('listed', 0):,}"], ["written", f"{b.get('written', 0):,}"],
            ["of which clipped to the image", f"{b.get('clipped', 0):,}"]]
    rows += [[f"dropped: <code>{_e(r)}</code>", f"{n:,}"] for r, n in sorted(dropped.items())]
    rows.append(["in rejected images", f"{b.get('in_rejected_images', 0):,}"])
    if "in_images_not_selected" in b:
        rows.append(["in images not selected", f"{b['in_images_not_selected']:,}"])
    images = d.get("images") or {}
    out = [f"<p>Images written with boxes: <b>{images.get('with_boxes', 0):,}</b>, without: "
           f"<b>{images.get('without_boxes', 0):,}</b>. The thumbnails above show each record's boxes.</p>",
           _table(["boxes", "count"], rows, "num")]
    per_class = d.get("per_class") or {}
    if per_class:
        names = sorted(per_class, key=lambda n: -per_class[n])[:MAX_CLASS_BARS]
        title = "boxes per class" + (f" (the {len(names)} commonest of {len(per_class):,})"
                                     if len(per_class) > len(names) else "")
        out.append(_chart(bars_chart(title, names, [per_class[n] for n in names], "boxes"), "boxes per class"))
    hists = [(title, (d.get(key) or {}).get("bins") or [], (d.get(key) or {}).get("counts") or [])
             for title, key in (("boxes per image", "per_image"),
                                ("box size (\u221aarea, px of the image as annotated)", "box_sizes"))]
    if any(c for _, _, c in hists):
        out.append(_chart(_hist_chart(hists), "boxes per image and box sizes"))
    return "".join(out)


def _hist_chart(hists: list) -> str:
    fig = _figure(12.0, 3.2)
    axes = fig.subplots(1, len(hists), gridspec_kw={"wspace": 0.25})
    for ax, (title, bins, counts) in zip(axes, hists):
        if len(bins) != len(counts) or not counts:
            ax.set_axis_off()
            continue
        ax.bar(range(len(counts)), counts, color=_COLORS[0])
        ax.set_xticks(range(len(counts)), bins, rotation=45, ha="right", fontsize="small")
        ax.set_title(title)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(axis="y", alpha=0.3)
    return _png_uri(fig)


def _sizes(m: dict, sampled: list) -> str:
    sizes = (m.get("quality") or {}).get("sizes")
    if isinstance(sizes, dict) and sizes:
        total = sum((sizes.get("width") or {}).get("counts") or [0])
        return f"<p>Image sizes of all {total:,} records.</p>" + _chart(sizes_chart(sizes), "image size histograms")
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
            "<h2>Samples</h2>", _contact_sheet(inputs.samples, classes, (m.get("label_map") or {}).get("kind", "")),
            *(["<h2>Boxes</h2>", _detection(m)] if isinstance(m.get("detection"), dict) else []),
            "<h2>Rejects</h2>", _rejects(m, inputs.rejects, check, rejects_file),
            "<h2>Duplicates and near duplicates</h2>", _duplicates(m, inputs.thumbs),
            "<h2>Image sizes</h2>", _sizes(m, inputs.sampled_sizes)]
    if inputs.notes:
        body.append("<h2>About this report</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in inputs.notes) + "</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(heading + (': ' + title if title else ''))}</title><style>{_STYLE}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")
