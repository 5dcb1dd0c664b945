"""`unknown-step`: an `after` or an `x.result` reference names no step of the plan.

Suggests the nearest step id by edit similarity (for the first `MAX_SUGGESTIONS` names). A name
repeated in one step's `after` (`after zz, zz`) is one mistake, reported at its first place; each
reference is reported where it stands.
"""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, backticked, diagnostic
from plangate.suggest import did_you_mean


# Suggestions cost a similarity search over every step id; past this many unknown names (a
# generated or broken file) the rest are reported without one, so the check stays linear.
MAX_SUGGESTIONS = 50


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    ids = list(ctx.graph.steps)
    seen: set[tuple[str, str]] = set()
    for index, name in enumerate(ctx.graph.dangling):
        if name.kind == "after":
            if (name.step, name.name) in seen:
                continue
            seen.add((name.step, name.name))
        where = "in `after`" if name.kind == "after" else "in a reference"
        # the step itself is no answer: it cannot come after itself, nor read its own result so
        suggestion = did_you_mean(name.name, (i for i in ids if i != name.step)) if index < MAX_SUGGESTIONS else None
        others = [i for i in ids[:9] if i != name.step][:8]
        listing = ("the other steps are " + backticked(others) + (", …" if len(ids) > len(others) + 1 else "")
                   if others else "the plan has no other step")
        yield diagnostic(
            "unknown-step", name.span,
            f"step `{name.step}` names `{name.name}` {where}, but the plan has no such step",
            help=suggestion or listing,
        )
