"""`duplicate-step`: two steps share an id. The first keeps the id; each later one is reported."""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, Label, diagnostic


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    first = {}
    for step in ctx.plan.steps:
        if step.id in first:
            yield diagnostic(
                "duplicate-step", step.id_span, f"a step named `{step.id}` is already defined",
                labels=[Label(first[step.id].id_span, "first defined here")],
                help="give each step its own id",
            )
        else:
            first[step.id] = step
