""""Did you mean" suggestions: the closest known name by edit similarity, if it is close enough."""

from __future__ import annotations

import difflib
from typing import Iterable


def closest(name: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str | None:
    match = closest(name, candidates)
    return f"did you mean `{match}`?" if match else None
