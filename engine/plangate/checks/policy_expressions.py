"""CEL typing of a policy's conditions (`when` of rules and requirements), and of the arguments
of its tests: `cel-type-error`, `unknown-name`.

The environment is the one the contract gives rules: `step` (id, kind, tool, risk, retry, cost,
time, conditional), `call` (tool, args), `args` (a map from names to `dyn`: each tool has its own
arguments), `plan` (id, version, budget with cost, time and calls), the risk constants (ordered
ints) and `duration()`. Conditions must be `bool`.
"""

from __future__ import annotations

from typing import Iterator

from plangate.cel import ast as cel
from plangate.cel.types import BOOL, DOUBLE, DURATION, DYN, INT, STRING, MapType, RecordType, check_types
from plangate.checks.context import PolicyContext
from plangate.diagnostics import Diagnostic, diagnostic
from plangate.ir.nodes import Risk

ARGS = MapType(STRING, DYN)
ENVIRONMENT = {
    "step": RecordType.of("step", {"id": STRING, "kind": STRING, "tool": STRING, "risk": INT, "retry": INT,
                                   "cost": DOUBLE, "time": DURATION, "conditional": BOOL}),
    "call": RecordType.of("call", {"tool": STRING, "args": ARGS}),
    "args": ARGS,
    "plan": RecordType.of("plan", {"id": STRING, "version": INT, "budget": RecordType.of(
        "budget", {"cost": DOUBLE, "time": DURATION, "calls": INT})}),
    **{risk.name: INT for risk in Risk},
}


def check(ctx: PolicyContext) -> Iterator[Diagnostic]:
    policy = ctx.policy
    conditions = [(f"rule `{rule.name}`", rule.when) for rule in policy.rules]
    conditions += [(f"`require {requirement.kind}`", requirement.when)
                   for requirement in policy.requirements if requirement.when is not None]
    for what, expr in conditions:
        result_type, problems = check_types(expr, ENVIRONMENT)
        yield from problems
        if not problems and result_type not in (BOOL, DYN):
            yield diagnostic("cel-type-error", expr.span,
                             f"the condition of {what} must be a bool, but `{cel.to_source(expr)}` is "
                             f"{getattr(result_type, 'name', result_type)}")
    for test in policy.tests:
        for argument in test.call.args:
            _type, problems = check_types(argument.value, {})
            yield from problems
