"""The previous version's provenance entries, read in parallel (a shard
each) and keyed like the records, for the stages that match records with
them (MatchPrevious, and PlanShards when it matches in its own grouping)."""
from __future__ import annotations

import collections
import dataclasses
import logging

import apache_beam as beam

from tfrecord_pipelines.transforms.core import provenance, sharding
from tfrecord_pipelines.transforms.core.matching import ENTRIES
from tfrecord_pipelines.transforms.core.specs import DEFAULT_IO_TIMEOUT, STATS
from tfrecord_pipelines.transforms.storage import copy_trust, previous, spill

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class MatchSpec:
    """The match's settings."""
    previous: provenance.PreviousVersion  # the version whose records may be copied
    seed: int = 0                  # the run's shuffle seed: records and entries are keyed alike
    timeout: float = DEFAULT_IO_TIMEOUT  # --io_timeout, for a previous version in a bucket
    spill_dir: str = ""            # a local run's spill folder (transforms/storage/spill.py)


class _ReadProvenanceFn(beam.DoFn):
    """One previous shard's provenance entries, by (split, bucket)."""

    def __init__(self, prev: provenance.PreviousVersion, seed: int, timeout: float, spill_dir: str = ""):
        self._prev, self._seed, self._timeout, self._spill_dir = prev, seed, timeout, spill_dir

    def process(self, shard: provenance.PrevShard):
        try:
            entries = previous.read_provenance(self._prev.folder, shard, self._timeout)
        except previous.Damaged as e:
            log.warning("version %s: %s; its %d records are read from their sources", self._prev.version, e,
                        shard.records)
            yield beam.pvalue.TaggedOutput(STATS, ("incremental/damaged", shard.records))
            return
        why = copy_trust.why_untrusted(self._prev, shard)  # after the read: a change before it or during it shows
        if why:
            log.info("version %s: %s: %s; its %d records are read from their sources", self._prev.version,
                     shard.name, why, shard.records)
            yield beam.pvalue.TaggedOutput(STATS, ("incremental/untrusted", shard.records))
            return
        groups = collections.defaultdict(list)
        for e in entries:
            groups[(shard.split, sharding.bucket_of(sharding.shuffle_key(self._seed, e.rel)))].append(
                (shard.name, *e))
        put = spill.putter(self._spill_dir)
        for key, items in sorted(groups.items()):
            yield key, (ENTRIES, put(items))


class PreviousEntries(beam.PTransform):
    """Applied to the pipeline: ((split, bucket), (ENTRIES, [entry rows]
    packed or spilled)); STATS: records of damaged provenance files."""

    def __init__(self, spec: MatchSpec):
        super().__init__()
        self._spec = spec

    def expand(self, pipeline):
        spec = self._spec
        return (pipeline
                | "PreviousShards" >> beam.Create(list(spec.previous.shards))
                | "Spread" >> beam.Reshuffle()
                | "ReadProvenance" >> beam.ParDo(_ReadProvenanceFn(spec.previous, spec.seed, spec.timeout,
                                                                   spec.spill_dir)).with_outputs(STATS, main="e"))


def entries_of(values) -> list:
    """The entry rows of PreviousEntries' values."""
    return [row for v in values for row in spill.load(v[1])]


def stats(counts: collections.Counter) -> list:
    """A match's counts as STATS elements."""
    return [beam.pvalue.TaggedOutput(STATS, ("incremental/" + what, n)) for what, n in sorted(counts.items()) if n]
