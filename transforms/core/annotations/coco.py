"""COCO instances JSON (`instances_train2017.json`): `images` (id, file_name,
width, height), `annotations` (image_id, category_id, bbox [x, y, w, h] in
pixels, iscrowd, area, polygon or RLE segmentation) and `categories` (id, name).

The file is one JSON document, often hundreds of MB (COCO train2017's is 448
MB; json.load holds several GB of Python objects for it). It is streamed with
ijson (yajl2's C parser), one section per pass, so memory holds one entry at
a time whatever the file's size; a malformed file stops the run with one line
naming it. Annotations are joined to their images by the pipeline's grouping,
not in memory here.
"""
from __future__ import annotations

import numbers
import re
from typing import BinaryIO, Iterator, Optional

import ijson
import numpy as np

from tfrecord_pipelines.transforms.core.annotations import AnnotationError, BoxReason, Obj

IMAGES, ANNOTATIONS, CATEGORIES = "images", "annotations", "categories"


def _number(v) -> bool:
    # ijson (use_float) gives int or float; type() is ~10x cheaper than an ABC isinstance, per coordinate.
    return type(v) is float or type(v) is int or (isinstance(v, numbers.Real) and not isinstance(v, bool))


# COCO nests 5 deep (file, section, entry, segmentation, polygon); yajl's
# memory grows with the square of the depth (6 GB at 100,000 levels).
MAX_DEPTH = 64
# The longest string or number: yajl's time grows with the square of one
# token's length (0.13 s at 4 MiB, 1.5 s at 16 MiB, 9 minutes at 500 MB);
# COCO's longest are RLE masks' counts, kilobytes.
MAX_TOKEN = 8 << 20
# A number or true/false/null: yajl is slower still on one long word (12 s at 8 MiB); COCO's are under 30 bytes.
MAX_WORD = 4096
_CHUNK = 1 << 16   # at most this much is handed to the parser at once (and so scanned at once)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_CLOSED = re.compile(rb'[^"]*+(?:"[^"\\]*+(?:\\.[^"\\]*+)*+"[^"]*+)*+')   # complete strings and what is between
_IN_STRING = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+')
# what a number or true/false/null is made of; any other byte outside a string ends one (or is no JSON)
_BARE = re.compile(rb"[0-9A-Za-z+\-.]*")
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')
_IS_SEPARATOR = np.ones(256, bool)
_IS_SEPARATOR[list(b"0123456789+-.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")] = False
_STEP = np.zeros(256, np.int8)
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


class Bounded:
    """A read() view that follows the JSON it hands on (nesting, strings,
    escapes) and raises AnnotationError past `max_depth` levels or one token
    of more than `max_token` bytes, before the parser is given it: 0.33-0.51
    CPU s per 56 MB of COCO-like JSON (the parse itself, 1.5-2.1 s)."""

    def __init__(self, f, name: str, max_depth: int = MAX_DEPTH, max_token: int = MAX_TOKEN, max_word: int = MAX_WORD):
        self._f, self._name, self._max_depth, self._max_token = f, name, max_depth, max_token
        self._max_word = max_word
        self._depth, self._in_string, self._escape, self._token = 0, False, False, 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(_CHUNK if n is None or n < 0 else min(n, _CHUNK))
        if data:
            self._scan(data)
        return data

    def _scan(self, data: bytes) -> None:
        pos, end = 0, len(data)
        while pos < end:
            if self._in_string:
                if self._escape:
                    pos, self._escape, self._token = pos + 1, False, self._token + 1
                    self._check_token("a string")
                    continue
                stop = _IN_STRING.match(data, pos).end()
                self._token += stop - pos
                self._check_token("a string")
                if stop < end and data[stop] == 0x22:  # the closing quote
                    self._in_string, self._token, pos = False, 0, stop + 1
                    continue
                if stop == end - 1:  # a backslash last: its escaped character comes with the next read
                    self._escape, self._token = True, self._token + 1
                self._check_token("a string")
                return
            if b"\\" in data[pos:]:  # escapes: the strings found by a regex (slower, rare in COCO files)
                stop = _CLOSED.match(data, pos).end()
                segment = data[pos:stop]
                kept = _ESCAPE.sub(b"", segment).translate(None, _NOT_STRUCTURE)
            else:  # no escapes: a string is what lies between two quotes
                segment = data[pos:] if pos else data
                kept = segment.translate(None, _NOT_STRUCTURE)
                if kept.count(b'"') % 2:  # a string that does not end in this read
                    stop = pos + segment.rfind(b'"')
                    segment, kept = data[pos:stop], kept[:kept.rfind(b'"')]
                else:
                    stop = end
            self._outside(segment, kept)
            if stop < end:  # a string that does not end in this read
                self._in_string, self._token, pos = True, 0, stop + 1
            else:
                pos = stop

    def _outside(self, segment: bytes, kept: bytes) -> None:
        """A stretch of whole strings and what lies between them (`kept`: its
        quotes and brackets, escapes taken out): nesting, and the numbers' lengths."""
        if not segment:
            return
        if self._max_token < len(segment):  # a string inside one read could pass the bound (never at 8 MiB)
            longest = max((m.end() - m.start() - 2 for m in _STRING.finditer(segment)), default=0)
            if longest > self._max_token:
                self._token = longest
                self._check_token("a string")
        # a word inside one read could pass its bound; a long run in the text as it is may lie inside a
        # string (an RLE mask's counts): looked for again with the strings taken out
        if self._max_word < len(segment) and _longest_run(segment) > self._max_word and \
                _longest_run(_STRING.sub(b'""', segment)) > self._max_word:
            self._token = self._max_word + 1
            self._check_word()
        lead = _BARE.match(segment).end()  # the bare-word class holds no quote: strings end a run
        self._token += lead
        self._check_word()
        if lead < len(segment):
            self._token = _BARE.match(segment[::-1]).end()
            self._check_word()
        if kept:
            marks = np.frombuffer(kept, np.uint8)
            outside = (np.cumsum(marks == 0x22, dtype=np.int64) & 1) == 0  # a bracket after an even number of quotes
            levels = np.cumsum(_STEP[marks] * outside, dtype=np.int64) + self._depth
            if int(levels.max()) > self._max_depth:
                raise AnnotationError(f"--annotations {self._name}: nested more than {self._max_depth} levels deep "
                                      "(a COCO file is 5): not a COCO annotation file")
            self._depth = int(levels[-1])

    def _check_word(self) -> None:
        if self._token > self._max_word:
            raise AnnotationError(f"--annotations {self._name}: a number or word of more than {self._max_word:,} "
                                  "bytes: not a COCO annotation file")

    def _check_token(self, what: str) -> None:
        if self._token > self._max_token:
            raise AnnotationError(f"--annotations {self._name}: {what} of more than {self._max_token:,} bytes (the "
                                  "longest in a COCO file, an RLE mask, is kilobytes): not a COCO annotation file")


