"""`check-not-read-only`: a `check` step only observes, so it may call only read-only tools.

Under a policy the step's effective risk decides (the higher of its declared risk and its tool's
catalogue risk; a tool the catalogue does not list counts as `irreversible`). Without one, only
the declared risk is known: a check that declares a risk above `read_only` is reported, one that
declares none is not (nothing says it writes). A check's `rollback` is held to the same rule, by
its tool's catalogue risk.
"""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic
from plangate.ir.nodes import Risk
from plangate.policy.facts import plan_facts


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    if ctx.policy is None:
        for step in ctx.graph.steps.values():
            if step.kind == "check" and step.call is not None and step.risk is not None \
                    and step.risk.level is not None and step.risk.level > Risk.read_only:
                yield _not_read_only(step, f"which is `{step.risk.level.name}` by its declared risk")
        return
    for facts in plan_facts(ctx).values():
        step = facts.step
        if step.kind == "check" and step.rollback is not None:
            entry = ctx.policy.match(step.rollback.tool)
            risk = entry.risk if entry is not None and entry.risk is not None else Risk.irreversible
            if risk > Risk.read_only:
                yield diagnostic(
                    "check-not-read-only", step.rollback.tool_span,
                    f"check `{step.id}` has the rollback `{step.rollback.tool}`, which is `{risk.name}`"
                    + (" by the catalogue" if entry is not None and entry.risk is not None
                       else ": the catalogue gives it no risk"),
                    help="a check only observes, so it has nothing to roll back: remove the `rollback`")
        if step.kind != "check" or step.call is None or facts.effective_risk <= Risk.read_only:
            continue
        if (facts.declared_risk or 0) > Risk.read_only:
            why = f"which is `{facts.effective_risk.name}` by its declared risk"
        elif facts.entry is not None:
            why = f"which is `{facts.effective_risk.name}` by the catalogue"
        else:
            why = f"which the catalogue does not list, so it counts as `{facts.effective_risk.name}`"
        yield _not_read_only(step, why)


def _not_read_only(step, why: str) -> Diagnostic:
    return diagnostic(
        "check-not-read-only", step.call.tool_span,
        f"check `{step.id}` calls `{step.call.tool}`, {why}",
        help="a check only observes: call a read-only tool, or make this a `step` followed by a `check`")
