"""`unreachable-step`: a step that can never run.

A step whose `when` is constant (it reads no name: `false`, `1 > 2`, `[1, 2].exists(v, v > 5)`)
and not `true` never runs (a `when` that is false, fails or is no bool skips the step); nor does a
step that uses the result of a step that never runs (a skipped step has no result, so whatever refers to it is skipped too; an
`after` alone only orders, and a skipped step counts as done for it). Only constant conditions are
judged here; the budget check reasons about the others (which steps can run together).
"""

from __future__ import annotations

from typing import Iterator

from plangate.cel.ast import Expr
from plangate.cel.evaluate import CelError, constant_value, constant_when
from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    if not ctx.graph.is_dag():
        return
    for step_id, cause in never_running(ctx).items():
        step = ctx.graph.steps[step_id]
        if cause == step_id:
            assert step.when is not None
            value = constant_value(step.when)
            why = "is always false" if value is False else "always fails" if isinstance(value, CelError) else \
                "is never a bool"
            yield diagnostic("unreachable-step", step.when.span, f"step `{step_id}` can never run: its `when` {why}",
                             help="remove the step or give it a real condition")
        else:
            yield diagnostic("unreachable-step", step.id_span,
                             f"step `{step_id}` can never run: it uses the result of `{cause}`, which never runs",
                             help="remove the dependency or the step")


def never_running(ctx: PlanContext) -> dict[str, str]:
    """The steps that can never run, in topological order: each with itself when its own `when` is
    constant and not `true`, else with the step that never runs whose result it uses; empty unless the
    plan is a DAG.
    Computed once per plan and kept in `ctx.facts` (the rules and requirements ask too: nothing
    fires for a step that never runs)."""
    known = ctx.facts.get("never_running")
    if known is not None:
        return known
    never: dict[str, str] = {}
    if ctx.graph.is_dag():
        for step_id in ctx.graph.topological_order():
            step = ctx.graph.steps[step_id]
            if step.when is not None and never_true(step.when):
                never[step_id] = step_id
                continue
            blocked_by = next((p for p in ctx.graph.pred[step_id]
                               if p in never and ctx.graph.edges[(p, step_id)].kind == "reference"), None) if never else None
            if blocked_by is not None:
                never[step_id] = blocked_by
    ctx.facts["never_running"] = never
    return never


def never_true(condition: Expr) -> bool:
    """Whether `condition` reads no name and is not `true`: a `when` that skips its step on every run."""
    return constant_when(condition) is False
