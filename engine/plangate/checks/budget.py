"""`budget-exceeded` / `budget-unknown`: can some execution exceed the plan's budget or a limit?

Figures (the contract §3, with plangate's decisions). Per attempt a step costs its declared
`cost` (the high end), else its tool's catalogue cap, else 0; it takes its declared `time`, else
its tool's time cap, else 0, and an attempt may take all of it. A step makes `retry + 1` attempts.
Over the steps that run: cost = Σ attempts × cost, calls = Σ attempts, and time is the makespan
under the policy's `limit concurrency` (none: unbounded).

Which steps run: a step with `when` may or may not run; one that references a skipped step's
result is skipped; an `after` alone only orders. Conditions that cannot hold together are never
charged together (`plangate.smt.branches` finds which can, with the solver, only when the
simple upper bound — every step that may run, runs — is over a bound).

Bounds: the plan's `budget { cost, time, calls }` and the policy's `limit cost/time/calls`, each
checked and reported on its own. Money that meets shares one currency (an amount without one
adopts the others'; a plan with no currency of its own counts in its policy's `limit cost`). A
step whose cost is in another currency is charged nothing, so the cost bounds still hold for the
rest: an excess found is real (the note names the steps left out), and `currency-mismatch` says the
sum is incomplete (step costs are reported by the currency check, tool caps here, a cap that
disagrees with its own policy's limit on the policy). A bound in another currency is skipped.

Verdicts per figure and bound, from the worst case's upper bound U and a witness execution
reaching L ≤ U (U = L unless the solver left something open):
- U ≤ bound: within, nothing said.
- L > bound: `budget-exceeded` (error), with the witness: the steps that run and their charges,
  the branches taken with the values that take them, and the total.
- otherwise: `budget-unknown`, with the reason and both figures.
Time: when the concurrency limit cannot bind (no more steps may run than it allows, or they split
into that many chains: `never_more_than`),
the makespan is the critical path, decided exactly as above. When it binds, Graham's bound
W/m + (1 − 1/m)·L bounds every schedule: within it, fine. Beyond it, no schedule is shorter than
the longest path, so a critical path over the bound (decided exactly as above) is
`budget-exceeded` with that path; else schedules in the runtime's order are searched for one over
the bound (`budget.longest_schedule`: the worst-work execution and the other combinations of
correlated branches with worst times, then steps ending early or retries not needed, which can
lengthen a list schedule). One over the bound: `budget-exceeded` with the schedule; none found and
only Graham's bound over: `budget-exceeded` as a warning — the plan cannot be proven to finish in
time.

`evaluate(ctx)` returns the findings with their witnesses as data (the tests replay them);
`check(ctx)` renders them (and skips the figures when there is no policy and the plan states no
budget: nothing could be reported). The option `solver_time_bound` (seconds, default 5) bounds the one
batch of solver work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any, Callable, Iterator, Mapping, Sequence

from plangate.budget import (DEFAULT_WORKERS, Effort, Loads, Schedule, Timing, critical_path, graham_bound,
                             longest_schedule, never_more_than)
from plangate.cel.ast import to_source
from plangate.cel.evaluate import value_source
from plangate.checks.context import PlanContext
from plangate.checks.currency import plan_currency
from plangate.checks.limits import money_text, shared_currency
from plangate.diagnostics import Diagnostic, Label, Severity, diagnostic
from plangate.policy.compiled import CatalogueEntry, LimitValue
from plangate.smt.branches import Branches, Worst
from plangate.source import Span

DEFAULT_TIME_BOUND = 5.0
LISTED = 8  # steps named in a note before "… and N more"
# Attempts simulated in all, for all the time bounds of one plan, while looking for a schedule over a
# bound (`budget.longest_schedule`), and the executions (choices of correlated branches) it starts from.
SCHEDULE_EFFORT = 200_000
MAX_EXECUTIONS = 64


@dataclass(frozen=True)
class Bound:
    figure: str  # "cost" | "calls" | "time"
    value: int  # in the figure's unit: money × scale, calls, seconds
    described: str  # "the plan's budget of `100 usd`" | "`limit cost <= 100 usd` of policy `p`"
    span: Span
    labels: tuple[Label, ...] = ()


@dataclass(frozen=True)
class Finding:
    bound: Bound
    verdict: str  # "exceeded" | "unprovable" | "unknown"
    worst: Worst
    workers: int | None = None  # the concurrency limit, when it binds
    schedule: Schedule | None = None
    graham: Fraction | None = None
    timing: Timing | None = None  # how the schedule's steps behave, when not all at their worst
    work: int | None = None  # Graham's W: the most work of any execution (the witness may have less)


@dataclass
class Report:
    loads: Loads
    branches: Branches | None
    currency: str | None
    scale: int
    bounds: list[Bound] = field(default_factory=list)
    excluded: tuple[str, ...] = ()  # steps whose cost is in another currency: not counted
    findings: list[Finding] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    budget = ctx.plan.budget
    if ctx.policy is None and (budget is None or (budget.cost is None and budget.time is None and budget.calls is None)):
        return  # no bound to check and no catalogue caps to compare currencies with: `evaluate` finds nothing
    report = evaluate(ctx)
    yield from report.diagnostics
    for finding in report.findings:
        yield _render(report, finding)


def evaluate(ctx: PlanContext) -> Report:
    loads, excluded, currency, scale, diagnostics = _loads(ctx)
    bounds = _bounds(ctx, currency, scale, diagnostics=diagnostics)
    report = Report(loads, None, currency, scale, bounds, excluded=excluded, diagnostics=diagnostics)
    if not bounds:
        return report
    time_bound = float(ctx.options.get("solver_time_bound", DEFAULT_TIME_BOUND))
    branches = Branches(ctx.graph, loads, time_bound)
    report.branches = branches
    for guard in branches.guards_decided_at_run_time():
        condition = ctx.graph.steps[guard.step].when
        assert condition is not None
        diagnostics.append(diagnostic(
            "decided-at-run-time", condition.span,
            f"the `when` of step `{guard.step}` is decided at run time ({guard.reason}): budgets count "
            f"the step as possibly running" + ("" if guard.kind == "runtime" else
                                               ", though never together with a step whose `when` is its negation")))
    weights = {"cost": [a * c for a, c in zip(loads.attempts, loads.cost)], "calls": list(loads.attempts)}
    for figure in ("cost", "calls"):
        figure_bounds = [bound for bound in bounds if bound.figure == figure]
        if not figure_bounds:
            continue
        worst = branches.maximum(weights[figure], min(bound.value for bound in figure_bounds))
        for bound in figure_bounds:
            verdict = _verdict(worst, bound.value)
            if verdict is not None:
                report.findings.append(Finding(bound, verdict, worst))
    effort = Effort(SCHEDULE_EFFORT)
    for bound in (bound for bound in bounds if bound.figure == "time"):
        finding = _time(ctx, branches, loads, bound, effort)
        if finding is not None:
            report.findings.append(finding)
    return report


def _verdict(worst: Worst, bound: int) -> str | None:
    if worst.upper <= bound:
        return None
    return "exceeded" if worst.lower > bound else "unknown"


def _time(ctx: PlanContext, branches: Branches, loads: Loads, bound: Bound, effort: Effort) -> Finding | None:
    limit = ctx.policy.limit("concurrency") if ctx.policy is not None else None
    workers = max(1, limit.count) if limit is not None and limit.count is not None else DEFAULT_WORKERS

    def unbound() -> bool:  # the limit cannot bind: the critical path, decided exactly, is the makespan
        runs = branches.possible_runs()
        return sum(runs) <= workers or never_more_than(loads, runs, workers)

    if unbound():
        return _critical_only(branches, bound)
    work = [a * s for a, s in zip(loads.attempts, loads.seconds)]
    runs = branches.possible_runs()
    simple = graham_bound(sum(w for w, running in zip(work, runs) if running), critical_path(loads, runs)[0], workers)
    if simple <= bound.value:
        return None
    most = branches.maximum(work, None)
    if unbound():  # the conditions are solved now: a step that can never run is no longer counted
        return _critical_only(branches, bound)
    longest, _ = critical_path(loads, branches.possible_runs())
    graham = graham_bound(most.upper, longest, workers)
    if graham <= bound.value:
        return None
    critical = branches.critical(bound.value)  # no schedule is shorter than its longest path
    if critical.lower > bound.value:
        return Finding(bound, "exceeded", critical)
    executions = [most]
    found = longest_schedule(
        loads, (execution.runs or () for execution in _executions(branches, most, work, executions)),
        workers, bound.value, effort)
    if found is None:  # more attempts than the search simulates: Graham's bound alone
        return Finding(bound, "unprovable", most, workers, None, graham, None, most.upper)
    number, schedule, timing = found
    # A schedule is not monotone in the steps that run: with a group of conditions left open (taken
    # not to hold), a longer schedule may belong to no real execution, so it proves nothing.
    verdict = "exceeded" if schedule.makespan > bound.value and most.reason is None else "unprovable"
    return Finding(bound, verdict, executions[number], workers, schedule, graham, timing, most.upper)


def _critical_only(branches: Branches, bound: Bound) -> Finding | None:
    worst = branches.critical(bound.value)
    verdict = _verdict(worst, bound.value)
    return Finding(bound, verdict, worst) if verdict is not None else None


def _executions(branches: Branches, most: Worst, work: Sequence[int], made: list[Worst]) -> Iterator[Worst]:
    """`most` (the execution with the most work), then others for the schedule search, appended to
    `made` as they are made: for each group of correlated branches, each of its other
    combinations, the rest as in `most` (a branch with less work may still take longer, if its
    steps cannot share the workers); then, for each component of conditions that can all fail
    (`Branches.silent_components`: an independent `when` that may be false), `most` with its steps
    skipped (a skipped step frees its successors sooner, which can delay a long one). At most
    `MAX_EXECUTIONS` in all."""
    def changes() -> Iterator[Mapping[int, int | None]]:  # what each execution changes of `most`'s choice
        for group in branches.weight_groups():
            if not isinstance(group.combinations, str):
                yield from group.combinations
        for component in branches.silent_components(most.choice):  # asked only once those are tried
            yield {component: None}

    yield most
    seen = {most.runs}
    for change in changes():
        if len(made) == MAX_EXECUTIONS:
            return
        choice = {**most.choice, **change}
        runs = tuple(branches.runs_under(choice))
        if runs in seen:
            continue
        seen.add(runs)
        total = sum(weight for weight, running in zip(work, runs) if running)
        made.append(Worst(total, total, runs, choice, reason=most.reason))
        yield made[-1]


# -- figures and bounds ------------------------------------------------------------------------

def _loads(ctx: PlanContext) -> tuple[Loads, tuple[str, ...], str | None, int, list[Diagnostic]]:
    """Per step in topological order: attempts, cost, seconds; the steps whose cost is in another
    currency than the plan's (charged nothing: a cost bound over the rest is a lower bound)."""
    order = ctx.graph.topological_order()
    currency, _ = plan_currency(ctx)
    limit = ctx.policy.limit("cost") if ctx.policy is not None else None
    if currency is None and limit is not None:
        currency = limit.currency
    diagnostics: list[Diagnostic] = []
    excluded: list[str] = []
    attempts: list[int] = []
    amounts: list[Decimal] = []
    seconds: list[int] = []
    entries: dict[str, CatalogueEntry | None] = {}
    for step_id in order:
        step = ctx.graph.steps[step_id]
        attempts.append(step.retry + 1)
        entry = None
        if ctx.policy is not None and step.call is not None:
            if step.call.tool not in entries:
                entries[step.call.tool] = ctx.policy.match(step.call.tool)
            entry = entries[step.call.tool]
        if step.cost is not None:
            amount, unit = step.cost.high.amount, step.cost.high.currency
            if not shared_currency(unit, currency)[0]:  # reported by the currency check
                amount = Decimal(0)
                excluded.append(step_id)
        elif entry is not None and entry.cost_cap is not None:
            amount, unit = entry.cost_cap, entry.currency
            currency = currency or unit
            if not shared_currency(unit, currency)[0]:
                excluded.append(step_id)
                assert step.call is not None
                diagnostics += _cap_mismatch(entry, currency, limit, step.call.tool_span, f"step `{step_id}`",
                                             f"declare the step's `cost` in `{currency}`")
                amount = Decimal(0)
        else:
            amount = Decimal(0)
        amounts.append(amount)
        if step.time is not None:
            seconds.append(step.time.seconds)
        elif entry is not None and entry.time_cap is not None:
            seconds.append(entry.time_cap)
        else:
            seconds.append(0)
    diagnostics += _rollback_currencies(ctx, order, currency, limit)
    scale = _scale(amounts + _bound_amounts(ctx))
    order_index = {step_id: index for index, step_id in enumerate(order)}
    pred = ctx.graph.pred
    predecessors = tuple(tuple(sorted([order_index[p] for p in pred[step_id]])) for step_id in order)
    scaled: dict[Decimal, int] = {}  # amounts repeat: each distinct one scaled once
    for amount in amounts:
        if amount not in scaled:
            scaled[amount] = _scaled(amount, scale)
    loads = Loads(tuple(order), tuple(attempts), tuple(scaled[amount] for amount in amounts), tuple(seconds),
                  predecessors)
    return loads, tuple(excluded), currency, scale, diagnostics


