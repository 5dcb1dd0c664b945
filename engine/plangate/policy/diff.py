"""`plangate policy diff OLD NEW`: what NEW allows that OLD denied, and back.

A semantic diff of two compiled policies, in three kinds of change:
- loosened: NEW allows something OLD did not (a tool added to a `deny`-unknown catalogue, a lower
  risk class, a deny rule that fires less, a requirement dropped, a limit raised…);
- tightened: the reverse;
- changed: a difference that is neither (an argument schema rewritten, a warn rule edited).

Deny rules are compared by meaning, not text: with every value of the call unknown (tool,
arguments, step figures), the solver looks for a call that the union of OLD's deny rules denies
and NEW's allows, and the reverse, and shows it as a witness. Requirements are compared per risk
class: the approvals, checks, rollbacks and idempotency keys a step of that class needs under each
policy (a requirement whose condition reads more than the risk counts if it may apply).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from functools import reduce
from typing import Any

from plangate.cel import ast as cel
from plangate.ir.nodes import Risk
from plangate.policy.compiled import CompiledPolicy, format_seconds


@dataclass
class Change:
    kind: str  # loosened | tightened | changed
    subject: str
    text: str


def diff_policies(old: CompiledPolicy, new: CompiledPolicy, time_bound: float = 2.0) -> list[Change]:
    changes: list[Change] = []
    _unknown_tools(old, new, changes)
    _catalogue(old, new, changes)
    _deny_rules(old, new, changes, time_bound)
    _warn_rules(old, new, changes)
    _requirements(old, new, changes, time_bound)
    _limits(old, new, changes)
    return changes


def _unknown_tools(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change]) -> None:
    if old.unknown_tools != new.unknown_tools:
        kind = "loosened" if new.unknown_tools == "warn" else "tightened"
        changes.append(Change(kind, "unknown_tools",
                              f"tools outside the catalogue: `{old.unknown_tools}` → `{new.unknown_tools}`"))


def _catalogue(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change]) -> None:
    before = {entry.pattern: entry for entry in old.catalogue}
    after = {entry.pattern: entry for entry in new.catalogue}
    for pattern in sorted(after.keys() - before.keys()):
        entry = after[pattern]
        risk = entry.risk.name if entry.risk is not None else "no risk class"
        covered = old.match(pattern.rstrip("*").rstrip(".") or "x")
        if covered is None and old.unknown_tools == "deny":
            changes.append(Change("loosened", f"tool {pattern}", f"`{pattern}` is now in the catalogue ({risk}): "
                                  "calls OLD denied as unknown are allowed"))
        else:
            changes.append(Change("changed", f"tool {pattern}", f"`{pattern}` is now in the catalogue ({risk})"))
    for pattern in sorted(before.keys() - after.keys()):
        covered = new.match(pattern.rstrip("*").rstrip(".") or "x")
        kind = "tightened" if covered is None and new.unknown_tools == "deny" else "changed"
        changes.append(Change(kind, f"tool {pattern}", f"`{pattern}` left the catalogue"
                              + (": its calls are now denied as unknown" if kind == "tightened" else "")))
    for pattern in sorted(before.keys() & after.keys()):
        a, b = before[pattern], after[pattern]
        if a.risk != b.risk:
            lower = (b.risk or 0) < (a.risk or 0)
            changes.append(Change("loosened" if lower else "tightened", f"tool {pattern}",
                                  f"`{pattern}` risk `{_risk(a.risk)}` → `{_risk(b.risk)}`"))
        if a.cost_cap != b.cost_cap:
            looser = b.cost_cap is None or (a.cost_cap is not None and b.cost_cap > a.cost_cap)
            changes.append(Change("loosened" if looser else "tightened", f"tool {pattern}",
                                  f"`{pattern}` cost cap {_amount(a.cost_cap, a.currency)} → {_amount(b.cost_cap, b.currency)}"))
        if a.time_cap != b.time_cap:
            looser = b.time_cap is None or (a.time_cap is not None and b.time_cap > a.time_cap)
            changes.append(Change("loosened" if looser else "tightened", f"tool {pattern}",
                                  f"`{pattern}` time cap {_seconds(a.time_cap)} → {_seconds(b.time_cap)}"))
        if a.args != b.args:
            changes.append(Change("changed", f"tool {pattern}", f"`{pattern}` argument schema changed: "
                                  f"{_schema(a.args)} → {_schema(b.args)}"))


def _call_activation() -> dict[str, Any]:
    from plangate.smt.decide import Unknown

    tool = Unknown("call.tool", "string")
    args = Unknown("args", "dyn")
    activation: dict[str, Any] = {risk.name: int(risk) for risk in Risk}
    activation["step"] = {"id": Unknown("step.id", "string"), "kind": Unknown("step.kind", "string"), "tool": tool,
                          "risk": Unknown("step.risk", "int"), "retry": Unknown("step.retry", "int"),
                          "cost": Unknown("step.cost", "double"), "time": Unknown("step.time", "double"),
                          "conditional": Unknown("step.conditional", "bool")}
    activation["call"] = {"tool": tool, "args": args}
    activation["args"] = args
    activation["plan"] = {"id": Unknown("plan.id", "string"), "version": Unknown("plan.version", "int"),
                          "budget": Unknown("plan.budget", "dyn")}
    return activation


def _any_of(conditions: list[cel.Expr]) -> cel.Expr:
    if not conditions:
        return cel.Literal(False, "bool")
    return reduce(lambda left, right: cel.Binary("||", left, right), conditions)


_RISK_RANGE = cel.Binary("&&", cel.Binary(">=", cel.Select(cel.Ident("step"), "risk"), cel.Literal(0, "int")),
                         cel.Binary("<=", cel.Select(cel.Ident("step"), "risk"), cel.Literal(3, "int")))


def _deny_rules(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change], time_bound: float) -> None:
    from plangate.smt.decide import decide

    old_rules = {rule.name: rule for rule in old.rules if rule.effect == "deny"}
    new_rules = {rule.name: rule for rule in new.rules if rule.effect == "deny"}
    for name in sorted(old_rules.keys() - new_rules.keys()):
        changes.append(Change("changed", f"deny {name}", f"deny rule `{name}` was removed"))
    for name in sorted(new_rules.keys() - old_rules.keys()):
        changes.append(Change("changed", f"deny {name}", f"deny rule `{name}` was added"))
    for name in sorted(old_rules.keys() & new_rules.keys()):
        if cel.to_source(old_rules[name].when) != cel.to_source(new_rules[name].when):
            changes.append(Change("changed", f"deny {name}", f"deny rule `{name}`: `{cel.to_source(old_rules[name].when)}` "
                                  f"→ `{cel.to_source(new_rules[name].when)}`"))
    old_deny = _any_of([rule.when for rule in old_rules.values()])
    new_deny = _any_of([rule.when for rule in new_rules.values()])
    activation = _call_activation()
    for kind, denied, allowed, text in (("loosened", old_deny, new_deny, "NEW allows a call that OLD denies"),
                                        ("tightened", new_deny, old_deny, "NEW denies a call that OLD allows")):
        question = cel.Binary("&&", _RISK_RANGE, cel.Binary("&&", denied, cel.Unary("!", allowed)))
        verdict = decide(question, activation, time_bound)
        if verdict.outcome in ("may", "must"):
            rules = [rule.when for rule in [*old_rules.values(), *new_rules.values()]]
            changes.append(Change(kind, "deny rules", f"{text}: {_witness(verdict.witness, rules)}"))
        elif verdict.outcome in ("unknown", "runtime"):
            changes.append(Change("changed", "deny rules",
                                  f"whether {text[4:]} could not be decided: {verdict.reason}"))


def _warn_rules(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change]) -> None:
    old_rules = {rule.name: cel.to_source(rule.when) for rule in old.rules if rule.effect == "warn"}
    new_rules = {rule.name: cel.to_source(rule.when) for rule in new.rules if rule.effect == "warn"}
    for name in sorted(old_rules.keys() | new_rules.keys()):
        if old_rules.get(name) != new_rules.get(name):
            what = "added" if name not in old_rules else "removed" if name not in new_rules else "changed"
            changes.append(Change("changed", f"warn {name}", f"warn rule `{name}` was {what}"))


def _needs(policy: CompiledPolicy, risk: Risk, time_bound: float) -> dict[str, tuple[str, int, int | None]]:
    """What a step of `risk` must have under `policy`: requirement key → description."""
    from plangate.smt.decide import decide

    activation = _call_activation()
    activation["step"] = dict(activation["step"], risk=int(risk))
    needs: dict[str, tuple[int, int | None]] = {}
    others: dict[str, str] = {}
    for requirement in policy.requirements:
        if requirement.when is not None:
            verdict = decide(requirement.when, activation, time_bound)
            if verdict.outcome == "never":
                continue
        if requirement.kind == "approval" and requirement.approval is not None:
            spec = requirement.approval
            count, within = needs.get(spec.role, (0, None))
            seconds = spec.within.seconds if spec.within else None
            bounds = [w for w in (within, seconds) if w is not None]
            needs[spec.role] = (max(count, spec.count), min(bounds) if bounds else None)
        else:
            others[requirement.kind] = requirement.kind
    result: dict[str, tuple[str, int, int | None]] = {
        f"approval:{role}": (f'approval by {count} of role "{role}"' + (f" within {format_seconds(within)}" if within else ""),
                             count, within)
        for role, (count, within) in needs.items()}
    result.update({kind: (kind, 0, None) for kind in others})
    return result


def _compare_needs(before: tuple[str, int, int | None], after: tuple[str, int, int | None]) -> str:
    """Whether NEW's approval need asks for less (loosened), more (tightened) or a mix (changed)."""
    _, old_count, old_within = before
    _, new_count, new_within = after
    more = new_count > old_count or (new_within is not None and (old_within is None or new_within < old_within))
    less = new_count < old_count or (old_within is not None and (new_within is None or new_within > old_within))
    return "changed" if more == less else "tightened" if more else "loosened"


