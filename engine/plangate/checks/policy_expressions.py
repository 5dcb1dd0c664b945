"""CEL typing of a policy's conditions (`when` of rules and requirements), and of the arguments
of its tests: `cel-type-error`, `unknown-name`.

The environment is the one the contract gives rules: `step` (id, kind, tool, risk, retry, cost,
time, conditional), `call` (tool, args), `args` (a map from names to `dyn`: each tool has its own
arguments), `plan` (id, version, budget with cost, time and calls), the risk constants (ordered
ints) and `duration()`. Conditions must be `bool`. A part of a condition that reads no name and
fails on every evaluation (`1 / 0`, `int("x")`) is a `cel-type-error`, as in plans (`expressions`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator

from plangate.cel import ast as cel
from plangate.cel.types import (BOOL, BYTES, DOUBLE, DURATION, DYN, INT, STRING, TIMESTAMP, UINT, ListType, MapType,
                                RecordType, check_types)
from plangate.checks.context import PolicyContext
from plangate.checks.expressions import constant_errors
from plangate.diagnostics import Diagnostic, diagnostic
from plangate.ir.nodes import Policy, Risk
from plangate.policy.relevance import condition_shape

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
        elif not problems:
            yield from constant_errors(expr)  # `1 / 0 == 1`: fails on every call, so it never fires
            yield from _against_schemas(policy, expr)
    for test in policy.tests:
        for argument in test.call.args:
            _type, problems = check_types(argument.value, {})
            yield from problems


_SCHEMA_TYPES = {"string": STRING, "int": INT, "uint": UINT, "double": DOUBLE, "bool": BOOL, "bytes": BYTES,
                 "duration": DURATION, "timestamp": TIMESTAMP, "list": ListType(DYN), "map": MapType(DYN, DYN)}


def _against_schemas(policy: Policy, expr: cel.Expr) -> Iterator[Diagnostic]:
    """A condition that names its tools (`call.tool == "notes.save" && …`) is typed again with
    `args` as each named tool's catalogue entry declares them (when this policy declares them
    all): one that fails for every such tool (`args.pth`, `args.path > 5` for a string) can never
    fire on a call it is about, which is a mistake, not a rule."""
    tools = condition_shape(expr).tools
    if tools is None or tools.names is None or not tools.names:
        return
    entries = {entry.pattern: entry for entry in policy.tools if entry.pattern in tools.names}
    if entries.keys() != tools.names or any(entry.args is None for entry in entries.values()):
        return
    first: list[Diagnostic] | None = None
    for name in sorted(entries):
        args = RecordType.of("args", {spec.name: _SCHEMA_TYPES.get(spec.type, DYN) for spec in entries[name].args or ()})
        environment = {**ENVIRONMENT, "args": args, "call": RecordType.of("call", {"tool": STRING, "args": args})}
        _type, problems = check_types(expr, environment)
        if not problems:
            return
        first = first if first is not None else [replace(problem, notes=(
            *problem.notes, f"`args` as the catalogue declares them for `{name}`, the tool the condition names"))
            for problem in problems]
    yield from first or ()
