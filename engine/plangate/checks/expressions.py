"""CEL typing of a plan's expressions: `cel-type-error`, `unknown-name` (and `arg-type` for a map
key other than a string in an argument: a tool is given JSON).

Every expression of a step is type-checked against the plan's environment: each step id stands
for a record with one field, `result`, of type `dyn` (results are known only at run time), that
is meaningful only as `x.result…` — a bare `x` or `x.other` is an `unknown-name` whose help points
to `x.result`; inside `expect`, `idempotency` and `rollback` the step's own `result` is `dyn` too.
`when` and `expect` must be `bool` (or `dyn`). Names that are reported elsewhere (a `x.result`
naming no step, `result` out of its scope, a step naming its own result) are typed `dyn` here so
that one mistake gives one diagnostic, and they are neither listed nor suggested in the help.

Constant mistakes: a well-typed expression is then evaluated part by part where no name is read.
A maximal constant part (no identifier inside, not the branch of a `&&`, `||` or `?:` that may
absorb its error) that fails to evaluate (`1 / 0`, `int("x")`) fails on every run: it is a
`cel-type-error` at the innermost failing part.
"""

from __future__ import annotations

import math
from typing import Iterator

from plangate.cel import ast as cel
from plangate.cel.evaluate import CelError, compile_expr, constant_value, is_macro, leaves, reads_a_name
from plangate.cel.types import BOOL, DYN, RecordType, check_types
from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic
from plangate.graph import step_expressions
from plangate.ir.nodes import Step
from plangate.runtime.canonical import idempotency_key

_NEEDS_BOOL = ("when", "expect")
_OWN_RESULT = ("expect", "idempotency", "rollback")
_ARGUMENTS = ("call", "rollback")
_ABSORBING = (cel.Conditional,)


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    step_type = RecordType.of("step", {"result": DYN}, selected_only=True)
    base = {step_id: step_type for step_id in ctx.graph.steps}
    dangling = frozenset(name.name for name in ctx.graph.dangling if name.name not in base)
    for name in dangling:
        base[name] = DYN
    base.setdefault("result", DYN)  # out-of-scope uses are `result-out-of-scope`, not a type error
    for step in ctx.graph.steps.values():
        hidden_by_scope: dict[bool, frozenset[str]] = {}  # made on first need: `dangling` may be large
        for clause, expr in step_expressions(step):
            own_result = clause in _OWN_RESULT
            hidden = hidden_by_scope.get(own_result)
            if hidden is None:
                hidden = dangling | {step.id} | (frozenset() if own_result else {"result"})
                hidden_by_scope[own_result] = hidden
            result_type, problems = check_types(expr, base, hidden)
            yield from problems
            if problems:
                continue
            failures = constant_errors(expr)
            if not failures and not reads_a_name(expr):
                failures = _whole_constant_error(expr, clause, step)  # a macro that fails as a whole…
            yield from failures
            if clause in _ARGUMENTS:
                yield from _non_string_keys(step, clause, expr)
            if clause in _NEEDS_BOOL and result_type not in (BOOL, DYN):
                yield diagnostic("cel-type-error", expr.span,
                                 f"`{clause}` of step `{step.id}` must be a bool, but `{cel.to_source(expr)}` "
                                 f"is {getattr(result_type, 'name', result_type)}",
                                 help="compare it with something: `… == true`, `… > 0`")


def _non_string_keys(step: Step, clause: str, expr: cel.Expr) -> Iterator[Diagnostic]:
    """`arg-type` for each constant map key other than a string in the value an argument passes (its
    literal lists and maps, nested): a tool is given JSON, whose object keys are strings, so
    `{1: "a"}` would arrive as `{"1": "a"}` — what the rules saw and what the tool gets would differ,
    and `{"1": …, 1: …}` would lose an entry. The runtime refuses such a value too."""
    pending = [expr]
    while pending:  # the parts whose value flows into the argument's value
        node = pending.pop()
        if isinstance(node, cel.Conditional):
            pending += (node.then, node.otherwise)
        elif isinstance(node, cel.Binary) and node.op == "+":
            pending += (node.left, node.right)
        elif isinstance(node, cel.Call) and is_macro(node) and node.function in ("map", "filter"):
            pending.append(node.args[-1] if node.function == "map" else node.target)
        elif isinstance(node, cel.ListExpr):
            pending.extend(node.items)
        elif isinstance(node, cel.MapExpr):
            for key, value in node.entries:
                if isinstance(key, cel.Literal) and key.kind != "string":
                    yield diagnostic(
                        "arg-type", key.span,
                        f"a map in the `{clause}` of step `{step.id}` has the key `{cel.to_source(key)}`, "
                        f"but a tool is given JSON, whose keys are strings",
                        help=f'write the key as a string: `"{cel.to_source(key)}"`')
                pending.append(value)


