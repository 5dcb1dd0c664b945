"""`retry-without-idempotency`: a step whose effective risk is above `read_only` and that is
retried (`retry N`, N > 0) must carry an `idempotency` key, so a retry can never repeat an effect.
Runs with or without a policy (without one, the declared risk counts; no risk means riskiest).
A `check` step is exempt: it must be read-only, which `check-not-read-only` enforces."""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, diagnostic
from plangate.policy.facts import effective_risk, retry_needs_key


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    for step in ctx.graph.steps.values():
        if step.retry <= 0 or step.idempotency is not None:  # most steps: no need to look up the risk
            continue
        entry = ctx.policy.match(step.call.tool) if (ctx.policy is not None and step.call is not None) else None
        risk = effective_risk(step, entry)
        if retry_needs_key(step.kind, step.retry, risk):
            yield diagnostic(
                "retry-without-idempotency", step.retry_span or step.id_span,
                f"step `{step.id}` is retried up to {step.retry} time{'s' if step.retry != 1 else ''} but has no idempotency key, "
                f"and its effect is `{risk.name}`",
                notes=["a retry after a lost answer could perform the effect twice"],
                help=f'add `idempotency "{step.id}-" + …` with a value that names this one effect, or drop the retry')