def _rollback_currencies(ctx: PlanContext, order: list[str], currency: str | None,
                         limit: LimitValue | None) -> list[Diagnostic]:
    """A rollback is charged its tool's cap at run time, with the plan's other costs: a cap in
    another currency than the plan's could not be added to them (the static sums leave rollbacks
    out, so only the currency is checked here)."""
    found: list[Diagnostic] = []
    if ctx.policy is None or currency is None:
        return found
    for step_id in order:
        rollback = ctx.graph.steps[step_id].rollback
        entry = ctx.policy.match(rollback.tool) if rollback is not None else None
        if rollback is None or entry is None or entry.cost_cap is None or shared_currency(entry.currency, currency)[0]:
            continue
        found += _cap_mismatch(entry, currency, limit, rollback.tool_span, f"the rollback of step `{step_id}`",
                               f"state the plan's costs in `{entry.currency}`, or the cap in `{currency}`")
    return found


def _cap_mismatch(entry: CatalogueEntry, currency: str, limit: LimitValue | None, span: Span, charged: str,
                  help_text: str) -> list[Diagnostic]:
    """`currency-mismatch` for a tool's cap in another currency than the plan's, charged to a step
    or its rollback; none where it disagrees with the policy's own cost limit too: that is the
    policy's to fix, and reported on it."""
    if limit is not None and not shared_currency(entry.currency, limit.currency)[0]:
        return []
    return [diagnostic("currency-mismatch", span,
                       f"{charged} is charged the `{money_text(entry.cost_cap, entry.currency)}` cap of tool "  # type: ignore[arg-type]
                       f"`{entry.cost_source()[0]}`, but the plan counts in `{currency}`",
                       labels=[Label(entry.cost_source()[1], "the cap is here")], help=help_text)]


