"""`open-decision`: a pending decision (a warning at check time; execution may not start)."""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    for decision in ctx.plan.decisions:
        if decision.pending:
            yield diagnostic(
                "open-decision", decision.span, f"the decision `{decision.question}` is still pending",
                notes=["a run of this plan pauses before its first step until the decision is made"],
                help=f'record the answer: `decision "{decision.question}" resolved "…"`',
            )
