"""The embeddable pre-execution gate: an agent runtime asks, before each tool call, what the policy says.

    gate = Gate.from_files(["policies/baseline.policy"])
    decision = gate.decide("payments.refund", {"amount": 900.0, "currency": "EUR"})
    if not decision.allowed: ...            # decision.reasons says why
    for need in decision.approvals: ...     # who must approve first (role, count, within)

A `Gate` holds one `CompiledPolicy` (compiled once from one or more policies, combined as
`plangate check` combines them, with its content hash) and decides concrete calls with the same
evaluator, catalogue and argument check as `plangate check` and the runtime:

1. the tool is matched against the catalogue (the most specific entry); an unmatched tool is refused
   under `unknown_tools deny` (the default) and allowed with a warning under `warn`;
2. where the entry declares `args`, every argument must be declared, every required one given, and
   each value of its type (`arg-type`): a call that does not fit is refused whatever the rules
   say, as at run time, and the rules are still asked so that `denied_by` names those that would
   refuse it too (as for an unknown tool: a deny rule may name a tool the catalogue leaves out);
   one with no JSON form or with values the rules could not see is refused before any rule (no
   rule is asked, so `denied_by`, `errors`, requirements and approvals stay empty);
3. the step's risk is the higher of the one the caller declares and the catalogue's (neither:
   `irreversible`); declaring less than the catalogue refuses the call, as `risk-underdeclared`
   refuses such a step, though the rules are still asked; the rules see `step`, `call`, `args`, `plan` and the risk constants exactly
   as in a plan; every deny rule that fires refuses the call (a rule whose condition fails to
   evaluate does not fire, and the failure is reported in `errors` unless the condition reads
   nothing of the call, such as `plan.budget.time` with no plan); warn rules give warnings;
4. the requirements that apply are returned: approvals merged per role (the most approvers, the
   shortest `within`), and `check`, `rollback`, `idempotency`.

Invariant: `decide` never raises for any tool name and JSON-like arguments; everything it finds is
in the decision. `check_plan` runs the static checker on a plan text under the same policies.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from plangate.diagnostics import Diagnostic, Severity
from plangate.driver import CheckResult, as_paths, as_sources, check_sources, policy_set, read_sources
from plangate.ir.nodes import RISK_NAMES, Plan, Risk, RiskRef, Step, ToolCall
from plangate.policy.compiled import CompiledPolicy
from plangate.source import SourceFile



class GateError(Exception):
    """The policies could not be compiled; `diagnostics` says why."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        errors = [item for item in diagnostics if item.severity is Severity.ERROR]
        shown = "; ".join(f"{item.file}: {item.name}: {item.message}" for item in errors[:3])
        super().__init__(f"the policies have {len(errors)} error(s): {shown}")
        self.diagnostics = diagnostics


@dataclass(frozen=True)
class ApprovalNeed:
    role: str
    count: int
    within_seconds: int | None
    rules: tuple[str, ...]  # the `require` clauses that ask for it


@dataclass
class GateDecision:
    """What the policy says about one concrete call."""

    tool: str
    allowed: bool
    risk: str
    reasons: list[str] = field(default_factory=list)  # why it is refused; empty when allowed
    denied_by: list[str] = field(default_factory=list)  # deny rules that fire
    warnings: list[str] = field(default_factory=list)  # warn rules that fire, unknown tool under `warn`
    approvals: list[ApprovalNeed] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)  # `check`, `rollback`, `idempotency`
    errors: list[str] = field(default_factory=list)  # conditions that failed to evaluate on this call
    policy_hash: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool, "allowed": self.allowed, "risk": self.risk, "reasons": self.reasons,
            "denied_by": self.denied_by, "warnings": self.warnings,
            "approvals": [{"role": need.role, "count": need.count, "within_seconds": need.within_seconds,
                           "rules": list(need.rules)} for need in self.approvals],
            "requires": self.requires, "errors": self.errors, "policy_hash": self.policy_hash,
        }


