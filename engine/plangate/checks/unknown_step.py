"""`unknown-step`: an `after` or an `x.result` reference names no step of the plan.

Suggests the nearest step id by edit similarity.
"""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic
from plangate.suggest import did_you_mean


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    ids = list(ctx.graph.steps)
    for name in ctx.graph.dangling:
        where = "in `after`" if name.kind == "after" else "in a reference"
        yield diagnostic(
            "unknown-step", name.span,
            f"step `{name.step}` names `{name.name}` {where}, but the plan has no such step",
            help=did_you_mean(name.name, ids) or "the steps are " + ", ".join(f"`{i}`" for i in ids[:8]),
        )
