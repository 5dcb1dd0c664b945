"""What a rule or requirement condition can depend on, read off its shape once per condition.

The static checks decide every condition of the policy for every step of the plan; most
conditions concern a few tools, or read nothing but the step's risk. Two facts of a condition's
tree let them skip or share that work without changing a single verdict:

- `tools` (a `ToolFilter`): the tools for which the condition can hold. It is read off the
  conjuncts of the condition's outermost `&&` chain that test the called tool against literals:
  `call.tool == "x"` (either side), `step.tool == "x"`, `call.tool in ["x", "y"]`,
  `call.tool.startsWith("x")`. `call.tool` and `step.tool` are both the step's tool, a string
  known before the run, so such a conjunct is a bool; for a tool the filter rejects it is false,
  and a false conjunct makes a CEL conjunction false whatever its other conjuncts are (an error
  or a value known only at run time included: `&&` is commutative in absorbing errors). The
  verdict for such a step is "never" without evaluating anything. None when no conjunct says.
- `reads`: when everything the condition reads is known before the run and the same for many
  steps — fields of `step` (`step.risk`, `step.kind`…), `call.tool`, `plan`, the risk names and
  literals — the `(variable, field)` pairs it reads. Its verdict for a step is then a function of
  those values (and of whether the call can be made at all), so it may be decided once per
  distinct tuple of values. None when the condition reads anything else: an argument, a bare
  variable, a name bound by a macro.

Both are conservative: a shape they do not recognise gives None, which means "decide per step".
Results are cached per condition object (kept alive by the cache, so an id is never reused).
"""

from __future__ import annotations

from dataclasses import dataclass

from plangate.cel import ast as cel
from plangate.ir.nodes import Risk

# Names whose values do not vary between the steps of one plan (`plan` is the plan's record).
_CONSTANT_NAMES = frozenset({"plan", *(risk.name for risk in Risk)})


@dataclass(frozen=True)
class ToolFilter:
    """The tools a condition can hold for: each named exactly, or starting with one of `prefixes`;
    several filters (one per tool conjunct) must all admit the tool."""

    names: frozenset[str] | None = None  # None: any name (only prefixes constrain)
    prefixes: tuple[str, ...] = ()

    def admits(self, tool: str) -> bool:
        if self.names is not None and tool not in self.names:
            return False
        return all(tool.startswith(prefix) for prefix in self.prefixes)


@dataclass(frozen=True)
class ConditionShape:
    tools: ToolFilter | None
    reads: tuple[tuple[str, str], ...] | None


_SHAPES: dict[int, tuple[cel.Expr, ConditionShape]] = {}


def condition_shape(condition: cel.Expr) -> ConditionShape:
    """The shape of `condition`, computed once per condition object."""
    known = _SHAPES.get(id(condition))
    if known is None or known[0] is not condition:
        if len(_SHAPES) >= 4096:  # conditions come from a few policies: keep the cache small
            _SHAPES.clear()
        known = (condition, ConditionShape(_tool_filter(condition), _step_reads(condition)))
        _SHAPES[id(condition)] = known
    return known[1]


def _conjuncts(condition: cel.Expr) -> list[cel.Expr]:
    """The operands of the outermost `&&` chain (the condition itself when it is no conjunction)."""
    found, stack = [], [condition]
    while stack:
        node = stack.pop()
        if isinstance(node, cel.Binary) and node.op == "&&":
            stack += [node.right, node.left]
        else:
            found.append(node)
    return found


def _is_tool(expr: cel.Expr) -> bool:
    """`call.tool` or `step.tool`: the step's tool."""
    return (isinstance(expr, cel.Select) and expr.field == "tool" and isinstance(expr.operand, cel.Ident)
            and expr.operand.name in ("call", "step"))


def _string(expr: cel.Expr) -> str | None:
    return expr.value if isinstance(expr, cel.Literal) and expr.kind == "string" else None  # type: ignore[return-value]


def _tool_filter(condition: cel.Expr) -> ToolFilter | None:
    names: frozenset[str] | None = None
    prefixes: list[str] = []
    for conjunct in _conjuncts(condition):
        allowed: frozenset[str] | None = None
        if isinstance(conjunct, cel.Binary) and conjunct.op == "==":
            for tool, other in ((conjunct.left, conjunct.right), (conjunct.right, conjunct.left)):
                if _is_tool(tool) and _string(other) is not None:
                    allowed = frozenset({_string(other)})  # type: ignore[arg-type]
        elif isinstance(conjunct, cel.Binary) and conjunct.op == "in" and _is_tool(conjunct.left) \
                and isinstance(conjunct.right, cel.ListExpr):
            items = [_string(item) for item in conjunct.right.items]
            if all(item is not None for item in items):
                allowed = frozenset(items)  # type: ignore[arg-type]
        elif isinstance(conjunct, cel.Call) and conjunct.function == "startsWith" and conjunct.target is not None \
                and _is_tool(conjunct.target) and len(conjunct.args) == 1 and _string(conjunct.args[0]) is not None:
            prefixes.append(_string(conjunct.args[0]))  # type: ignore[arg-type]
        if allowed is not None:
            names = allowed if names is None else names & allowed
    if names is None and not prefixes:
        return None
    return ToolFilter(names, tuple(prefixes))


def _step_reads(condition: cel.Expr) -> tuple[tuple[str, str], ...] | None:
    """The `(variable, field)` pairs `condition` reads, when it reads nothing but `step.field`,
    `call.tool` and the names in `_CONSTANT_NAMES`; else None."""
    reads: dict[tuple[str, str], None] = {}
    selected: set[int] = set()
    for node in cel.walk(condition):
        if isinstance(node, cel.Select) and isinstance(node.operand, cel.Ident):
            name = node.operand.name
            if name == "step" or (name == "call" and node.field == "tool"):
                reads[(name, node.field)] = None
                selected.add(id(node.operand))
        elif isinstance(node, cel.Ident) and id(node) not in selected and node.name not in _CONSTANT_NAMES:
            return None  # an argument, a bare `step`/`call`, a macro's variable: per step
    return tuple(reads)
