"""`unreachable-step`: a step that can never run.

A step whose `when` is constant and false (`false`, `1 > 2`: it reads no name) never runs; nor does a step that uses the result of a
step that never runs (a skipped step has no result, so whatever refers to it is skipped too; an
`after` alone only orders, and a skipped step counts as done for it). Only constant conditions are
judged here; the budget check reasons about the others (which steps can run together).
"""

from __future__ import annotations

from typing import Iterator

from plangate.cel.ast import Expr, Ident, walk
from plangate.cel.evaluate import compile_expr
from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    if not ctx.graph.is_dag():
        return
    never: dict[str, str] = {}  # step → the step whose `when` rules it out
    for step_id in ctx.graph.topological_order():
        step = ctx.graph.steps[step_id]
        if step.when is not None and constant_false(step.when):
            never[step_id] = step_id
            yield diagnostic("unreachable-step", step.when.span, f"step `{step_id}` can never run: its `when` is always false",
                             help="remove the step or give it a real condition")
            continue
        blocked_by = next((p for p in ctx.graph.pred[step_id]
                           if p in never and ctx.graph.edges[(p, step_id)].kind == "reference"), None) if never else None
        if blocked_by is not None:
            never[step_id] = blocked_by
            yield diagnostic("unreachable-step", step.id_span,
                             f"step `{step_id}` can never run: it uses the result of `{blocked_by}`, which never runs",
                             help="remove the dependency or the step")


def constant_false(condition: Expr) -> bool:
    if any(isinstance(node, Ident) for node in walk(condition)):
        return False
    return compile_expr(condition)({}) is False
