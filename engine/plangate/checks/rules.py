"""Deny and warn rules decided statically: `policy-deny`, `policy-deny-possible`, `policy-warn`,
`decided-at-run-time`.

For each step and rule: if every value the rule reads is known, the closure decides it; otherwise
the solver answers whether the rule can never, may, or must fire, over every value the unknown
arguments could take (their declared types). For a conditional step the rule is decided together
with the step's `when` (it fires only on runs where the step runs): may = SAT(when ∧ rule),
must = UNSAT(when ∧ ¬rule). A deny that must fire is an error; one that may fire is a warning with
a witness; a warn rule that must or may fire is a warning. A rule outside the subset the solver
reasons about is reported once as decided at run time — never silently taken as true or false.
Rules that read only `plan` are decided once for the plan, not per step. An argument the call
computes from earlier results is reasoned about through that computation (`policy.facts.symbolic`),
so a witness names the results themselves, under the premise that the computation evaluates (the
call is made only when its arguments do: `"DROP " + g.result.name` is a string starting with
"DROP" on every run that makes the call).

Rules and requirements are decided through one `StepDecisions` per plan (`step_decisions(ctx)`):
it skips the steps whose tool a condition's tool conjunct rejects (their verdict is "never") and
decides a condition that reads only known, shared fields of the step (`step.risk`, `call.tool`…)
once per distinct tuple of their values (`plangate.policy.relevance` says why both are exact).
"""

from __future__ import annotations

from typing import Any, Iterator

from plangate.cel import ast as cel
from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, Label, backticked, diagnostic
from plangate.ir.nodes import Risk, Step
from plangate.policy.compiled import CompiledRule
from plangate.policy.decide import StaticVerdict, evaluator_for
from plangate.policy.facts import (STEP_FIELDS, StepFacts, arguments_read, plan_facts, plan_record, rename_steps,
                                   result_scope, rule_activation, symbolic)
from plangate.policy.relevance import ToolFilter, condition_shape
from plangate.smt.encode import Unknown

_STEP_NAMES = {"step", "call", "args"}


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    policy = ctx.policy
    assert policy is not None
    decisions = step_decisions(ctx)
    for rule in policy.rules:
        roots = {node.name for node in cel.walk(rule.when) if isinstance(node, cel.Ident)}
        if not roots & _STEP_NAMES:
            scope = {**{risk.name: int(risk) for risk in Risk}, "plan": plan_record(ctx.plan)}  # as for a step
            verdict = decisions.evaluator.verdict(rule.when, scope, unknown=False)
            if verdict.outcome == "must":
                yield _fired(rule, ctx.plan.budget.span if ctx.plan.budget is not None else ctx.plan.id_span,
                             verdict, f"plan `{ctx.plan.id}`")
            continue
        undecided: list[tuple[Step, StaticVerdict]] = []
        for step_id, verdict in decisions.verdicts(rule.when):
            step = decisions.facts[step_id].step
            if verdict.outcome in ("runtime", "unknown"):
                undecided.append((step, verdict))
                continue
            if verdict.outcome in ("must", "may"):
                facts = decisions.facts[step_id]
                untyped = sorted(name for name in arguments_read(rule.when) if isinstance(facts.args.get(name), Unknown)) \
                    if facts.entry is None or facts.entry.args is None else []  # values the run computes
                yield _fired(rule, step.call.span, verdict, f"step `{step.id}`", untyped)
        if undecided:
            yield _undecided(rule, undecided)


LISTED_UNDECIDED = 5  # steps a `decided-at-run-time` names besides the first


def _undecided(rule: CompiledRule, undecided: list[tuple[Step, StaticVerdict]]) -> Diagnostic:
    """One note per rule, on the first step it could not be decided for, counting the others: a
    spent solver allowance may leave hundreds, and the note must not read as one."""
    step, verdict = undecided[0]
    others = [other.id for other, _ in undecided[1:]]
    also = ""
    if others:
        shown = backticked(others[:LISTED_UNDECIDED]) + (", …" if len(others) > LISTED_UNDECIDED else "")
        also = f" and {len(others)} more step{'s' if len(others) > 1 else ''} ({shown})"
    return diagnostic(
        "decided-at-run-time", step.call.span,
        f"rule `{rule.name}` cannot be decided before the run for step `{step.id}`{also}"
        + (f": {verdict.reason}" if verdict.reason else ""),
        labels=[Label(rule.span, "the rule")],
        notes=["the runtime evaluates the rule on the concrete arguments before the call"])


_MISSING = object()  # a field the step record lacks (a condition reading it errs alike for every step)


