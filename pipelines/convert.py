"""Convert an image tree or label table into TFRecord shards.

    python -m pipelines.convert --input ./images --output ./out [Beam flags]

The pipeline, one stage per step (element shapes in the comments):
    ListInputs | AssignLabels | Split | ValidateImages | PlanShards | WriteShards | Publish
"""
from __future__ import annotations

if __name__ == "__main__":  # start the workers' zygote while Beam is imported below
    import sys as _sys

    from pipelines import local_worker as _local_worker
    _local_worker.prestart(_sys.argv[1:])

import logging
import os
import sys
import tempfile
import time
import uuid
from typing import Optional

import apache_beam as beam
from apache_beam.options.pipeline_options import (GoogleCloudOptions, PipelineOptions, StandardOptions, TestOptions,
                                                      TypeOptions)

from pipelines import __version__, local_worker, output_guard, runner as runners
from pipelines.config import ConvertConfig
from pipelines.options import ConvertOptions, help_parser
from pipelines.parse import UsageError, build_config
from pipelines.report import ProgressLine, print_summary
from transforms import fingerprint, fsutil, layout
from transforms.assign_labels import AssignLabels
from transforms.fingerprint import FINGERPRINT
from transforms.list_inputs import RECORDS, REJECTS, STATS, ListInputs
from transforms.plan_shards import PlanShards
from transforms.labels import LabelError
from transforms.publish import Publish, PublishError, release_lock
from transforms.split import Split
from transforms.validate_images import ValidateImages
from transforms.write_shards import WriteShards


def build_pipeline(p: beam.Pipeline, cfg: ConvertConfig, progress_dir: str = "") -> None:
    out = cfg.output
    staging = layout.staging_dir(out.output, out.run_id)
    listed = p | "ListInputs" >> ListInputs(cfg.inputs)
    # [Rec(rel, path, size, raw label/split/extras)] batches
    labeled = listed[RECORDS] | "AssignLabels" >> AssignLabels(cfg.labels, cfg.inputs.extra_columns)
    # [Rec + label_id | target, typed extras]; label_map: singleton LabelMap
    split = labeled[RECORDS] | "Split" >> Split(cfg.splits, cfg.shards.seed, cfg.shards.max_per_split)
    # [Rec + split, shuffle key]
    fp = (listed[FINGERPRINT] | "Fingerprint" >> beam.combiners.ToList()
          | "RunFingerprint" >> beam.Map(
              lambda digests, lm: fingerprint.combine(digests + [("label_map", fingerprint.options_digest(
                  lm.to_json()))], fingerprint.options_digest(cfg.fingerprint_options())),
              beam.pvalue.AsSingleton(labeled["label_map"])))
    # singleton: sha256 of the listing, the options and the label map
    records = split[RECORDS]
    if out.previous_fingerprint and not out.republish:
        records = records | "SkipIfUnchanged" >> beam.FlatMap(
            lambda b, run_fp: [] if fingerprint.unchanged(run_fp, out.previous_fingerprint) else [b],
            beam.pvalue.AsSingleton(fp))
    valid = records | "ValidateImages" >> ValidateImages(cfg.images, progress_dir)
    # [Rec + size, format, height, width, channels, crc]
    planned = valid[RECORDS] | "PlanShards" >> PlanShards(cfg.shards)
    # ((split, index, num_shards), [[(position, Rec)]]); plans: singleton {split: SplitPlan}
    written = planned["shards"] | "WriteShards" >> WriteShards(
        staging, cfg.shards.compression, cfg.images, dict(out.feature_keys), labeled["label_map"], progress_dir)
    # ShardResult(name, temp path, records, bytes, sha256)
    rejects = ([pc for pc in (listed.get(REJECTS), labeled[REJECTS], split[REJECTS], valid[REJECTS],
                              written[REJECTS]) if pc is not None]
               | "AllRejects" >> beam.Flatten())
    stats = [pc for pc in (listed[STATS], split.get(STATS)) if pc is not None] | "AllStats" >> beam.Flatten()
    ({"shards": written["shards"], "rejects": rejects, "stats": stats,
      "label_map": labeled["label_map"], "plans": planned["plans"], "fingerprint": fp}
     | "Publish" >> Publish(spec=out, staging=staging, options=cfg.describe(),
                            options_fingerprint=fingerprint.options_digest(cfg.fingerprint_options()),
                            compression=cfg.shards.compression,
                            max_reject_fraction=cfg.max_reject_fraction, tool_version=__version__))
    # manifest.json, written last


def _error_message(e: BaseException) -> Optional[str]:
    """Our own error inside a Beam failure (Beam wraps it with tracebacks)."""
    if isinstance(e, (PublishError, LabelError)):
        return str(e).split(" [while running")[0]
    text = str(e)
    for cls in _OWN_ERRORS:
        marker = cls + ": "
        if marker in text:
            return text[text.rindex(marker) + len(marker):].split("\n")[0].split(" [while running")[0]
    return None


