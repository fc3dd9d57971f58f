"""README.md and the site's pages (docs/*.md) are reference for users: what to type and what
happens, each figure once with the command and the machine that produced it. They hold no
dated rows, no commit hashes and no words about how the project was made (sessions, rounds of
work, issue numbers, which day's work a figure came from): a reader can act on none of them.
The history of measurements, where kept, lives with the benchmark (bench/HISTORY.md), not in
the docs."""
from __future__ import annotations

import re

import pytest

from docs_text import doc_files, read

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b20\d\d\d\d\d\d(?:-\d{4,6})?\b")
# a commit hash in backticks: 7-40 hex digits with at least one digit and one letter a-f
HASH = re.compile(r"`(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}`")
COMMIT = re.compile(r"\b(?:commit|on) `?[0-9a-f]{7,40}\b")
MAKING = re.compile("|".join([
    r"\bsessions?\b",
    r"\b(?:this|that|the previous|the next|the last|before this|a later|an earlier) round\b",
    r"\bround of work\b",
    r"\bissues? #?\d+\b", r"(?<![\w&])#\d{1,4}\b",
    r"\b(?:hours|minutes|a day|days) (?:earlier|later)\b",
    r"\b(?:earlier|later) that day\b", r"\bthe same (?:day|evening|morning|night|hour)\b",
    r"\bthe lead\b",
    r"\b(?:this|that|the same) (?:morning|evening|night|afternoon)\b",
    r"\bWIP\b",
]), re.I)


def offences(text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for pattern, what in ((DATE, "a date"), (HASH, "a commit hash"), (COMMIT, "a commit"),
                              (MAKING, "words about the project's making")):
            for m in pattern.finditer(line):
                found.append(f"{n}: {what}: {m.group(0)!r} in {line.strip()[:120]!r}")
    return found


@pytest.mark.parametrize("rel", doc_files())
def test_the_page_is_reference_not_a_diary(rel):
    found = offences(read(rel))
    assert not found, f"{rel}:\n" + "\n".join(found)


def test_the_patterns_catch_what_they_are_for():
    assert offences("Measured on 2026-11-28 on a 2-vCPU VM")
    assert offences("`bench/results/bench-20261129-030047.json`")
    assert offences("the `98ccc19` row") and offences("on commit 618d413, busy")
    assert offences("the next session's changes") and offences("## This round: the fixed cost")
    assert offences("the peers (issue 26)") and offences("22.3 s (32%) hours earlier")
    assert offences("run by the lead on a quiet machine")
    # what a user reads stays: benchmark rounds, flag values, CRCs, counts, ids in examples
    for fine in ("medians of 3 rounds", "`--shard_multiple 8` rounds counts up", "`--num_shards 256`",
                 "a version folder `v20261121-030000`", "`1000000` files", "the shard's CRC32C `deadbeef`",
                 "`image/key/sha256`", "versions: v2, not v1", "a nightly job finds yesterday's version"):
        assert not offences(fine), (fine, offences(fine))
