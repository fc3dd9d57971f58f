"""The run's settings as frozen dataclasses and enums, built once from the
command-line strings (pipelines/options.py) and handed to each stage. The
specs the library's stages take live in transforms/core/specs.py (re-exported
here); the whole config, which only the application needs, is here."""
from __future__ import annotations

import dataclasses
import enum
from typing import Optional

from tfrecord_pipelines.transforms.core import resize
from tfrecord_pipelines.transforms.core.images import ImagePolicy
from tfrecord_pipelines.transforms.core.specs import (KNOWN_SPLIT_FOLDERS, SPLIT_NAME, InputKind, InputSpec,  # noqa: F401 (re-exported)
                                   LabelSource, LabelSpec, LabelType, OutputSpec, ShardSpec, SplitSource, SplitSpec)
from tfrecord_pipelines.transforms.core.specs import DetectionSpec, DuplicatePolicy, QualitySpec  # noqa: F401 (re-exported)
from tfrecord_pipelines.transforms.core.tfrecord_io import Compression  # noqa: F401 (re-exported)


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    inputs: InputSpec
    labels: LabelSpec
    splits: SplitSpec
    images: ImagePolicy
    shards: ShardSpec
    output: OutputSpec
    max_reject_fraction: float = 1.0
    quality: QualitySpec = QualitySpec()
    detection: Optional[DetectionSpec] = None  # --annotations: object boxes (and masks)

    def describe(self) -> dict:
        """The settings as plain JSON values, for the manifest."""
        def plain(v):
            if isinstance(v, enum.Enum):
                return v.value
            if dataclasses.is_dataclass(v):
                return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
            if isinstance(v, (tuple, list, frozenset, set)):
                items = sorted(v) if isinstance(v, (frozenset, set)) else v
                return [plain(x) for x in items]
            return v
        d = plain(self)
        for k in ("run_id", "progress", "previous_fingerprint", "job_ends_run", "check_only"):
            d["output"].pop(k, None)
        return d

    def fingerprint_options(self) -> dict:
        """The settings that shape the shards (not where they go)."""
        d = self.describe()
        if d.get("detection") is None:
            d.pop("detection", None)  # runs without annotations fingerprint as before
        else:
            d["detection"].pop("found", None)
        out = d.pop("output")
        d["feature_keys"] = out["feature_keys"]
        d["inputs"].pop("fingerprint_root", None)
        # The label map that results is fingerprinted instead (it is the same
        # whether computed, or carried from the previous version).
        d["labels"].pop("frozen_map", None)
        d["labels"].pop("extend_map", None)
        # How fast files are read changes nothing written.
        d["images"]["reads"].pop("in_flight", None)
        d["images"]["reads"].pop("timeout", None)
        if self.images.reencode or self.images.resize.enabled or self.images.apply_orientation:
            # Re-encoded bytes depend on the image library's build: an upgrade is a change.
            d["image_library"] = resize.library_versions()
        return d
