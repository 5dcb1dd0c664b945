""""Did you mean" suggestions: the closest known name by edit similarity, if it is close enough.

Bounded: difflib's ratio is quadratic in the names' length and linear in the candidates, and a plan
may hold tens of thousands of step ids. A name longer than `MAX_NAME` gets no suggestion, and of
many candidates only the `MAX_CANDIDATES` likeliest are compared: those that share the name's first
character, then those nearest in length.
"""

from __future__ import annotations

import difflib
from typing import Iterable

MAX_CANDIDATES = 100
MAX_NAME = 64


def closest(name: str, candidates: Iterable[str]) -> str | None:
    if len(name) > MAX_NAME:
        return None
    pool = [candidate for candidate in candidates if len(candidate) <= MAX_NAME]
    if len(pool) > MAX_CANDIDATES:
        first = name[:1]
        pool.sort(key=lambda candidate: (candidate[:1] != first, abs(len(candidate) - len(name))))
        del pool[MAX_CANDIDATES:]
    matches = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    match = closest(name, candidates)
    return f"did you mean `{match}`?" if match else None
