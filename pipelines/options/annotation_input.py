"""--annotations: which format it is (found from the file or folder, and
said), where the images are, and the splits, turned into the InputSpec,
SplitSpec and DetectionSpec of a detection run. Only names and the first
bytes of a file are looked at here: the annotations themselves are read
inside the pipeline (transforms/stages/list_annotations.py)."""
from __future__ import annotations

import posixpath
from typing import Optional

from tfrecord_pipelines.transforms.core.annotations import yolo
from tfrecord_pipelines.transforms.core.specs import (KNOWN_SPLIT_FOLDERS, SPLIT_NAME, AnnotationFormat, BadBoxes,
                                                      DetectionSpec, InputKind, InputSpec, ReadPolicy)
from tfrecord_pipelines.transforms.core.tables import IMAGE_EXTENSIONS
from tfrecord_pipelines.transforms.storage import fsutil, reads

IMAGE_PATTERNS = tuple(sorted("*" + e for e in IMAGE_EXTENSIONS))
YAML_NAMES = ("data.yaml", "dataset.yaml", "data.yml", "dataset.yml")


class AnnotationUsageError(ValueError):
    """A bad --annotations value (resolve.py turns it into a UsageError)."""


def _pairs(text: str, flag: str) -> list:
    """[(split or "", value)]: one value, or SPLIT=VALUE,..."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) == 1 and "=" not in parts[0]:
        return [("", parts[0])]
    out = []
    for p in parts:
        split, eq, value = p.partition("=")
        if not eq or not SPLIT_NAME.match(split.strip()) or not value.strip():
            raise AnnotationUsageError(f"{flag} {text!r}: {p!r} is not SPLIT=PATH (a split name is 1-64 letters, "
                                       "digits or '_')")
        out.append((split.strip(), value.strip()))
    if len({s for s, _ in out}) != len(out):
        raise AnnotationUsageError(f"{flag} {text!r} names a split twice")
    return out


def _head(path: str, n: int = 4096) -> bytes:
    try:
        with fsutil.open_read(path) as f:
            return f.read(n)
    except fsutil.NotRegularFile as e:
        raise AnnotationUsageError(f"--annotations {path!r}: {e}") from None


def _read_small(path: str, max_bytes: int) -> bytes:
    """A class-name file or data YAML: a regular file, at most --max_annotation_bytes."""
    try:
        return reads.read_input(path, 0, -1, ReadPolicy(max_file_bytes=max_bytes))[0]
    except reads.NotAFile as e:
        raise AnnotationUsageError(f"--annotations: {path}: {e}, not a file") from None
    except reads.TooLarge as e:
        shown = str(e).replace("--max_file_bytes", "--max_annotation_bytes")
        raise AnnotationUsageError(f"--annotations: {path}: {shown}") from None


def sniff(path: str) -> tuple:
    """(AnnotationFormat, what was found) of one --annotations path."""
    if fsutil.is_dir(path):
        subdirs = set(fsutil.list_subdirs(path))
        if "Annotations" in subdirs:
            return AnnotationFormat.VOC, "a Pascal VOC root (Annotations/ and JPEGImages/)"
        if "labels" in subdirs or "images" in subdirs:
            return AnnotationFormat.YOLO, "a YOLO folder (images/ and labels/)"
        names = fsutil.list_dir(path)
        if any(n.lower().endswith(".xml") for n in names):
            return AnnotationFormat.VOC, "a folder of Pascal VOC XML files"
        raise AnnotationUsageError(f"--annotations {path!r}: a folder that holds neither Pascal VOC XML files (or "
                                   "Annotations/) nor a YOLO layout (images/ and labels/)")
    if not fsutil.exists(path):
        raise AnnotationUsageError(f"--annotations {path!r}: no such file or folder")
    lower = path.lower()
    if lower.endswith((".yaml", ".yml")):
        return AnnotationFormat.YOLO, "a YOLO data YAML"
    head = _head(path).lstrip()
    if head.startswith(b"{"):
        return AnnotationFormat.COCO, "a COCO JSON file"
    what = "empty" if not head else "binary data" if b"\x00" in head[:512] else "text that is not a JSON object"
    raise AnnotationUsageError(f"--annotations {path!r} is {what}: expected a COCO JSON file (one JSON object), a "
                               "YOLO data YAML, or a folder of VOC XML files or a YOLO layout")


def _common_root(folders: list) -> str:
    if len(set(folders)) == 1:
        return folders[0]
    scheme = folders[0].split("://", 1)[0] + "://" if "://" in folders[0] else ""
    parts = [f[len(scheme):].split("/") for f in folders]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    root = scheme + "/".join(common)
    if not root or root == scheme:
        raise AnnotationUsageError(f"--image_root folders {folders} share no parent folder")
    return root


def _prefix(root: str, folder: str) -> str:
    return folder[len(root):].strip("/") if folder != root else ""


def _coco_image_root(json_path: str) -> Optional[str]:
    """COCO's layout: annotations/instances_train2017.json beside train2017/."""
    stem = posixpath.basename(json_path).rsplit(".", 1)[0]
    name = stem.split("_", 1)[1] if "_" in stem else stem
    guess = fsutil.join(posixpath.dirname(posixpath.dirname(json_path)) or ".", name)
    return guess if fsutil.is_dir(guess) else None


