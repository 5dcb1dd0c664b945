"""Branch patterns of simple conditions, found without the solver.

Most plan conditions compare one field of a result with a constant: `x.result.status == "ok"`,
`x.result.count > 3`, `x.result.ready`, `has(x.result.error)`, `x.result.env in ["eu", "us"]`. A
condition is *simple* when it is a conjunction (`&&`) of such atoms, each on one path with
literals of one kind; `!` of an atom is an atom (`!(a < 3)` is `a >= 3`, `!has(a)` says `a` is
absent). Anything else is left to the solver.

Semantics (those of `plangate.smt.encode`, which the solver path uses): an atom fires only when its
field is present (an error otherwise); a field compared with a number is a number of either kind,
modelled as a real; with a string, a string (only `==` and `!=`); with a bool, a bool — except that
`!=` alone forces no type: a value of another type (`null`) is unequal to every value named, so
`x != true` and `x != false` fire together. A path used with two kinds, or both as a value and as
a map, is not simple.

Algorithm. A set of conditions can fire together iff, per path, their atoms are consistent:
presence (nothing present under an absent path, the parent of an absent path present); bools
(one value); strings (at most one value required, not also excluded); numbers (the intersection of
the bounds, less the excluded points, is not empty); a list (`in`) narrows the candidates to its
items, each then tried against the other atoms. Two conditions are *compatible* when they
can fire together. Every set that can fire together is pairwise compatible, so it lies inside a
maximal clique of the compatibility graph (Bron–Kerbosch, with pivoting); when every maximal
clique can itself fire together, the maximal cliques are exactly the maximal sets that can fire
together — the patterns the budget check needs. If one cannot (a number excluded from a range
that pairs of bounds leave open), or the cliques are too many, the component goes to the solver,
as does one of over `MAX_CONDITIONS` conditions (the pairwise tests are quadratic and the clique
search recursive) — unless all its conditions can fire together, which one test of all the atoms
settles first (`a.result.v > 1`, `> 2`, … `> 1000`). Both stop at the caller's deadline (the
budget check's time bound, shared by every component and the solver), and the component then goes
to the solver with what is left of it: many large components cannot outlast the bound.
A witness for each pattern is built from the consistent atoms: the required value, a point inside
the bounds that avoids the excluded ones, or a fresh string.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping

from plangate.cel.ast import Binary, Call, Expr, Ident, Index, ListExpr, Literal, Select, Unary

MAX_CLIQUES = 256
MAX_CONDITIONS = 300  # per component (pairwise tests ~1.5 s, clique recursion 300 deep); more go to the solver
FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


@dataclass(frozen=True)
class Atom:
    path: str
    op: str  # "==" "!=" "<" "<=" ">" ">=" (a value), "in" "not in" (a set of values), "present", "absent"
    value: object = None  # Fraction | str | bool, or a frozenset of them


def atoms(condition: Expr, steps: Mapping[str, object]) -> list[Atom] | None:
    """The atoms of a simple condition, or None when it is not simple."""
    if isinstance(condition, Binary) and condition.op == "&&":
        left, right = atoms(condition.left, steps), atoms(condition.right, steps)
        return None if left is None or right is None else left + right
    found = _atom(condition, steps)
    return None if found is None else [found]


def _atom(expr: Expr, steps: Mapping[str, object]) -> Atom | None:
    negated = False
    while isinstance(expr, Unary) and expr.op == "!":
        negated, expr = not negated, expr.operand
    if isinstance(expr, Call) and expr.function == "has" and expr.target is None and len(expr.args) == 1 \
            and isinstance(expr.args[0], Select):
        path = _path(expr.args[0], steps)
        if path is None or path.count(".") < 2:  # a step's result itself is always there
            return None
        return Atom(path, "absent" if negated else "present")
    path = _path(expr, steps)
    if path is not None:
        return Atom(path, "==", not negated)
    if isinstance(expr, Binary) and expr.op == "in" and isinstance(expr.right, ListExpr):
        path, values = _path(expr.left, steps), [_constant(item) for item in expr.right.items]
        if path is None or not values or any(value is None for value in values) or \
                len({_kind(value) for value in values}) != 1:
            return None
        return Atom(path, "not in" if negated else "in", frozenset(values))
    if not isinstance(expr, Binary) or expr.op not in FLIPPED:
        return None
    op = NEGATED[expr.op] if negated else expr.op
    path, literal = _path(expr.left, steps), expr.right
    if path is None:
        path, literal, op = _path(expr.right, steps), expr.left, FLIPPED[op]
    value = _constant(literal)
    if path is None or value is None:
        return None
    if isinstance(value, (str, bool)) and op not in ("==", "!="):
        return None
    return Atom(path, op, value)  # `!= true` is not `== false`: `null` (or a string) is neither


def _path(expr: Expr, steps: Mapping[str, object]) -> str | None:
    """`x.result.a.b` as a path, when it starts at a step's result."""
    fields: list[str] = []
    while True:
        if isinstance(expr, Select):
            fields.append(expr.field)
            expr = expr.operand
        elif isinstance(expr, Index) and isinstance(expr.index, Literal) and expr.index.kind == "string":
            if any(char in str(expr.index.value) for char in ".[]"):
                return None  # `x["a.b"]` is not `x.a.b`: such a key is the solver's to decline
            fields.append(str(expr.index.value))
            expr = expr.operand
        else:
            break
    if not isinstance(expr, Ident) or expr.name not in steps or not fields or fields[-1] != "result":
        return None
    return ".".join([expr.name, *reversed(fields)])


