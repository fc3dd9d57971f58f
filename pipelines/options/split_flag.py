"""--split: its text parsed into a SplitSpec, and the guard against top
folders that look like splits being taken as class names (shared by the
folder, table and listing inputs: parse.py, file_list.py)."""
from __future__ import annotations

import math

from tfrecord_pipelines.options.config import SPLIT_NAME, SplitSource, SplitSpec
from tfrecord_pipelines.transforms.core import labels
from tfrecord_pipelines.transforms.core.errors import UsageError


def parse_pairs(text: str, flag: str) -> list[tuple[str, str]]:
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise UsageError(f"{flag} {text!r}: {part!r} is not NAME=VALUE")
        k, v = part.split("=", 1)
        pairs.append((k.strip(), v.strip()))
    return pairs


def parse_split(text: str, have_split_folders: bool, have_split_column: bool) -> SplitSpec:
    text = text.strip()
    if text == "auto":
        if have_split_column:
            return SplitSpec(SplitSource.COLUMN)
        if have_split_folders:
            return SplitSpec(SplitSource.FOLDERS)
        return SplitSpec(SplitSource.SINGLE, name="train")
    if text == "folders":
        return SplitSpec(SplitSource.FOLDERS)
    if text == "column":
        return SplitSpec(SplitSource.COLUMN)
    if "=" not in text:
        if not SPLIT_NAME.match(text):
            raise UsageError(f"--split {text!r}: a split name is 1-64 letters, digits or '_' "
                             "(or use auto, folders, column, or NAME=FRACTION,...)")
        return SplitSpec(SplitSource.SINGLE, name=text)
    ratios = []
    for name, v in parse_pairs(text, "--split"):
        if not SPLIT_NAME.match(name):
            raise UsageError(f"--split {text!r}: split name {name!r} must be 1-64 letters, digits or '_'")
        if not labels.is_float(v):
            raise UsageError(f"--split {text!r}: fraction {v!r} of {name!r} is not a number")
        f = float(v)
        if not (0 < f <= 1) or not math.isfinite(f):
            raise UsageError(f"--split {text!r}: fraction {v} of {name!r} must be in (0, 1]")
        ratios.append((name, f))
    if len({n for n, _ in ratios}) != len(ratios):
        raise UsageError(f"--split {text!r} names a split twice")
    total = sum(f for _, f in ratios)
    if abs(total - 1) > 1e-6:
        raise UsageError(f"--split {text!r}: fractions add up to {total:g}; they must add up to 1")
    return SplitSpec(SplitSource.RATIOS, ratios=tuple(ratios))


def refuse_split_folders_as_classes(o, subdirs: list, split_folders: bool, split: SplitSpec) -> None:
    """Top folders train/ val/ under ratio or single-name splits would become
    the class labels ("train", "val") of every image: refuse, saying how to go on."""
    folder_labels = o.label_from == "folder" or (o.label_from == "auto" and not o.label_regex)
    if not split_folders or split.source is SplitSource.FOLDERS or not folder_labels or o.label_depth != 1:
        return
    shown = ", ".join(sorted(d + "/" for d in subdirs))
    raise UsageError(f"--split {o.split}: the top folders of --input ({shown}) look like splits, so every image "
                     f"would be labelled with its split folder's name. Use --split folders to keep those splits "
                     f"(the class is the folder below them), or, to draw new splits over all images with the class "
                     f"one level down, add --label_depth 2")