def _longest_run(text: bytes) -> int:
    """The longest stretch of `text` made of what numbers and words are made of."""
    seps = np.flatnonzero(_IS_SEPARATOR[np.frombuffer(text, np.uint8)])
    if not len(seps):
        return len(text)
    return int(max(seps[0], len(text) - 1 - seps[-1], (np.diff(seps).max() - 1) if len(seps) > 1 else 0))


def _items(stream: BinaryIO, section: str, name: str) -> Iterator:
    try:
        yield from ijson.items(Bounded(stream, name), f"{section}.item", use_float=True)
    except ijson.JSONError as e:
        first = " ".join(str(e).split())[:160]
        raise AnnotationError(f"--annotations {name}: not valid JSON ({first}); a COCO annotation file is one JSON "
                              "object with images, annotations and categories") from None


def read_categories(stream: BinaryIO, name: str) -> tuple:
    """((id, name), ...) in the file's order. No categories, a category
    without an integer id or a name, or two categories of one name: the run
    stops (boxes could not be given class ids)."""
    out, names = [], {}
    for c in _items(stream, CATEGORIES, name):
        cid = c.get("id") if isinstance(c, dict) else None
        cname = c.get("name") if isinstance(c, dict) else None
        if not isinstance(cid, int) or isinstance(cid, bool) or not isinstance(cname, str) or not cname:
            raise AnnotationError(f"--annotations {name}: category {str(c)[:120]} needs an integer id and a name")
        if cname in names and names[cname] != cid:
            raise AnnotationError(f"--annotations {name}: categories {names[cname]} and {cid} are both named "
                                  f"{cname!r}; class names must be unique")
        names[cname] = cid
        out.append((cid, cname))
    if not out:
        raise AnnotationError(f"--annotations {name}: no categories (a COCO instances file lists them under "
                              "\"categories\")")
    return tuple(out)


def read_images(stream: BinaryIO, name: str) -> Iterator[tuple]:
    """(image id, file name or None, width, height, problem) of each `images`
    entry; `problem` says why an entry cannot be used ("" when it can)."""
    for im in _items(stream, IMAGES, name):
        if not isinstance(im, dict):
            yield None, None, 0, 0, f"an images entry is not an object: {str(im)[:80]}"
            continue
        iid, fname = im.get("id"), im.get("file_name")
        w, h = im.get("width", 0), im.get("height", 0)
        if not isinstance(iid, (int, str)) or isinstance(iid, bool):
            yield None, fname if isinstance(fname, str) else None, 0, 0, f"image id {iid!r} is not an integer"
        elif not isinstance(fname, str) or not fname:
            yield iid, None, 0, 0, f"image {iid} has no file_name"
        elif not (isinstance(w, int) and isinstance(h, int)) or isinstance(w, bool) or w < 0 or h < 0:
            yield iid, fname, 0, 0, f"image {iid} has width {w!r} and height {h!r}, not sizes in pixels"
        else:
            yield iid, fname, w, h, ""


