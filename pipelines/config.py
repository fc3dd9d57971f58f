"""The run's settings as frozen dataclasses and enums, built once from the
command-line strings (pipelines/options.py) and handed to each stage. The
specs the library's stages take live in transforms/specs.py (re-exported
here); what only the application needs (output, the whole config) is here."""
from __future__ import annotations

import dataclasses
import enum

from transforms.images import ImagePolicy
from transforms.specs import (KNOWN_SPLIT_FOLDERS, SPLIT_NAME, InputKind, InputSpec,  # noqa: F401 (re-exported)
                              LabelSource, LabelSpec, LabelType, ShardSpec, SplitSource, SplitSpec)
from transforms.tfrecord_io import Compression  # noqa: F401 (re-exported)


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    output: str                      # the folder the shards go to
    run_id: str
    overwrite: bool = False
    feature_keys: tuple = ()         # ((default key, new key or ""), ...)
    progress: bool = False
    root: str = ""                   # --versioned: the dataset root holding versions and LATEST
    version: str = ""                # --versioned: this run's version folder name
    previous_version: str = ""       # the version LATEST named when the run started
    previous_fingerprint: str = ""
    republish: bool = False          # publish even when nothing changed

    @property
    def lock_dir(self) -> str:
        """Versioned runs lock the dataset root, so scheduled runs never overlap."""
        return self.root or self.output


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    inputs: InputSpec
    labels: LabelSpec
    splits: SplitSpec
    images: ImagePolicy
    shards: ShardSpec
    output: OutputSpec
    max_reject_fraction: float = 1.0

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
        for k in ("run_id", "progress", "previous_fingerprint"):
            d["output"].pop(k, None)
        return d

    def fingerprint_options(self) -> dict:
        """The settings that shape the shards (not where they go)."""
        d = self.describe()
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
        return d