def _bound_amounts(ctx: PlanContext) -> list[Decimal]:
    amounts = []
    if ctx.plan.budget is not None and ctx.plan.budget.cost is not None:
        amounts.append(ctx.plan.budget.cost.amount)
    limit = ctx.policy.limit("cost") if ctx.policy is not None else None
    if limit is not None and limit.amount is not None:
        amounts.append(limit.amount)
    return amounts


def _scaled(amount: Decimal, scale: int) -> int:
    """`amount` × `scale` as an exact int: `scale` clears every decimal place, and the product is
    taken with all its digits (the default context would round past 28 of them)."""
    sign, digits, exponent = amount.as_tuple()
    whole = int("".join(map(str, digits)) or "0") * scale
    whole = whole * 10 ** exponent if exponent >= 0 else whole // 10 ** -exponent  # type: ignore[operator]
    return -whole if sign else whole


def _unscaled(value: int, scale: int) -> Decimal:
    """The amount an int of `_scaled` stands for, exactly (`scale` is a power of ten), with no
    trailing zeros the scale added (`0.1`, not `0.10000`, beside an amount of five places)."""
    exact = Context(prec=400)  # sums of 40-digit amounts: exact
    amount = Decimal(value).scaleb(-(len(str(scale)) - 1), exact)
    return amount.normalize(exact) if amount != amount.to_integral_value() else amount.quantize(Decimal(1), context=exact)


