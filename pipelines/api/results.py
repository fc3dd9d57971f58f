"""What the Python API returns: frozen dataclasses read from what a run
wrote (the manifest, check.json), so a result says what is on disk."""
from __future__ import annotations

import dataclasses
import io
import json
from typing import Iterator, Optional

from tfrecord_pipelines.transforms.core import findings
from tfrecord_pipelines.transforms.storage import fsutil, layout


def _stream_jsonl(path: str) -> Iterator[dict]:
    """The objects of a JSON Lines file, one at a time (local or gs://)."""
    try:
        f = fsutil.open_read(path)
    except FileNotFoundError:
        return
    with f:
        for line in io.TextIOWrapper(f, encoding="utf-8", errors="surrogateescape"):
            if line.strip():
                yield json.loads(line)


@dataclasses.dataclass(frozen=True)
class ConversionResult:
    """A conversion's outcome and figures, from its manifest.

    outcome: "published"; "unchanged" (--versioned: inputs and options as in
    the version LATEST names, nothing published: the fields describe that
    version); "submitted" (a remote job that publishes when it ends: no
    manifest yet) or "dry_run"."""
    outcome: str
    output: str                    # the folder holding the shards (a --versioned run's version folder)
    version: str = ""              # --versioned: the version's name
    splits: dict = dataclasses.field(default_factory=dict)             # {split: records written}
    counts: dict = dataclasses.field(default_factory=dict)             # listed, written, rejected, not_selected
    rejects_by_reason: dict = dataclasses.field(default_factory=dict)  # {reason: count}
    manifest: Optional[dict] = dataclasses.field(default=None, repr=False)
    report: Optional[str] = None   # report.html's path, None when it was not written
    seconds: float = 0.0
    # report.html's "Look at these": (kind, count, text) Findings (transforms/core/findings.py)
    findings: tuple = ()

    @property
    def rejects_file(self) -> str:
        return fsutil.join(self.output, layout.REJECTS)

    def rejects(self) -> Iterator[dict]:
        """Each reject, {"path", "reason", "detail", "split"}, streamed from rejects.jsonl."""
        return _stream_jsonl(self.rejects_file) if self.manifest else iter(())

    def summary(self) -> str:
        """The command's summary of this output."""
        if not self.manifest:
            return f"{self.outcome}: {self.output}"
        from tfrecord_pipelines.console.summary import print_summary
        buf = io.StringIO()
        print_summary(self.output, self.seconds, out=buf)
        return buf.getvalue().strip("\n")

    @classmethod
    def read(cls, outcome: str, output: str, version: str = "", seconds: float = 0.0) -> "ConversionResult":
        if outcome not in ("published", "unchanged"):
            return cls(outcome=outcome, output=output, version=version, seconds=seconds)
        m = layout.read_manifest(output)
        report = (m.get("report") or {}).get("file")
        return cls(outcome=outcome, output=output, version=version or m.get("version", ""),
                   splits={k: s["records"] for k, s in m["splits"].items()},
                   counts={k: v for k, v in m["counts"].items() if k != "excluded"},
                   rejects_by_reason=dict(m["rejects_by_reason"]), manifest=m,
                   report=fsutil.join(output, report) if report else None, seconds=seconds,
                   findings=tuple(findings.findings(m)))


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """A pre-flight check's figures, from check.json (counts: listed = valid +
    rejected + not_selected). would_publish is False when a conversion with
    the same options would be refused for its rejects (--max_reject_fraction)."""
    output: str
    would_publish: bool = True
    splits: dict = dataclasses.field(default_factory=dict)             # {split: valid records}
    counts: dict = dataclasses.field(default_factory=dict)
    rejects_by_reason: dict = dataclasses.field(default_factory=dict)
    figures: Optional[dict] = dataclasses.field(default=None, repr=False)  # check.json
    report: Optional[str] = None
    seconds: float = 0.0
    findings: tuple = ()  # as ConversionResult's, of the records that would be written

    def rejects(self) -> Iterator[dict]:
        from tfrecord_pipelines.transforms.stages.check_report import CHECK_REJECTS
        return _stream_jsonl(fsutil.join(self.output, CHECK_REJECTS)) if self.figures else iter(())

    @classmethod
    def read(cls, output: str, seconds: float = 0.0) -> "CheckResult":
        from tfrecord_pipelines.transforms.stages.check_report import CHECK_JSON
        f = json.loads(fsutil.read_bytes(fsutil.join(output, CHECK_JSON)))
        report = (f.get("report") or {}).get("file")
        return cls(output=output, would_publish=bool(f.get("would_publish", True)),
                   splits={k: s["records"] for k, s in f["splits"].items()},
                   counts={k: v for k, v in f["counts"].items() if k != "excluded"},
                   rejects_by_reason=dict(f["rejects_by_reason"]), figures=f,
                   report=fsutil.join(output, report) if report else None, seconds=seconds,
                   findings=tuple(findings.findings(f, check=True)))


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """Every shard of `output` matched its manifest."""
    output: str
    shards: int
    records: int
    bytes: int


@dataclasses.dataclass(frozen=True)
class ReportResult:
    path: str      # the report.html written
    bytes: int
    seconds: float
    reads: str = ""  # what its thumbnails read, by the deadline (report_data.Budget.summary)
