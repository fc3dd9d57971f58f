"""Side-input values Beam's state cache does not walk to weigh.

The SDK harness caches each side input it reads, weighed by walking every
object it holds (objsize, a Python call per object). The quality checks'
partial summaries (transforms/stages/check_quality.py) are a few dozen
elements holding ~300,000 small objects at 50,000 images: weighing them took
most of a second of a run's critical path (bench/incremental.py (a)), longer
than building them. Wrapped in `Unsized`, an element is
weighed as itself: Beam's own hook for this (statecache.CacheAware) says which
objects count, here none beyond the wrapper. The values are the same; only
the cache's estimate of their memory is smaller, and a run's side inputs are
few and read once.
"""
from __future__ import annotations

from apache_beam.runners.worker.statecache import CacheAware


class Unsized(CacheAware):
    __slots__ = ("value",)

    def __init__(self, value):
        super().__init__()
        self.value = value

    def get_referents_for_cache(self) -> list:
        return []

    def __reduce__(self):
        return Unsized, (self.value,)


def unwrap(values) -> list:
    return [v.value if isinstance(v, Unsized) else v for v in values]