def _scale(amounts: Sequence[Decimal]) -> int:
    places = max((-amount.as_tuple().exponent for amount in amounts  # type: ignore[operator]
                  if amount.is_finite()), default=0)
    return 10 ** max(0, places)


def _bounds(ctx: PlanContext, currency: str | None, scale: int, *, diagnostics: list[Diagnostic]) -> list[Bound]:
    bounds: list[Bound] = []
    budget = ctx.plan.budget
    if budget is not None:
        if budget.cost is not None and shared_currency(budget.cost.currency, currency)[0]:
            shown = money_text(budget.cost.amount, budget.cost.currency or currency)  # `5` of a plan in usd: `5 usd`
            bounds.append(Bound("cost", _scaled(budget.cost.amount, scale), f"the plan's budget of `{shown}`",
                                budget.cost.span))
        if budget.time is not None:
            bounds.append(Bound("time", budget.time.seconds, f"the plan's budget of `{budget.time}`", budget.time.span))
        if budget.calls is not None:
            plural = "s" if budget.calls != 1 else ""
            bounds.append(Bound("calls", budget.calls, f"the plan's budget of {budget.calls} call{plural}",
                                budget.calls_span or budget.span))
    if ctx.policy is None:
        return bounds
    for name in ("cost", "time", "calls"):
        limit = ctx.policy.limit(name)
        if limit is None:
            continue
        owner = f"`limit {name} <= {limit.text()}` of policy `{limit.policy}`"
        labels = (Label(limit.span, "the limit is here"),)
        if name == "cost" and limit.amount is not None:
            if not shared_currency(limit.currency, currency)[0]:
                declared = budget.cost if budget is not None else None
                if declared is None or shared_currency(declared.currency, limit.currency)[0]:  # else limits said it
                    diagnostics.append(diagnostic(
                        "currency-mismatch", ctx.plan.id_span,
                        f"the plan counts in `{currency}`, but {owner} is in `{limit.currency}`",
                        labels=labels, help="state the plan's costs in the currency of the limit"))
            else:
                bounds.append(Bound("cost", _scaled(limit.amount, scale), owner, ctx.plan.id_span, labels))
        elif name == "time" and limit.seconds is not None:
            bounds.append(Bound("time", limit.seconds, owner, ctx.plan.id_span, labels))
        elif name == "calls" and limit.count is not None:
            bounds.append(Bound("calls", limit.count, owner, ctx.plan.id_span, labels))
    return bounds


