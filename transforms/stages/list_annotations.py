"""Stage ListAnnotations: object annotations (COCO JSON, Pascal VOC XML,
YOLO text) read inside the pipeline and joined with a listing of the images'
folders, so every record has its file's size (one read per image) and an
annotation whose image is missing is a reject, not a failed read.

COCO: the JSON is streamed three times in parallel (categories, images,
annotations; transforms/core/annotations/coco.py), the objects joined to
their images by id, then the images to the files by path. VOC: each XML file
listed is parsed. YOLO: label files are joined to images by Ultralytics' path
rule (images/x.jpg -> labels/x.txt). The joins group in spill files on a
local run (transforms/storage/spill.py), so memory does not grow with the
annotations.

Output (a dict):
  records      [Rec, ...] batches, each Rec with its annotation (Rec.annotation)
  rejects      [Reject, ...] batches (missing_image, bad_annotation, duplicate, unsafe_path)
  stats        (name, count): listed, excluded/not_annotated, boxes/listed, boxes/dropped/no_image, ...
  fingerprint  (unit, hex) digests of the listings and annotation files
  label_map    a singleton LabelMap of kind BOXES (transforms/core/annotations/categories.py)
"""
from __future__ import annotations

import collections
import hashlib
from typing import Optional

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from tfrecord_pipelines.transforms.core.annotations import coco, join, yolo
from tfrecord_pipelines.transforms.core.annotations.categories import box_label_map, merge_categories
from tfrecord_pipelines.transforms.core.fingerprint import FINGERPRINT
from tfrecord_pipelines.transforms.core.records import Batch, Reason, Rec, Reject
from tfrecord_pipelines.transforms.core.specs import (RECORDS, REJECTS, STATS, AnnotationFormat, DetectionSpec,
                                                      InputSpec, LabelSpec, ReadPolicy)
from tfrecord_pipelines.transforms.storage import fsutil, listing, reads, spill
from tfrecord_pipelines.transforms.storage.gcs import StorageUnavailable

BATCH = 500


class _Hashing:
    """A read() view that hashes what it reads (the annotation file's fingerprint)."""

    def __init__(self, f):
        self._f, self.sha = f, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.sha.update(data)
        return data


def _folder(root: str, prefix: str) -> str:
    return fsutil.join(root, prefix) if prefix else root


class _WalkFn(beam.DoFn):
    """One listing unit of one folder: (key, (tag, Rec)) batches, rel under the root."""

    def __init__(self, root: str, patterns: tuple, name: str):
        self._root, self._patterns, self._name = root, patterns, name

    def process(self, item):
        prefix, split, unit, keyed = item
        counts = collections.Counter()
        digest = hashlib.sha256()
        batch = []
        for rec in listing.walk_unit(_folder(self._root, prefix), listing.unit_from_bytes(unit), self._patterns,
                                     counts, digest):
            rel = f"{prefix}/{rec.rel}" if prefix else rec.rel
            rec = rec._replace(rel=rel, split=split or None)
            # YOLO's images are keyed by their label file's path; other files by their own
            batch.append(join.yolo_file(rec, split) if keyed == "yolo" else (rel, (join.FILE, rec)))
            if len(batch) >= BATCH:
                yield batch
                batch = []
        if batch:
            yield batch
        key = unit.decode("utf-8", "backslashreplace")
        yield beam.pvalue.TaggedOutput(FINGERPRINT, (f"{self._name}/{prefix}/{key}", digest.hexdigest()))
        for name, count in counts.items():
            yield beam.pvalue.TaggedOutput(STATS, ("excluded/" + name, count))


def _units(root: str, folders: list) -> list:
    """(prefix, split, unit, keyed) of every listing unit of the folders."""
    return [(prefix, split, listing.unit_to_bytes(u), keyed) for prefix, split, keyed in folders
            for u in listing.folder_units(_folder(root, prefix))]


