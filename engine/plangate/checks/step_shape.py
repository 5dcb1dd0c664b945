"""`empty-plan`, `missing-call`, `reserved-step-id`: a plan needs steps, every step one `call`, and
an id that its references can name: in an expression `result` is a step's own result and `true`,
`false`, `null` are constants, so `true.result.v` could never reach a step named `true`. And
`arg-type` for a call (or rollback) that gives `idempotency_key`: the runtime gives a tool that
argument, the step's key, so a call giving it could never be made (every attempt would fail)."""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic

IDEMPOTENCY_PARAMETER = "idempotency_key"  # as `runtime.tools` names it (not imported: the check stays light)

RESERVED = {
    "result": "in an expression, `result` is a step's own result",
    "true": "in an expression, `true` is the bool constant",
    "false": "in an expression, `false` is the bool constant",
    "null": "in an expression, `null` is the null constant",
}


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    plan = ctx.plan
    if not plan.steps:
        yield diagnostic("empty-plan", plan.id_span, f"plan `{plan.id}` has no steps",
                         help="add a `step name { call tool(…) }`")
    for step in plan.steps:
        reserved = RESERVED.get(step.id)
        if reserved is not None:
            yield diagnostic("reserved-step-id", step.id_span,
                             f"`{step.id}` cannot be a step id: {reserved}, so no reference could name the step",
                             help=f"give the step another id, such as `{step.id}_step`")
        if step.call is None:
            yield diagnostic("missing-call", step.id_span, f"{step.kind} `{step.id}` has no `call`",
                             help="say what the step does: `call tool.name(arg: value)`")
        for clause, call in (("call", step.call), ("rollback", step.rollback)):
            for argument in call.args if call is not None else ():
                if argument.name == IDEMPOTENCY_PARAMETER:
                    yield diagnostic(
                        "arg-type", argument.span,
                        f"the `{clause}` of step `{step.id}` gives `{IDEMPOTENCY_PARAMETER}`, which the runtime "
                        "gives a tool: the step's idempotency key",
                        help="remove the argument and write the key on the step: `idempotency \"…\"`")