class StepDecisions:
    """The verdicts of policy conditions for the steps of one plan that make a call, as
    `decide_for_step` gives them, with the work it would repeat left out:

    - a step whose tool the condition's tool filter rejects is left out: its verdict is "never";
    - a condition that reads only shared fields (`ConditionShape.reads`) is decided for the first
      step with given values of those fields (and given `failing`), and that verdict is reused for
      every later step with the same values;
    - each step's activation is built once, on first need, for all conditions.
    """

    def __init__(self, ctx: PlanContext) -> None:
        assert ctx.policy is not None
        self.ctx = ctx
        self.evaluator = evaluator_for(ctx.policy)
        self.facts = plan_facts(ctx)
        self.steps_with_calls = [step_id for step_id, facts in self.facts.items() if facts.step.call is not None]
        self._position = {step_id: index for index, step_id in enumerate(self.steps_with_calls)}
        self._by_tool: dict[str, list[str]] = {}
        for step_id in self.steps_with_calls:
            self._by_tool.setdefault(self.facts[step_id].step.call.tool, []).append(step_id)  # type: ignore[union-attr]
        self._activations: dict[str, dict[str, Any]] = {}
        self._read_values: dict[tuple[tuple[str, str], ...], dict[str, tuple[Any, ...]]] = {}

    def verdicts(self, condition: cel.Expr) -> Iterator[tuple[str, StaticVerdict]]:
        """`(step id, decide_for_step(condition))` in plan order for each step with a call, except
        those whose verdict is "never" by the condition's tool filter."""
        shape = condition_shape(condition)
        step_ids = self.steps_with_calls if shape.tools is None else self._admitted(shape.tools)
        if shape.reads is None:
            for step_id in step_ids:
                yield step_id, self._decide(condition, step_id)
            return
        values = self._values(shape.reads)
        decided: dict[tuple[Any, ...], StaticVerdict] = {}
        for step_id in step_ids:
            verdict = decided.get(values[step_id])
            if verdict is None:
                verdict = decided[values[step_id]] = self._decide(condition, step_id)
            yield step_id, verdict

    def _decide(self, condition: cel.Expr, step_id: str) -> StaticVerdict:
        activation = self._activations.get(step_id)
        if activation is None:
            activation = self._activations[step_id] = rule_activation(self.facts[step_id], self.ctx.plan)
        return decide_for_step(self.evaluator, condition, self.facts[step_id], activation, self.ctx)

    def _admitted(self, tools: ToolFilter) -> list[str]:
        """The steps whose tool `tools` admits, in plan order."""
        groups = [steps for tool, steps in self._by_tool.items() if tools.admits(tool)]
        if len(groups) == len(self._by_tool):
            return self.steps_with_calls
        return sorted((step_id for steps in groups for step_id in steps), key=self._position.__getitem__)

    def _values(self, reads: tuple[tuple[str, str], ...]) -> dict[str, tuple[Any, ...]]:
        """Per step: whether its call can never be made or the step never runs (then nothing fires for
        it), and the values of
        the `step` fields in `reads` (`call.tool` is `step.tool`), floats by their exact bits (0.0 and
        -0.0 print differently)."""
        found = self._read_values.get(reads)
        if found is None:
            fields = [STEP_FIELDS.get(field) for _variable, field in reads]
            found = {}
            for step_id in self.steps_with_calls:
                facts = self.facts[step_id]
                parts = [_MISSING if value is None else value(facts) for value in fields]
                found[step_id] = (bool(facts.failing) or facts.never_runs,
                                  *(part.hex() if isinstance(part, float) else part for part in parts))
            self._read_values[reads] = found
        return found


def step_decisions(ctx: PlanContext) -> StepDecisions:
    """The plan's `StepDecisions`, made once and kept in `ctx.facts` for the rules and requirements."""
    decisions = ctx.facts.get("decisions")
    if decisions is None:
        decisions = ctx.facts["decisions"] = StepDecisions(ctx)
    return decisions


def decide_for_step(evaluator: Any, when: cel.Expr, facts: StepFacts, activation: dict[str, Any],
                    ctx: PlanContext) -> StaticVerdict:
    """Whether a rule's condition `when` never, may or must hold for a step's call on the runs where
    the step runs (its own `when` is taken into account): through the arguments' computations, or,
    when that is outside what the solver reasons about, with the computed arguments as opaque
    values of their declared types. Shared by deny/warn rules and requirements. A call with a
    constant argument that fails to evaluate can never be made (`cel-type-error` says why), nor can
    that of a step that never runs (`unreachable-step`): nothing fires for it."""
    if facts.failing or facts.never_runs:
        return StaticVerdict("never")
    read = arguments_read(when)
    verdict = _decide_computed(evaluator, when, activation, facts, ctx, [name for name in facts.computed if name in read])
    if verdict.outcome == "may" and facts.computed.keys() - read:
        # Only runs where the call is made count: every computed argument evaluates on them, not only
        # those the rule reads (`y: a.result.g.startsWith("ab")` makes `g` a string for `args.x > 5`
        # with `x: a.result.g`). Asked only of a "may", which fewer runs can make "never" or "must";
        # where those computations are outside the solver's subset, the "may" stands.
        every = _decide_computed(evaluator, when, activation, facts, ctx, list(facts.computed))
        if every.outcome in ("never", "must", "may"):
            return every
    if verdict.outcome != "runtime":
        return verdict
    opaque = _decide_condition(evaluator, when, dict(activation), facts, ctx)
    if opaque.outcome != "may":
        return opaque  # "never" and "must" over every value of the argument's type hold for the computed one
    computed = backticked(sorted(read & facts.computed.keys()))
    return StaticVerdict("may", opaque.witness, f"how the call computes {computed} is not followed here "
                                                f"({verdict.reason}): the example is a value of the argument, "
                                                "which the run may or may not give")