class _CocoFn(beam.DoFn):
    """One pass over a COCO file: its images entries or its annotations."""

    def __init__(self, masks: bool):
        self._masks = masks

    def process(self, item, categories):
        section, split, path = item
        names = dict(categories)
        batch = []
        with fsutil.open_read(path) as raw:
            f = _Hashing(raw)
            if section == coco.IMAGES:
                for iid, file_name, w, h, problem in coco.read_images(f, path):
                    if problem and iid is None:
                        yield beam.pvalue.TaggedOutput(REJECTS, Batch([Reject(file_name or "(an images entry)",
                                                                             Reason.BAD_ANNOTATION.value, problem,
                                                                             split)]))
                        yield beam.pvalue.TaggedOutput(STATS, ("listed", 1))
                        continue
                    value = (join.BAD, (file_name or f"(image {iid})", problem)) if problem else \
                        (join.IMAGE, (file_name, w, h))
                    batch.append(((split, iid), value))
                    if len(batch) >= BATCH:
                        yield batch
                        batch = []
            else:
                for iid, n, obj in coco.read_annotations(f, path, names, self._masks):
                    tag = join.BAD_OBJECT if isinstance(obj, str) else join.OBJECT  # a str: why it cannot be used
                    batch.append(((split, iid), (tag, (n, obj))))
                    if len(batch) >= BATCH:
                        yield batch
                        batch = []
            while f.read(1 << 20):
                pass
        if batch:
            yield batch
        if section == coco.IMAGES:
            yield beam.pvalue.TaggedOutput(FINGERPRINT, (f"annotations/{split}/{path}", f.sha.hexdigest()))


def _read_categories(item) -> tuple:
    _, path = item
    with fsutil.open_read(path) as f:
        return coco.read_categories(f, path)


def _too_big(rel: str, size: int, spec: DetectionSpec, split: str) -> Optional[Reject]:
    """The reject of an annotation file over --max_annotation_bytes, read no further (None if it is not)."""
    if size <= spec.max_annotation_bytes:
        return None
    return Reject(rel, Reason.BAD_ANNOTATION.value, f"{size:,} bytes > --max_annotation_bytes "
                  f"{spec.max_annotation_bytes:,}", split)


def _read_annotation(rec: Rec, spec: DetectionSpec) -> tuple:
    """(bytes, None) of one per-image annotation file, or (None, why not): only
    a regular file is opened (a FIFO would block, /dev/zero never ends), read
    no further than --max_annotation_bytes."""
    try:
        data, _, _ = reads.read_input(rec.path, rec.generation, rec.size,
                                      ReadPolicy(max_file_bytes=spec.max_annotation_bytes))
    except reads.NotAFile as e:
        return None, f"{e}, not an annotation file"
    except reads.TooLarge as e:
        return None, str(e).replace("--max_file_bytes", "--max_annotation_bytes")
    except StorageUnavailable:
        raise
    except Exception as e:  # any filesystem's error on this one file: FileNotFoundError, EIO, 404
        return None, f"cannot be read: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
    return data, None


class _VocFn(beam.DoFn):
    def __init__(self, root: str, spec: DetectionSpec, allow_absolute: bool = False):
        self._root, self._spec, self._absolute = root, spec, allow_absolute

    def process(self, batch):
        out, bad = [], Batch()
        for split, ann_folder, prefix, rec in batch:
            shown = f"{ann_folder.rstrip('/').rsplit('/', 1)[-1]}/{rec.rel}"
            big = _too_big(shown, rec.size, self._spec, split)
            if big is not None:
                bad.append(big)
                continue
            data, problem = _read_annotation(rec, self._spec)
            if problem is not None:
                bad.append(Reject(shown, Reason.BAD_ANNOTATION.value, f"{shown}: {problem}", split))
                continue
            got = join.voc_entry(data, shown, split, self._root, prefix, self._absolute)
            (bad if isinstance(got, Reject) else out).append(got)
        if bad:
            yield beam.pvalue.TaggedOutput(REJECTS, bad)
            yield beam.pvalue.TaggedOutput(STATS, ("listed", len(bad)))
        if out:
            yield out


class _YoloLabelFn(beam.DoFn):
    """Each label file's objects, keyed by its path; a label file that cannot
    be read is a bad entry, so the images it labels are rejected with its
    reason (not written as images without boxes)."""

    def __init__(self, spec: DetectionSpec):
        self._spec = spec

    def process(self, batch):
        out = []
        for key, (_, rec) in batch:
            split = rec.split or ""
            big = _too_big(rec.rel, rec.size, self._spec, split)
            if big is not None:
                out.append((rec.rel, (join.BAD, (split, f"its label file {rec.rel}: {big.detail}"))))
                continue
            data, problem = _read_annotation(rec, self._spec)
            if problem is None:
                try:
                    ann = yolo.parse(data.decode("utf-8-sig"), self._spec.names, rec.rel)
                except UnicodeDecodeError as e:
                    problem = f"not UTF-8 text: {e}"
                else:
                    out.append((rec.rel, (join.ENTRY, (split, tuple(ann)))))
                    continue
            out.append((rec.rel, (join.BAD, (split, f"its label file {rec.rel}: {problem}"))))
        if out:
            yield out


