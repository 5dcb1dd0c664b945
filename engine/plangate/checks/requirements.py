"""Requirements: `approval-missing`, `approval-insufficient`, `check-missing`,
`rollback-missing`, `idempotency-missing`.

For each step, every `require` rule of the compiled policy is decided on the step's call: a rule
applies when its `when` must or may hold on the runs where the step runs (decided with the solver
where it reads values known only at run time, together with the step's own `when`, exactly as deny
rules are: `rules.step_decisions`; "may" counts, since the run may need it).

Approvals: the required approvals are merged per role (the most approvers, the shortest `within`);
the plan's clauses for one role merge the same way, as the run merges them, and must ask for at
least that many approvers and no longer `within` (a plan `approval` without `within` takes the
policy's). A `check` step needs approvals like any other, but no check, rollback or key of its own:
it must be read-only, and `check-not-read-only` reports one that is not. `limit approval_within`
bounds every `within` a plan writes (`limit-exceeded`).

A `check` covers a step when it depends on it directly and runs whenever the step runs (see
`_verifiers`). Each diagnostic says which rule asked for what.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from plangate.cel import ast as cel
from plangate.cel.evaluate import constant_when
from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, Label, diagnostic
from plangate.ir.nodes import ApprovalSpec, Step
from plangate.policy.compiled import CompiledPolicy, CompiledRequirement, describe_approval, format_seconds
from plangate.checks.limits import limit_text
from plangate.checks.rules import step_decisions
from plangate.checks.unreachable import never_true, never_running


@dataclass
class _Need:
    role: str
    count: int
    within: int | None
    rules: list[CompiledRequirement]


def applicable(ctx: PlanContext) -> dict[str, list[tuple[CompiledRequirement, str]]]:
    """step id → the requirements that apply to it, with "must" or "may"; computed once per plan."""
    cached = ctx.facts.get("requirements")
    if cached is not None:
        return cached
    policy = ctx.policy
    assert policy is not None
    decisions = step_decisions(ctx)
    result: dict[str, list[tuple[CompiledRequirement, str]]] = {step_id: [] for step_id in decisions.steps_with_calls}
    for requirement in policy.requirements:
        if requirement.when is None:  # every step, even one that looks unreachable: a new version of a
            for found in result.values():  # run may keep the result of a step it made unreachable
                found.append((requirement, "must"))
            continue
        for step_id, verdict in decisions.verdicts(requirement.when):
            if verdict.outcome != "never":
                result[step_id].append((requirement, verdict.outcome))
    ctx.facts["requirements"] = result
    return result


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    checked_by, skippable = _verifiers(ctx)
    cap = ctx.policy.limit("approval_within") if ctx.policy is not None else None
    for step in ctx.graph.steps.values():
        for spec in step.approvals:
            if cap is not None and spec.within is not None and cap.seconds is not None and spec.within.seconds > cap.seconds:
                yield diagnostic(
                    "limit-exceeded", spec.within.span,
                    f"step `{step.id}` lets an approval last {spec.within.text}, over {limit_text(cap)}",
                    labels=[Label(cap.span, "the limit is here")],
                    help=f"write `within {format_seconds(cap.seconds)}` or less (or leave it out: the limit applies)")
    for step_id, requirements in applicable(ctx).items():
        step = ctx.graph.steps[step_id]
        approvals = [(r, outcome) for r, outcome in requirements if r.kind == "approval" and r.approval is not None]
        yield from _approvals(step, approvals, ctx.policy)
        if step.kind == "check":
            continue  # a check only observes; if it calls a write, `check-not-read-only` says so
        by_kind: dict[str, list[tuple[CompiledRequirement, str]]] = {}
        for requirement, outcome in requirements:  # one diagnostic per kind, naming every rule that asks
            if requirement.kind in _KINDS:
                by_kind.setdefault(requirement.kind, []).append((requirement, outcome))
        for kind, asking in by_kind.items():
            if kind == "check" and not checked_by.get(step_id):
                maybe = skippable.get(step_id, [])
                named = ", ".join(f"`{check_id}`" for check_id, _ in maybe)
                if not maybe:
                    message = f"step `{step.id}` must be verified by a `check` step, and none depends on it"
                elif all(why == _NEVER for _, why in maybe):
                    message = f"step `{step.id}` must be verified by a `check` step, and {named} never runs"
                else:
                    message = (f"step `{step.id}` must be verified by a `check` step whenever it runs, and {named} "
                               "may be skipped when it runs")
                yield _missing("check-missing", step, asking, message,
                               f"add `check verify_{step.id} after {step.id} {{ call … expect … }}`"
                               + (" with no `when` of its own" if any(why != _NEVER for _, why in maybe) else ""),
                               [f"`{check_id}` runs only when {why}" if why != _NEVER else
                                f"`{check_id}` never runs: its `when` never holds, or it uses the result of a step that never runs"
                                for check_id, why in maybe])
            elif kind == "rollback" and step.rollback is None:
                yield _missing("rollback-missing", step, asking,
                               f"step `{step.id}` needs a `rollback`, and has none",
                               "add `rollback tool.undo(id: result.id)`: the call that undoes this step")
            elif kind == "idempotency" and step.idempotency is None:
                yield _missing("idempotency-missing", step, asking,
                               f"step `{step.id}` needs an `idempotency` key, and has none",
                               f'add `idempotency "{step.id}-" + …`: a value that names this one effect')


_KINDS = ("check", "rollback", "idempotency")
_NEVER = "never"  # why a check that depends on a step does not verify it: it never runs


def _verifiers(ctx: PlanContext) -> tuple[dict[str, list[str]], dict[str, list[tuple[str, str]]]]:
    """Per step, the `check` steps that verify it on every run where it runs; and those that
    depend on it directly but may be skipped when it runs, each with why.

    A check never runs when its `when` is constant and not true, or it uses the result of a step
    that never runs: it verifies nothing. Else it runs when every guard of its guard set holds —
    its own `when` and those of the steps whose results it uses, transitively (a skipped step's
    users are skipped; `after` only orders) — so it verifies a step on each of that step's runs
    when every guard it has beyond the step's own guards has the same condition as one of them
    (the same canonical text over the same results: the same value on every run). A condition
    implied without being the same one is not recognised: the check then counts as skippable."""
    checked_by: dict[str, list[str]] = {}
    skippable: dict[str, list[tuple[str, str]]] = {}
    checks = [step for step in ctx.graph.steps.values() if step.kind == "check"]
    if not checks:
        return checked_by, skippable
    never = never_running(ctx)
    guards = guard_sets(ctx)
    for step in checks:
        if step.id in never or (step.when is not None and never_true(step.when)):
            for source in ctx.graph.predecessors(step.id):  # it depends on them, and never runs
                skippable.setdefault(source, []).append((step.id, _NEVER))
            continue
        for source in ctx.graph.predecessors(step.id):
            conditions = {guard_condition(ctx, guard) for guard in guards.get(source, ())}
            extra = [guard for guard in guards.get(step.id, ()) if guard_condition(ctx, guard) not in conditions]
            if not extra:
                checked_by.setdefault(source, []).append(step.id)
                continue
            guard = min(extra)
            skippable.setdefault(source, []).append(
                (step.id, f"`{guard_condition(ctx, guard)}` holds"
                          + ("" if guard == step.id else f" (the `when` of `{guard}`, whose result it depends on)")))
    return checked_by, skippable


def guard_sets(ctx: PlanContext) -> dict[str, frozenset[str]]:
    """Per step, the conditional steps whose `when` must hold for it to run (see `_verifiers`);
    empty when no step has a `when` that reads a result, or the plan is no DAG. Computed once per
    plan and kept in `ctx.facts`."""
    known = ctx.facts.get("guard_sets")
    if known is None:
        known = ctx.facts["guard_sets"] = _guard_sets(ctx)
    return known


def guard_condition(ctx: PlanContext, step_id: str) -> str:
    """A guard's `when` as canonical text: two guards have the same condition when their texts are
    (the syntax tree's equality would take `-0.0` for `0.0`). Kept per plan in `ctx.facts`."""
    texts = ctx.facts.setdefault("guard_conditions", {})
    text = texts.get(step_id)
    if text is None:
        text = texts[step_id] = cel.to_source(ctx.graph.steps[step_id].when)  # type: ignore[arg-type]
    return text


def _guard_sets(ctx: PlanContext) -> dict[str, frozenset[str]]:
    conditional = {step_id for step_id, step in ctx.graph.steps.items()
                   if step.when is not None and constant_when(step.when) is None}
    if not conditional or not ctx.graph.is_dag():
        return {}
    empty: frozenset[str] = frozenset()
    sets: dict[str, frozenset[str]] = {}
    for step_id in ctx.graph.topological_order():
        inherited = [sets[p] for p in ctx.graph.pred[step_id]
                     if ctx.graph.edges[(p, step_id)].kind == "reference" and sets[p]]
        own = frozenset((step_id,)) if step_id in conditional else empty
        sets[step_id] = inherited[0] if len(inherited) == 1 and not own else own.union(*inherited)
    return sets


MAY_APPLY = "the rule may apply at run time, depending on values known only then"


def _required_by(requirement: CompiledRequirement) -> str:
    return f"required by `{requirement.describe()}` in policy `{requirement.policy}`"


def _missing(name: str, step: Step, asking: list[tuple[CompiledRequirement, str]], message: str,
             help_text: str, notes_first: list[str] | None = None) -> Diagnostic:
    """One diagnostic for a requirement kind the step does not meet, naming every rule that asks
    for it (several policies may); "may apply" only when none of them must."""
    notes = [*(notes_first or []),
             *(_required_by(requirement) for requirement, _ in asking)]
    if all(outcome != "must" for _, outcome in asking):
        notes.append(MAY_APPLY)
    return diagnostic(name, step.id_span, message, labels=[Label(requirement.span, "required here") for requirement, _ in asking],
                      notes=notes, help=help_text)


def _approvals(step: Step, requirements: list[tuple[CompiledRequirement, str]],
               policy: CompiledPolicy) -> Iterator[Diagnostic]:
    """The approval a help tells the plan to write has the required `within` capped by `limit
    approval_within` (`approval_lasts`: a longer one is `limit-exceeded`); what the plan asks for is
    compared with the requirements as written (the run caps every approval anyway)."""
    needs: dict[str, _Need] = {}
    maybe: set[str] = set()
    for requirement, outcome in requirements:
        if outcome != "must":
            maybe.add(requirement.approval.role)  # type: ignore[union-attr]
        spec = requirement.approval
        assert spec is not None
        need = needs.setdefault(spec.role, _Need(spec.role, 0, None, []))
        need.count = max(need.count, spec.count)
        if spec.within is not None:
            need.within = spec.within.seconds if need.within is None else min(need.within, spec.within.seconds)
        need.rules.append(requirement)
    for need in needs.values():
        within = policy.approval_lasts(need.within)
        wanted = describe_approval(ApprovalSpec(count=need.count, role=need.role, within=None)) + (
            f" within {format_seconds(within)}" if within is not None else "")
        notes = [_required_by(rule) for rule in need.rules]
        if need.role in maybe:
            notes.append(MAY_APPLY)
        labels = [Label(rule.span, "required here") for rule in need.rules]
        same_role = [spec for spec in step.approvals if spec.role == need.role]
        if not step.approvals:
            yield diagnostic("approval-missing", step.id_span,
                             f"step `{step.id}` needs approval `by {wanted}`, and asks for none",
                             labels=labels, notes=notes, help=f"add `approval by {wanted}`")
            continue
        if not same_role:
            others = [spec for spec in step.approvals if spec.role not in needs]
            if not others:  # every approval asked for serves another requirement: this one has none
                asked = ", ".join(dict.fromkeys(f"`{spec.role}`" for spec in step.approvals))
                yield diagnostic("approval-missing", step.id_span,
                                 f"step `{step.id}` needs approval `by {wanted}`, and asks only for approval by role {asked}",
                                 labels=labels, notes=notes, help=f"add `approval by {wanted}`")
                continue
            roles = ", ".join(f"`{spec.role}`" for spec in others)
            yield diagnostic("approval-insufficient", others[0].span,
                             f"step `{step.id}` asks for approval by role {roles}, but role `{need.role}` must approve",
                             labels=labels, notes=notes, help=f"add `approval by {wanted}`")
            continue
        # The plan's clauses for one role merge as the policy's do (the most approvers, the shortest
        # `within`): the run waits for that many approvals, each valid that long.
        # One diagnostic per step and role, saying every way the plan falls short.
        most = max(same_role, key=lambda spec: spec.count)
        shortest = min((spec.within for spec in same_role if spec.within is not None),
                       key=lambda within: within.seconds, default=None)
        unbounded = any(spec.within is None for spec in same_role)  # takes the policy's: never longer
        too_few = most.count < need.count
        too_long = shortest is not None and not unbounded and need.within is not None and shortest.seconds > need.within
        asked = f"{most.count} approver{'s' if most.count != 1 else ''} of role `{need.role}`"
        if too_few and too_long:
            assert shortest is not None and need.within is not None
            yield diagnostic("approval-insufficient", most.span,
                             f"step `{step.id}` asks for {asked} for {shortest.text}, but {need.count} are required, "
                             f"within {format_seconds(need.within)}",
                             labels=labels, notes=notes, help=f"write `approval by {wanted}`")
        elif too_few:
            yield diagnostic("approval-insufficient", most.span,
                             f"step `{step.id}` asks for {asked}, but {need.count} are required",
                             labels=labels, notes=notes, help=f"write `approval by {wanted}`")
        elif too_long:
            assert shortest is not None and need.within is not None
            yield diagnostic("approval-insufficient", shortest.span,
                             f"step `{step.id}` lets an approval by role `{need.role}` last {shortest.text}, "
                             f"longer than the {format_seconds(need.within)} required",
                             labels=labels, notes=notes, help=f"write `within {format_seconds(need.within)}` or less")
