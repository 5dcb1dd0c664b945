"""The CEL syntax tree shared by every later stage.

Nodes are frozen, slotted dataclasses; their `span` is excluded from equality and hashing, so two
expressions that read the same compare equal wherever they stand. The parser (`plangate.syntax`)
builds them; `to_source` prints the canonical text that cel-python evaluates and that content
hashes cover; `step_references` finds the `x.result…` references that make plan edges.

Binary operators keep CEL's spelling: `||` `&&` `==` `!=` `<` `<=` `>` `>=` `in` `+` `-` `*` `/` `%`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Union

from plangate.source import NO_SPAN, Span


@dataclass(frozen=True, slots=True)
class Literal:
    value: object  # int, float, str, bytes, bool or None
    kind: str  # "int" | "uint" | "double" | "string" | "bytes" | "bool" | "null"
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Ident:
    name: str
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Select:
    operand: "Expr"
    field: str
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Index:
    operand: "Expr"
    index: "Expr"
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Call:
    function: str
    target: "Expr | None"
    args: tuple["Expr", ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Unary:
    op: str  # "!" | "-"
    operand: "Expr"
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    left: "Expr"
    right: "Expr"
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Conditional:
    condition: "Expr"
    then: "Expr"
    otherwise: "Expr"
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ListExpr:
    items: tuple["Expr", ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class MapExpr:
    entries: tuple[tuple["Expr", "Expr"], ...]
    span: Span = field(default=NO_SPAN, compare=False, repr=False)


Expr = Union[Literal, Ident, Select, Index, Call, Unary, Binary, Conditional, ListExpr, MapExpr]

_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "in": 3,
               "+": 4, "-": 4, "*": 5, "/": 5, "%": 5}


_CHILDREN: dict[type, "Callable[[Any], tuple[Expr, ...]]"] = {
    Literal: lambda expr: (),
    Ident: lambda expr: (),
    Select: lambda expr: (expr.operand,),
    Index: lambda expr: (expr.operand, expr.index),
    Call: lambda expr: expr.args if expr.target is None else (expr.target, *expr.args),
    Unary: lambda expr: (expr.operand,),
    Binary: lambda expr: (expr.left, expr.right),
    Conditional: lambda expr: (expr.condition, expr.then, expr.otherwise),
    ListExpr: lambda expr: expr.items,
    MapExpr: lambda expr: tuple(part for entry in expr.entries for part in entry),
}


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct children of `expr`, left to right."""
    return _CHILDREN[type(expr)](expr)


