"""The catalogue: `unknown-tool`, `arg-type`, `risk-underdeclared`.

Every call (a step's `call` and its `rollback`) must match a catalogue entry; with
`unknown_tools warn` an unmatched tool is a warning, else an error. Where the entry has an `args`
schema, each argument must be declared, each required one present, and each value of its type:
constants are typed by value, expressions by the CEL type checker, results of earlier steps are
`dyn` and pass. An `int` is accepted where a `double` is declared (`amount: 900`); otherwise
`int` and `uint` are distinct (`5` is no `uint`: `5u`), a `duration` takes a duration
(`duration("1h")`, not the string `"1h"`) and a `timestamp` a timestamp (`timestamp("…")`, RFC
3339), as CEL types them; the help shows the conversion when the string would convert.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Collection, Iterator

from plangate.cel import ast as cel
from plangate.cel.evaluate import (INT_MAX, INT_MIN, CelError, Duration, Timestamp, Uint, parse_bytes, parse_duration,
                                   parse_timestamp, value_source, leaves)
from plangate.cel.types import DYN, INT, ListType, MapType, Primitive, check_types
from plangate.checks.context import PlanContext
from plangate.checks.step_shape import IDEMPOTENCY_PARAMETER
from plangate.diagnostics import Diagnostic, Label, Severity, backticked, diagnostic
from plangate.ir.nodes import Risk, Step, ToolCall
from plangate.policy.compiled import CatalogueEntry, CompiledPolicy
from plangate.policy.facts import as_declared, plan_facts, static_arguments
from plangate.smt.encode import Unknown
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
                labels=[Label(facts.entry.risk_source()[1],
                              f"`{facts.entry.risk_source()[0]}` is `{facts.entry.risk.name}` here")],
                help=f"declare `risk {facts.entry.risk.name}` (or higher)")


def call_diagnostics(policy: CompiledPolicy, step: Step, call: ToolCall, entry: CatalogueEntry | None,
                      values: dict[str, Any], clause: str) -> Iterator[Diagnostic]:
    if entry is None:
        severity = Severity.WARNING if policy.unknown_tools == "warn" else Severity.ERROR
        suggestion = closest(call.tool, [e.pattern for e in policy.catalogue if not e.pattern.endswith("*")])
        prefix = next((e.pattern for e in policy.catalogue if e.pattern == call.tool + ".*"), None)
        yield diagnostic(
            "unknown-tool", call.tool_span,
            f"`{call.tool}` in the `{clause}` of step `{step.id}` matches no tool of the catalogue",
            severity=severity,
            help=f"did you mean `{suggestion}`?" if suggestion else
            f"`{prefix}` matches the tools under `{call.tool}.` (`{call.tool}.name`), not `{call.tool}` itself"
            if prefix else "add the tool to the policy's catalogue: `tool name { risk … }`")
        return
    if entry.args is None:
        return
    schema = {spec.name: spec for spec in entry.args}
    given = {argument.name: argument for argument in call.args}
    for argument in call.args:
        if argument.name == IDEMPOTENCY_PARAMETER:
            continue  # the runtime gives it (`step_shape` says so)
        spec = schema.get(argument.name)
        if spec is None:
            suggestion = closest(argument.name, schema)
            yield diagnostic(
                "arg-type", argument.span, f"`{call.tool}` has no argument `{argument.name}`",
                labels=[Label(entry.args_source()[1], "its arguments are declared here")],
                help=f"did you mean `{suggestion}`?" if suggestion else
                "its arguments are " + (backticked(schema) or "none"))
            continue
        found = type_problem(spec.type, values.get(argument.name), argument.value)
        if found is not None:
            problem, fix = found
            yield diagnostic(
                "arg-type", argument.value.span,
                f"argument `{argument.name}` of `{call.tool}` must be `{spec.type}`, but {problem}",
                labels=[Label(spec.span, f"`{spec.name}` is declared `{spec.type}` here")], help=fix)
    for name, spec in schema.items():
        if name not in given and not spec.optional and name != IDEMPOTENCY_PARAMETER:  # the runtime gives that one
            yield diagnostic(
                "arg-type", call.span, f"`{call.tool}` needs argument `{name}` (`{spec.type}`), which the call does not give",
                labels=[Label(spec.span, "declared here")], help=f"add `{name}: …` to the call")


_PYTHON_TYPES = {"string": (str,), "int": (int,), "double": (float, int), "bool": (bool,),
                 "bytes": (bytes,), "list": (list, tuple), "map": (dict,), "null": (type(None),)}


def typed_arguments(entry: CatalogueEntry | None, args: dict[str, Any]) -> dict[str, Any]:
    """Concrete arguments as the rules see them, of the types the entry declares: a string where it
    declares a `duration`, a `timestamp` or `bytes` becomes one when it reads as one (a tool receives
    such a value as its text, `"30m"`, so the gate's callers and the runtime hold it so; a rule
    compares durations); an int where it declares a `double` becomes that double (`amount: 900` passes for a
    double, and a rule's `args.amount * 1.05` must then see 900.0, not fail on `int * double`); a
    non-negative int where it declares a `uint` becomes a `uint` (JSON has no unsigned ints)."""
    declared = {spec.name: spec.type for spec in entry.args} if entry is not None and entry.args else {}
    return {str(name): as_declared(declared.get(name, ""), value) for name, value in args.items()}


@dataclass(frozen=True)
class Refusal:
    """Why a call is refused before any rule decides it: what is wrong, and each problem found.
    `explainable`: the arguments are values the rules can read (of other types than declared), so
    where a refusal is explained (the gate, `plangate test`) the rules are still asked, to name the
    deny rules that would refuse the call as well; the refusal stands whatever they say."""

    what: str
    problems: tuple[str, ...]
    explainable: bool = False

    def __str__(self) -> str:
        return f"{self.what}: {'; '.join(self.problems)}" if self.what else "; ".join(self.problems)


def underdeclared(tool: str, declared: Risk | None, entry: CatalogueEntry | None) -> str | None:
    """Why a call that declares less risk than its tool's catalogue risk is refused (the gate,
    `plangate test`), as `risk-underdeclared` refuses such a step; None when it declares none, or
    not less."""
    if declared is None or entry is None or entry.risk is None or declared >= entry.risk:
        return None
    return f"the call declares risk `{declared.name}`, below `{entry.risk.name}`, the risk of `{tool}` in the catalogue"


def not_in_catalogue(tool: str) -> str:
    """Why a tool outside the catalogue is refused (under `unknown_tools deny`) or warned about."""
    return f"`{tool}` is not in the policy's catalogue"


def refusal_before_rules(tool: str, entry: CatalogueEntry | None, args: dict[str, Any]) -> Refusal | None:
    """Why a concrete call is refused whatever the rules say — the same at run time, by the gate
    and by `plangate test`: arguments that do not fit its tool's `args` (`argument_problems`;
    `explainable`), values the rules could not see as the runtime holds them (`values_outside_cel`).
    None when the rules decide. (A tool outside the catalogue is refused too under `unknown_tools
    deny`, and its rules are likewise still asked where a decision is explained: a deny rule may
    name a tool the catalogue leaves out, as the contract's `no-prod-drops` names `db.drop`.)"""
    outside = values_outside_cel(args)
    if outside:  # no rule could see it as it is: one would err (and not fire) where it must decide
        # a number the rules cannot see is no misfit of a number type besides: said once, as it is
        numeric = {spec.name for spec in entry.args if spec.type in ("int", "uint", "double")} \
            if entry is not None and entry.args else set()
        unseen = {name for name in numeric & args.keys()  # the value itself, not one inside a list or map
                  if not isinstance(args[name], (list, dict)) and values_outside_cel({name: args[name]})}
        return Refusal("the rules cannot see the call's arguments",
                       (*outside, *argument_problems(tool, entry, args, unchecked=unseen)))
    misfits = argument_problems(tool, entry, args)
    if misfits:  # the rules were written for arguments of the declared types: none may let it through
        return Refusal("the call does not fit its tool's `args`", tuple(misfits), explainable=True)
    return None


def argument_problems(tool: str, entry: CatalogueEntry | None, args: dict[str, Any],
                      unchecked: Collection[str] = ()) -> list[str]:
    """Why concrete arguments (as `typed_arguments` gives them) do not fit the entry's `args` schema
    (empty when they do, or when the entry declares none): an unknown argument, a missing required
    one, a value of another type (not tested for the names in `unchecked`: values already refused)."""
    if entry is None or entry.args is None:
        return []
    schema = {spec.name: spec for spec in entry.args}
    problems = []
    for name, value in args.items():
        spec = schema.get(name)
        if spec is None:
            problems.append(f"`{tool}` has no argument `{name}`")
            continue
        problem = None if name in unchecked else type_problem(spec.type, value, None)
        if problem is not None:
            problems.append(f"argument `{name}` of `{tool}` must be `{spec.type}`, but {problem[0]}")
    problems.extend(f"`{tool}` needs argument `{name}` (`{spec.type}`)" for name, spec in schema.items()
                    if name not in args and not spec.optional and name != IDEMPOTENCY_PARAMETER)
    return problems



def values_outside_cel(args: dict[str, Any]) -> list[str]:
    """Why arguments (typed as the rules see them) that have a JSON form are still no values the
    rules could see as the runtime's would be: a `Decimal` (JSON has numbers, the rules doubles:
    pass a float, or the amount as a string) or an int out of the range of a CEL `int` that is not
    a declared `uint` (`plangate check` refuses such a constant too). Empty when there is nothing of
    the kind."""
    found: list[str] = []
    for value in leaves(args):
        if isinstance(value, Decimal):
            found.append(f"the argument value `{value}` is a Decimal: pass a float, or the amount as a string")
        elif isinstance(value, int) and not isinstance(value, (bool, Uint)) and not INT_MIN <= value <= INT_MAX:
            found.append(f"an argument holds `{value}`, out of the range of a CEL `int` (a `uint` argument "
                         "must be declared so)" if value.bit_length() <= 64 else
                         "an argument holds an int past 64 bits, which no CEL value holds")
        if len(found) == 3:
            break
    return found


# The declared types whose values a call writes as a conversion of text: value class, parser, example.
_FROM_TEXT = {
    "duration": (Duration, parse_duration, 'a duration such as `duration("30s")`'),
    "timestamp": (Timestamp, parse_timestamp, 'an RFC 3339 time such as `timestamp("2024-01-01T00:00:00Z")`'),
    "bytes": (bytes, parse_bytes, 'bytes such as `bytes("text")`'),
}


def type_problem(declared: str, value: Any, expr: Any) -> tuple[str, str | None] | None:
    """Why `value` (the argument's value before the run, an `Unknown` or a `CelError`) does not fit
    the declared type, and how to write it; None when it fits or is known only at run time."""
    if declared == "dyn" or isinstance(value, CelError):
        return None  # anything goes; a constant that fails is a `cel-type-error` of its own
    if isinstance(value, Unknown):
        return _static_problem(declared, expr)
    if value is None:
        return None if declared == "null" else ("it is `null`", None)
    if declared in _FROM_TEXT:
        kind, parse, example = _FROM_TEXT[declared]
        if isinstance(value, kind):
            return None
        fix = f"write `{declared}({value_source(value)})`" if isinstance(value, str) and not isinstance(
            parse(value), CelError) else f"write {example}"
        return f"it is {_describe(value)}", fix
    if declared == "uint":
        if isinstance(value, Uint):
            return None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return f"it is {_describe(value)}", f"write `{value}u`"
        return f"it is {_describe(value)}", None
    if declared == "int" and type(value) is int and not INT_MIN <= value <= INT_MAX:
        return f"`{value}` is out of the range of `int`", None
    if declared == "int" and isinstance(value, Uint):
        return f"it is {_describe(value)}", f"write `{int(value)}`" if value <= 2 ** 63 - 1 else None
    if isinstance(value, bool) and declared != "bool":
        return f"it is {_describe(value)}", None
    accepted = _PYTHON_TYPES.get(declared)
    if accepted is None or isinstance(value, accepted):
        return None
    return f"it is {_describe(value)}", None


_STATIC_NAMES = {"string", "int", "uint", "double", "bool", "bytes", "duration", "timestamp", "null"}


def _static_problem(declared: str, expr: Any) -> tuple[str, str | None] | None:
    """An expression over results: its static type (results are `dyn`) must fit the declared one."""
    env = {node.name: DYN for node in cel.walk(expr) if isinstance(node, cel.Ident)}
    found, problems = check_types(expr, env)
    if problems or found == DYN:
        return None
    if declared == "list" and isinstance(found, ListType) or declared == "map" and isinstance(found, MapType):
        return None
    if declared == "double" and found == INT:
        return None  # an int is accepted for a double, as for constants
    if isinstance(found, Primitive) and found.name == declared:
        return None
    if declared not in _STATIC_NAMES | {"list", "map"}:
        return None
    return f"`{cel.to_source(expr)}` is {_article(str(found))}", None


def _article(name: str) -> str:
    return f"{'an' if name[0] in 'aeiou' else 'a'} `{name}`"


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return f"the bool `{str(value).lower()}`"
    if isinstance(value, str):
        return f"the string `{value_source(value)}`" if len(value) < 40 else "a string"
    if isinstance(value, Uint):
        return f"the uint `{value_source(value)}`"
    if isinstance(value, int):
        return f"the int `{value}`"
    if isinstance(value, float):
        return f"the double `{value_source(value)}`"
    if isinstance(value, Duration):
        return f"the duration `{value_source(value)}`"
    if isinstance(value, Timestamp):
        return f"the timestamp `{value_source(value)}`"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a map"
    return f"`{value_source(value)}`"
