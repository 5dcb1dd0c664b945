"""Per-step facts under a policy, derived once per plan and shared by the checks.

For each step: its catalogue entry (most specific match), declared and effective risk, and the
values of its call's arguments as far as they are known before the run. Effective risk is the
higher of the declared risk and the catalogue's; with neither, it is `irreversible` (what nothing
vouches for is treated as the riskiest effect). An argument that depends on no step's result is
evaluated now (a constant; one that fails to evaluate is listed in `failing`: the call can never
be made, so no rule is decided for it); one that does is an `Unknown`: a bare `x.result.a.b` keeps that
path, so a witness can name it ("fires when `look.result.total` = 500.01"); any other expression
becomes `step.args.name`, typed by the tool's argument schema (or `dyn`): a declared `list` or `map`
stays one, so the solver reasons about its size and keys and a witness shows a list or a map.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Container, Iterable

from plangate.cel import ast as cel
from plangate.cel.evaluate import (CelError, Duration, Uint, constant_value, parse_bytes, parse_duration,
                                   parse_timestamp, reads_a_name)
from plangate.ir.nodes import Plan, Risk, Step, ToolCall
from plangate.policy.compiled import CatalogueEntry, CompiledPolicy
from plangate.smt.encode import Unknown

if TYPE_CHECKING:
    from plangate.checks.context import PlanContext

UNKNOWN_TYPES = {"string": "string", "int": "int", "uint": "uint", "double": "double", "bool": "bool",
                 "list": "list", "map": "map"}


@dataclass
class StepFacts:
    step: Step
    entry: CatalogueEntry | None
    declared_risk: Risk | None
    effective_risk: Risk
    args: dict[str, Any] = field(default_factory=dict)
    unknown_args: bool = False
    # Arguments computed from earlier results by more than a bare `x.result…` path: name → expression.
    computed: dict[str, cel.Expr] = field(default_factory=dict)
    # Constant arguments that fail to evaluate (`cel-type-error`): the call can never be made.
    failing: tuple[str, ...] = ()
    # Its `when` is constant and false, or it uses the result of a step that never runs (`unreachable-step`).
    never_runs: bool = False


def effective_risk(step: Step, entry: CatalogueEntry | None) -> Risk:
    declared = step.risk.level if step.risk is not None else None
    catalogue = entry.risk if entry is not None else None
    levels = [level for level in (declared, catalogue) if level is not None]
    return max(levels) if levels else Risk.irreversible


def retry_needs_key(kind: str, retry: int, risk: Risk) -> bool:
    """§3: a step retried (`retry N`, N > 0) whose effective risk is above `read_only` needs an
    `idempotency` key, so a retry never repeats an effect; a `check` step is read-only, exempt."""
    return kind != "check" and retry > 0 and risk > Risk.read_only


def plan_facts(ctx: "PlanContext") -> dict[str, StepFacts]:
    """The facts of every step (first of each id), computed once and kept in `ctx.facts`."""
    cached = ctx.facts.get("steps")
    if cached is None:
        from plangate.checks.unreachable import never_running

        cached = {step_id: step_facts(step, ctx.policy) for step_id, step in ctx.graph.steps.items()}
        for step_id in never_running(ctx):
            cached[step_id].never_runs = True
        ctx.facts["steps"] = cached
    return cached


def step_facts(step: Step, policy: CompiledPolicy | None) -> StepFacts:
    entry = policy.match(step.call.tool) if (policy is not None and step.call is not None) else None
    facts = StepFacts(
        step=step,
        entry=entry,
        declared_risk=step.risk.level if step.risk is not None else None,
        effective_risk=effective_risk(step, entry),
    )
    if step.call is not None:
        arguments = step.call.args
        depends = [depends_on_results(argument.value) for argument in arguments]
        facts.args = static_arguments(step.id, step.call, entry, depends)
        facts.unknown_args = any(isinstance(value, Unknown) for value in facts.args.values())
        facts.computed = {argument.name: argument.value for argument, reads in zip(arguments, depends)
                          if reads and result_path(argument.value) is None}
        facts.failing = tuple(argument.name for argument, reads in zip(arguments, depends)  # a constant is an
                              if not reads and isinstance(facts.args.get(argument.name), Unknown))  # `Unknown` only if it fails
    return facts


def symbolic(condition: cel.Expr, facts: StepFacts) -> tuple[cel.Expr, dict[str, Any]]:
    """`condition` with each `args.x` / `call.args.x` that the call computes from earlier results
    replaced by that computation, and those results as `Unknown`s to add to the activation: the
    solver then reasons about the results themselves (`"preview-" + x.result.id` starts with
    `preview-`), and a witness names them ("fires when `look.result.total` = 454.55"). `has(args.x)`
    is kept: it asks whether the call gives `x`, which it always does; `has(args.m.f)` asks whether
    m's value has `f`, so m is replaced there too."""
    if not facts.computed or not (arguments_read(condition) & facts.computed.keys()):
        return condition, {}
    read: set[str] = set()
    declared = {spec.name: spec.type for spec in (facts.entry.args or ())} if facts.entry is not None else {}

    def rebuild(node: cel.Expr) -> cel.Expr:
        name = _argument_name(node)
        if name is not None and name in facts.computed:
            computed = facts.computed[name]
            names = {n.name for n in cel.walk(computed) if isinstance(n, cel.Ident)}
            read.update(names)
            renamed = rename_steps(computed, names)  # the plan's names, not the rule's (`call`, `args`…)
            if declared.get(name) == "double":  # an int passes for a double: the rules see it converted
                return cel.Call("double", None, (renamed,), renamed.span)
            return renamed
        if isinstance(node, cel.Call) and node.function == "has" and any(
                _argument_name(argument) is not None for argument in node.args):
            return node  # `has(args.x)`: whether the call gives `x` (it does), not a test of x's value
        return cel.map_children(node, rebuild)

    replaced = rebuild(condition)
    if not read:
        return condition, {}  # nothing computed is read: the same object, so its compiled closure is reused
    return replaced, result_scope(read)


