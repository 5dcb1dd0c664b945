"""`result-out-of-scope`: bare `result` (the step's own result) exists only in `expect`,
`idempotency` and `rollback`; in `call` arguments and `when` the step has not run yet."""

from __future__ import annotations

from typing import Iterator

from plangate.cel.ast import uses_bare_result
from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    for step in ctx.plan.steps:
        places = [("call", argument.value) for argument in step.call.args] if step.call is not None else []
        if step.when is not None:
            places.append(("when", step.when))
        for clause, expr in places:
            span = uses_bare_result(expr)
            if span is not None:
                yield diagnostic(
                    "result-out-of-scope", span,
                    f"`result` in `{clause}` of step `{step.id}`: the step has no result before it runs",
                    help="use another step's result as `name.result…`; `result` alone belongs in "
                         "`expect`, `idempotency` or `rollback`",
                )
