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
"""

from __future__ import annotations

from typing import Any, Iterator

from plangate.cel import ast as cel
from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, Label, diagnostic
from plangate.policy.compiled import CompiledRule
from plangate.policy.decide import StaticVerdict, evaluator_for
from plangate.policy.facts import StepFacts, arguments_read, plan_facts, plan_record, rule_activation, symbolic

_STEP_NAMES = {"step", "call", "args"}


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    policy = ctx.policy
    assert policy is not None
    evaluator = evaluator_for(policy)
    facts_by_step = plan_facts(ctx)
    reported_runtime: set[str] = set()
    activations = {step_id: rule_activation(facts, ctx.plan)
                   for step_id, facts in facts_by_step.items() if facts.step.call is not None}
    for rule in policy.rules:
        roots = {node.name for node in cel.walk(rule.when) if isinstance(node, cel.Ident)}
        if not roots & _STEP_NAMES:
            verdict = evaluator.verdict(rule.when, {"plan": plan_record(ctx.plan)}, unknown=False)
            if verdict.outcome == "must":
                yield _fired(rule, None, ctx.plan.budget.span if ctx.plan.budget is not None else ctx.plan.id_span,
                             "must", None, f"plan `{ctx.plan.id}`")
            continue
        for step_id, facts in facts_by_step.items():
            step = facts.step
            if step.call is None:
                continue
            verdict = decide_for_step(evaluator, rule.when, facts, activations[step_id], ctx)
            if verdict.outcome in ("runtime", "unknown"):
                if rule.name not in reported_runtime:
                    reported_runtime.add(rule.name)
                    yield diagnostic(
                        "decided-at-run-time", step.call.span,
                        f"rule `{rule.name}` cannot be decided before the run for step `{step.id}`"
                        + (f": {verdict.reason}" if verdict.reason else ""),
                        labels=[Label(rule.span, "the rule")],
                        notes=["the runtime evaluates the rule on the concrete arguments before the call"])
                continue
            if verdict.outcome in ("must", "may"):
                yield _fired(rule, step.call.span, step.call.span, verdict.outcome, verdict.witness,
                             f"step `{step.id}`")


def decide_for_step(evaluator: Any, when: cel.Expr, facts: StepFacts, activation: dict[str, Any],
                    ctx: PlanContext) -> StaticVerdict:
    """Whether a rule's condition `when` never, may or must hold for a step's call on the runs where
    the step runs (its own `when` is taken into account): through the arguments' computations, or,
    when that is outside what the solver reasons about, with the computed arguments as opaque
    values of their declared types. Shared by deny/warn rules and requirements. A call with a
    constant argument that fails to evaluate can never be made (`cel-type-error` says why): nothing
    fires for it."""
    if facts.failing:
        return StaticVerdict("never")
    condition, results = symbolic(when, facts)
    if condition is not when:
        read = arguments_read(when)
        assume = tuple(expr for name, expr in facts.computed.items() if name in read)
        verdict = _decide_condition(evaluator, condition, {**results, **activation}, facts, ctx, assume)
        if verdict.outcome != "runtime":
            return verdict
    return _decide_condition(evaluator, when, dict(activation), facts, ctx)


def _verdict(evaluator: Any, expr: cel.Expr, scope: dict[str, Any], unknown: bool,
             assume: tuple[cel.Expr, ...]) -> StaticVerdict:
    """The evaluator's verdict; with `assume`, the solver's under the premise that those
    expressions evaluate (the call is made only when its computed arguments do)."""
    if not assume:
        return evaluator.verdict(expr, scope, unknown)
    outcome = evaluator.holds(expr, scope)
    if isinstance(outcome, bool):
        return StaticVerdict("must" if outcome else "never")
    from plangate.policy.decide import _seconds_for_durations
    from plangate.smt.decide import decide

    answer = decide(expr, _seconds_for_durations(scope), assume=assume, original=scope)
    return StaticVerdict(answer.outcome, answer.witness, answer.reason)


def _decide_condition(evaluator: Any, condition: cel.Expr, scope: dict[str, Any], facts: StepFacts,
                      ctx: PlanContext, assume: tuple[cel.Expr, ...] = ()) -> StaticVerdict:
    alone = _verdict(evaluator, condition, scope, facts.unknown_args, assume)
    when = facts.step.when
    if when is None or alone.outcome in ("never", "runtime", "unknown"):
        return alone  # a rule that cannot fire on any call cannot fire on the runs where the step runs
    if alone.outcome == "must" and isinstance(evaluator.holds(condition, scope), bool):
        return alone  # decided on known values: it holds on every run, so on those where the step runs
    from plangate.smt.decide import Unknown

    for node in cel.walk(when):  # the steps whose results the condition reads, and no others
        if isinstance(node, cel.Ident) and node.name in ctx.graph.steps:
            scope.setdefault(node.name, {"result": Unknown(f"{node.name}.result", "dyn")})
    together = cel.Binary("&&", when, condition)
    possible = _verdict(evaluator, together, scope, True, assume)
    if possible.outcome in ("never", "runtime", "unknown"):
        return possible
    otherwise = _verdict(evaluator, cel.Binary("&&", when, cel.Unary("!", condition)), scope, True, assume)
    if otherwise.outcome == "never":
        return StaticVerdict("must", possible.witness)
    if otherwise.outcome in ("runtime", "unknown"):
        return otherwise
    return StaticVerdict("may", possible.witness)


def _fired(rule: CompiledRule, _call_span: Any, span: Any, outcome: str, witness: dict[str, Any] | None,
           subject: str) -> Diagnostic:
    because = [f"because: {rule.because}"] if rule.because else []
    where = [f"rule `{rule.name}` in policy `{rule.policy}`"]
    labels = [Label(rule.span, "the rule")]
    if rule.effect == "warn":
        verb = "fires" if outcome == "must" else "may fire"
        example = _witness_notes(witness) if outcome == "may" else []
        return diagnostic("policy-warn", span, f"warn rule `{rule.name}` {verb} for {subject}",
                          labels=labels, notes=[*because, *where, *example])
    if outcome == "must":
        return diagnostic("policy-deny", span, f"deny rule `{rule.name}` fires for {subject}",
                          labels=labels, notes=[*because, *where],
                          help="change the call so the rule does not apply, or remove the step")
    return diagnostic("policy-deny-possible", span,
                      f"deny rule `{rule.name}` may fire for {subject}" + _witness_text(witness),
                      labels=labels, notes=[*because, *where,
                                            "the runtime decides again on the concrete arguments and blocks the step if it fires"],
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