def result_scope(step_ids: Iterable[str]) -> dict[str, Any]:
    """The results of `step_ids`, each under its `step_key`, as values known only at run time."""
    return {step_key(step_id): {"result": Unknown(f"{step_id}.result", "dyn")} for step_id in step_ids}


def step_key(step_id: str) -> str:
    """The name a step's result is bound under where a plan's expression meets a rule's: a step
    may be named `plan`, `args` or `read_only`, which the rule's environment binds, so plan
    expressions read their steps under names no CEL identifier can be (`$plan`)."""
    return "$" + step_id


def rename_steps(expr: cel.Expr, steps: "Container[str]") -> cel.Expr:
    """`expr` with each identifier that names one of `steps` read as `step_key(name)` (spans kept),
    but a macro's variable of such a name inside its macro (it hides the step there)."""
    def rename(node: cel.Expr, bound: frozenset[str]) -> cel.Expr:
        if isinstance(node, cel.Ident):
            return cel.Ident(step_key(node.name), node.span) if node.name in steps and node.name not in bound else node
        if isinstance(node, cel.Call) and cel.is_macro(node):
            (target, outside), *parts = cel.macro_parts(node, bound)
            return cel.Call(node.function, rename(target, outside),
                            (node.args[0], *(rename(part, names) for part, names in parts)), node.span)
        return cel.map_children(node, lambda child: rename(child, bound))

    return rename(expr, frozenset())


_ARGUMENTS_READ: dict[int, tuple[cel.Expr, frozenset[str]]] = {}


def arguments_read(condition: cel.Expr) -> frozenset[str]:
    """The call arguments `condition` reads (`args.x`, `call.args.x`), computed once per condition."""
    known = _ARGUMENTS_READ.get(id(condition))
    if known is None or known[0] is not condition:
        names = frozenset(name for node in cel.walk(condition) if (name := _argument_name(node)) is not None)
        if len(_ARGUMENTS_READ) >= 4096:  # conditions come from a few policies: keep the cache small
            _ARGUMENTS_READ.clear()
        known = (condition, names)
        _ARGUMENTS_READ[id(condition)] = known
    return known[1]


def _argument_name(node: cel.Expr) -> str | None:
    """`x` for `args.x` and `call.args.x`, else None."""
    if not isinstance(node, cel.Select):
        return None
    operand = node.operand
    if isinstance(operand, cel.Ident) and operand.name == "args":
        return node.field
    if (isinstance(operand, cel.Select) and operand.field == "args" and isinstance(operand.operand, cel.Ident)
            and operand.operand.name == "call"):
        return node.field
    return None