def _requirements(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change], time_bound: float) -> None:
    for risk in Risk:
        before, after = _needs(old, risk, time_bound), _needs(new, risk, time_bound)
        for key in sorted(before.keys() | after.keys()):
            if key not in after:
                changes.append(Change("loosened", f"{risk.name} steps", f"`{risk.name}` steps no longer need {before[key][0]}"))
            elif key not in before:
                changes.append(Change("tightened", f"{risk.name} steps", f"`{risk.name}` steps now need {after[key][0]}"))
            elif before[key] != after[key]:
                changes.append(Change(_compare_needs(before[key], after[key]), f"{risk.name} steps",
                                      f"`{risk.name}` steps: {before[key][0]} → {after[key][0]}"))


def _limits(old: CompiledPolicy, new: CompiledPolicy, changes: list[Change]) -> None:
    for name in sorted(old.limits.keys() | new.limits.keys()):
        a, b = old.limits.get(name), new.limits.get(name)
        if a is None and b is not None:
            changes.append(Change("tightened", f"limit {name}", f"`limit {name}` added: {b.text()}"))
        elif b is None and a is not None:
            changes.append(Change("loosened", f"limit {name}", f"`limit {name}` removed (was {a.text()})"))
        elif a is not None and b is not None and a.key() != b.key():
            kind = "loosened" if b.key() > a.key() else "tightened"
            changes.append(Change(kind, f"limit {name}", f"`limit {name}` {a.text()} → {b.text()}"))