def _decide_computed(evaluator: Any, when: cel.Expr, activation: dict[str, Any], facts: StepFacts,
                     ctx: PlanContext, assumed: list[str]) -> StaticVerdict:
    """`_decide_condition` of `when` through the computations of the arguments it reads, under the
    premise that the computations of `assumed` evaluate (the call is made only when they do)."""
    condition, results = symbolic(when, facts)
    premises = [facts.computed[name] for name in assumed]
    if condition is when and not premises:
        return _decide_condition(evaluator, when, dict(activation), facts, ctx)
    # the steps a premise reads too (`has(args.x)` reads x's computation only there)
    results = {**result_scope(_steps_read(premises, ctx)), **results}
    steps = {key[1:] for key in results}  # `step_key` names
    assume = tuple(rename_steps(expr, steps) for expr in premises)
    return _decide_condition(evaluator, condition, {**results, **activation}, facts, ctx, assume)


def _verdict(evaluator: Any, expr: cel.Expr, scope: dict[str, Any], unknown: bool,
             assume: tuple[cel.Expr, ...], given: tuple[cel.Expr, ...] = ()) -> StaticVerdict:
    """The evaluator's verdict; with `assume`, the solver's under the premise that those
    expressions evaluate (the call is made only when its computed arguments do), and with `given`
    that those conditions hold (the call is made only when its step's `when` does)."""
    if not assume and not given:
        return evaluator.verdict(expr, scope, unknown)
    outcome = evaluator.holds(expr, scope)
    if isinstance(outcome, bool):
        return StaticVerdict("must" if outcome else "never")
    from plangate.policy.decide import _seconds_for_durations
    from plangate.smt.decide import decide

    answer = decide(expr, _seconds_for_durations(scope), assume=assume, original=scope, given=given)
    return StaticVerdict(answer.outcome, answer.witness, answer.reason)


def _decide_condition(evaluator: Any, condition: cel.Expr, scope: dict[str, Any], facts: StepFacts,
                      ctx: PlanContext, assume: tuple[cel.Expr, ...] = ()) -> StaticVerdict:
    alone = _verdict(evaluator, condition, scope, facts.unknown_args, assume)
    if alone.outcome in ("never", "runtime", "unknown"):
        return alone  # a rule that cannot fire on any call cannot fire on the runs where the step runs
    if alone.outcome == "must" and isinstance(evaluator.holds(condition, scope), bool):
        return alone  # decided on known values: it holds on every run, so on those where the step runs
    whens = _running_conditions(facts.step, ctx)
    if not whens:
        return alone
    steps = _steps_read(whens, ctx)
    for key, value in result_scope(steps).items():  # the steps whose results they read, and no others
        scope.setdefault(key, value)
    # On the runs where the step runs: the condition's verdict given that the `when`s it runs under
    # hold. (Not `when && !condition`: `!` of an error is an error, so runs where the rule fails,
    # and does not fire, would not count against "must".) Where that cannot be decided (the
    # conditions are outside what the solver reasons about, or its example does not fire once the
    # runtime rounds), the verdict over every run stands only where it holds on the narrower set:
    # a "must" does; a "may" where its example is a run where the step runs (the runtime's
    # evaluator says every `when` holds on it), or where the `when`s read no result field that the
    # call's arguments read (whatever makes them hold leaves the example as it is); else the rule
    # is decided at run time.
    conditions = tuple(rename_steps(when, steps) for when in whens)
    given = _verdict(evaluator, condition, scope, True, assume, given=conditions)
    if given.outcome not in ("runtime", "unknown"):
        return given
    if alone.outcome == "must" or (alone.witness is not None and _holds_on(conditions, scope, alone.witness)):
        return alone
    call = facts.step.call
    read_by_call = _chains_read([argument.value for argument in call.args] if call is not None else [])
    if not _overlap(read_by_call, _chains_read(whens)):
        return alone
    return given