# -- rendering ---------------------------------------------------------------------------------

def _render(report: Report, finding: Finding) -> Diagnostic:
    bound, worst = finding.bound, finding.worst
    figure = bound.figure
    if finding.verdict == "unknown":
        return diagnostic(
            "budget-unknown", bound.span,
            f"cannot tell whether the worst-case {_figure_name(figure)} stays within {bound.described}: "
            f"{worst.reason}",
            labels=bound.labels,
            notes=[f"the worst case is between {_amount(report, figure, worst.lower)} and "
                   f"{_amount(report, figure, worst.upper)}"],
            help="simplify the conditions that share results, or give the solver more time (`--solver-time`)")
    notes = _execution_notes(report, finding)
    if figure == "cost" and report.excluded:
        notes.append("not counted: " + _listed([f"`{step}`" for step in report.excluded], ", ")
                     + ", whose cost is in another currency (see `currency-mismatch`): the plan can cost more")
    if finding.verdict == "unprovable":
        assert finding.workers is not None and finding.graham is not None and finding.work is not None
        searched = (f"the longest schedule found in the runtime's order takes {_duration(finding.schedule.makespan)}"
                    if finding.schedule is not None else
                    f"no schedule was simulated: its attempts are more than the {SCHEDULE_EFFORT:,} the checker simulates")
        return diagnostic(
            "budget-exceeded", bound.span,
            f"cannot prove the plan finishes within {bound.described}: with {_at_a_time(finding.workers)} "
            f"Graham's bound is `{_duration(finding.graham)}`",
            labels=bound.labels, severity=Severity.WARNING,
            notes=[f"Graham's bound W/m + (1 − 1/m)·L with W = {_duration(finding.work)} of work, "
                   f"m = {finding.workers} and L = the longest path", searched, *notes],
            help="raise the time budget, shorten steps, or raise `limit concurrency`")
    if finding.schedule is not None:
        assert finding.workers is not None
        return diagnostic(
            "budget-exceeded", bound.span,
            f"with {_at_a_time(finding.workers)} the plan can take `{_duration(finding.schedule.makespan)}`, "
            f"over {bound.described}",
            labels=bound.labels, notes=notes,
            help="raise the time budget, shorten steps, or raise `limit concurrency`")
    verb = {"cost": "can cost", "calls": "can make", "time": "can take"}[figure]
    return diagnostic(
        "budget-exceeded", bound.span,
        f"the plan {verb} {_amount(report, figure, worst.lower, quoted=True)}, over {bound.described}",
        labels=bound.labels, notes=notes,
        help={"cost": "lower costs or retries, make steps conditional, or raise the budget",
              "calls": "lower retries or steps, or raise the budget",
              "time": "shorten the critical path or raise the budget"}[figure])