def _risk(risk: Risk | None) -> str:
    return risk.name if risk is not None else "none"


def _amount(amount: Any, currency: str | None) -> str:
    return "none" if amount is None else f"{amount} {currency}" if currency else str(amount)


def _seconds(seconds: int | None) -> str:
    return "none" if seconds is None else format_seconds(seconds)


def _schema(args: Any) -> str:
    if args is None:
        return "any arguments"
    return "{" + ", ".join(f"{a.name}: {a.type}{'?' if a.optional else ''}" for a in args) + "}"


def _witness(witness: dict[str, Any] | None, conditions: list[cel.Expr]) -> str:
    """The witness values the compared conditions read (the solver also picks values for the rest)."""
    read = {_path(node) for condition in conditions for node in cel.walk(condition)}
    shown = {path: value for path, value in (witness or {}).items()
             if any(path == prefix or path.startswith(prefix + ".") for prefix in read if prefix)}
    if not shown:
        return "(any call)"
    names = {int(risk): risk.name for risk in Risk}
    return ", ".join(f"`{path}` = " + (names.get(value, str(value)) if path == "step.risk" else
                                       json.dumps(value) if isinstance(value, str) else str(value))
                     for path, value in sorted(shown.items()))


def _path(node: cel.Expr) -> str | None:
    fields: list[str] = []
    while isinstance(node, cel.Select):
        fields.append(node.field)
        node = node.operand
    if isinstance(node, cel.Ident) and fields:
        return ".".join([node.name, *reversed(fields)])
    return None


def diff_command(old_path: str, new_path: str, output_format: str, exit_code: bool = False) -> int:
    """The CLI face: 0 when the diff was made, 2 when a policy is broken; with `exit_code`, 1 when
    the policies differ in meaning (for scripts that gate on a change)."""
    from plangate.diagnostics import Severity
    from plangate.diagnostics.render import render
    from plangate.driver import check

    compiled = []
    for path in (old_path, new_path):
        result = check([], [path])
        errors = [d for d in result.diagnostics if d.severity is Severity.ERROR]
        if errors or result.policy is None:
            sys.stderr.write(render(result.diagnostics, result.sources, "text", files=result.files,
                                    tool_version=""))
            print(f"plangate: `{path}` has errors; no diff was made", file=sys.stderr)
            return 2
        compiled.append(result.policy)
    changes = diff_policies(compiled[0], compiled[1])
    if output_format == "json":
        print(json.dumps({"old": old_path, "new": new_path, "changes": [asdict(c) for c in changes]}, indent=2))
    elif not changes:
        print(f"`{old_path}` and `{new_path}` allow and deny the same calls")
    else:
        titles = {"loosened": "NEW allows what OLD denied (loosened)", "tightened": "NEW denies what OLD allowed (tightened)",
                  "changed": "other changes"}
        for kind in ("loosened", "tightened", "changed"):
            group = [change for change in changes if change.kind == kind]
            if group:
                print(titles[kind] + ":")
                for change in group:
                    print(f"  {change.text}")
    return 1 if (changes and exit_code) else 0