def _constant(expr: Expr) -> object:
    if not isinstance(expr, Literal):
        return None
    if expr.kind in ("int", "double"):
        value = (DoubleLiteral if expr.kind == "double" else Fraction)(expr.value)  # type: ignore[arg-type]
        return value if abs(value) < 2 ** 1000 else None
    if expr.kind in ("string", "bool"):
        return expr.value
    return None


def links(found: list[Atom]) -> tuple[str, ...]:
    """The run-time values a simple condition reads, as the encoder would name them: each field
    and the fields above it (a result's root only when it is itself compared)."""
    paths = set()
    for atom in found:
        path = atom.path
        if path.count(".") == 1:
            paths.add(path)
        while path.count(".") > 1:
            paths.add(path)
            path = path.rsplit(".", 1)[0]
    return tuple(sorted(paths))


def _kind(value: object) -> str:
    if isinstance(value, frozenset):
        return _kind(next(iter(value)))
    return "bool" if isinstance(value, bool) else "string" if isinstance(value, str) else "number"


def well_formed(conditions: list[list[Atom]]) -> bool:
    """One kind per path, and no path both a value and the parent of another."""
    kinds: dict[str, str] = {}
    for found in conditions:
        for atom in found:
            if atom.op in ("present", "absent"):
                continue
            if kinds.setdefault(atom.path, _kind(atom.value)) != _kind(atom.value):
                return False
    paths = {atom.path for found in conditions for atom in found}
    return not any(path.startswith(value + ".") for value in kinds for path in paths)


def consistent(found: list[Atom]) -> bool:
    return _solution(found) is not None


def _solution(found: list[Atom]) -> dict[str, object] | None:
    """path → a value (None: present, no value asked) that makes every atom fire; None if none does."""
    absent = {atom.path for atom in found if atom.op == "absent"}
    present = {atom.path for atom in found if atom.op != "absent"}
    for path in absent:
        parent = path.rsplit(".", 1)[0]
        if any(other == path or other.startswith(path + ".") for other in present) or \
                any(parent == other or parent.startswith(other + ".") for other in absent):
            return None
    maps = {path.rsplit(".", 1)[0] for path in present | absent if path.count(".") > 1}  # parents of fields
    solution: dict[str, object] = {}
    for path in sorted(present | maps):
        constraints = [atom for atom in found if atom.path == path and atom.op not in ("present", "absent")]
        if not constraints:
            solution[path] = {} if path in maps else None  # present; its value is free
            continue
        value = _value(constraints)
        if value is _NONE:
            return None
        solution[path] = value
    return solution


