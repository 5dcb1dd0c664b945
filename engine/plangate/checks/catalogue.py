"""The catalogue: `unknown-tool`, `arg-type`, `risk-underdeclared`, `check-not-read-only`.

Every call (a step's `call` and its `rollback`) must match a catalogue entry; with
`unknown_tools warn` an unmatched tool is a warning, else an error. Where the entry has an `args`
schema, each argument must be declared, each required one present, and each value of its type:
constants are typed by value, expressions by the CEL type checker, results of earlier steps are
`dyn` and pass. An `int` constant is accepted where a `double` is declared (`amount: 900`).
"""

from __future__ import annotations

from typing import Any, Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, Label, Severity, diagnostic
from plangate.ir.nodes import Risk, Step, ToolCall
from plangate.policy.compiled import CatalogueEntry, CompiledPolicy
from plangate.policy.facts import plan_facts, static_arguments
from plangate.suggest import closest


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    policy = ctx.policy
    assert policy is not None
    for step_id, facts in plan_facts(ctx).items():
        step = facts.step
        if step.call is None:
            continue
        yield from call_diagnostics(policy, step, step.call, facts.entry, facts.args, "call")
        if step.rollback is not None:
            entry = policy.match(step.rollback.tool)
            args = static_arguments(step_id, step.rollback, entry)
            yield from call_diagnostics(policy, step, step.rollback, entry, args, "rollback")
        if facts.entry is not None and facts.entry.risk is not None and facts.declared_risk is not None \
                and facts.declared_risk < facts.entry.risk:
            yield diagnostic(
                "risk-underdeclared", step.risk.span if step.risk is not None else step.id_span,
                f"step `{step.id}` declares risk `{facts.declared_risk.name}` but its tool "
                f"`{step.call.tool}` is `{facts.entry.risk.name}` in the catalogue",
                labels=[Label(facts.entry.span, f"`{facts.entry.pattern}` is `{facts.entry.risk.name}` here")],
                help=f"declare `risk {facts.entry.risk.name}` (or higher)")
        if step.kind == "check" and facts.effective_risk > Risk.read_only:
            where = "its declared risk" if (facts.declared_risk or 0) > Risk.read_only else "the catalogue"
            yield diagnostic(
                "check-not-read-only", step.call.tool_span,
                f"check `{step.id}` calls `{step.call.tool}`, which is `{facts.effective_risk.name}` by {where}",
                help="a check only observes: call a read-only tool, or make this a `step` followed by a `check`")


def call_diagnostics(policy: CompiledPolicy, step: Step, call: ToolCall, entry: CatalogueEntry | None,
                      values: dict[str, Any], clause: str) -> Iterator[Diagnostic]:
    if entry is None:
        severity = Severity.WARNING if policy.unknown_tools == "warn" else Severity.ERROR
        suggestion = closest(call.tool, [e.pattern for e in policy.catalogue if e.pattern != "*"])
        yield diagnostic(
            "unknown-tool", call.tool_span,
            f"`{call.tool}` in the `{clause}` of step `{step.id}` matches no tool of the catalogue",
            severity=severity,
            help=f"did you mean `{suggestion}`?" if suggestion else
            "add the tool to the policy's catalogue: `tool name { risk … }`")
        return
    if entry.args is None:
        return
    schema = {spec.name: spec for spec in entry.args}
    given = {argument.name: argument for argument in call.args}
    for argument in call.args:
        spec = schema.get(argument.name)
        if spec is None:
            suggestion = closest(argument.name, schema)
            yield diagnostic(
                "arg-type", argument.span, f"`{call.tool}` has no argument `{argument.name}`",
                labels=[Label(entry.span, "its arguments are declared here")],
                help=f"did you mean `{suggestion}`?" if suggestion else
                "its arguments are " + (", ".join(f"`{name}`" for name in schema) or "none"))
            continue
        problem = _type_problem(spec.type, values.get(argument.name), argument.value)
        if problem is not None:
            yield diagnostic(
                "arg-type", argument.value.span,
                f"argument `{argument.name}` of `{call.tool}` must be `{spec.type}`, but {problem}",
                labels=[Label(spec.span, f"`{spec.name}` is declared `{spec.type}` here")])
    for name, spec in schema.items():
        if name not in given and not spec.optional:
            yield diagnostic(
                "arg-type", call.span, f"`{call.tool}` needs argument `{name}` (`{spec.type}`), which the call does not give",
                labels=[Label(spec.span, "declared here")], help=f"add `{name}: …` to the call")


_PYTHON_TYPES = {"string": (str,), "int": (int,), "uint": (int,), "double": (float, int), "bool": (bool,),
                 "bytes": (bytes,), "list": (list, tuple), "map": (dict,), "null": (type(None),)}


def _type_problem(declared: str, value: Any, expr: Any) -> str | None:
    from plangate.cel.evaluate import CelError
    from plangate.smt.decide import Unknown

    if isinstance(value, (Unknown, CelError)) or declared in ("dyn", "duration", "timestamp"):
        return None  # known only at run time (the tool's own type hints are checked then), or not checkable by value
    if value is None:
        return None if declared == "null" else "it is `null`"
    if isinstance(value, bool) and declared != "bool":
        return f"it is {_describe(value)}"
    accepted = _PYTHON_TYPES.get(declared)
    if accepted is None or (isinstance(value, accepted) and not (declared == "uint" and value < 0)):
        return None
    return f"it is {_describe(value)}"


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"the bool `{str(value).lower()}`"
    if isinstance(value, str):
        return f"the string `\"{value}\"`" if len(value) < 40 else "a string"
    if isinstance(value, int):
        return f"the int `{value}`"
    if isinstance(value, float):
        return f"the double `{value}`"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a map"
    return f"`{value!r}`"
