"""Counts and sizes as people read them, in the summary, verify and the report."""
from __future__ import annotations


def plural(n: int, word: str, many: str = "") -> str:
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