_NONE = object()


def _value(constraints: list[Atom]) -> object:
    if all(atom.op in ("!=", "not in") for atom in constraints):
        return None  # `null` differs from every value named: CEL's `!=` holds for a value of another type
    kind = _kind(constraints[0].value)
    double = any(isinstance(atom.value, DoubleLiteral) or (
        isinstance(atom.value, frozenset) and any(isinstance(item, DoubleLiteral) for item in atom.value))
        for atom in constraints)

    def _number(value: Fraction) -> int | float:  # a double when compared with one, as the encoder shows it
        return float(value) if double or value.denominator != 1 else int(value)

    required = {atom.value for atom in constraints if atom.op == "=="}
    excluded = {atom.value for atom in constraints if atom.op == "!="}
    for atom in constraints:
        if atom.op == "not in":
            excluded |= atom.value  # type: ignore[arg-type]
    allowed = [atom.value for atom in constraints if atom.op == "in"]
    if allowed:  # a finite set of candidates: try each against every atom
        choices = set(required) if required else set.intersection(*(set(values) for values in allowed))  # type: ignore[arg-type]
        for value in sorted(choices, key=repr):
            if value not in excluded and all(value in values for values in allowed) and \
                    _value([Atom(atom.path, "==", value)] + [a for a in constraints if a.op not in ("in", "not in")]) \
                    is not _NONE:
                return _number(value) if kind == "number" else value  # type: ignore[arg-type]
        return _NONE
    if len(required) > 1 or required & excluded:
        return _NONE
    if kind != "number":
        if required:
            return next(iter(required))
        if kind == "bool":
            return True
        return next(candidate for candidate in (f"x{n}" for n in range(len(excluded) + 1)) if candidate not in excluded)
    low, low_strict, high, high_strict = None, False, None, False
    for atom in constraints:
        bound = atom.value
        if atom.op in (">", ">=") and (low is None or bound > low or (bound == low and atom.op == ">")):  # type: ignore[operator]
            low, low_strict = bound, atom.op == ">"
        if atom.op in ("<", "<=") and (high is None or bound < high or (bound == high and atom.op == "<")):  # type: ignore[operator]
            high, high_strict = bound, atom.op == "<"
    if required:
        value = next(iter(required))
        inside = (low is None or value > low or (value == low and not low_strict)) and \
            (high is None or value < high or (value == high and not high_strict))  # type: ignore[operator]
        return _number(value) if inside else _NONE
    if low is not None and high is not None and (low > high or (low == high and (low_strict or high_strict))):  # type: ignore[operator]
        return _NONE
    for candidate in _candidates(low, low_strict, high, high_strict, len(excluded) + 1):  # type: ignore[arg-type]
        if candidate not in excluded:
            return _number(candidate)
    return _NONE


def _candidates(low: Fraction | None, low_strict: bool, high: Fraction | None, high_strict: bool, count: int):
    """Distinct points that satisfy the bounds: `count` of them (or the one point of [a, a])."""
    if low is not None and high is not None:
        if low == high:
            yield low
            return
        step = high - low
        for _ in range(count):
            step /= 2
            yield low + step
        return
    start = low if low is not None else high if high is not None else Fraction(0)
    direction = 1 if high is None else -1
    if (low is not None and not low_strict) or (high is not None and not high_strict) or (low is None and high is None):
        yield start
    for offset in range(1, count + 1):
        yield start + direction * offset


class DoubleLiteral(Fraction):
    """The value of a double literal: a witness compared with one shows a double (`101.0`)."""


