"""`currency-mismatch`: amounts that meet in one sum or comparison must share one currency.

The plan's step costs and its budget meet in the cost bound; an amount with no currency takes the
currency of the others. Reports each step cost whose currency differs from the budget's (or, with
no budget currency, from the first currency the plan uses). Policy limits and tool caps are
compared with the plan in the budget check (they use the same rule).
"""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, Label, diagnostic
from plangate.ir.nodes import Money


def plan_currency(ctx: PlanContext) -> tuple[str | None, Money | None]:
    budget = ctx.plan.budget
    if budget is not None and budget.cost is not None and budget.cost.currency:
        return budget.cost.currency, budget.cost
    for step in ctx.plan.steps:
        if step.cost is not None and step.cost.high.currency:
            return step.cost.high.currency, step.cost.high
    return None, None


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    currency, anchor = plan_currency(ctx)
    if currency is None or anchor is None:
        return
    for step in ctx.plan.steps:
        if step.cost is None or step.cost.low.currency != step.cost.high.currency:
            continue  # a range across currencies is reported where it is written
        unit = step.cost.high.currency
        if unit and unit != currency:  # one diagnostic for a range: its two ends share their currency
            low, high = step.cost.low, step.cost.high
            written = f"{high}" if low == high else f"{low.amount}..{high}"
            yield diagnostic(
                "currency-mismatch", low.span.cover(high.span),
                f"step `{step.id}` costs `{written}` but the plan counts in `{currency}`",
                labels=[Label(anchor.span, f"the plan counts in `{currency}` here")],
                help=f"state every amount in `{currency}`",
            )