def _yolo_names(root: str, yaml_doc, max_bytes: int) -> tuple:
    if yaml_doc is not None:
        try:
            return yolo.names_from_yaml(yaml_doc)
        except ValueError as e:
            raise AnnotationUsageError(f"--annotations: the data YAML: {e}") from None
    for name in ("classes.txt", *YAML_NAMES):
        path = fsutil.join(root, name)
        if fsutil.exists(path):
            data = _read_small(path, max_bytes)
            if name == "classes.txt":
                try:
                    return yolo.names_from_text(data.decode("utf-8-sig"))
                except (ValueError, UnicodeDecodeError) as e:
                    raise AnnotationUsageError(f"--annotations: {path}: {' '.join(str(e).split())[:200]}") from None
            return _yolo_names(root, _yaml(path, data), max_bytes)
    raise AnnotationUsageError(f"--annotations {root!r}: no class names: put classes.txt (one name a line) or "
                               "data.yaml (names: [...]) in the folder, or give the data YAML")


# A data YAML names a few folders and classes: one that expands (through its
# aliases) to more nodes and characters than this is a bomb (a few hundred
# bytes of nested aliases make ~300 MB of text).
MAX_YAML_EXPANDED = 1_000_000


def _expanded(node, memo: dict) -> int:
    """The nodes and characters of the document `node` expands to, its aliases
    written out (each shared node counted every time it is used)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = 1  # an alias of a node inside itself (a cycle) counts once
    if isinstance(node.value, list):  # a sequence's nodes, or a mapping's (key, value) pairs
        n = 1 + sum(_expanded(c, memo) for item in node.value for c in (item if isinstance(item, tuple) else (item,)))
    else:
        n = 1 + len(node.value)
    memo[key] = n
    return n


def _yaml(path: str, data: bytes):
    import yaml
    try:
        loader = yaml.SafeLoader(data.decode("utf-8-sig"))
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            size = _expanded(node, {})
            if size > MAX_YAML_EXPANDED:
                raise AnnotationUsageError(f"--annotations {path!r}: its aliases (*name) expand it to {size:,} nodes "
                                           f"and characters (at most {MAX_YAML_EXPANDED:,}): refused as an expansion "
                                           "bomb")
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except RecursionError:
        raise AnnotationUsageError(f"--annotations {path!r}: nested too deep to be a data YAML") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise AnnotationUsageError(f"--annotations {path!r} is not a readable YAML file: "
                                   f"{' '.join(str(e).split())[:200]}") from None


def _yolo_sources(path: str, max_bytes: int) -> tuple:
    """(root, names, sources) of a YOLO folder or data YAML."""
    if fsutil.is_dir(path):
        root = path
        names = _yolo_names(root, None, max_bytes)
        images = fsutil.join(root, "images")
        splits = [d for d in fsutil.list_subdirs(images) if not d.startswith(".")] if fsutil.is_dir(images) else []
        if splits and all(d.lower() in KNOWN_SPLIT_FOLDERS for d in splits):
            return root, names, tuple((d, fsutil.join(images, d)) for d in sorted(splits))
        return root, names, (("", images if fsutil.is_dir(images) else root),)
    data = _read_small(path, max_bytes)
    doc = _yaml(path, data)
    if not isinstance(doc, dict):
        raise AnnotationUsageError(f"--annotations {path!r}: a data YAML is a mapping (path, train, val, names)")
    base = posixpath.dirname(path) or "."
    root = doc.get("path")
    root = fsutil.normalize_root(root if isinstance(root, str) and ("://" in root or root.startswith("/"))
                                 else posixpath.normpath(posixpath.join(base, root if isinstance(root, str) else ".")))
    names = _yolo_names(root, doc, max_bytes)
    sources = []
    for key in ("train", "val", "test"):
        v = doc.get(key)
        if isinstance(v, str) and v:
            sources.append((key, fsutil.normalize_root(posixpath.normpath(posixpath.join(root, v)))))
    if not sources:
        raise AnnotationUsageError(f"--annotations {path!r}: the data YAML names no train, val or test folder")
    return root, names, tuple(sources)


def annotation_input(o) -> tuple:
    """(InputSpec, DetectionSpec, whether the splits come with the annotations) for --annotations."""
    given = _pairs(o.annotations, "--annotations")
    found = [sniff(fsutil.normalize_root(p)) for _, p in given]
    fmts = {f for f, _ in found}
    if len(fmts) > 1:
        raise AnnotationUsageError(f"--annotations {o.annotations!r} mixes formats: "
                                   + ", ".join(w for _, w in found))
    fmt = fmts.pop()
    if o.annotation_format != "auto" and o.annotation_format != fmt.value:
        raise AnnotationUsageError(f"--annotation_format {o.annotation_format}: --annotations {o.annotations!r} is "
                                   f"{found[0][1]}")
    if o.max_annotation_bytes < 1:
        raise AnnotationUsageError(f"--max_annotation_bytes {o.max_annotation_bytes} must be positive")
    roots = _pairs(o.image_root, "--image_root") if o.image_root else []
    names: tuple = ()
    if fmt is AnnotationFormat.YOLO:
        if len(given) > 1 or roots:
            raise AnnotationUsageError("YOLO annotations are one folder (or data YAML) holding images/ and labels/; "
                                       "its splits come from images/<split>/ or the YAML: drop --image_root and "
                                       "SPLIT= pairs")
        root, names, yolo_sources = _yolo_sources(fsutil.normalize_root(given[0][1]), o.max_annotation_bytes)
        sources = tuple((split, root, folder) for split, folder in yolo_sources)
        keyed = any(split for split, _, _ in sources)
    else:
        by_split = dict(roots)
        if roots and set(by_split) != {s for s, _ in given} and not (len(roots) == 1 and roots[0][0] == ""):
            raise AnnotationUsageError(f"--image_root {o.image_root!r} must name one folder, or a folder for each "
                                       f"split of --annotations ({', '.join(s for s, _ in given)})")
        sources_list = []
        for split, path in given:
            path = fsutil.normalize_root(path)
            folder = by_split.get(split) or by_split.get("")
            if fmt is AnnotationFormat.VOC and fsutil.is_dir(fsutil.join(path, "Annotations")):
                folder = folder or fsutil.join(path, "JPEGImages")
                path = fsutil.join(path, "Annotations")
            if folder is None and fmt is AnnotationFormat.COCO:
                folder = _coco_image_root(path)
                if folder is None:
                    raise AnnotationUsageError(f"--annotations {path!r}: give --image_root, the folder of its images "
                                               "(COCO's layout, annotations/instances_train2017.json beside "
                                               "train2017/, is found by itself)")
            folder = fsutil.normalize_root(folder or path)
            if not fsutil.is_dir(folder):
                raise AnnotationUsageError(f"--image_root {folder!r}: no such folder")
            sources_list.append((split, path, folder))
        root = _common_root([f for _, _, f in sources_list])
        sources = tuple(sources_list)
        keyed = any(s for s, _, _ in sources)
    root = fsutil.normalize_root(root)
    spec = DetectionSpec(fmt, sources=tuple((s, a, _prefix(root, f)) for s, a, f in sources), names=names,
                         masks=o.masks == "png", bad_boxes=BadBoxes(o.bad_boxes),
                         keep_empty=o.images_without_boxes == "keep", contiguous_ids=o.category_ids == "contiguous",
                         max_annotation_bytes=o.max_annotation_bytes,
                         found="; ".join(f"{split + ': ' if split else ''}{w} ({p})"
                                         for (split, p), (_, w) in zip(given, found)))
    return InputSpec(InputKind.ANNOTATIONS, root, include=IMAGE_PATTERNS,
                     allow_absolute_paths=bool(getattr(o, "allow_absolute_paths", False))), spec, keyed