def _at_a_time(workers: int) -> str:
    return f"{workers} step{'s' if workers != 1 else ''} at a time"


def _figure_name(figure: str) -> str:
    return {"cost": "cost", "calls": "number of calls", "time": "time"}[figure]


def _amount(report: Report, figure: str, value: int | Fraction, quoted: bool = False) -> str:
    if figure == "cost":
        text = money_text(_unscaled(int(value), report.scale), report.currency)
    elif figure == "calls":
        return f"{value} tool call{'s' if value != 1 else ''}"
    else:
        text = _duration(value)
    return f"`{text}`" if quoted else text


def _duration(seconds: int | Fraction) -> str:
    value = Fraction(seconds)
    days, rest = divmod(int(value), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, whole_seconds = divmod(rest, 60)
    parts = [f"{count}{unit}" for count, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if count]
    rest_seconds = whole_seconds + (value - int(value))
    if rest_seconds or not parts:
        parts.append(f"{rest_seconds}s" if rest_seconds.denominator == 1 else f"{float(rest_seconds):.1f}s")
    return "".join(parts)


def _execution_notes(report: Report, finding: Finding) -> list[str]:
    worst, loads, branches = finding.worst, report.loads, report.branches
    assert worst.runs is not None and branches is not None
    runs = worst.runs
    figure = finding.bound.figure
    notes: list[str] = []
    if finding.verdict == "unprovable" and finding.schedule is None:
        return notes  # no execution was simulated: there is none to describe
    if figure == "time" and finding.schedule is None:
        notes.append("critical path: " + _listed(worst.path, " → ", lambda i: _time_charge(loads, i, runs[i]))
                     + f" = {_duration(worst.lower)}")
    elif finding.schedule is not None:
        notes.append(f"schedule with {finding.workers} at a time, ready steps started in topological order: "
                     + _listed(_numbered(finding.schedule.starts), ", ",
                               lambda start: f"`{loads.steps[start[0]]}`{start[3]} {_duration(start[1])}–{_duration(start[2])}"))
        if finding.timing is not None and finding.timing.shortened(loads):
            notes.append("in this execution, steps end before their worst (their `time` bounds an attempt, and "
                         "a retried step may succeed early), which lets others take the workers first: "
                         + _listed(finding.timing.shortened(loads), ", ", lambda i: _shortened(loads, finding.timing, i)))
    else:
        running = [i for i in range(len(loads)) if runs[i]]
        charge = (lambda i: loads.attempts[i] * loads.cost[i]) if figure == "cost" else (lambda i: loads.attempts[i])
        largest = sorted((i for i in running if loads.steps[i] not in report.excluded), key=lambda i: (-charge(i), i))
        notes.append(f"worst case: {len(running)} of {len(loads)} steps run; " + _listed(
            largest, ", ", (lambda i: _cost_charge(report, i)) if figure == "cost" else (lambda i: _attempts(loads, i))))
    notes.extend(_branch_notes(report, runs, worst))
    assumed = branches.assumed(runs)
    if assumed:
        notes.append("this execution takes the run-time conditions of " + _listed([f"`{s}`" for s in assumed], ", ")
                     + " to hold")
    if worst.reason is not None:
        notes.append(f"conditions left open ({worst.reason}) are taken not to hold; the worst case may be higher")
    return notes


def _numbered(starts: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int, str]]:
    """Each attempt of a schedule with " (attempt N)" after the first of its step."""
    made: dict[int, int] = {}
    numbered = []
    for step, start, end in starts:
        made[step] = made.get(step, 0) + 1
        numbered.append((step, start, end, f" (attempt {made[step]})" if made[step] > 1 else ""))
    return numbered