# An RLE mask is decoded at its own size, one byte a pixel: more pixels than
# Pillow decodes in any image (its bomb limit, 179 Mpx) is no real mask.
MAX_MASK_PIXELS = 178_956_970


class BadSegmentation(ValueError):
    """A segmentation that cannot be drawn (its image is rejected as bad_annotation)."""


def _segmentation(seg) -> Optional[tuple]:
    """Polygons as tuples of floats, or ("rle", counts, height, width);
    raises BadSegmentation for an RLE mask that does not describe its size."""
    if isinstance(seg, list):
        polys = tuple(tuple(float(v) for v in p) for p in seg
                      if isinstance(p, list) and len(p) >= 6 and len(p) % 2 == 0 and all(map(_number, p)))
        return polys or None
    if isinstance(seg, dict):
        counts, size = seg.get("counts"), seg.get("size")
        if not (isinstance(size, list) and len(size) == 2 and all(type(v) is int for v in size)):
            raise BadSegmentation(f"an RLE mask's size {str(size)[:40]} is not [height, width]")
        h, w = size
        if not (0 < h and 0 < w and h * w <= MAX_MASK_PIXELS):
            raise BadSegmentation(f"an RLE mask's size {h}x{w} is not 1 to {MAX_MASK_PIXELS:,} pixels")
        if isinstance(counts, str):
            runs = rle_counts(counts)
        elif isinstance(counts, list) and all(type(v) is int for v in counts):
            runs = counts
        else:
            raise BadSegmentation("an RLE mask's counts are neither a string nor a list of integers")
        if any(v < 0 for v in runs):
            raise BadSegmentation("an RLE mask has a negative run length")
        if sum(runs) != h * w:
            raise BadSegmentation(f"an RLE mask's runs cover {sum(runs):,} pixels, its size {h}x{w} is {h * w:,}")
        return "rle", counts if isinstance(counts, str) else tuple(counts), h, w
    return None


def rle_counts(text: str) -> list:
    """The run lengths of COCO's compressed RLE string (pycocotools'
    rleFrString, in Python: pycocotools reads past a malformed string's end
    and aborts on a non-ASCII one). Raises BadSegmentation."""
    out: list = []
    p, n = 0, len(text)
    while p < n:
        x, k, more = 0, 0, True
        while more:
            if p >= n:
                raise BadSegmentation("an RLE mask's counts string ends inside a number")
            c = ord(text[p]) - 48
            if not 0 <= c < 64:
                raise BadSegmentation(f"an RLE mask's counts string holds {text[p]!r}, not a character of "
                                      "COCO's compressed RLE (0 to o)")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if k > 13:
                raise BadSegmentation("an RLE mask's counts string holds a number of more than 64 bits")
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(out) > 2:
            x += out[-2]
        out.append(x)
    return out


def to_object(a: dict, categories: dict, masks: bool) -> Obj:
    """An `annotations` entry as an Obj (a box [x, y, w, h] becomes its corners)."""
    cid = a.get("category_id")
    category = categories.get(cid, cid) if isinstance(cid, int) and not isinstance(cid, bool) else -1
    bbox = a.get("bbox")
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(map(_number, bbox))):
        return Obj(category, 0.0, 0.0, 0.0, 0.0, problem=BoxReason.MALFORMED.value)
    x, y, w, h = (float(v) for v in bbox)
    area = a.get("area")
    return Obj(category, x, y, x + w, y + h, is_crowd=1 if a.get("iscrowd") else 0,
               area=float(area) if _number(area) else -1.0,
               segmentation=_segmentation(a.get("segmentation")) if masks else None)


def read_annotations(stream: BinaryIO, name: str, categories: dict, masks: bool) -> Iterator[tuple]:
    """(image id, position in the file, Obj as a tuple) of each `annotations`
    entry; `categories` is {id: name}. The position keeps each image's
    objects in file order, however the pipeline groups them. An entry whose
    mask cannot be drawn (--masks) comes as a str in place of the Obj: why,
    naming the file and the entry."""
    for n, a in enumerate(_items(stream, ANNOTATIONS, name)):
        if not isinstance(a, dict):
            yield None, n, tuple(Obj(-1, 0.0, 0.0, 0.0, 0.0, problem=BoxReason.MALFORMED.value))
            continue
        iid = a.get("image_id")
        iid = iid if isinstance(iid, (int, str)) and not isinstance(iid, bool) else None
        try:
            yield iid, n, tuple(to_object(a, categories, masks))
        except BadSegmentation as e:
            shown = f" (id {a['id']})" if isinstance(a.get("id"), (int, str)) else ""
            yield iid, n, f"{name}: annotation {n}{shown[:40]}: {e}"