def map_children(expr: Expr, function: "Callable[[Expr], Expr]") -> Expr:
    """`expr` with `function` applied to each direct child (the node itself is rebuilt, spans kept)."""
    if isinstance(expr, Select):
        return Select(function(expr.operand), expr.field, expr.span)
    if isinstance(expr, Index):
        return Index(function(expr.operand), function(expr.index), expr.span)
    if isinstance(expr, Call):
        target = function(expr.target) if expr.target is not None else None
        return Call(expr.function, target, tuple(function(arg) for arg in expr.args), expr.span)
    if isinstance(expr, Unary):
        return Unary(expr.op, function(expr.operand), expr.span)
    if isinstance(expr, Binary):
        return Binary(expr.op, function(expr.left), function(expr.right), expr.span)
    if isinstance(expr, Conditional):
        return Conditional(function(expr.condition), function(expr.then), function(expr.otherwise), expr.span)
    if isinstance(expr, ListExpr):
        return ListExpr(tuple(function(item) for item in expr.items), expr.span)
    if isinstance(expr, MapExpr):
        return MapExpr(tuple((function(k), function(v)) for k, v in expr.entries), expr.span)
    return expr


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of `expr`, pre-order, without recursion (deep trees are allowed)."""
    stack = [expr]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        yield node
        kind = type(node)  # the commonest kinds inline: walks run over every expression of a plan
        if kind is Select:
            push(node.operand)
        elif kind is Binary:
            push(node.right)
            push(node.left)
        elif kind is not Literal and kind is not Ident:
            stack.extend(reversed(_CHILDREN[kind](node)))


def field_chain(expr: Expr) -> tuple[str, list[str]] | None:
    """`a.b.c` as ("a", ["b", "c"]): the identifier a chain of field selections starts at and its
    fields in order (none for `a` alone); None when it starts at anything else (a call, an index)."""
    fields: list[str] = []
    while isinstance(expr, Select):
        fields.append(expr.field)
        expr = expr.operand
    if not isinstance(expr, Ident):
        return None
    fields.reverse()
    return expr.name, fields


MACROS = {"all": 2, "exists": 2, "exists_one": 2, "filter": 2, "map": (2, 3)}


def is_macro(expr: Call) -> bool:
    """`xs.all(x, p)`, `exists`, `exists_one`, `filter`, `map(x, e)` / `map(x, p, e)`."""
    arities = MACROS.get(expr.function)
    if expr.target is None or arities is None or not expr.args or not isinstance(expr.args[0], Ident):
        return False
    return len(expr.args) in (arities if isinstance(arities, tuple) else (arities,))


def macro_parts(expr: Call, bound: frozenset[str]) -> list[tuple[Expr, frozenset[str]]]:
    """A macro's parts (`is_macro`) with the names bound in each, in `walk`'s order: its target
    with `bound`, the rest with its variable too (`xs.all(x, p)`: `x` is bound in `p` only)."""
    inner = bound | {expr.args[0].name}  # type: ignore[attr-defined]
    return [(expr.target, bound), *((part, inner) for part in expr.args[1:])]  # type: ignore[list-item]


def step_references(expr: Expr, bound: frozenset[str] = frozenset()) -> list[tuple[str, Span]]:
    """Each `x.result…` in `expr` (in the order of `walk`): the step id `x` and the span of the
    identifier; not `result.result` (a field of the step's own result, `result` being no step id)
    nor a macro's variable (`xs.all(c, c.result == "ok")`, `bound` inside it), which hides any
    step of its name. (`walk` spelled out: the graph calls this on every expression of a plan.)"""
    found = []
    stack = [expr]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        kind = type(node)
        if kind is Select:
            operand = node.operand
            if node.field == "result" and type(operand) is Ident and operand.name != "result" \
                    and operand.name not in bound:
                found.append((operand.name, operand.span))
            push(operand)
        elif kind is Binary:
            push(node.right)
            push(node.left)
        elif kind is Call and is_macro(node):
            for part, names in macro_parts(node, bound):
                found += step_references(part, names)
        elif kind is not Literal and kind is not Ident:
            stack.extend(reversed(_CHILDREN[kind](node)))
    return found


def uses_bare_result(expr: Expr, bound: frozenset[str] = frozenset()) -> Span | None:
    """The span of the first bare `result` (the step's own result) in the order of `walk`, if any;
    a macro's variable named `result` is not it, inside that macro. (`walk` spelled out: the
    result-scope check calls this on most expressions of a plan.)"""
    stack = [expr]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        kind = type(node)
        if kind is Ident:
            if node.name == "result" and "result" not in bound:
                return node.span
        elif kind is Select:
            push(node.operand)
        elif kind is Binary:
            push(node.right)
            push(node.left)
        elif kind is Call and is_macro(node):
            found = next((span for part, names in macro_parts(node, bound)
                          if (span := uses_bare_result(part, names)) is not None), None)
            if found is not None:
                return found
        elif kind is not Literal:
            stack.extend(reversed(_CHILDREN[kind](node)))
    return None


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def to_source(expr: Expr) -> str:
    """Canonical CEL text for `expr` (fully determined by the tree, never by the spans)."""
    return _print(expr, 0)


def _print(expr: Expr, parent: int) -> str:
    if isinstance(expr, Literal):
        if expr.kind == "string":
            return _quote(expr.value)  # type: ignore[arg-type]
        if expr.kind == "bool":
            return "true" if expr.value else "false"
        if expr.kind == "null":
            return "null"
        if expr.kind == "uint":
            return f"{expr.value}u"
        if expr.kind == "bytes":
            return "b" + _quote(expr.value.decode("latin-1"))  # type: ignore[union-attr]
        if expr.kind == "double":
            text = repr(float(expr.value))  # type: ignore[arg-type]
            return text if ("." in text or "e" in text or "n" in text) else text + ".0"
        return str(expr.value)
    if isinstance(expr, Ident):
        return expr.name
    if isinstance(expr, Select):
        return f"{_print(expr.operand, 9)}.{expr.field}"
    if isinstance(expr, Index):
        return f"{_print(expr.operand, 9)}[{_print(expr.index, 0)}]"
    if isinstance(expr, Call):
        args = ", ".join(_print(arg, 0) for arg in expr.args)
        if expr.target is not None:
            return f"{_print(expr.target, 9)}.{expr.function}({args})"
        return f"{expr.function}({args})"
    if isinstance(expr, Unary):
        return f"{expr.op}{_print(expr.operand, 8)}"
    if isinstance(expr, Binary):
        level = _PRECEDENCE[expr.op]
        text = f"{_print(expr.left, level)} {expr.op} {_print(expr.right, level + 1)}"
        return f"({text})" if level < parent else text
    if isinstance(expr, Conditional):
        text = (f"{_print(expr.condition, 1)} ? {_print(expr.then, 1)} : "
                f"{_print(expr.otherwise, 0)}")
        return f"({text})" if parent > 0 else text
    if isinstance(expr, ListExpr):
        return "[" + ", ".join(_print(item, 0) for item in expr.items) + "]"
    if isinstance(expr, MapExpr):
        return "{" + ", ".join(f"{_print(k, 0)}: {_print(v, 0)}" for k, v in expr.entries) + "}"
    raise TypeError(f"not a CEL node: {expr!r}")
