"""`empty-plan`, `missing-call`: a plan needs steps, and every step one `call`."""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    plan = ctx.plan
    if not plan.steps:
        yield diagnostic("empty-plan", plan.id_span, f"plan `{plan.id}` has no steps",
                         help="add a `step name { call tool(…) }`")
    for step in plan.steps:
        if step.call is None:
            yield diagnostic("missing-call", step.id_span, f"{step.kind} `{step.id}` has no `call`",
                             help="say what the step does: `call tool.name(arg: value)`")