def static_arguments(step_id: str, call: ToolCall, entry: CatalogueEntry | None,
                     depends: list[bool] | None = None) -> dict[str, Any]:
    """The arguments' values before the run (see the module's docstring); `depends`: whether each
    argument depends on results (`depends_on_results`), when the caller knows already."""
    types = {spec.name: spec.type for spec in (entry.args or ())} if entry is not None else {}
    values: dict[str, Any] = {}
    if depends is None:
        depends = [depends_on_results(argument.value) for argument in call.args]
    for argument, reads in zip(call.args, depends):
        expr = argument.value
        kind = UNKNOWN_TYPES.get(types.get(argument.name, ""), "dyn")
        if reads:
            path = result_path(expr)
            if path is not None and types.get(argument.name) == "double":
                # An int result passes for a double argument (the rules see it converted) while other
                # uses of that result see it as it is, an int: a number of either kind, not `double`.
                kind = "number"
            values[argument.name] = Unknown(path or f"{step_id}.args.{argument.name}", kind)
            continue
        value = constant_value(expr)
        if isinstance(value, CelError):
            values[argument.name] = Unknown(f"{step_id}.args.{argument.name}", kind)
        elif types.get(argument.name) == "double":  # an int passes for a double: the rules see the double
            values[argument.name] = as_declared("double", value)
        else:  # `5` for a uint or `"1h"` for a duration are the catalogue's to report, as written
            values[argument.name] = value
    return values


def as_declared(declared: str, value: Any) -> Any:
    """`value` as a value of the `declared` argument type, where CEL would hold it so (see
    `typed_arguments`); any other value as it is."""
    parse = {"duration": parse_duration, "timestamp": parse_timestamp, "bytes": parse_bytes}.get(declared)
    if parse is not None and isinstance(value, str):
        parsed = parse(value)
        return value if isinstance(parsed, CelError) else parsed
    if declared == "double" and isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            return value  # no double holds it: the type check says so
    if declared == "uint" and type(value) is int and 0 <= value < 2 ** 64:
        return Uint(value)
    return value


def depends_on_results(expr: cel.Expr) -> bool:
    """Whether `expr` reads a name (a macro's own variable is no name read: `[1, 2].map(v, v * 2)` is
    a constant)."""
    return reads_a_name(expr)


def result_path(expr: cel.Expr) -> str | None:
    """`x.result.a.b` for a bare select chain from a step's result, else None."""
    chain = cel.field_chain(expr)
    if chain is not None and chain[1] and chain[1][0] == "result":
        return ".".join([chain[0], *chain[1]])
    return None


def plan_record(plan: Plan) -> dict[str, Any]:
    """`plan` in the CEL environment of rules: id, version and budget (amounts as doubles)."""
    budget: dict[str, Any] = {}
    if plan.budget is not None:
        if plan.budget.cost is not None:
            budget["cost"] = float(plan.budget.cost.amount)
        if plan.budget.time is not None:
            budget["time"] = Duration.from_seconds(plan.budget.time.seconds)
        if plan.budget.calls is not None:
            budget["calls"] = plan.budget.calls
    return {"id": plan.id, "version": plan.version or 0, "budget": budget}


def rule_activation(facts: StepFacts, plan: Plan, args: dict[str, Any] | None = None,
                    record: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CEL environment in which rules and requirements are decided for one step's call
    (`record`: the step's `step_record`, when the caller has it already)."""
    call_args = facts.args if args is None else args
    record = step_record(facts) if record is None else record
    activation: dict[str, Any] = {risk.name: int(risk) for risk in Risk}
    activation["step"] = record
    activation["call"] = {"tool": record["tool"], "args": call_args}
    activation["args"] = call_args
    activation["plan"] = plan_record(plan)
    return activation


def step_record(facts: StepFacts) -> dict[str, Any]:
    """`step` in the CEL environment of rules: what is known of the step before the run."""
    return {name: value(facts) for name, value in STEP_FIELDS.items()}


def _step_cost(facts: StepFacts) -> float:
    """The high end of one attempt's cost: as declared, else the tool's cap (what the budgets charge),
    else 0 — leaving `cost` out never lowers what a rule sees."""
    if facts.step.cost is not None:
        return float(facts.step.cost.high.amount)
    cap = facts.entry.cost_cap if facts.entry is not None else None
    return float(cap) if cap is not None else 0.0


def _step_time(facts: StepFacts) -> Any:
    """The step's time bound: as declared, else the tool's cap (what the budgets count), else `0s`."""
    if facts.step.time is not None:
        return Duration.from_seconds(facts.step.time.seconds)
    cap = facts.entry.time_cap if facts.entry is not None else None
    return Duration.from_seconds(cap or 0)


# The fields of `step_record`, each computed from the step's facts alone.
STEP_FIELDS: dict[str, Callable[[StepFacts], Any]] = {
    "id": lambda facts: facts.step.id,
    "kind": lambda facts: facts.step.kind,
    "tool": lambda facts: facts.step.call.tool if facts.step.call is not None else "",
    "risk": lambda facts: int(facts.effective_risk),
    "retry": lambda facts: facts.step.retry,
    "cost": _step_cost,
    "time": _step_time,
    "conditional": lambda facts: facts.step.when is not None,
}
