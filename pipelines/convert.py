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
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, TestOptions, TypeOptions

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
    options = PipelineOptions(argv)
    run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]
    try:
        local = runners.is_local(options)
        progress_mode = options.view_as(ConvertOptions).progress
        cfg = build_config(options.view_as(ConvertOptions), run_id, progress=local and progress_mode != "off")
        runner = runners.choose_runner(options, argv)
        convert_opts = options.view_as(ConvertOptions)
        output_guard.acquire_lock(cfg.output.lock_dir, run_id, convert_opts.lock_ttl_hours, convert_opts.break_lock)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        output_guard.check_output(cfg.output.output, cfg.inputs.root, cfg.output.overwrite)
        output_guard.remove_leftover_staging(cfg.output.output, run_id)
    except UsageError as e:
        release_lock(cfg.output.lock_dir, run_id)
        print(f"error: {e}", file=sys.stderr)
        return 2
    started = time.time()
    dry_run = bool(options.view_as(TestOptions).dry_run)
    with tempfile.TemporaryDirectory(prefix="tfrecords-progress-") as progress_dir:
        try:
            # Our transforms declare no element types; Beam's construction-time
            # type inference would only cost time.
            options.view_as(TypeOptions).pipeline_type_check = False
            p = beam.Pipeline(runner=runner, options=options)
            build_pipeline(p, cfg, progress_dir if cfg.output.progress else "")
            with ProgressLine(progress_dir if cfg.output.progress else "", progress_mode):
                result = p.run()
                if dry_run:
                    release_lock(cfg.output.lock_dir, run_id)
                    print(f"dry run: the {type(runner).__name__ if not isinstance(runner, str) else runner} job "
                          "was built and not submitted")
                    return 0
                if local or not convert_opts.detach:
                    result.wait_until_finish()
        except (Exception, KeyboardInterrupt) as e:
            release_lock(cfg.output.lock_dir, run_id)
            fsutil.delete_tree(layout.staging_dir(cfg.output.output, run_id))
            msg = _error_message(e)
            if msg is None:
                raise
            print(f"error: {msg}", file=sys.stderr)
            return 1
    if not local:
        if options.view_as(GoogleCloudOptions).template_location:
            print(f"job description written to {options.view_as(GoogleCloudOptions).template_location} for the "
                  "template launcher; the job's last step publishes the output")
            return 0
        state = getattr(result, "state", "")
        print(f"job {'submitted' if convert_opts.detach else 'finished'} ({state}); output {cfg.output.output}, "
              f"complete when {layout.MANIFEST} appears")
        return 0
    if cfg.output.root and not fsutil.exists(fsutil.join(cfg.output.output, layout.MANIFEST)):
        if fsutil.is_local(cfg.output.output) and os.path.isdir(cfg.output.output) \
                and not os.listdir(cfg.output.output):
            os.rmdir(cfg.output.output)
        print(f"unchanged: inputs and options are the same as version {cfg.output.previous_version}; nothing "
              f"published, {fsutil.join(cfg.output.root, layout.LATEST)} still names {cfg.output.previous_version}")
        return 0
    print_summary(cfg.output.output, time.time() - started)
    if cfg.output.root:
        print(f"published version {cfg.output.version}: {fsutil.join(cfg.output.root, layout.LATEST)} now names it")
    return 0


def main() -> None:
    from pipelines.cli import exit_now
    exit_now(run())


if __name__ == "__main__":
    main()
