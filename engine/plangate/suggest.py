""""Did you mean" suggestions: the closest known name by edit similarity, if it is close enough.

Bounded: difflib's ratio is quadratic in the names' length and linear in the candidates, and a plan
may hold tens of thousands of step ids. A name longer than `MAX_NAME` gets no suggestion, and of
many candidates only the `MAX_CANDIDATES` likeliest are compared: those that share the name's first
character, then those nearest in length. Of the names difflib finds close enough, the one fewest
edits away wins (`PG1O1` is one edit from `PG101`, two from `PG311`, which difflib ranks first),
then difflib's order (for names up to `RANKED_NAME` long: the edits of a longer one cost too much).
"""

from __future__ import annotations

import difflib
from typing import Iterable

MAX_CANDIDATES = 100
MAX_NAME = 64
RANKED_NAME = 24  # names up to this long are ranked by edits


def closest(name: str, candidates: Iterable[str]) -> str | None:
    if len(name) > MAX_NAME:
        return None
    pool = [candidate for candidate in candidates if len(candidate) <= MAX_NAME]
    if len(pool) > MAX_CANDIDATES:
        first = name[:1]
        pool.sort(key=lambda candidate: (candidate[:1] != first, abs(len(candidate) - len(name))))
        del pool[MAX_CANDIDATES:]
    matches = difflib.get_close_matches(name, pool, n=max(len(pool), 1), cutoff=0.6)
    if len(name) > RANKED_NAME or not matches:
        return matches[0] if matches else None  # a long name: difflib's order alone (edits cost its square)
    best, fewest = None, float("inf")
    for match in matches:  # difflib's order: the likeliest first, so the bound tightens early
        edits = _edits(name, match, fewest)
        if edits < fewest:
            best, fewest = match, edits
    return best


_LOOKALIKES = frozenset({("o", "0"), ("0", "o"), ("l", "1"), ("1", "l"), ("i", "1"), ("1", "i")})


def _edits(a: str, b: str, bound: float) -> float:
    """Levenshtein distance (insertions, deletions, substitutions; both names at most `MAX_NAME`
    long), a letter typed for the digit it looks like (`o` for `0`) counting half; `bound` or more
    as soon as it is sure to reach `bound` (a row's least cost only grows)."""
    if abs(len(a) - len(b)) >= bound:
        return bound
    previous: list[float] = [float(j) for j in range(len(b) + 1)]
    for i, char in enumerate(a, 1):
        current = [float(i)]
        for j, other in enumerate(b, 1):
            change = 0.0 if char == other else 0.5 if (char.lower(), other.lower()) in _LOOKALIKES else 1.0
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + change))
        if min(current) >= bound:
            return bound
        previous = current
    return previous[-1]


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    match = closest(name, candidates)
    return f"did you mean `{match}`?" if match else None
