"""Hypothesis strategies for CEL: well-typed expression trees and activations for their variables.

`expressions(kind)` draws a tree of the given static type (`int`, `double`, `string`, `bool`)
over the variables of `VARIABLE_TYPES`, built from the subset on which the compiled evaluator and
cel-python must agree: literals, variables, arithmetic, comparisons, `&&` `||` `!`, `?:`, `in` over
list literals, `startsWith`/`endsWith`/`contains` and `size`. Mixed-type comparisons and double
division by a zero divisor are left out: there cel-python departs from the CEL specification
(see `plangate.cel.reference`).
"""

from __future__ import annotations

from functools import lru_cache

from hypothesis import strategies as st

from plangate.cel.ast import Binary, Call, Conditional, Expr, Ident, ListExpr, Literal, Unary
from plangate.cel.evaluate import INT_MAX, INT_MIN
from plangate.cel.types import BOOL, DOUBLE, INT, STRING

VARIABLE_TYPES = {"i1": INT, "i2": INT, "d1": DOUBLE, "d2": DOUBLE, "s1": STRING, "s2": STRING,
                  "b1": BOOL, "b2": BOOL}
KIND_TYPES = {"int": INT, "double": DOUBLE, "string": STRING, "bool": BOOL}
MAX_DEPTH = 3

_BOUNDARY_INTS = [INT_MIN, INT_MIN + 1, INT_MAX, INT_MAX - 1, 1 << 32, -(1 << 32), 3037000500]
_LITERAL_TEXT = "ab é€\"\\\n\t"

ints = st.one_of(st.integers(-30, 30), st.sampled_from(_BOUNDARY_INTS))
doubles = st.one_of(st.sampled_from([0.0, -0.0, 0.5, 1.0, -2.5, 1e308, -1e308, 5e-324]),
                    st.floats(allow_nan=False, allow_infinity=False))
strings = st.text(alphabet=_LITERAL_TEXT, max_size=5)
_VALUES = {"int": ints,
           "double": st.one_of(doubles, st.sampled_from([float("inf"), float("-inf"), float("nan")])),
           "string": st.text(st.characters(codec="utf-8"), max_size=6),
           "bool": st.booleans()}


def activations() -> st.SearchStrategy[dict[str, object]]:
    """Values for every variable of `VARIABLE_TYPES`."""
    return st.fixed_dictionaries({name: _VALUES[str(cel_type)] for name, cel_type in VARIABLE_TYPES.items()})


def _literal(kind: str) -> st.SearchStrategy[Expr]:
    if kind == "int":
        return ints.map(lambda value: Literal(value, "int"))
    if kind == "double":
        return doubles.map(lambda value: Literal(value, "double"))
    if kind == "string":
        return strings.map(lambda value: Literal(value, "string"))
    return st.booleans().map(lambda value: Literal(value, "bool"))


def _variable(kind: str) -> st.SearchStrategy[Expr]:
    names = [name for name, cel_type in VARIABLE_TYPES.items() if str(cel_type) == kind]
    return st.sampled_from(names).map(Ident)


def _binary(ops: list[str], left: st.SearchStrategy[Expr], right: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.builds(Binary, st.sampled_from(ops), left, right)


@lru_cache(maxsize=None)
def expressions(kind: str, depth: int = MAX_DEPTH) -> st.SearchStrategy[Expr]:
    """Well-typed trees of static type `kind`, at most `depth` operators deep."""
    leaves = st.one_of(_literal(kind), _variable(kind))
    if depth == 0:
        return leaves
    same = expressions(kind, depth - 1)
    options = [leaves, st.builds(Conditional, expressions("bool", depth - 1), same, same)]
    if kind == "int":
        strings_below = expressions("string", depth - 1)
        options += [
            _binary(["+", "-", "*", "/", "%"], same, same),
            st.builds(Unary, st.just("-"), same),
            strings_below.map(lambda text: Call("size", None, (text,))),
            strings_below.map(lambda text: Call("size", text, ())),
        ]
    elif kind == "double":
        nonzero = doubles.filter(lambda value: value != 0.0).map(lambda value: Literal(value, "double"))
        options += [
            _binary(["+", "-", "*"], same, same),
            _binary(["/"], same, nonzero),
            st.builds(Unary, st.just("-"), same),
        ]
    elif kind == "string":
        options.append(_binary(["+"], same, same))
    else:
        comparisons = [_binary(["==", "!=", "<", "<=", ">", ">="], expressions(other, depth - 1),
                       expressions(other, depth - 1)) for other in KIND_TYPES]
        memberships = [st.builds(Binary, st.just("in"), expressions(other, depth - 1),
                                 st.lists(expressions(other, depth - 1), max_size=3).map(
                                     lambda items: ListExpr(tuple(items))))
                       for other in ("int", "string", "double")]
        strings_below = expressions("string", depth - 1)
        options += [
            _binary(["&&", "||"], same, same),
            st.builds(Unary, st.just("!"), same),
            *comparisons,
            *memberships,
            st.builds(lambda method, target, argument: Call(method, target, (argument,)),
                      st.sampled_from(["startsWith", "endsWith", "contains"]), strings_below, strings_below),
        ]
    return st.one_of(*options)


def typed_expressions() -> st.SearchStrategy[tuple[str, Expr]]:
    """A kind and a well-typed tree of that kind."""
    return st.sampled_from(sorted(KIND_TYPES)).flatmap(
        lambda kind: expressions(kind).map(lambda expr: (kind, expr)))
