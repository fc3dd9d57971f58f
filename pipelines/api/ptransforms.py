"""The conversion as two Beam transforms for a pipeline of your own: the same
composites the command's graph is built from (pipelines/run/pipeline.py).

    import apache_beam as beam
    import tfrecord_pipelines as tfp

    cfg = tfp.beam_config(output="out", image_root="images", num_shards=4,
                          split={"train": 0.8, "validation": 0.2})
    with beam.Pipeline() as p:
        rows = p | beam.Create([("cat/1.jpg", "cat"), ("dog/2.jpg", "dog")])  # or your own read
        records = rows | tfp.ToRecords(cfg)
        records | tfp.WriteDataset(cfg)

beam_config takes the keywords of tfrecord_pipelines.convert (the command's
flags), but no input: the rows come from the pipeline.

ToRecords: a PCollection of rows, each a (path, label) pair or a dict
{"path": ..., "label": ..., other columns} (column names: path_column,
label_column, split_column; other columns become typed features only when
named in extra_columns), paths relative to image_root (or absolute below it),
-> a dict of PCollections: "records" (batches of validated, labelled, split
records), "rejects" (batches of Reject(path, reason, detail, split): what
rejects.jsonl will hold), and what the manifest needs ("stats", "label_map",
"fingerprint", ...). Rows are held to a label table's rules: the same
validation, reject reasons and counts.

WriteDataset: that dict -> shards planned, written and published with their
manifest (written last), rejects.jsonl, label_map.json and report.html in
`output`; its output is the manifest (a singleton PCollection). Building the
graph reads and writes nothing: the pipeline's first step takes the output's
lock (before any shard is written), and its publish step releases it; a
pipeline that fails leaves the lock, which the next run in the same process
takes over (else break_lock=True, or it expires: lock_ttl_hours).

Same rows and options as the command's table: byte-identical shards
(tests/e2e/test_ptransforms.py), on any runner. A local runner holds the
record metadata in its memory (no spill files, which need the command's
lifecycle).
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam

from tfrecord_pipelines.run import pipeline
from tfrecord_pipelines.options.config import ConvertConfig
from tfrecord_pipelines.transforms.core.errors import UsageError
from tfrecord_pipelines.transforms.core.specs import RECORDS, InputKind, InputSpec, SplitSource
from tfrecord_pipelines.transforms.stages.list_inputs import ListInputs, ListSpec
from tfrecord_pipelines.transforms.storage import layout

_NOT_HERE = {"input": "the rows come from the pipeline", "label_table": "the rows come from the pipeline",
             "file_list": "the rows come from the pipeline",
             "versioned": "a pipeline of your own writes one output (convert() writes versions)",
             "progress": "the runner shows a pipeline's progress", "spill": "the runner holds the metadata"}


def beam_config(**options) -> ConvertConfig:
    """The settings ToRecords and WriteDataset share, from the keywords of
    convert() (see the module's docstring); UsageError or TypeError as convert()."""
    from tfrecord_pipelines.api import _beam_names
    from tfrecord_pipelines.options import keywords
    from tfrecord_pipelines.options.parse import build_config
    from tfrecord_pipelines.options.resolve import resolve
    from tfrecord_pipelines.options.split_flag import parse_split
    from tfrecord_pipelines.transforms.storage import fsutil
    for name, why in _NOT_HERE.items():
        if options.get(name) not in (None, "", False):
            raise UsageError(f"beam_config: no {name}= here: {why}")
    options.setdefault("path_column", "path")
    options.setdefault("label_column", "label")
    options.setdefault("extra_columns", "")
    try:
        o, _ = keywords.split_keywords("beam_config", options, _beam_names())
    except UsageError as e:
        raise type(e)(keywords.as_keywords(str(e))) from None
    if o.extra_columns.strip() == "*":
        raise UsageError("beam_config: extra_columns='*' cannot be known before the rows are: name the columns")
    split = parse_split(o.split, False, bool(o.split_column))
    if split.source is SplitSource.FOLDERS:
        raise UsageError("beam_config: split='folders' needs an image tree; give a split column or ratios")
    root = fsutil.normalize_root(o.image_root or ".")
    if fsutil.is_local(root):
        import os
        root = os.path.abspath(root)
    inputs = InputSpec(InputKind.ROWS, root, path_column=o.path_column, label_column=o.label_column,
                       split_column=o.split_column if split.source is SplitSource.COLUMN else "",
                       extra_columns=tuple(c.strip() for c in o.extra_columns.split(",") if c.strip()),
                       allow_absolute_paths=o.allow_absolute_paths, source="<Beam PCollection>")
    label_from = "table" if o.label_from == "auto" and not o.label_regex else o.label_from
    run_id = layout.new_run_id()
    cfg = build_config(o, resolve(o, rows=True), run_id, given_inputs=(inputs, split, label_from))
    return dataclasses.replace(cfg, output=dataclasses.replace(cfg.output, job_ends_run=True))


class ToRecords(beam.PTransform):
    """Rows -> validated, labelled, split records and rejects (the module's docstring)."""

    def __init__(self, config: ConvertConfig):
        super().__init__()
        if config.inputs.kind is not InputKind.ROWS:
            raise UsageError("ToRecords takes the config of tfrecord_pipelines.beam_config()")
        self._cfg = config

    def expand(self, rows):
        return (rows | "ListRows" >> ListInputs(ListSpec(self._cfg.inputs))
                | "Records" >> pipeline.PrepareRecords(self._cfg))


class WriteDataset(beam.PTransform):
    """ToRecords' output -> the published dataset (the module's docstring)."""

    def __init__(self, config: ConvertConfig, lock_ttl_hours: float = 48.0, break_lock: bool = False):
        super().__init__()
        if config.inputs.kind is not InputKind.ROWS:
            raise UsageError("WriteDataset takes the config of tfrecord_pipelines.beam_config()")
        self._cfg, self._ttl, self._break = config, lock_ttl_hours, break_lock

    def expand(self, records):
        cfg, ttl, break_lock = self._cfg, self._ttl, self._break
        taken = (records[RECORDS].pipeline | "Output" >> beam.Create([None])
                 | "TakeOutput" >> beam.Map(lambda _: _take_output(cfg, ttl, break_lock)))
        # Every record waits for the lock: no shard is written before the output is this run's.
        locked = records[RECORDS] | "AfterLock" >> beam.Map(lambda batch, _: batch, beam.pvalue.AsSingleton(taken))
        return {**records, RECORDS: locked} | "Dataset" >> pipeline.WriteDataset(cfg)


def _take_output(cfg: ConvertConfig, ttl_hours: float, break_lock: bool) -> bool:
    """What the command's lifecycle does before a run (pipelines/run/lifecycle.py):
    the output checked, locked, cleared of earlier runs' leftovers; the run's
    publish step ends it (job_ends_run). A retry of the step finds the lock
    its own."""
    from tfrecord_pipelines.outputs import output_guard
    from tfrecord_pipelines.run import lifecycle
    from tfrecord_pipelines.transforms.storage import run_lock
    out = cfg.output
    lifecycle.check_output_path(out.output)
    try:
        run_lock.acquire(out.lock_dir, out.run_id, ttl_hours, break_lock, handed_off=True)
    except run_lock.LockHeld:
        if run_lock.held_by(out.lock_dir) != out.run_id:
            raise
        return True
    try:
        from tfrecord_pipelines.outputs import versions
        versions.make_version_folder(out)  # never through a path a neighbour planted under its name
        output_guard.check_output(out.output, "", out.overwrite)  # rows: no folder is listed
        output_guard.remove_leftover_staging(out.output, out.run_id)
    except BaseException:
        run_lock.release(out.lock_dir, out.run_id)
        raise
    return True
