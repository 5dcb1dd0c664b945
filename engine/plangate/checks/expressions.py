"""CEL typing of a plan's expressions: `cel-type-error`, `unknown-name`.

Every expression of a step is type-checked against the plan's environment: each step id is a
record with one field, `result`, of type `dyn` (results are known only at run time), and inside
`expect`, `idempotency` and `rollback` the step's own `result` is `dyn` too. `when` and `expect`
must be `bool` (or `dyn`). Names that are reported elsewhere (a `x.result` naming no step,
`result` out of its scope) are typed `dyn` here so that one mistake gives one diagnostic.
"""

from __future__ import annotations

from typing import Iterator

from plangate.cel import ast as cel
from plangate.cel.types import BOOL, DYN, RecordType, check_types
from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic

_NEEDS_BOOL = ("when", "expect")
_OWN_RESULT = ("expect", "idempotency", "rollback")


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    step_type = RecordType.of("step", {"result": DYN})
    base = {step_id: step_type for step_id in ctx.graph.steps}
    for name in ctx.graph.dangling:
        base.setdefault(name.name, DYN)
    base.setdefault("result", DYN)  # out-of-scope uses are `result-out-of-scope`, not a type error
    for step in ctx.graph.steps.values():
        for clause, expr in _expressions(step):
            result_type, problems = check_types(expr, base)
            yield from problems
            if not problems and clause in _NEEDS_BOOL and result_type not in (BOOL, DYN):
                yield diagnostic("cel-type-error", expr.span,
                                 f"`{clause}` of step `{step.id}` must be a bool, but `{cel.to_source(expr)}` "
                                 f"is {getattr(result_type, 'name', result_type)}",
                                 help="compare it with something: `… == true`, `… > 0`")


def _expressions(step) -> Iterator[tuple[str, cel.Expr]]:
    from plangate.graph import step_expressions

    for clause, expr in step_expressions(step):
        yield clause, expr