class Gate:
    """One compiled policy, deciding concrete calls (see the module's docstring)."""

    def __init__(self, policy: CompiledPolicy, sources: Sequence[SourceFile] = ()) -> None:
        if not isinstance(policy, CompiledPolicy):
            raise TypeError(f"a gate decides by a CompiledPolicy (see `Gate.from_files`), not {type(policy).__name__}")
        self.policy = policy
        self._sources = list(sources)

    @classmethod
    def from_files(cls, paths: Sequence[str | bytes | os.PathLike[str]] | str | bytes | os.PathLike[str]) -> "Gate":
        """Policies read from files (one path may be given as itself); `GateError` when any cannot
        be read or has an error."""
        problems: list[Diagnostic] = []
        sources = read_sources(as_paths(paths, "policy"), problems)
        if problems:
            raise GateError(problems)
        return cls.from_sources([(source.name, source.text) for source in sources])

    @classmethod
    def from_sources(cls, sources: Sequence[tuple[str, str]]) -> "Gate":
        """Policies given as (name, text) pairs (or `SourceFile`s); `GateError` when any has an error."""
        files = as_sources(sources, "policy")
        if not files:
            raise ValueError("a gate needs at least one policy")
        files = policy_set(files)  # a set: neither their order nor a repeat changes the decisions or the hash
        result = check_sources([], files)
        errors = [item for item in result.diagnostics if item.severity is Severity.ERROR]
        if errors or result.policy is None:
            raise GateError(result.diagnostics or [])
        return cls(result.policy, files)

    @property
    def policy_hash(self) -> str:
        return self.policy.hash

    def decide(self, tool: str, args: Mapping[str, Any] | None = None, *, risk: str | Risk | None = None,
               step: str = "call", kind: str = "step", retry: int = 0, plan: str = "gate",
               plan_version: int | None = None) -> GateDecision:
        """The policy's decision on calling `tool` with `args` (see the module's docstring).
        `TypeError` when `tool` is not a string or `args` not a mapping (a caller's mistake, not a
        decision)."""
        from plangate.checks.catalogue import not_in_catalogue, refusal_before_rules, typed_arguments, underdeclared
        from plangate.policy.decide import evaluator_for
        from plangate.policy.facts import StepFacts, effective_risk, retry_needs_key, rule_activation
        from plangate.runtime.canonical import canonical_json
        from plangate.runtime.tools import is_tool_name

        if not isinstance(tool, str):
            raise TypeError(f"the tool must be a name (a str), not {type(tool).__name__}")
        if args is not None and not isinstance(args, Mapping):
            raise TypeError(f"the arguments must be a mapping of names to values, not {type(args).__name__}")
        if kind not in ("step", "check"):
            raise ValueError(f"kind must be \"step\" or \"check\", not {kind!r}")
        if not isinstance(retry, int) or isinstance(retry, bool):
            raise TypeError(f"retry must be an int, not {type(retry).__name__}")
        for name, value in (("step", step), ("plan", plan)):  # what the rules see as step.id and plan.id
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a string (the id the rules see), not {type(value).__name__}")
        if plan_version is not None and (not isinstance(plan_version, int) or isinstance(plan_version, bool)):
            raise TypeError(f"plan_version must be an int or None, not {type(plan_version).__name__}")
        if retry < 0:
            raise ValueError(f"retry must be 0 or more, not {retry}")
        declared = _risk(risk)
        entry = self.policy.match(tool)
        arguments = typed_arguments(entry, dict(args or {}))
        facts_step = Step.model_construct(id=step, kind=kind, retry=retry,
                                          call=ToolCall.model_construct(tool=tool, args=()),
                                          risk=RiskRef.model_construct(name=declared.name, level=declared)
                                          if declared is not None else None)
        level = effective_risk(facts_step, entry)
        decision = GateDecision(tool=tool, allowed=True, risk=level.name, policy_hash=self.policy.hash)
        if entry is None:
            if self.policy.unknown_tools == "warn":
                decision.warnings.append(not_in_catalogue(tool))
            else:
                decision.reasons.append(not_in_catalogue(tool))
        if not is_tool_name(tool):
            decision.reasons.append(f"`{tool}` is not a tool name (dotted identifiers, such as `deploy.preview`)")
        low = underdeclared(tool, declared, entry)
        if low is not None:
            decision.reasons.append(low)
        before_rules = False
        try:
            canonical_json(dict(args or {}))
        except (TypeError, ValueError, RecursionError) as error:  # NaN, a set…: a tool could never be given it
            decision.reasons.append(f"the arguments have no JSON form: {error}")
            before_rules = True
        refused = refusal_before_rules(tool, entry, arguments)
        if refused is not None:
            decision.reasons.extend(refused.problems)
            before_rules = before_rules or not refused.explainable
        if kind == "check" and level > Risk.read_only:
            decision.reasons.append(f"a check only observes, and `{tool}` is `{level.name}`")
        retries = self.policy.limit("retries")
        if retries is not None and retries.count is not None and retry > retries.count:
            decision.reasons.append(f"{retry} retries are over `limit retries <= {retries.count}`")
        if before_rules:  # values no rule could see as the runtime would hold them: no rule is asked
            decision.allowed = False
            return decision
        facts = StepFacts(step=facts_step, entry=entry, declared_risk=declared, effective_risk=level, args=arguments)
        outcome = evaluator_for(self.policy).decide_call(
            rule_activation(facts, Plan.model_construct(id=plan, version=plan_version)))
        for rule in outcome.denied_by:
            decision.denied_by.append(rule.name)
            decision.reasons.append(outcome.denial(rule))
        decision.warnings.extend(f"warn rule `{rule.name}` fires" for rule in outcome.warned_by)
        plan_level = self._plan_level_conditions
        if refused is None:  # else a rule fails on values of the wrong type, and the refusal says why
            decision.errors.extend(f"{name}: {message}" for name, message in outcome.errors if name not in plan_level)
        needs: dict[str, ApprovalNeed] = {}
        for requirement in outcome.requirements:
            spec = requirement.approval
            if requirement.kind == "approval" and spec is not None:
                needs[spec.role] = _merge(needs.get(spec.role), spec.role, spec.count,
                                          spec.within.seconds if spec.within is not None else None,
                                          requirement.describe())
            elif kind != "check" and requirement.kind not in decision.requires:
                decision.requires.append(requirement.kind)  # a check only observes: approvals alone
        if retry_needs_key(kind, retry, level) and "idempotency" not in decision.requires:
            decision.requires.append("idempotency")  # a retried write needs a key, policy or not
        # capped by `limit approval_within`, as the runtime caps the expiry of every approval
        decision.approvals = [replace(need, within_seconds=self.policy.approval_lasts(need.within_seconds))
                              for need in needs.values()]
        decision.allowed = not decision.reasons
        return decision

    @functools.cached_property
    def _plan_level_conditions(self) -> frozenset[str]:
        """Rules and requirements whose condition reads nothing of the call (`plan.budget…`): their
        failures (a plan without a budget) say nothing about the call and are not reported."""
        from plangate.cel.ast import Ident, walk

        names = set()
        for rule in (*self.policy.rules, *self.policy.requirements):
            when = rule.when
            if when is not None and not any(isinstance(node, Ident) and node.name in ("step", "call", "args")
                                            for node in walk(when)):
                names.add(rule.name if hasattr(rule, "name") else rule.describe())
        return frozenset(names)

    def check_plan(self, text: str, name: str = "plan.plan") -> CheckResult:
        """The static check of a plan text under this gate's policies (as `plangate check`)."""
        if not isinstance(text, str):
            raise TypeError(f"the plan text must be a str (decode bytes first), not {type(text).__name__}")
        if not self._sources:
            raise ValueError("this gate was built from a compiled policy alone: use `Gate.from_sources`")
        result = check_sources([SourceFile(name, text)], self._sources)
        if not result.plans and not any(item.severity is Severity.ERROR and item.file == name
                                        for item in result.diagnostics):
            from plangate.diagnostics import diagnostic
            from plangate.source import Span

            result.diagnostics.append(diagnostic(  # a policy text, say: `check` would lint it, this checks plans
                "wrong-document-kind", Span(name, 0, 0), f"`{name}` holds no plan",
                help="`check_plan` checks a plan text (`plan name { … }`) under the gate's policies"))
        return result


def _merge(known: ApprovalNeed | None, role: str, count: int, within: int | None, rule: str) -> ApprovalNeed:
    """Two approvals asked of one role: the most approvers, the shortest `within`."""
    if known is None:
        return ApprovalNeed(role, count, within, (rule,))
    shortest = [seconds for seconds in (known.within_seconds, within) if seconds is not None]
    return ApprovalNeed(role, max(known.count, count), min(shortest) if shortest else None, (*known.rules, rule))


def _risk(risk: str | Risk | None) -> Risk | None:
    if risk is None or isinstance(risk, Risk):
        return risk
    if risk not in RISK_NAMES:
        raise ValueError(f"`{risk}` is not a risk class; the classes are {', '.join(RISK_NAMES)}")
    return Risk[risk]