def _shortened(loads: Loads, timing: Timing | None, index: int) -> str:
    assert timing is not None
    attempts, seconds = timing.attempts[index], timing.seconds[index]
    parts = []
    if attempts < loads.attempts[index]:
        parts.append(f"{attempts} attempt{'s' if attempts != 1 else ''} of {loads.attempts[index]}")
    failed = timing.failed_seconds(index)
    if attempts > 1 and failed != seconds:
        each = "its failed attempt" if attempts == 2 else "its failed attempts"
        parts.append(f"{each} {_duration(failed)}{' each' if attempts > 2 else ''}, its last {_duration(seconds)}, "
                     f"of its {_duration(loads.seconds[index])}")
    elif seconds < loads.seconds[index]:
        parts.append(f"{_duration(seconds)} of its {_duration(loads.seconds[index])}"
                     + (" each" if attempts > 1 else ""))
    return f"`{loads.steps[index]}` ({', '.join(parts)})"


def _listed(items: Sequence[Any], separator: str, describe: Callable[[Any], str] = str) -> str:
    """The items described and joined, the first `LISTED` only when there are more (only those
    shown are described: a long plan lists thousands)."""
    if len(items) <= LISTED + 1:
        return separator.join(describe(item) for item in items)
    return separator.join(describe(item) for item in items[:LISTED]) + f"{separator}… and {len(items) - LISTED} more"


def _attempts(loads: Loads, index: int) -> str:
    attempts = loads.attempts[index]
    return f"`{loads.steps[index]}` ({attempts} attempt{'s' if attempts != 1 else ''})"


def _cost_charge(report: Report, index: int) -> str:
    loads = report.loads
    unit = money_text(_unscaled(loads.cost[index], report.scale), report.currency)
    attempts = loads.attempts[index]
    if attempts == 1:
        return f"`{loads.steps[index]}` ({unit})"
    return f"`{loads.steps[index]}` ({attempts} attempts × {unit})"


def _time_charge(loads: Loads, index: int, runs: bool) -> str:
    """A step on the critical path with the time it takes there: none when it is skipped (it only
    orders the steps after it)."""
    if not runs:
        return f"`{loads.steps[index]}` (skipped, 0s)"
    attempts, seconds = loads.attempts[index], loads.seconds[index]
    if attempts == 1:
        return f"`{loads.steps[index]}` ({_duration(seconds)})"
    return f"`{loads.steps[index]}` ({attempts} × {_duration(seconds)})"


def _branch_notes(report: Report, runs: Sequence[bool], worst: Worst) -> list[str]:
    """Which correlated conditions hold in the witness, with the values that decide them."""
    branches = report.branches
    assert branches is not None
    values = branches.witness_values(worst.choice)
    taken, skipped = [], []
    for guard in branches.guards.values():
        component = branches.components[guard.component] if guard.kind == "symbolic" else None
        if component is None or component.patterns is None:
            continue  # decided at run time, or left open: said in other notes
        index = branches.position[guard.step]
        pattern = worst.choice.get(guard.component)
        fires = pattern is not None and guard.step in component.patterns[pattern]
        if len(component.guards) == 1 and fires:
            continue  # an independent condition that holds says nothing of interest
        if fires and runs[index]:
            taken.append(guard)
        elif not fires:
            skipped.append(guard)

    def described(guard: Any) -> str:
        component = branches.components[guard.component]
        if worst.choice.get(guard.component, 0) is None:  # none of its group's conditions holds
            shown = ", ".join(f"`{path}` absent" for path in guard.paths) if component.atoms is not None else ""
        else:
            shown = "" if guard.opaque else ", ".join(  # an opaque condition's model values decide nothing
                f"`{path}` = {value_source(values[path])}" for path in guard.paths if path in values)
        return f"`{guard.step}` (`{to_source(guard.condition)}`" + (f" with {shown})" if shown else ")")

    notes = []
    if taken:
        notes.append("conditions that hold: " + _listed(taken, "; ", described))
    if skipped:
        notes.append("conditions that do not hold (so those steps are skipped): " + _listed(skipped, "; ", described))
    return notes
