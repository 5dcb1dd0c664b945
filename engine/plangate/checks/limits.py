"""`limit-exceeded`: a figure the plan declares is over a policy limit or a tool's cap.

Each comparison stands alone and each breach is reported:
- a step's `retry` over `limit retries`;
- a step's declared cost (the high end of its range) over its tool's catalogue `cost <=` cap;
- a step's declared `time` over its tool's catalogue `time <=` cap;
- the plan's own `budget` (`cost`, `time`, `calls`) over `limit cost` / `limit time` / `limit calls`
  (a plan can never weaken a policy, so declaring more is a mistake even if no execution reaches it);
- the plan's number of steps over `limit steps`.
Money that meets must share one currency; an amount without one adopts the other's. Otherwise the
comparison is skipped and `currency-mismatch` says why. Without a policy nothing is compared (what
executions can actually reach is the budget check's business).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.checks.currency import plan_currency
from plangate.diagnostics import Diagnostic, Label, diagnostic
from plangate.ir.nodes import Money
from plangate.policy.compiled import LimitValue, format_seconds
from plangate.source import Span


def shared_currency(first: str | None, second: str | None) -> tuple[bool, str | None]:
    """Whether two amounts may meet, and the currency they then share."""
    if first and second and first != second:
        return False, None
    return True, first or second


def money_text(amount: Decimal, currency: str | None) -> str:
    """An amount as a message shows it: in plain digits (`1000`, not `1E+3`), as written otherwise."""
    return f"{amount:f} {currency}" if currency else f"{amount:f}"


def limit_text(limit: LimitValue) -> str:
    return f"`limit {limit.name} <= {limit.text()}` of policy `{limit.policy}`"


def currency_mismatch(span: Span, what: str, money: str, other: str, other_span: Span,
                      other_label: str | None = None) -> Diagnostic:
    return diagnostic("currency-mismatch", span, f"{what} (`{money}`) cannot be compared with `{other}`",
                      labels=[Label(other_span, other_label or f"`{other}` is here")],
                      help="state both amounts in one currency")


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    if ctx.policy is None:
        return
    policy = ctx.policy
    retries = policy.limit("retries")
    for step in ctx.plan.steps:
        if retries is not None and retries.count is not None and step.retry > retries.count:
            yield diagnostic(
                "limit-exceeded", step.retry_span or step.id_span,
                f"step `{step.id}` retries {step.retry} time{'s' if step.retry != 1 else ''}, over {limit_text(retries)}",
                labels=[Label(retries.span, "the limit is here")],
                help=f"retry at most {retries.count} time{'s' if retries.count != 1 else ''}")
        entry = policy.match(step.call.tool) if step.call is not None else None
        if entry is None:
            continue
        if step.cost is not None and entry.cost_cap is not None:
            high = step.cost.high
            meets, currency = shared_currency(high.currency, entry.currency)
            if not meets:
                cap = money_text(entry.cost_cap, entry.currency)
                pattern, where = entry.cost_source()  # the entry, not the amount: it keeps no span of its cap
                yield currency_mismatch(high.span, f"the cost of step `{step.id}`", str(high), cap, where,
                                        f"`{pattern}` caps its cost at `{cap}`")
            elif high.amount > entry.cost_cap:
                pattern, where = entry.cost_source()
                yield diagnostic(
                    "limit-exceeded", high.span,
                    f"step `{step.id}` may cost `{money_text(high.amount, currency)}`, over the "
                    f"`{money_text(entry.cost_cap, currency)}` cap of tool `{pattern}`",
                    labels=[Label(where, "the cap is here")],
                    help=f"keep the step's cost within `{money_text(entry.cost_cap, currency)}`")
        if step.time is not None and entry.time_cap is not None and step.time.seconds > entry.time_cap:
            pattern, where = entry.time_source()
            yield diagnostic(
                "limit-exceeded", step.time.span,
                f"step `{step.id}` may take `{step.time}`, over the `{format_seconds(entry.time_cap)}` "
                f"time cap of tool `{pattern}`",
                labels=[Label(where, "the cap is here")],
                help=f"keep the step's time within `{format_seconds(entry.time_cap)}`")
    yield from _plan_budget(ctx)
    steps = policy.limit("steps")
    if steps is not None and steps.count is not None and len(ctx.plan.steps) > steps.count:
        yield diagnostic("limit-exceeded", ctx.plan.id_span,
                         f"the plan has {len(ctx.plan.steps)} steps, over {limit_text(steps)}",
                         labels=[Label(steps.span, "the limit is here")],
                         help="split the plan into smaller plans")


def _plan_budget(ctx: PlanContext) -> Iterator[Diagnostic]:
    budget, policy = ctx.plan.budget, ctx.policy
    if budget is None or policy is None:
        return
    cost, time, calls = policy.limit("cost"), policy.limit("time"), policy.limit("calls")
    if budget.cost is not None and cost is not None and cost.amount is not None:
        yield from _budget_cost(budget.cost, cost, plan_currency(ctx)[0])
    if budget.time is not None and time is not None and time.seconds is not None \
            and budget.time.seconds > time.seconds:
        yield _over(budget.time.span, f"the plan's budget allows `{budget.time}`", time)
    if budget.calls is not None and calls is not None and calls.count is not None and budget.calls > calls.count:
        yield _over(budget.calls_span or budget.span, f"the plan's budget allows {budget.calls} calls", calls)


def _budget_cost(declared: Money, limit: LimitValue, plan_unit: str | None) -> Iterator[Diagnostic]:
    """A budget without a currency counts in the plan's (`plan_currency`: its steps'), as the
    budget check reads it; only a plan with none at all adopts the limit's. Where the plan's
    currency is not the limit's, the budget check says so (`currency-mismatch` on the plan) and
    the comparison is skipped."""
    assert limit.amount is not None
    meets, currency = shared_currency(declared.currency or plan_unit, limit.currency)
    if not meets:
        if declared.currency:
            yield currency_mismatch(declared.span, "the plan's budget", str(declared), limit.text(), limit.span)
    elif declared.amount > limit.amount:
        yield _over(declared.span, f"the plan's budget allows `{money_text(declared.amount, currency)}`", limit)


def _over(span: Span, what: str, limit: LimitValue) -> Diagnostic:
    return diagnostic("limit-exceeded", span, f"{what}, over {limit_text(limit)}",
                      labels=[Label(limit.span, "the limit is here")],
                      help=f"declare at most `{limit.text()}`: a plan can never weaken a policy")
