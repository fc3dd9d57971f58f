"""The run's settings as frozen dataclasses and enums, built once from the
command-line strings (pipelines/options.py) and handed to each stage. The
specs the library's stages take live in transforms/core/specs.py (re-exported
here); the whole config, which only the application needs, is here."""
from __future__ import annotations

import dataclasses
import enum
from typing import Optional

from tfrecord_pipelines.transforms.core import fingerprint, resize
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
    allow_empty: bool = False        # publish a dataset of 0 records (transforms/core/publishable.py)
    allow_shrink: bool = False       # a --versioned run may fall below half of LATEST's records
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
        if self.inputs.source:  # rows from Python: the table is a scratch copy, named by what it was made from
            d["inputs"]["table"] = self.inputs.source
        d["inputs"].pop("source", None)
        for f in dataclasses.fields(self.output):
            if f.metadata.get("recorded", True) is False:  # specs.RUN_ONLY: this run's, not a setting
                d["output"].pop(f.name, None)
        return d

    def fingerprint_options(self) -> dict:
        """The settings that shape the shards (not where they go)."""
        d = fingerprint.shard_options(self.describe())
        if self.images.reencode or self.images.resize.enabled or self.images.apply_orientation \
                or self.images.color_convert:  # CMYK JPEGs and palette PNGs are re-encoded
            # Re-encoded bytes depend on the image library's build: an upgrade is a change.
            d["image_library"] = resize.library_versions()
        return d