class _RouteFn(beam.DoFn):
    """A join's output: records and rejects in batches, counts summed per bundle."""

    def __init__(self, fn, *args):
        self._fn, self._args = fn, args

    def start_bundle(self):
        self._stats = collections.Counter()

    def process(self, element):
        key, tagged = element
        recs, rejects, entries = Batch(), Batch(), []
        for out in self._fn(key, tagged, *self._args):
            if isinstance(out, Rec):
                recs.append(out)
            elif isinstance(out, Reject):
                rejects.append(out)
            elif out[0] == "stat":
                self._stats[out[1]] += out[2]
            else:
                entries.append((out[1], (out[0], out[2])))
        if recs:
            yield recs
        if entries:
            yield beam.pvalue.TaggedOutput("entries", entries)
        if rejects:
            yield beam.pvalue.TaggedOutput(REJECTS, rejects)

    def finish_bundle(self):
        for name, n in self._stats.items():
            if n:
                yield beam.pvalue.TaggedOutput(STATS, GlobalWindows.windowed_value((name, n)))


def _names_seen(batches) -> set:
    return {o[0] for b in batches for _, (_, (_, ann)) in b for o in ann[4] if isinstance(o[0], str)}


class ListAnnotations(beam.PTransform):
    def __init__(self, inputs: InputSpec, spec: DetectionSpec, labels: LabelSpec, spill_dir: str = ""):
        super().__init__()
        self._inputs, self._spec, self._labels, self._spill_dir = inputs, spec, labels, spill_dir

    def expand(self, pbegin):
        spec, root = self._spec, self._inputs.root
        yolo_fmt = spec.fmt is AnnotationFormat.YOLO
        folders = list(dict.fromkeys((prefix, split, "yolo" if yolo_fmt else "") for split, _, prefix in spec.sources))
        files = self._walk(pbegin, "Images", folders, self._inputs.include)
        stats, rejects, fingerprints = [files[STATS]], [], [files[FINGERPRINT]]
        categories = None
        if spec.fmt is AnnotationFormat.COCO:
            entries, categories = self._coco(pbegin, stats, rejects, fingerprints)
        elif spec.fmt is AnnotationFormat.VOC:
            entries = self._voc(pbegin, stats, rejects, fingerprints)
        else:
            entries = self._yolo(pbegin, stats, rejects, fingerprints)
        joined = ((files[RECORDS], entries) | "FilesAndAnnotations" >> beam.Flatten()
                  | "JoinFiles" >> spill.GroupByKey(self._spill_dir, batched=True)
                  | "Records" >> beam.ParDo(_RouteFn(join.with_files, yolo_fmt)).with_outputs(
                      REJECTS, STATS, "entries", main=RECORDS))
        stats.append(joined[STATS])
        rejects.append(joined[REJECTS])
        if categories is None:
            names = spec.names if yolo_fmt else ()
            categories = pbegin | "Categories" >> beam.Create([tuple(enumerate(names))])
        seen = (entries | "NamesSeen" >> beam.Map(lambda b: _names_seen([b]))
                | "AllNames" >> beam.CombineGlobally(lambda sets: set().union(*sets)))
        labels, contiguous = self._labels, spec.contiguous_ids
        label_map = categories | "LabelMap" >> beam.Map(
            lambda cats, names: box_label_map(cats, names, labels, contiguous), beam.pvalue.AsSingleton(seen))
        return {RECORDS: joined[RECORDS] | "Rebatch" >> beam.FlatMap(lambda b: b)
                | "Batch" >> beam.BatchElements(min_batch_size=BATCH, max_batch_size=BATCH)
                | "AsBatch" >> beam.Map(Batch),
                REJECTS: rejects | "Rejects" >> beam.Flatten(),
                STATS: stats | "Stats" >> beam.Flatten(),
                FINGERPRINT: fingerprints | "Fingerprints" >> beam.Flatten(),
                "label_map": label_map}

    def _walk(self, pbegin, name: str, folders: list, patterns: tuple):
        root = self._inputs.root
        return (pbegin | f"{name}Folders" >> beam.Create([folders])
                | f"{name}Units" >> beam.FlatMap(lambda fs: _units(root, fs))
                | f"{name}Spread" >> beam.Reshuffle()
                | f"{name}Walk" >> beam.ParDo(_WalkFn(root, patterns, name)).with_outputs(STATS, FINGERPRINT,
                                                                                           main=RECORDS))

    def _coco(self, pbegin, stats, rejects, fingerprints):
        spec, root = self._spec, self._inputs.root
        sources = [(split, path) for split, path, _ in spec.sources]
        prefixes = {split: prefix for split, _, prefix in spec.sources}
        absolute = self._inputs.allow_absolute_paths
        categories = (pbegin | "CategoryFiles" >> beam.Create(sources)
                      | "ReadCategories" >> beam.Map(_read_categories)
                      | "AllCategories" >> beam.combiners.ToList()
                      | "MergeCategories" >> beam.Map(merge_categories))
        passes = [(section, split, path) for split, path in sources for section in (coco.IMAGES, coco.ANNOTATIONS)]
        read = (pbegin | "CocoPasses" >> beam.Create(passes)
                | "SpreadPasses" >> beam.Reshuffle()
                | "ReadCoco" >> beam.ParDo(_CocoFn(spec.masks), beam.pvalue.AsSingleton(categories))
                .with_outputs(REJECTS, STATS, FINGERPRINT, main=RECORDS))
        stats.append(read[STATS])
        rejects.append(read[REJECTS])
        fingerprints.append(read[FINGERPRINT])
        images = (read[RECORDS]
                  | "JoinObjects" >> spill.GroupByKey(self._spill_dir, batched=True)
                  | "Images" >> beam.ParDo(_RouteFn(
                      lambda key, tagged: join.coco_image(key, tagged, root, prefixes.get(key[0], ""), absolute)))
                  .with_outputs(REJECTS, STATS, "entries", main=RECORDS))
        stats.append(images[STATS])
        rejects.append(images[REJECTS])
        return images["entries"], categories

    def _voc(self, pbegin, stats, rejects, fingerprints):
        spec, root = self._spec, self._inputs.root
        xmls = []
        for i, (split, ann, prefix) in enumerate(spec.sources):
            walked = (pbegin | f"Xml{i}Units" >> beam.Create([listing.unit_to_bytes(u) for u in listing.folder_units(ann)])
                      | f"Xml{i}Spread" >> beam.Reshuffle()
                      | f"Xml{i}Walk" >> beam.ParDo(_XmlWalkFn(ann, split, prefix)).with_outputs(FINGERPRINT,
                                                                                                  main=RECORDS))
            fingerprints.append(walked[FINGERPRINT])
            xmls.append(walked[RECORDS])
        parsed = (xmls | "AllXml" >> beam.Flatten()
                  | "ParseXml" >> beam.ParDo(_VocFn(root, spec, self._inputs.allow_absolute_paths))
                  .with_outputs(REJECTS, STATS, main=RECORDS))
        stats.append(parsed[STATS])
        rejects.append(parsed[REJECTS])
        return parsed[RECORDS]

    def _yolo(self, pbegin, stats, rejects, fingerprints):
        spec = self._spec
        label_folders = []
        for split, _, prefix in spec.sources:
            label = yolo.label_rel(f"{prefix}/x.jpg" if prefix else "images/x.jpg")
            label_folders.append((label.rsplit("/", 1)[0], split, ""))
        labels = self._walk(pbegin, "Labels", list(dict.fromkeys(label_folders)), ("*.txt",))
        fingerprints.append(labels[FINGERPRINT])
        parsed = (labels[RECORDS]
                  | "ReadLabels" >> beam.ParDo(_YoloLabelFn(spec)).with_outputs(REJECTS, STATS, main=RECORDS))
        stats.append(parsed[STATS])
        rejects.append(parsed[REJECTS])
        return parsed[RECORDS]


class _XmlWalkFn(beam.DoFn):
    def __init__(self, folder: str, split: str, prefix: str):
        self._folder, self._split, self._prefix = folder, split, prefix

    def process(self, unit: bytes):
        digest = hashlib.sha256()
        batch = []
        for rec in listing.walk_unit(self._folder, listing.unit_from_bytes(unit), ("*.xml",),
                                     collections.Counter(), digest):
            batch.append((self._split, self._folder, self._prefix, rec))
            if len(batch) >= BATCH:
                yield batch
                batch = []
        if batch:
            yield batch
        yield beam.pvalue.TaggedOutput(FINGERPRINT, (f"xml/{self._folder}/{unit.decode('utf-8', 'backslashreplace')}",
                                                     digest.hexdigest()))