def constant_errors(expr: cel.Expr) -> list[Diagnostic]:
    """A `cel-type-error` for each maximal constant part of `expr` that fails on every run."""
    if not _has_constant_composite(expr):
        return []  # every part that reads no name is a literal, which cannot fail (the common case)
    found = []
    for part in _constant_parts(expr):
        if isinstance(compile_expr(part)({}), CelError):
            culprit = _innermost_failure(part)
            message = compile_expr(culprit)({})
            assert isinstance(message, CelError)
            found.append(diagnostic("cel-type-error", culprit.span,
                                    f"`{_short(cel.to_source(culprit))}` always fails: {message.message}",
                                    help="this part reads no value of the run, so it fails on every run"))
    return found


def _whole_constant_error(expr: cel.Expr, clause: str, step: Step) -> list[Diagnostic]:
    """A `cel-type-error` when `expr`, which reads no name, fails as a whole (its parts may each be
    fine: a macro's body, or the evaluator's bounds on the work it does); for an argument, an
    `arg-type` when its value holds a NaN or an infinity, which JSON, and so a tool, cannot be
    given; for an `idempotency` key, an `invalid-value` when its value names no key
    (`runtime.canonical.idempotency_key`: `null`, `""`, a NaN), which fails the step on every run."""
    value = constant_value(expr)
    if isinstance(value, CelError):
        return [diagnostic("cel-type-error", expr.span, f"`{_short(cel.to_source(expr))}` always fails: {value.message}",
                           help="this expression reads no value of the run, so it fails on every run")]
    if clause in _ARGUMENTS and any(isinstance(item, float) and not math.isfinite(item) for item in leaves(value)):
        return [diagnostic("arg-type", expr.span, f"`{_short(cel.to_source(expr))}` is or holds a NaN or an infinity, and "
                           "a tool is given JSON, which has neither", help="pass a finite number")]
    if clause == "idempotency":
        try:
            idempotency_key(value)
        except ValueError as error:
            return [diagnostic("invalid-value", expr.span,
                               f"`{_short(cel.to_source(expr))}` is no idempotency key for step `{step.id}`: {error}",
                               notes=["the runtime refuses such a key: the step fails on every run"],
                               help=f'name the one effect of the step: `idempotency "{step.id}-" + …`')]
    return []


def _constant_parts(expr: cel.Expr) -> Iterator[cel.Expr]:
    """The maximal parts of `expr` that read no name, except literals (which cannot fail), and
    except under `&&`, `||`, a conditional's branches and macros, which may absorb an error."""
    constant = _constant_composites(expr)
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cel.Literal):
            continue
        if id(node) in constant:
            yield node
            continue
        if isinstance(node, cel.Binary) and node.op in ("&&", "||"):
            continue  # either side's error may be absorbed by the other
        if isinstance(node, cel.Conditional):
            stack.append(node.condition)  # a branch may never be taken
            continue
        if isinstance(node, cel.Call) and node.function in ("all", "exists", "exists_one", "filter", "map"):
            continue  # a macro's parts may be absorbed or never evaluated
        stack.extend(reversed(cel.children(node)))


def _has_constant_composite(expr: cel.Expr) -> bool:
    """Whether a node of `expr` other than a literal reads no name: exactly when some such node has
    only literals as children (a lowest one does). One pass, without building anything (most
    expressions have none, and need no more of `constant_errors`)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is cel.Literal or kind is cel.Ident:
            continue
        if kind is cel.Select:
            if type(node.operand) is cel.Literal:
                return True
            stack.append(node.operand)
        elif kind is cel.Binary:
            if type(node.left) is cel.Literal and type(node.right) is cel.Literal:
                return True
            stack += (node.left, node.right)
        else:
            parts = cel.children(node)
            if all(type(part) is cel.Literal for part in parts):
                return True
            stack += parts
    return False


def _constant_composites(expr: cel.Expr) -> set[int]:
    """The ids of the nodes of `expr` other than literals that read no name, in one pass: reversed
    pre-order visits every node after all of its descendants."""
    constant: set[int] = set()
    for node in reversed(list(cel.walk(expr))):
        kind = type(node)
        if kind is cel.Literal or kind is cel.Ident:
            continue
        if all(type(child) is cel.Literal or id(child) in constant for child in cel.children(node)):
            constant.add(id(node))
    return constant


def _innermost_failure(expr: cel.Expr) -> cel.Expr:
    """The deepest failing part whose parts all evaluate (the error's origin)."""
    node = expr
    while True:
        if isinstance(node, (cel.Binary, cel.Conditional)) and (
                isinstance(node, cel.Conditional) or node.op in ("&&", "||")):
            return node
        failing = [child for child in cel.children(node) if isinstance(compile_expr(child)({}), CelError)]
        if not failing:
            return node
        node = failing[0]


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "…"