_OWN_ERRORS = ("TooManyRejects", "PublishError", "LabelError")


class _OwnErrorsFilter(logging.Filter):
    """Beam logs a traceback for every failed bundle; ours get a one-line message."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(name in text for name in _OWN_ERRORS)


def _quiet_beam_logs() -> None:
    # Local workers relay their start-up chatter at WARNING; keep errors only.
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(logging.ERROR)
    logging.getLogger("apache_beam.options.pipeline_options").setLevel(logging.ERROR)
    # We run subprocess workers in Beam's in_memory mode (pipelines/runner.py); its warning about that is moot.
    logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner").setLevel(logging.ERROR)
    for name in ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                 "apache_beam.runners.portability.local_job_service"):
        logging.getLogger(name).addFilter(_OwnErrorsFilter())


def run(argv: Optional[list] = None, prog: str = "python -m pipelines.convert") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(argv, prog)
    finally:
        local_worker.stop_zygote()


def _run(argv: list, prog: str) -> int:
    _quiet_beam_logs()
    if "-h" in argv or "--help" in argv:
        help_parser(prog).print_help()
        return 0
    try:
        options, cfg, runner = _prepare(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    started = time.time()
    try:
        outcome = _execute(options, cfg, runner)
    except (Exception, KeyboardInterrupt) as e:
        release_lock(cfg.output.lock_dir, cfg.output.run_id)
        fsutil.delete_tree(layout.staging_dir(cfg.output.output, cfg.output.run_id))
        msg = _error_message(e)
        if msg is None:
            raise
        print(f"error: {msg}", file=sys.stderr)
        return 1
    _report(options, cfg, runner, outcome, time.time() - started)
    return 0


def _prepare(argv: list) -> tuple:
    """(options, config, runner), with the output checked and locked; raises
    UsageError before anything is submitted."""
    options = PipelineOptions(argv)
    opts = options.view_as(ConvertOptions)
    run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]
    cfg = build_config(opts, run_id, progress=runners.is_local(options) and opts.progress != "off")
    runner = runners.choose_runner(options, argv)
    output_guard.acquire_lock(cfg.output.lock_dir, run_id, opts.lock_ttl_hours, opts.break_lock)
    try:
        output_guard.check_output(cfg.output.output, cfg.inputs.root, cfg.output.overwrite)
        output_guard.remove_leftover_staging(cfg.output.output, run_id)
    except UsageError:
        release_lock(cfg.output.lock_dir, run_id)
        raise
    return options, cfg, runner


def _execute(options: PipelineOptions, cfg: ConvertConfig, runner) -> str:
    """Builds and runs the pipeline: "dry_run", "submitted" or "done"."""
    opts = options.view_as(ConvertOptions)
    # Our transforms declare no element types; construction-time type inference would only cost time.
    options.view_as(TypeOptions).pipeline_type_check = False
    with tempfile.TemporaryDirectory(prefix="tfrecords-progress-") as progress_dir:
        folder = progress_dir if cfg.output.progress else ""
        p = beam.Pipeline(runner=runner, options=options)
        build_pipeline(p, cfg, folder)
        with ProgressLine(folder, opts.progress):
            result = p.run()
            if options.view_as(TestOptions).dry_run:
                release_lock(cfg.output.lock_dir, cfg.output.run_id)
                return "dry_run"
            if opts.detach and not runners.is_local(options):
                return "submitted"
            result.wait_until_finish()
    return "done"


def _report(options: PipelineOptions, cfg: ConvertConfig, runner, outcome: str, seconds: float) -> None:
    out = cfg.output
    template = options.view_as(GoogleCloudOptions).template_location
    if outcome == "dry_run":
        name = runner if isinstance(runner, str) else type(runner).__name__
        print(f"dry run: the {name} job was built and not submitted")
    elif not runners.is_local(options) and template:
        print(f"job description written to {template} for the template launcher; the job's last step publishes "
              "the output")
    elif not runners.is_local(options):
        print(f"job {outcome} ({options.view_as(StandardOptions).runner}); output {out.output}, complete when "
              f"{layout.MANIFEST} appears")
    elif out.root and not fsutil.exists(fsutil.join(out.output, layout.MANIFEST)):
        if fsutil.is_local(out.output) and os.path.isdir(out.output) and not os.listdir(out.output):
            os.rmdir(out.output)
        print(f"unchanged: inputs and options are the same as version {out.previous_version}; nothing "
              f"published, {fsutil.join(out.root, layout.LATEST)} still names {out.previous_version}")
    else:
        print_summary(out.output, seconds)
        if out.root:
            print(f"published version {out.version}: {fsutil.join(out.root, layout.LATEST)} now names it")


def main() -> None:
    from pipelines.cli import exit_now
    exit_now(run())


if __name__ == "__main__":
    main()
