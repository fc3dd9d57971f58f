"""Generated detection datasets for the tests: small images with known boxes,
in COCO JSON, Pascal VOC XML and YOLO text, and what each should become."""
from __future__ import annotations

import json
import os
import random

from conftest import image_bytes, write

CATEGORIES = [(1, "person"), (3, "car"), (7, "dog")]  # COCO-like: ids with gaps


def _polygon(x, y, w, h, rng):
    """A polygon inside the box touching all four sides (its bbox is the box)."""
    return [x, y + h / 2, x + w / 2, y, x + w, y + h * rng.uniform(0.3, 0.7), x + w * 0.4, y + h]


def _rle(x, y, w, h, width, height):
    """An uncompressed RLE (column-major runs) of the box's pixels."""
    import numpy as np
    m = np.zeros((height, width), np.uint8)
    m[int(y):int(y + h), int(x):int(x + w)] = 1
    flat = m.flatten(order="F")
    counts, last, run = [], 0, 0
    for v in flat:
        if v != last:
            counts.append(run)
            run, last = 0, v
        run += 1
    counts.append(run)
    return {"counts": counts, "size": [height, width]}


def make_coco(folder: str, n: int = 30, seed: int = 0, split_name: str = "train2017") -> dict:
    """folder/annotations/instances_<split_name>.json and folder/<split_name>/*.jpg;
    returns {"json": path, "images": folder, "expected": {file name: [objects]}, "doc": the JSON}."""
    rng = random.Random(seed)
    images, anns = [], []
    expected = {}
    aid = 1
    for i in range(n):
        w, h = rng.randint(48, 96), rng.randint(40, 80)
        iid = 1000 + i
        name = f"{iid:012d}.jpg"
        write(os.path.join(folder, split_name, name), image_bytes(w, h, seed=seed * 1000 + i))
        images.append({"id": iid, "file_name": name, "width": w, "height": h})
        objs = []
        for k in range(0 if i % 10 == 9 else rng.randint(1, 4)):
            bw, bh = rng.randint(4, w // 2), rng.randint(4, h // 2)
            x, y = rng.randint(0, w - bw), rng.randint(0, h - bh)
            cid, cname = CATEGORIES[(i + k) % 3]
            crowd = 1 if (i % 7 == 3 and k == 0) else 0
            seg = _rle(x, y, bw, bh, w, h) if crowd else [_polygon(x, y, bw, bh, rng)]
            area = float(bw * bh) if crowd else float(bw * bh) * 0.5
            anns.append({"id": aid, "image_id": iid, "category_id": cid, "bbox": [x, y, bw, bh], "iscrowd": crowd,
                         "area": area, "segmentation": seg})
            objs.append({"box": (x / w, y / h, (x + bw) / w, (y + bh) / h), "label": cid, "text": cname,
                         "is_crowd": crowd, "area": area, "segmentation": seg, "size": (w, h)})
            aid += 1
    rng.shuffle(anns)  # annotations in no image order, as in COCO's files
    anns.sort(key=lambda a: a["id"] % 5)
    doc = {"info": {}, "images": images, "annotations": anns,
           "categories": [{"id": c, "name": nm, "supercategory": "x"} for c, nm in CATEGORIES]}
    path = os.path.join(folder, "annotations", f"instances_{split_name}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f)
    # expected objects in file order of the annotations
    order = {a["id"]: k for k, a in enumerate(anns)}
    by_image = {}
    for a in anns:
        by_image.setdefault(a["image_id"], []).append(a)
    for im in images:
        expected[im["file_name"]] = [_expected(a, im) for a in sorted(by_image.get(im["id"], []), key=lambda a: order[a["id"]])]
    return {"json": path, "images": os.path.join(folder, split_name), "expected": expected, "doc": doc}


def _expected(a: dict, im: dict) -> dict:
    x, y, bw, bh = a["bbox"]
    w, h = im["width"], im["height"]
    return {"box": (x / w, y / h, (x + bw) / w, (y + bh) / h), "label": a["category_id"],
            "text": dict(CATEGORIES)[a["category_id"]], "is_crowd": a["iscrowd"], "area": a["area"],
            "segmentation": a["segmentation"], "size": (w, h), "source_id": str(im["id"])}


def make_voc(folder: str, n: int = 20, seed: int = 1) -> dict:
    """folder/Annotations/*.xml and folder/JPEGImages/*.jpg; {"root", "expected"}."""
    rng = random.Random(seed)
    names = ["aeroplane", "bicycle", "cat"]
    expected = {}
    for i in range(n):
        w, h = rng.randint(48, 96), rng.randint(40, 80)
        stem = f"2008_{i:06d}"
        write(os.path.join(folder, "JPEGImages", stem + ".jpg"), image_bytes(w, h, seed=seed * 1000 + i))
        objs, xml_objs = [], []
        for k in range(rng.randint(1, 3)):
            bw, bh = rng.randint(4, w // 2), rng.randint(4, h // 2)
            x, y = rng.randint(1, w - bw), rng.randint(1, h - bh)
            name = names[(i + k) % 3]
            diff, trunc = int(k == 1), int(i % 4 == 0)
            xml_objs.append(f"<object><name>{name}</name><pose>Unspecified</pose><truncated>{trunc}</truncated>"
                            f"<difficult>{diff}</difficult><bndbox><xmin>{x}</xmin><ymin>{y}</ymin>"
                            f"<xmax>{x + bw}</xmax><ymax>{y + bh}</ymax></bndbox></object>")
            objs.append({"box": (x / w, y / h, (x + bw) / w, (y + bh) / h), "text": name,
                         "label": sorted(names).index(name) + 1, "difficult": diff, "truncated": trunc,
                         "area": float(bw * bh), "size": (w, h)})
        xml = (f"<annotation><folder>VOC2012</folder><filename>{stem}.jpg</filename><size><width>{w}</width>"
               f"<height>{h}</height><depth>3</depth></size>{''.join(xml_objs)}</annotation>")
        write(os.path.join(folder, "Annotations", stem + ".xml"), xml.encode())
        expected[f"{stem}.jpg"] = objs
    return {"root": folder, "expected": expected, "names": names}


def make_yolo(folder: str, n: int = 20, seed: int = 2) -> dict:
    """folder/images/{train,val}/*.png, folder/labels/{train,val}/*.txt, classes.txt; {"root", "expected", "splits"}."""
    rng = random.Random(seed)
    names = ["ball", "goal", "player"]
    with open(os.path.join(_mk(folder), "classes.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    expected, splits = {}, {}
    for i in range(n):
        split = "val" if i % 4 == 0 else "train"
        w, h = rng.randint(48, 96), rng.randint(40, 80)
        rel = f"images/{split}/frame{i:04d}.png"
        write(os.path.join(folder, rel), image_bytes(w, h, fmt="PNG", seed=seed * 1000 + i))
        splits[rel] = split
        objs, lines = [], []
        for k in range(0 if i == 5 else rng.randint(1, 3)):
            bw, bh = rng.randint(4, w // 2), rng.randint(4, h // 2)
            x, y = rng.randint(0, w - bw), rng.randint(0, h - bh)
            c = (i + k) % 3
            cx, cy, nw, nh = (x + bw / 2) / w, (y + bh / 2) / h, bw / w, bh / h
            lines.append(f"{c} {cx:.6f} {cy:.6f} {nw:.6f} {nh:.6f}")
            objs.append({"box": (cx - nw / 2, cy - nh / 2, cx + nw / 2, cy + nh / 2), "label": c, "text": names[c],
                         "size": (w, h)})
        if i != 5:
            write(os.path.join(folder, f"labels/{split}/frame{i:04d}.txt"), ("\n".join(lines) + "\n").encode())
        expected[rel] = objs
    return {"root": folder, "expected": expected, "splits": splits, "names": names}


def _mk(folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    return folder