def _chains_read(exprs: list[cel.Expr]) -> set[str]:
    """The longest chains of field selections the expressions read (`a.result.w`), as text."""
    found: set[str] = set()
    pending = list(exprs)
    while pending:
        expr = pending.pop()
        chain = cel.field_chain(expr)
        if chain is not None:
            found.add(".".join([chain[0], *chain[1]]))
        else:
            pending.extend(cel.children(expr))
    return found


def _overlap(paths: set[str], others: set[str]) -> bool:
    """Whether a path of one set is, or holds, or lies inside a path of the other."""
    return any(a == b or a.startswith(b + ".") or b.startswith(a + ".") for a in paths for b in others)


def _holds_on(conditions: tuple[cel.Expr, ...], scope: dict[str, Any], witness: dict[str, Any]) -> bool:
    """Whether every condition is exactly true, by the runtime's evaluator, on the run `witness` describes."""
    from plangate.cel.evaluate import compile_expr
    from plangate.smt.decide import instantiate

    concrete = instantiate(scope, witness)
    return all(compile_expr(condition)(concrete) is True for condition in conditions)


def _running_conditions(step: Step, ctx: PlanContext) -> list[cel.Expr]:
    """The `when`s that hold on every run where `step` runs: its own and, since a step that uses a
    skipped step's result is skipped too, those of the steps whose results it uses, transitively
    (its guard set, `requirements.guard_sets`). Its own alone where the plan is no DAG."""
    from plangate.checks.requirements import guard_sets

    guards = guard_sets(ctx).get(step.id)
    if guards is None:
        return [step.when] if step.when is not None else []
    return [when for guard in sorted(guards) for when in [ctx.graph.steps[guard].when] if when is not None]


def _steps_read(exprs: list[cel.Expr], ctx: PlanContext) -> set[str]:
    """The plan's steps that `exprs` name (their results, read under `step_key`)."""
    return {node.name for expr in exprs for node in cel.walk(expr)
            if isinstance(node, cel.Ident) and node.name in ctx.graph.steps}


def _fired(rule: CompiledRule, span: Any, verdict: StaticVerdict, subject: str,
           untyped: list[str] | None = None) -> Diagnostic:
    """The diagnostic of a rule that must or may fire. `untyped`: the arguments the rule reads that
    the catalogue gives no type for this call, named in a deny that may fire: a value of another
    type at run time makes the condition fail, and a failing rule does not fire."""
    outcome, witness = verdict.outcome, verdict.witness
    because = [f"because: {rule.because}"] if rule.because else []
    where = [f"rule `{rule.name}` in policy `{rule.policy}`"]
    if outcome == "must" and verdict.reason:  # a condition the evaluator's bounds stop counts as holding
        where.append(f"its condition cannot be evaluated on these arguments ({verdict.reason}); "
                     f"a rule stopped by the evaluator's bounds counts as firing, here and at run time")
    if outcome == "may" and verdict.reason:
        where.append(verdict.reason)
    labels = [Label(rule.span, "the rule")]
    if rule.effect == "warn":
        verb = "fires" if outcome == "must" else "may fire"
        example = _witness_notes(witness) if outcome == "may" else []
        return diagnostic("policy-warn", span, f"warn rule `{rule.name}` {verb} for {subject}",
                          labels=labels, notes=[*because, *where, *example])
    if outcome == "must":
        return diagnostic("policy-deny", span, f"deny rule `{rule.name}` fires for {subject}",
                          labels=labels, notes=[*because, *where],
                          help="change the call so the rule does not apply, or remove the step"
                          if subject.startswith("step") else
                          "change the plan (its budget, id or version) so the rule does not apply")
    typing = [f"the catalogue gives {backticked(untyped)} no type: a value of another type "
              f"than the rule expects makes its condition fail at run time, and a rule that fails does not fire "
              f"(declare the tool's `args` to refuse such a call)"] if untyped else []
    return diagnostic("policy-deny-possible", span,
                      f"deny rule `{rule.name}` may fire for {subject}" + _witness_text(witness),
                      labels=labels, notes=[*because, *where,
                                            "the runtime decides again on the concrete arguments and blocks the step if it fires",
                                            *typing],
                      help="constrain the value (a `when` on the step, or a check before it) so the rule cannot fire")


def _witness_text(witness: dict[str, Any] | None) -> str:
    if not witness:
        return ""
    parts = [f"`{path}` = {_show(value)}" for path, value in sorted(witness.items())]
    return ": it fires when " + ", ".join(parts)


def _witness_notes(witness: dict[str, Any] | None) -> list[str]:
    if not witness:
        return []
    return ["it fires, for example, when " + ", ".join(f"`{path}` = {_show(value)}" for path, value in sorted(witness.items()))]


def _show(value: Any) -> str:
    from plangate.cel.evaluate import value_source

    return value_source(value)