class _OutOfTime(Exception):
    """The deadline passed before the patterns were found."""


_ANSWERS: dict[tuple, tuple | None] = {}  # renamed conditions → their patterns (`patterns`)
_UNKNOWN = object()
MAX_ANSWERS = 4096


def patterns(conditions: list[list[Atom]], deadline: float | None = None) -> list[tuple[frozenset[int], dict[str, object]]] | None:
    """Every maximal set of the conditions that can fire together, with a witness of each; None
    when the compatibility cliques do not settle it (the solver then decides), or when `deadline`
    (a `time.monotonic()` instant) passes first — the pairwise tests are quadratic, and many large
    components must not outlast the solver's time bound. Conditions that differ only in the steps
    they read share one answer (cached with the steps renamed; an answer cut short is not kept)."""
    steps: dict[str, str] = {}
    renamed = tuple(tuple(Atom(_rename(atom.path, steps), atom.op, atom.value) for atom in found)
                    for found in conditions)
    settled = _ANSWERS.get(renamed, _UNKNOWN)  # one lookup: another thread may clear the cache meanwhile
    if settled is _UNKNOWN:
        try:
            settled = _patterns(renamed, deadline)
        except _OutOfTime:
            return None
        if len(_ANSWERS) >= MAX_ANSWERS:
            _ANSWERS.clear()
        _ANSWERS[renamed] = settled
    if settled is None:
        return None
    back = {name: step for step, name in steps.items()}
    return [(pattern, {_restore(path, back): value for path, value in witness.items()})
            for pattern, witness in settled]


def _rename(path: str, steps: dict[str, str]) -> str:
    step, rest = path.split(".", 1)
    return steps.setdefault(step, f"r{len(steps)}") + "." + rest


def _restore(path: str, back: dict[str, str]) -> str:
    name, rest = path.split(".", 1)
    return back[name] + "." + rest


def _patterns(conditions: tuple[tuple[Atom, ...], ...],
              deadline: float | None) -> tuple[tuple[frozenset[int], dict[str, object]], ...] | None:
    def on_time() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise _OutOfTime

    size = len(conditions)
    everything = [atom for found in conditions for atom in found]
    if consistent(everything):  # all can fire together: the one maximal set, found in one test
        witness = _solution(everything)
        if witness is not None:
            return ((frozenset(range(size)), witness),)
    if size > MAX_CONDITIONS:  # pairwise tests and the clique search grow too fast: the solver's bounds hold
        return None
    if not all(consistent(list(found)) for found in conditions):
        alone = [index for index in range(size) if consistent(list(conditions[index]))]
        inner = _patterns(tuple(conditions[index] for index in alone), deadline)
        return None if inner is None else tuple((frozenset(alone[i] for i in pattern), witness)
                                                for pattern, witness in inner)
    neighbours: list[set[int]] = []
    for i in range(size):
        on_time()
        neighbours.append({j for j in range(size) if j != i and consistent(list(conditions[i] + conditions[j]))})
    cliques: list[frozenset[int]] = []

    def expand(clique: set[int], candidates: set[int], excluded: set[int]) -> bool:
        on_time()
        if not candidates and not excluded:
            cliques.append(frozenset(clique))
            return len(cliques) <= MAX_CLIQUES
        pivot = max(candidates | excluded, key=lambda vertex: len(neighbours[vertex] & candidates))
        for vertex in list(candidates - neighbours[pivot]):
            if not expand(clique | {vertex}, candidates & neighbours[vertex], excluded & neighbours[vertex]):
                return False
            candidates = candidates - {vertex}
            excluded = excluded | {vertex}
        return True

    if not expand(set(), set(range(size)), set()):
        return None
    found = []
    for clique in cliques:
        witness = _solution([atom for index in sorted(clique) for atom in conditions[index]])
        if witness is None:
            return None
        found.append((clique, witness))
    return tuple(found)
