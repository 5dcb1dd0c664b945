"""CEL evaluation by closure compilation: the tree is turned once into nested Python closures.

Algorithm
- `compile_expr(expr)` walks the syntax tree once and returns `evaluate(activation)`. Each node
  becomes one closure that calls its children's closures; nothing inspects the tree afterwards.
  Common shapes get a specialised closure: a selection on a variable (`args.amount`), a comparison
  with a literal (`call.tool == "x"`, `args.amount > 500.0`), `in` over a literal list of strings,
  a `matches` with a literal pattern (compiled once), a function of a literal (`duration("1h")`,
  computed once: its results are immutable).
- Inside, a failed operation raises the private `_Failure`; `&&` and `||` catch it to give CEL's
  commutative error absorption (`false && error` is false, `true || error` is true, in either order);
  the outer `evaluate` turns it into a `CelError` value. The happy path pays for no error checks.

Values: CEL values are plain Python data. int → `int` (64-bit: an operation whose result leaves the
range is an error), uint → `Uint` (an `int` subclass), double → `float`, string → `str`,
bytes → `bytes`, bool → `bool`, null → `None`, list → `list` (a `tuple` is read as a list),
map → any `Mapping`, duration → `Duration`, timestamp → `Timestamp` (`timestamp("…")` reads RFC 3339;
a timestamp plus or minus a duration is a timestamp, the difference of two is a duration). A `bool` is never a number, though Python says
`True == 1`.

Semantics kept from the CEL specification (and cel-go) where cel-python 0.5 differs:
- Heterogeneous numeric comparison and equality: `1 == 1.0`, `2 < 2.5`, `1u < 2` compare the
  mathematical values (exactly, without rounding the int to a double). Values of different
  non-numeric types are unequal (`1 == "a"` is false, never an error); arithmetic never mixes types.
- Double division by zero follows IEEE 754 (±inf, NaN for 0/0); `[1][-1]` is out of range;
  `string(true)` is "true"; `true && 1` is an error; durations keep nanoseconds.
- Kept from cel-python where the two differ from cel-go: `string(1.5)` is Python's shortest repr
  ("1.0", "1e+100"); `-9223372036854775808 % -1` is 0. Refused here alone: a map literal holding
  both `true` and `1` as keys (Python cannot keep them apart; "duplicate map key").
- `matches` uses RE2 (CEL's own regular-expression dialect), whose matching time is linear in the
  text: no pattern can backtrack catastrophically. Patterns are bounded to `MAX_PATTERN_CHARS`.

Invariants
- The returned `evaluate` never raises on any activation of CEL values: a failure is a `CelError`.
  Values of other Python types are refused by the operations that meet them ("unsupported value").
- No `eval`, no attribute access: a selection `a.b` only reads the key "b" of a mapping, so
  `x.__class__` is a "no such key" error, never a Python attribute.
- No evaluation builds a string, bytes or list longer than `MAX_SIZE`, nor returns a list or map
  whose tree repeats more than `MAX_DEEP_SIZE` elements and characters (`repetition_problem`:
  shared references let n steps build 2ⁿ; inside an evaluation only `==` and `in` walk a value
  deeply, and they pay per element), and no evaluation does more
  than `MAX_WORK` units of work: each element a comprehension visits, and each item of a list or
  map literal built, costs `ITERATION_COST` (both run closures); each element of a string, bytes
  or list built by an operator costs one. Sizes alone would not do: nested
  comprehensions over small lists multiply (`L.map(a, L.map(b, …))` over ten elements, nine deep,
  is 10⁹ elements, none of its lists long). Work done in C on data costs too: each element that
  `==` or `in` compares in a list or map costs `ITERATION_COST`, each character that `contains` or
  `matches` reads one. The budget is per call of `evaluate` (and per thread); a failure at a bound
  is `bounded`, and a comprehension stops at it rather than absorbing it as an element's error.
  Inside `allowance(units)` (a command: `plangate check`, `plangate test`) the evaluations also
  draw on one budget for all of them, so many expensive expressions cannot add up to hours: once
  it is spent, each evaluation fails at once, `bounded`.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import operator
import re
import threading
import warnings
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Iterator, Mapping

import re2

from plangate.cel.ast import (Binary, Call, Conditional, Expr, Ident, Index, ListExpr, Literal, MapExpr,
                              Select, Unary, children, is_macro, macro_parts)

INT_MIN = -(1 << 63)
INT_MAX = (1 << 63) - 1
UINT_MAX = (1 << 64) - 1
MAX_SIZE = 1_000_000
MAX_DEEP_SIZE = 4 * MAX_SIZE  # repetition a value leaving an evaluation may hold (`repetition_problem`)
MAX_WORK = 100_000_000
COMMAND_WORK = 20 * MAX_WORK  # every evaluation of one `plangate check` or `plangate test`, in all (`allowance`)
ITERATION_COST = 100  # a visited element runs closures in Python; a built element is a C copy
MAX_PATTERN_CHARS = 4096
MAX_DURATION_SECONDS = 315_576_000_000  # CEL's bound: 10,000 years
NANOS_PER_SECOND = 1_000_000_000


@dataclass(frozen=True, slots=True)
class CelError:
    """An evaluation error, returned as a value (CEL errors are values, never exceptions).

    `bounded`: the evaluator's own bounds stopped it (work, size, nesting), not the values' meaning;
    a policy must not read such an error as "the rule does not apply" (see `plangate.policy.decide`).
    """

    message: str
    bounded: bool = False


class Uint(int):
    """A CEL `uint`: an `int` marked unsigned, so that `1u + 1` is refused like in CEL."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


@dataclass(frozen=True, order=True, slots=True)
class Duration:
    """A CEL duration (`google.protobuf.Duration`): a signed whole number of nanoseconds."""

    nanos: int

    @classmethod
    def from_seconds(cls, seconds: int | float | Fraction) -> "Duration":
        if type(seconds) is int:
            return cls(seconds * NANOS_PER_SECOND)  # exact already: no fraction to round
        return cls(round(Fraction(seconds) * NANOS_PER_SECOND))

    @property
    def seconds(self) -> float:
        return self.nanos / NANOS_PER_SECOND

    def __str__(self) -> str:
        """CEL's text form: seconds with the fraction trimmed, then `s` (`5400s`, `0.1s`)."""
        sign = "-" if self.nanos < 0 else ""
        whole, fraction = divmod(abs(self.nanos), NANOS_PER_SECOND)
        digits = f".{fraction:09d}".rstrip("0") if fraction else ""
        return f"{sign}{whole}{digits}s"


@dataclass(frozen=True, order=True, slots=True)
class Timestamp:
    """A CEL timestamp (`google.protobuf.Timestamp`): nanoseconds since 1970-01-01T00:00:00Z, from
    0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z."""

    nanos: int

    def __str__(self) -> str:
        """RFC 3339 in UTC, the fraction trimmed: `2024-01-01T00:00:00Z`, `…:00.5Z`."""
        seconds, fraction = divmod(self.nanos, NANOS_PER_SECOND)
        moment = _EPOCH + datetime.timedelta(seconds=seconds)
        digits = f".{fraction:09d}".rstrip("0") if fraction else ""
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + digits + "Z"


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_TIMESTAMP_MIN = -62_135_596_800 * NANOS_PER_SECOND  # 0001-01-01T00:00:00Z
_TIMESTAMP_MAX = 253_402_300_800 * NANOS_PER_SECOND - 1  # 9999-12-31T23:59:59.999999999Z
_RFC3339 = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
                      r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))")


def parse_timestamp(text: str) -> "Timestamp | CelError":
    """An RFC 3339 timestamp (`2024-01-01T00:00:00Z`, `2024-01-01T01:00:00.5+01:00`)."""
    match = _RFC3339.fullmatch(text) if len(text) <= 64 else None
    if match is None:
        return CelError(f"invalid timestamp `{text[:64]}`")
    year, month, day, hour, minute, second, fraction, _z, sign, offset_h, offset_m = match.groups()
    try:
        moment = datetime.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                                   tzinfo=datetime.timezone.utc)
    except ValueError:
        return CelError(f"invalid timestamp `{text[:64]}`")
    offset = 0 if sign is None else (1 if sign == "+" else -1) * (int(offset_h) * 3600 + int(offset_m) * 60)
    if sign is not None and (int(offset_h) > 23 or int(offset_m) > 59):
        return CelError(f"invalid timestamp `{text[:64]}`")
    seconds = (moment - _EPOCH) // datetime.timedelta(seconds=1) - offset
    nanos = seconds * NANOS_PER_SECOND + (int(fraction.ljust(9, "0")) if fraction else 0)
    if not _TIMESTAMP_MIN <= nanos <= _TIMESTAMP_MAX:
        return CelError(f"timestamp `{text[:64]}` is out of range")
    return Timestamp(nanos)


Activation = Mapping[str, object]
Evaluator = Callable[[Activation], object]


class _Failure(Exception):
    """Raised inside compiled closures; never leaves `compile_expr`'s evaluator. `bounded` as in
    `CelError`."""

    def __init__(self, message: str, bounded: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.bounded = bounded


_MISSING = object()
_NUMBER = frozenset({int, float, Uint})
_EQUAL_AS_PYTHON = frozenset({int, float, Uint, str, bytes, bool, type(None), Duration, Timestamp})
_ORDERED_AS_PYTHON = frozenset({int, float, Uint, str, bytes, bool, Duration, Timestamp})
_TEXTS = (str, bytes)
_ORDERINGS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_LOGICAL = frozenset({"&&", "||"})
_BASE_CONVERSIONS: tuple[tuple[type, Callable[[object], object]], ...] = (
    (int, int), (float, float), (str, str.__str__), (bytes, bytes))  # `str()` of a str enum is its name


def compile_expr(expr: Expr) -> Evaluator:
    """Compile `expr` into `evaluate(activation) -> value | CelError`; it never raises on input."""
    try:
        compiled = _compile(expr)
    except RecursionError:
        error = CelError("the expression is nested too deeply to evaluate", bounded=True)
        return lambda activation: error

    def evaluate(activation: Activation) -> object:
        outer = _work.left  # an evaluation inside another (none today) gets its own budget
        shared = _work.shared
        budget = MAX_WORK if shared is None else min(MAX_WORK, shared)
        _work.left = budget
        try:
            value = compiled(activation)
            if value.__class__ not in _SCALAR_TYPES:  # a rule's bool pays nothing more
                problem = repetition_problem(value)
                if problem is not None:
                    return CelError(problem, bounded=True)
            return value
        except _Failure as failure:
            return CelError(failure.message, failure.bounded)
        except RecursionError:
            return CelError("a value is nested too deeply to evaluate", bounded=True)
        finally:
            if shared is not None:
                _work.shared = max(0, shared - (budget - _work.left))
            _work.left = outer

    return evaluate


@dataclass
class Allowance:
    """What `allowance` yields: `exhausted` once the block is over, when some evaluation inside it
    failed because the allowance was spent (its verdicts are then no longer all to be trusted);
    `outermost` when no allowance encloses it (the one whose command says so, once)."""

    outermost: bool
    exhausted: bool = False


@contextlib.contextmanager
def allowance(units: int) -> Iterator[Allowance]:
    """Bound all the evaluations inside (in this thread) to `units` of work in all (see the module's
    docstring); an allowance inside another has the smaller of what is left and `units`, and what
    it spends is spent from the outer one too (as does its exhaustion)."""
    saved, saved_exhausted = _work.shared, _work.exhausted
    start = units if saved is None else min(saved, units)
    _work.shared, _work.exhausted = start, False
    found = Allowance(outermost=saved is None)
    try:
        yield found
    finally:
        found.exhausted = _work.exhausted
        spent = start - (_work.shared or 0)
        _work.shared = None if saved is None else max(0, saved - spent)
        _work.exhausted = saved_exhausted or found.exhausted


def constant_value(expr: Expr) -> object:
    """`compile_expr(expr)({})`: the value of an expression that reads no name, or its `CelError`;
    a literal's without compiling a closure (the checks ask for every constant argument of a plan)."""
    if isinstance(expr, Literal):
        value = _literal_value(expr)
        return CelError(value.message) if isinstance(value, _Failure) else value
    return compile_expr(expr)({})


# ------------------------------------------------------------------------------------ values
def leaves(value: object) -> Iterator[object]:
    """The values inside a nested value that are not lists, tuples or maps (a map's values, not its
    keys), depth first, without recursion: what a walk for one kind of value looks at."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
        else:
            yield item


def type_name(value: object) -> str:
    """The CEL type of a value, as CEL writes it (`int`, `map`…); other Python types by class."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Uint):
        return "uint"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, Duration):
        return "duration"
    if isinstance(value, Timestamp):
        return "timestamp"
    return f"unsupported value of Python type `{type(value).__name__}`"


def value_source(value: object) -> str:
    """`value` as canonical CEL text, which reads back as the same value: `null`, `true`, `5`, `5u`,
    `101.0`, `"text"`, `duration("3601s")`, `[1, 2]`, `{"k": 1}` (the form `ast.to_source` prints
    literals in; every message that shows a value uses it)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Uint):
        return f"{int(value)}u"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if math.isnan(value):
            return 'double("NaN")'
        if math.isinf(value):
            return 'double("Infinity")' if value > 0 else 'double("-Infinity")'
        text = repr(float(value))
        return text if ("." in text or "e" in text) else text + ".0"
    if isinstance(value, str):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, bytes):
        return "b" + json.dumps(bytes(value).decode("latin-1"), ensure_ascii=False)
    if isinstance(value, Duration):
        return f'duration("{value}")'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_source(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{value_source(key)}: {value_source(item)}" for key, item in value.items()) + "}"
    if isinstance(value, Timestamp):
        return f'timestamp("{value}")'
    return str(value)


def _plain(value: object) -> object:
    """`value` as its exact base type (an `IntEnum` as `int`, a `StrEnum` as `str`…)."""
    if type(value) in _EQUAL_AS_PYTHON or isinstance(value, bool):
        return value
    for base, convert in _BASE_CONVERSIONS:
        if isinstance(value, base):
            return convert(value)
    return value


def _no_overload(symbol: str, *operands: object) -> _Failure:
    types = [type_name(operand) for operand in operands]
    if len(types) == 1:
        return _Failure(f"no such overload for `{symbol}{types[0]}`")
    return _Failure(f"no such overload for `{types[0]} {symbol} {types[1]}`")


def _int_result(value: int) -> int:
    if INT_MIN <= value <= INT_MAX:
        return value
    raise _Failure("integer overflow")


def _uint_result(value: int) -> Uint:
    if 0 <= value <= UINT_MAX:
        return Uint(value)
    raise _Failure("unsigned integer overflow")


def _timestamp_result(nanos: int) -> Timestamp:
    if not _TIMESTAMP_MIN <= nanos <= _TIMESTAMP_MAX:
        raise _Failure("timestamp out of range")
    return Timestamp(nanos)


def _duration_result(nanos: int) -> Duration:
    if abs(nanos) > MAX_DURATION_SECONDS * NANOS_PER_SECOND:
        raise _Failure("duration out of range")
    return Duration(nanos)


def _sized(length: int, what: str) -> None:
    if length > MAX_SIZE:
        raise _Failure(f"the {what} would be longer than {MAX_SIZE:,}", bounded=True)
    _spend(length)


class _Work(threading.local):
    left = MAX_WORK
    shared: int | None = None  # what is left of the `allowance`, if one is in force
    exhausted = False  # an evaluation failed because the allowance was spent


_work = _Work()


_CONTAINERS = (list, tuple, Mapping)
_SCALAR_TYPES = frozenset({bool, int, float, str, bytes, type(None)})


def repetition_problem(value: object) -> str | None:
    """Why a value cannot leave an evaluation (as an argument, a key, a result), or None: its tree
    — what a JSON form or a walk visits — holds more than `MAX_DEEP_SIZE` elements and characters
    beyond its distinct contents. A value held twice is visited twice: `[[1]].map(a, [a, a])
    .map(b, [b, b])…` builds 2ⁿ elements in n cheap steps, and `L.map(x, args.text)` a copy of
    the text per element, while a large argument or result passed along as it is repeats nothing.
    Each distinct list or map counts 1, each element's position 1, except a string or bytes of
    over 64 characters, counted by its length (in the distinct contents once per object).
    Without recursion, in time linear in the distinct values."""
    if not isinstance(value, _CONTAINERS):
        return None
    trees: dict[int, int] = {}  # container id → its tree size (all are reachable from `value`: ids stay theirs)
    strings: set[int] = set()
    distinct = 0
    open_now: set[int] = set()
    pending: list[object] = [value]
    while pending:
        item = pending[-1]
        key = id(item)
        if key in trees:
            pending.pop()
            continue
        inner = list(item.values()) if isinstance(item, Mapping) else list(item)  # type: ignore[union-attr]
        waiting = [element for element in inner if isinstance(element, _CONTAINERS) and id(element) not in trees]
        if waiting:
            if key in open_now:
                return "the value holds itself"
            open_now.add(key)
            pending.extend(waiting)
            continue
        pending.pop()
        open_now.discard(key)
        tree = 1
        distinct += 1
        for element in inner:
            if isinstance(element, _CONTAINERS):
                tree += trees[id(element)]
            elif isinstance(element, (str, bytes)) and len(element) > 64:
                tree += len(element)
                if id(element) not in strings:
                    strings.add(id(element))
                    distinct += len(element)
            else:
                tree += 1
                distinct += 1
        trees[key] = tree
        if tree - distinct > MAX_DEEP_SIZE:
            return (f"the value would repeat over {MAX_DEEP_SIZE:,} elements and characters of itself inside "
                    "it (shared values, each copy counted)")
    return None


def _spend(units: int) -> None:
    left = _work.left - units
    if left < 0 and _work.shared is not None and _work.shared < MAX_WORK:
        _work.exhausted = True
        raise _Failure("the expressions checked together do too much work in all (a command's evaluations share "
                       f"{COMMAND_WORK // MAX_WORK} times what one may do)", bounded=True)
    if left < 0:
        raise _Failure(f"the expression does too much work to evaluate: its comprehensions and comparisons "
                       f"visit over {MAX_WORK // ITERATION_COST:,} elements, or it builds or reads values of over "
                       f"{MAX_WORK:,} elements or characters, in all", bounded=True)
    _work.left = left


def _is_list(value: object) -> bool:
    return isinstance(value, (list, tuple))


# ---------------------------------------------------------------------- equality and ordering
def _equals(left: object, right: object) -> bool:
    """CEL equality: numbers by value across int/uint/double, other types never equal each other."""
    left_type = type(left)
    if left_type is type(right) and left_type in _EQUAL_AS_PYTHON:
        if left_type in _TEXTS and len(left) == len(right) > 64:  # type: ignore[arg-type]
            _spend(len(left))  # type: ignore[arg-type]  # compared character by character (in C)
        return left == right
    if left_type in _NUMBER and type(right) in _NUMBER:
        return left == right
    left, right = _plain(left), _plain(right)
    left_name, right_name = type_name(left), type_name(right)
    for name in (left_name, right_name):
        if name.startswith("unsupported"):
            raise _Failure(name)
    if left_name in ("int", "uint", "double") and right_name in ("int", "uint", "double"):
        return left == right
    if left_name != right_name:
        return False
    if left_name == "list":
        if len(left) != len(right):  # type: ignore[arg-type]
            return False
        for left_item, right_item in zip(left, right):  # type: ignore[call-overload]
            _spend(ITERATION_COST)  # each pair compared, in Python (a shared sublist as often as it appears)
            if not _equals(left_item, right_item):
                return False
        return True
    if left_name == "map":
        if len(left) != len(right):  # type: ignore[arg-type]
            return False
        for key, value in left.items():  # type: ignore[union-attr]
            _spend(ITERATION_COST)
            found = _map_find(right, key)  # type: ignore[arg-type]
            if found is _MISSING or not _equals(value, found):
                return False
        return True
    return left == right


def _ordered(left: object, right: object, symbol: str) -> tuple[object, object]:
    """The pair as Python can order it, or a failure when CEL has no ordering for the two types."""
    left_type, right_type = type(left), type(right)
    if (left_type is right_type and left_type in _ORDERED_AS_PYTHON) or (
            left_type in _NUMBER and right_type in _NUMBER):
        if left_type in _TEXTS and min(len(left), len(right)) > 64:  # type: ignore[arg-type]
            _spend(min(len(left), len(right)))  # type: ignore[arg-type]  # up to the first difference
        return left, right
    plain_left, plain_right = _plain(left), _plain(right)
    if plain_left is not left or plain_right is not right:
        return _ordered(plain_left, plain_right, symbol)
    raise _no_overload(symbol, left, right)


# -------------------------------------------------------------------------------- containers
def _map_find(mapping: Mapping, key: object) -> object:
    """The value stored under `key` with CEL's key equality, or `_MISSING`."""
    if isinstance(key, str):
        return mapping.get(key, _MISSING)
    if isinstance(key, bool):
        for stored, value in mapping.items():
            _spend(ITERATION_COST)
            if stored is key:
                return value
        return _MISSING
    if isinstance(key, (int, float)):
        if isinstance(key, float) and not key.is_integer():
            return _MISSING
        if key == 0 or key == 1:  # Python finds `True` under 1 and `False` under 0
            for stored, value in mapping.items():
                _spend(ITERATION_COST)
                if not isinstance(stored, bool) and isinstance(stored, (int, float)) and stored == key:
                    return value
            return _MISSING
        return mapping.get(key, _MISSING)
    raise _Failure(f"unsupported map key type `{type_name(key)}`")


def _lookup(mapping: Mapping, key: object) -> object:
    value = _map_find(mapping, key)
    if value is _MISSING:
        raise _Failure(f"no such key `{_show(key)}`")
    return value


def _show(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _select(base: object, field: str) -> object:
    if isinstance(base, Mapping):
        value = base.get(field, _MISSING)
        if value is _MISSING:
            raise _Failure(f"no such key `{field}`")
        return value
    raise _Failure(f"cannot select `{field}` from a value of type `{type_name(base)}`")


def _index(container: object, key: object) -> object:
    if _is_list(container):
        key = _plain(key)
        if type(key) is int or type(key) is Uint:
            if 0 <= key < len(container):  # type: ignore[arg-type,operator]
                return container[key]  # type: ignore[index]
            raise _Failure(f"index {key} out of range for a list of size {len(container)}")  # type: ignore[arg-type]
        raise _no_overload("[]", container, key)
    if isinstance(container, Mapping):
        return _lookup(container, key)
    raise _Failure(f"cannot index a value of type `{type_name(container)}`")


def _contains(item: object, container: object) -> bool:
    if _is_list(container):
        for element in container:  # type: ignore[union-attr]
            _spend(ITERATION_COST)  # a scan, in Python, as far as it goes
            if _equals(item, element):
                return True
        return False
    if isinstance(container, Mapping):
        return _map_find(container, item) is not _MISSING
    raise _no_overload("in", item, container)


# -------------------------------------------------------------------------------- arithmetic
def _add(left: object, right: object) -> object:
    kind = type(left)
    if kind is type(right):
        if kind is int:
            return _int_result(left + right)  # type: ignore[operator]
        if kind is float:
            return left + right  # type: ignore[operator]
        if kind is str or kind is bytes:
            _sized(len(left) + len(right), "string" if kind is str else "bytes")  # type: ignore[arg-type]
            return left + right  # type: ignore[operator]
        if kind is Uint:
            return _uint_result(left + right)  # type: ignore[operator]
        if kind is Duration:
            return _duration_result(left.nanos + right.nanos)  # type: ignore[attr-defined]
    if kind is Timestamp and type(right) is Duration:
        return _timestamp_result(left.nanos + right.nanos)  # type: ignore[attr-defined]
    if kind is Duration and type(right) is Timestamp:
        return _timestamp_result(left.nanos + right.nanos)  # type: ignore[attr-defined]
    if _is_list(left) and _is_list(right):
        _sized(len(left) + len(right), "list")  # type: ignore[arg-type]
        return [*left, *right]  # type: ignore[misc]
    return _retry_plain(_add, "+", left, right)


def _subtract(left: object, right: object) -> object:
    kind = type(left)
    if kind is type(right):
        if kind is int:
            return _int_result(left - right)  # type: ignore[operator]
        if kind is float:
            return left - right  # type: ignore[operator]
        if kind is Uint:
            return _uint_result(left - right)  # type: ignore[operator]
        if kind is Duration:
            return _duration_result(left.nanos - right.nanos)  # type: ignore[attr-defined]
        if kind is Timestamp:
            return _duration_result(left.nanos - right.nanos)  # type: ignore[attr-defined]
    if kind is Timestamp and type(right) is Duration:
        return _timestamp_result(left.nanos - right.nanos)  # type: ignore[attr-defined]
    return _retry_plain(_subtract, "-", left, right)


def _multiply(left: object, right: object) -> object:
    kind = type(left)
    if kind is type(right):
        if kind is int:
            return _int_result(left * right)  # type: ignore[operator]
        if kind is float:
            return left * right  # type: ignore[operator]
        if kind is Uint:
            return _uint_result(left * right)  # type: ignore[operator]
    return _retry_plain(_multiply, "*", left, right)


def _divide(left: object, right: object) -> object:
    kind = type(left)
    if kind is type(right):
        if kind is int or kind is Uint:
            if right == 0:
                raise _Failure("division by zero")
            quotient = abs(left) // abs(right)  # type: ignore[arg-type]
            if (left < 0) != (right < 0):  # type: ignore[operator]
                quotient = -quotient  # truncation toward zero, as CEL and C
            return _int_result(quotient) if kind is int else Uint(quotient)
        if kind is float:
            if right == 0.0:
                if left == 0.0 or left != left:  # 0/0 and NaN/0 are NaN
                    return math.nan
                return math.copysign(math.inf, left) * math.copysign(1.0, right)  # type: ignore[arg-type]
            return left / right  # type: ignore[operator]
    return _retry_plain(_divide, "/", left, right)


def _modulo(left: object, right: object) -> object:
    kind = type(left)
    if kind is type(right) and (kind is int or kind is Uint):
        if right == 0:
            raise _Failure("modulus by zero")
        remainder = abs(left) % abs(right)  # type: ignore[arg-type]
        if left < 0:  # type: ignore[operator]
            remainder = -remainder  # the sign of the dividend, as CEL and C
        return remainder if kind is int else Uint(remainder)
    return _retry_plain(_modulo, "%", left, right)


def _retry_plain(operation: Callable[[object, object], object], symbol: str,
                 left: object, right: object) -> object:
    plain_left, plain_right = _plain(left), _plain(right)
    if plain_left is left and plain_right is right:
        raise _no_overload(symbol, left, right)
    return operation(plain_left, plain_right)


def _negate(value: object) -> object:
    kind = type(value)
    if kind is int:
        return _int_result(-value)  # type: ignore[operator]
    if kind is float:
        return -value  # type: ignore[operator]
    if kind is Duration:
        return Duration(-value.nanos)  # type: ignore[attr-defined]
    plain = _plain(value)
    if plain is value:
        raise _no_overload("-", value)
    return _negate(plain)


_ARITHMETIC = {"+": _add, "-": _subtract, "*": _multiply, "/": _divide, "%": _modulo}


# --------------------------------------------------------------------------------- functions
_DURATION_TEXT = re.compile(r"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h|d))+|[-+]?0")
_DURATION_PART = re.compile(r"([0-9]*)\.?([0-9]*)(ns|us|µs|μs|ms|s|m|h|d)")
_UNIT_NANOS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": NANOS_PER_SECOND,
               "m": 60 * NANOS_PER_SECOND, "h": 3600 * NANOS_PER_SECOND, "d": 86400 * NANOS_PER_SECOND}
_MAX_DURATION_TEXT = 256


def parse_duration(text: str) -> Duration | CelError:
    """A CEL duration string (`30s`, `1.5h`, `1h30m`, `100ms`, `-2m`; units ns us ms s m h d)."""
    if len(text) > _MAX_DURATION_TEXT or not _DURATION_TEXT.fullmatch(text):
        return CelError(f"invalid duration `{text[:64]}`")
    nanos = Fraction(0)
    for whole, fraction, unit in _DURATION_PART.findall(text):
        amount = int(whole or "0") + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)
        nanos += amount * _UNIT_NANOS[unit]
    total = int(nanos) * (-1 if text.startswith("-") else 1)
    if abs(total) > MAX_DURATION_SECONDS * NANOS_PER_SECOND:
        return CelError(f"duration `{text[:64]}` is out of range")
    return Duration(total)


@lru_cache(maxsize=512)
def _regexp(pattern: str) -> object:
    """The compiled RE2 program for `pattern`, or the message saying why there is none."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"the regular expression is longer than {MAX_PATTERN_CHARS:,} characters"
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        return f"invalid regular expression `{pattern[:64]}`: {reason}"
    except UnicodeEncodeError:
        return "the regular expression is not valid unicode"


def pattern_error(pattern: str) -> str | None:
    """Why `pattern` cannot be used by `matches`, or None when it can."""
    regexp = _regexp(pattern)
    return regexp if isinstance(regexp, str) else None


def regex_search(pattern: str, text: str) -> bool | None:
    """Whether `text` matches `pattern` as `text.matches(pattern)` says; None when that is an error."""
    regexp = _regexp(pattern)
    if isinstance(regexp, str):
        return None
    try:
        return regexp.search(text) is not None  # type: ignore[attr-defined]
    except UnicodeEncodeError:
        return None


def python_regex_tree(pattern: str) -> Any:
    """Python's syntax tree of `pattern` (`re._parser`, which reads the common RE2 syntax alike),
    or None when Python does not read it. Its warnings about syntax it may read otherwise one day
    (`[[:digit:]]`) are no user's business."""
    import re._parser as parser  # type: ignore[import-not-found]

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return parser.parse(pattern)
    except Exception:  # noqa: BLE001 — a pattern Python does not read
        return None


def regex_example(pattern: str) -> str | None:
    """A short string that `pattern` may match, read from its syntax tree (Python's parser, which
    reads the common RE2 syntax alike): each repetition at its least, the first branch, the first
    character of a class. Only a candidate: the caller checks it with `regex_search`. None when the
    pattern is not read."""
    tree = python_regex_tree(pattern)
    if tree is None:
        return None
    out: list[str] = []

    def emit(items: object, depth: int = 0) -> bool:
        if depth > 50:
            return False
        for op, argument in items:  # type: ignore[attr-defined]
            name = str(op)
            if name == "LITERAL":
                out.append(chr(argument))
            elif name == "NOT_LITERAL":
                out.append("a" if chr(argument) != "a" else "b")
            elif name == "ANY":
                out.append("a")
            elif name == "IN":
                first = argument[0] if argument else None
                if first is None:
                    return False
                if str(first[0]) == "NEGATE":
                    out.append("~")
                elif str(first[0]) == "LITERAL":
                    out.append(chr(first[1]))
                elif str(first[0]) == "RANGE":
                    out.append(chr(first[1][0]))
                elif str(first[0]) == "CATEGORY":
                    out.append({"CATEGORY_DIGIT": "0", "CATEGORY_SPACE": " "}.get(str(first[1]), "a"))
                else:
                    return False
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                low, _high, body = argument
                for _ in range(min(low, 64)):
                    if not emit(body, depth + 1):
                        return False
            elif name == "SUBPATTERN":
                if not emit(argument[-1], depth + 1):
                    return False
            elif name == "BRANCH":
                if not emit(argument[1][0], depth + 1):
                    return False
            elif name == "AT":
                continue  # anchors take no characters
            elif name == "CATEGORY":
                out.append({"CATEGORY_DIGIT": "0", "CATEGORY_SPACE": " "}.get(str(argument), "a"))
            else:
                return False
        return True

    return "".join(out) if emit(tree) else None


def _matches(text: object, pattern: object) -> bool:
    if not isinstance(text, str) or not isinstance(pattern, str):
        raise _no_overload(".matches", text, pattern)
    regexp = _regexp(pattern)
    if isinstance(regexp, str):  # a pattern past the bound is the evaluator's limit, not the pattern's meaning
        raise _Failure(regexp, bounded=len(pattern) > MAX_PATTERN_CHARS)
    _spend(len(text))  # linear in the text (RE2), in C
    try:
        return regexp.search(text) is not None  # type: ignore[attr-defined]
    except UnicodeEncodeError:
        raise _Failure("the string is not valid unicode") from None


def _size(value: object) -> int:
    if isinstance(value, (str, bytes, list, tuple, Mapping)):
        return len(value)
    raise _Failure(f"no such overload for `size({type_name(value)})`")


def _string_method(method: Callable[[str, str], bool], name: str) -> Callable[[object, object], bool]:
    whole_target = name == "contains"  # a search reads the whole text; a prefix or suffix test, the argument's length

    def call(target: object, argument: object) -> bool:
        if isinstance(target, str) and isinstance(argument, str):
            _spend(len(target) if whole_target else len(argument))
            return method(target, argument)
        raise _Failure(f"no such overload for `{type_name(target)}.{name}({type_name(argument)})`")
    return call


_METHODS_OF_ONE: dict[str, Callable[[object, object], object]] = {
    "startsWith": _string_method(str.startswith, "startsWith"),
    "endsWith": _string_method(str.endswith, "endsWith"),
    "contains": _string_method(str.__contains__, "contains"),
    "matches": _matches,
}

_DECIMAL_INT = re.compile(r"[+-]?[0-9]{1,20}")
_DECIMAL_UINT = re.compile(r"[0-9]{1,20}")
_DECIMAL_DOUBLE = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?|inf|infinity|nan)",
                             re.IGNORECASE)
_BOOL_TEXT = {"true": True, "True": True, "TRUE": True, "t": True, "T": True, "1": True,
              "false": False, "False": False, "FALSE": False, "f": False, "F": False, "0": False}


def _whole_from_double(value: float, low: int, high: int, what: str) -> int:
    if not math.isfinite(value):
        raise _Failure(f"cannot convert `{value}` to `{what}`")
    whole = int(value)
    if not low <= whole <= high:
        raise _Failure(f"`{value!r}` is out of the range of `{what}`")
    return whole


def _to_int(value: object) -> int:
    value = _plain(value)
    if type(value) is int or type(value) is Uint:
        return _int_result(int(value))  # type: ignore[arg-type]
    if type(value) is float:
        return _whole_from_double(value, INT_MIN, INT_MAX, "int")  # type: ignore[arg-type]
    if type(value) is str:
        if not _DECIMAL_INT.fullmatch(value):
            raise _Failure(f"cannot convert `{value[:64]}` to `int`")
        return _int_result(int(value))
    raise _Failure(f"no such overload for `int({type_name(value)})`")


def _to_uint(value: object) -> Uint:
    value = _plain(value)
    if type(value) is int or type(value) is Uint:
        return _uint_result(value)  # type: ignore[arg-type]
    if type(value) is float:
        return Uint(_whole_from_double(value, 0, UINT_MAX, "uint"))  # type: ignore[arg-type]
    if type(value) is str:
        if not _DECIMAL_UINT.fullmatch(value):
            raise _Failure(f"cannot convert `{value[:64]}` to `uint`")
        return _uint_result(int(value))
    raise _Failure(f"no such overload for `uint({type_name(value)})`")


def _to_double(value: object) -> float:
    value = _plain(value)
    if type(value) is float:
        return value  # type: ignore[return-value]
    if type(value) is int or type(value) is Uint:
        try:
            return float(value)  # type: ignore[arg-type]
        except OverflowError:
            raise _Failure("the number is out of the range of `double`") from None
    if type(value) is str:
        if len(value) > 400 or not _DECIMAL_DOUBLE.fullmatch(value):
            raise _Failure(f"cannot convert `{value[:64]}` to `double`")
        return float(value)
    raise _Failure(f"no such overload for `double({type_name(value)})`")


def _to_string(value: object) -> str:
    value = _plain(value)
    kind = type(value)
    if kind is str:
        return value  # type: ignore[return-value]
    if kind is bool:
        return "true" if value else "false"
    if kind is int or kind is Uint:
        if not INT_MIN <= value <= UINT_MAX:  # type: ignore[operator]
            raise _Failure("integer overflow")
        return str(int(value))  # type: ignore[call-overload]
    if kind is float:
        return repr(value)
    if kind is bytes:
        try:
            return value.decode("utf-8")  # type: ignore[union-attr]
        except UnicodeDecodeError:
            raise _Failure("the bytes are not valid UTF-8") from None
    if kind is Duration or kind is Timestamp:
        return str(value)
    raise _Failure(f"no such overload for `string({type_name(value)})`")


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value in _BOOL_TEXT:
            return _BOOL_TEXT[value]
        raise _Failure(f"cannot convert `{value[:64]}` to `bool`")
    raise _Failure(f"no such overload for `bool({type_name(value)})`")


def parse_bytes(text: str) -> bytes | CelError:
    """The UTF-8 bytes of a string, as `bytes(text)` gives them (a lone surrogate has none)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return CelError("the string is not valid unicode")


def _to_bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, str):
        _sized(len(value) * 4, "bytes")
        converted = parse_bytes(value)
        if isinstance(converted, CelError):
            raise _Failure(converted.message)
        return converted
    raise _Failure(f"no such overload for `bytes({type_name(value)})`")


def _to_duration(value: object) -> Duration:
    if isinstance(value, Duration):
        return value
    if isinstance(value, str):
        parsed = parse_duration(value)
        if isinstance(parsed, CelError):
            raise _Failure(parsed.message)
        return parsed
    raise _Failure(f"no such overload for `duration({type_name(value)})`")


def _to_timestamp(value: object) -> Timestamp:
    if isinstance(value, Timestamp):
        return value
    if isinstance(value, str):
        parsed = parse_timestamp(value)
        if isinstance(parsed, CelError):
            raise _Failure(parsed.message)
        return parsed
    raise _Failure(f"no such overload for `timestamp({type_name(value)})`")


_FUNCTIONS_OF_ONE: dict[str, Callable[[object], object]] = {
    "timestamp": _to_timestamp,
    "size": _size,
    "int": _to_int,
    "uint": _to_uint,
    "double": _to_double,
    "string": _to_string,
    "bool": _to_bool,
    "bytes": _to_bytes,
    "duration": _to_duration,
    "dyn": lambda value: value,  # CEL's `dyn(x)`: the value itself, its static type erased
}


# --------------------------------------------------------------------------------- compiling
_Closure = Callable[[Activation], object]


def _failing(message: str) -> _Closure:
    def fail(activation: Activation) -> object:
        raise _Failure(message)
    return fail


def _compile(expr: Expr) -> _Closure:
    if isinstance(expr, Literal):
        return _compile_literal(expr)
    if isinstance(expr, Ident):
        return _compile_ident(expr.name)
    if isinstance(expr, Select):
        return _compile_select(expr)
    if isinstance(expr, Index):
        operand, key = _compile(expr.operand), _compile(expr.index)
        return lambda activation: _index(operand(activation), key(activation))
    if isinstance(expr, Call):
        return _compile_call(expr)
    if isinstance(expr, Unary):
        return _compile_unary(expr)
    if isinstance(expr, Binary):
        return _compile_binary(expr)
    if isinstance(expr, Conditional):
        return _compile_conditional(expr)
    if isinstance(expr, ListExpr):
        items = tuple(_compile(item) for item in expr.items)
        cost = len(items) * ITERATION_COST  # each item runs its closure, as a visited element does

        def build_list(activation: Activation) -> list:
            _spend(cost)
            return [item(activation) for item in items]

        return build_list
    if isinstance(expr, MapExpr):
        return _compile_map(expr)
    raise TypeError(f"not a CEL node: {expr!r}")


def _literal_value(literal: Literal) -> object:
    """The literal's value, or a `_Failure` when it is out of its type's range."""
    if literal.kind == "int":
        in_range = INT_MIN <= literal.value <= INT_MAX  # type: ignore[operator]
        return literal.value if in_range else _Failure(f"`{literal.value}` is out of the range of `int`")
    if literal.kind == "uint":
        in_range = 0 <= literal.value <= UINT_MAX  # type: ignore[operator]
        return Uint(literal.value) if in_range else _Failure(f"`{literal.value}u` is out of the range of `uint`")
    if literal.kind == "double" and literal.value in (float("inf"), float("-inf")):
        return _Failure("the number is out of the range of `double`")
    return literal.value


def _compile_literal(literal: Literal) -> _Closure:
    value = _literal_value(literal)
    if isinstance(value, _Failure):
        return _failing(value.message)
    return lambda activation: value


def _compile_ident(name: str) -> _Closure:
    unknown = f"unknown name `{name}`"

    def ident(activation: Activation) -> object:
        try:
            return activation[name]
        except KeyError:
            raise _Failure(unknown) from None

    return ident


def _compile_select(expr: Select) -> _Closure:
    field = expr.field
    missing = f"no such key `{field}`"
    if isinstance(expr.operand, Ident):  # `args.amount`: one closure for the variable and the key
        name = expr.operand.name
        unknown = f"unknown name `{name}`"

        def select_variable(activation: Activation) -> object:
            try:
                base = activation[name]
            except KeyError:
                raise _Failure(unknown) from None
            if type(base) is dict:
                try:
                    return base[field]
                except KeyError:
                    raise _Failure(missing) from None
            return _select(base, field)

        return select_variable
    operand = _compile(expr.operand)

    def select(activation: Activation) -> object:
        base = operand(activation)
        if type(base) is dict:
            try:
                return base[field]
            except KeyError:
                raise _Failure(missing) from None
        return _select(base, field)

    return select




def reads_a_name(expr: Expr) -> bool:
    """Whether `expr` reads a name from its activation: an identifier other than a macro's own
    variable inside that macro (`[1, 2].exists(v, v > 5)` reads none: it is a constant). Stops at the
    first name read (the checks ask this of every expression of a plan)."""
    if type(expr) is Literal:
        return False
    if type(expr) is Ident:
        return True
    stack: list[tuple[Expr, frozenset[str]]] = [(expr, _NOTHING_BOUND)]
    while stack:
        node, bound = stack.pop()
        kind = type(node)
        if kind is Ident:
            if node.name not in bound:  # type: ignore[union-attr]
                return True
        elif kind is Literal:
            continue
        elif kind is Call and is_macro(node):  # type: ignore[arg-type]
            stack.extend(macro_parts(node, bound))  # type: ignore[arg-type]
        else:
            stack.extend((child, bound) for child in children(node))
    return False


_NOTHING_BOUND: frozenset[str] = frozenset()


def constant_when(condition: Expr) -> bool | None:
    """For a `when` that reads no name, whether its step runs (only when it is `true`: one that is
    false, fails or is no bool skips the step on every run); None when it reads a name."""
    return None if reads_a_name(condition) else constant_value(condition) is True


def _compile_macro(expr: Call) -> _Closure:
    """The comprehension macros, with CEL's error rules: `all` is false if some element gives
    false (errors elsewhere notwithstanding), `exists` true if some gives true; otherwise an error
    from an element is the result. A map is iterated by its keys."""
    name, variable = expr.function, expr.args[0].name  # type: ignore[union-attr]
    target = _compile(expr.target)  # type: ignore[arg-type]
    steps = [_compile(arg) for arg in expr.args[1:]]

    def elements(activation: Activation) -> Iterator[tuple[object, dict]]:
        collection = target(activation)
        if isinstance(collection, Mapping):
            items = list(collection.keys())
        elif isinstance(collection, (list, tuple)):
            items = list(collection)
        else:
            raise _Failure(f"`{name}` iterates over a list or a map, not a `{type_name(collection)}`")
        _spend(len(items) * ITERATION_COST)
        return ((item, {**activation, variable: item}) for item in items)  # one scope at a time

    def predicate(check: _Closure, scope: dict) -> bool | _Failure:
        try:
            value = check(scope)
        except _Failure as failure:
            if failure.bounded:  # the evaluator's limit: no later element could be evaluated either
                raise
            return failure
        return value if isinstance(value, bool) else _Failure(f"the predicate of `{name}` gives a "
                                                              f"`{type_name(value)}`, not a `bool`")

    def quantified(activation: Activation) -> object:
        outcomes = [predicate(steps[0], scope) for _item, scope in elements(activation)]
        decisive = (False if name == "all" else True)
        if name != "exists_one" and decisive in outcomes:
            return decisive
        failure = next((outcome for outcome in outcomes if isinstance(outcome, _Failure)), None)
        if failure is not None:
            raise failure
        if name == "exists_one":
            return outcomes.count(True) == 1
        return not decisive

    def filtered(activation: Activation) -> object:
        kept = []
        for item, scope in elements(activation):
            outcome = predicate(steps[0], scope)
            if isinstance(outcome, _Failure):
                raise outcome
            if outcome:
                kept.append(item)
        return kept

    def mapped(activation: Activation) -> object:
        results = []
        for _item, scope in elements(activation):
            if len(steps) == 2:
                outcome = predicate(steps[0], scope)
                if isinstance(outcome, _Failure):
                    raise outcome
                if not outcome:
                    continue
            results.append(steps[-1](scope))
        _sized(len(results), "a list")
        return results

    return {"filter": filtered, "map": mapped}.get(name, quantified)


def _compile_call(expr: Call) -> _Closure:
    name, arity = expr.function, len(expr.args)
    if expr.target is None and name == "has":
        return _compile_has(expr)
    if is_macro(expr):
        return _compile_macro(expr)
    if expr.target is None and arity == 1 and name in _FUNCTIONS_OF_ONE:
        function = _FUNCTIONS_OF_ONE[name]
        if isinstance(expr.args[0], Literal):  # `duration("1h")`: computed once, here
            return _compile_constant_call(function, expr.args[0])
        argument = _compile(expr.args[0])
        return lambda activation: function(argument(activation))
    if expr.target is not None and arity == 0 and name == "size":
        target = _compile(expr.target)
        return lambda activation: _size(target(activation))
    if expr.target is None and arity == 2 and name == "matches":
        expr = Call(name, expr.args[0], expr.args[1:], expr.span)  # `matches(s, p)` is `s.matches(p)`
    if expr.target is not None and len(expr.args) == 1 and name in _METHODS_OF_ONE:
        target = _compile(expr.target)
        pattern = expr.args[0]
        if name == "matches" and isinstance(pattern, Literal) and pattern.kind == "string":
            return _compile_literal_match(target, pattern.value)  # type: ignore[arg-type]
        method, argument = _METHODS_OF_ONE[name], _compile(pattern)
        return lambda activation: method(target(activation), argument(activation))
    if name in _FUNCTIONS_OF_ONE or name in _METHODS_OF_ONE or name == "has":
        return _failing(f"no overload of `{name}` takes these arguments")
    return _failing(f"unknown function `{name}`")


def _compile_constant_call(function: Callable[[object], object], literal: Literal) -> _Closure:
    value = _literal_value(literal)
    if isinstance(value, _Failure):
        return _failing(value.message)
    try:
        result = function(value)
    except _Failure as failure:
        return _failing(failure.message)
    return lambda activation: result


def _compile_literal_match(target: _Closure, pattern: str) -> _Closure:
    regexp = _regexp(pattern)
    if isinstance(regexp, str):
        return _failing(regexp)
    search = regexp.search  # type: ignore[attr-defined]

    def match(activation: Activation) -> bool:
        text = target(activation)
        if not isinstance(text, str):
            raise _no_overload(".matches", text, pattern)
        _spend(len(text))
        try:
            return search(text) is not None
        except UnicodeEncodeError:
            raise _Failure("the string is not valid unicode") from None

    return match


def _compile_has(expr: Call) -> _Closure:
    if len(expr.args) != 1 or not isinstance(expr.args[0], Select):
        return _failing("`has` takes one field selection, such as `has(a.b)`")
    selection = expr.args[0]
    operand, field = _compile(selection.operand), selection.field

    def has(activation: Activation) -> bool:
        base = operand(activation)
        if isinstance(base, Mapping):
            return field in base
        raise _Failure(f"`has` cannot test a field of a value of type `{type_name(base)}`")

    return has


def _compile_unary(expr: Unary) -> _Closure:
    operand = _compile(expr.operand)
    if expr.op == "-":
        return lambda activation: _negate(operand(activation))

    def logical_not(activation: Activation) -> bool:
        value = operand(activation)
        if value is True:
            return False
        if value is False:
            return True
        raise _no_overload("!", value)

    return logical_not


def _compile_binary(expr: Binary) -> _Closure:
    if expr.op in _LOGICAL:
        return _compile_logical(expr)
    if expr.op in ("==", "!="):
        return _compile_equality(expr)
    if expr.op in _ORDERINGS:
        return _compile_ordering(expr)
    if expr.op == "in":
        return _compile_in(expr)
    left, right = _compile(expr.left), _compile(expr.right)
    arithmetic = _ARITHMETIC[expr.op]
    return lambda activation: arithmetic(left(activation), right(activation))


def _compile_logical(expr: Binary) -> _Closure:
    """`&&` and `||`: the deciding value (false for `&&`, true for `||`) absorbs errors on either side."""
    left, right = _compile(expr.left), _compile(expr.right)
    decisive = expr.op == "||"  # decides the result whatever the other side is
    yielding = not decisive  # leaves the result to the other side
    symbol = expr.op

    def logical(activation: Activation) -> bool:
        try:
            first = left(activation)
        except _Failure:
            if _decides(right, activation, decisive):
                return decisive
            raise
        if first is decisive:
            return decisive
        second = right(activation)
        if first is yielding:
            if second is True or second is False:
                return second
            raise _Failure(f"no such overload for `bool {symbol} {type_name(second)}`")
        if second is decisive:  # a non-bool left side is an error, absorbed like any other
            return decisive
        raise _Failure(f"no such overload for `{type_name(first)} {symbol} {type_name(second)}`")

    return logical


def _decides(side: _Closure, activation: Activation, decisive: bool) -> bool:
    try:
        return side(activation) is decisive
    except _Failure:
        return False


def _compile_equality(expr: Binary) -> _Closure:
    negate = expr.op == "!="
    literal, other = (expr.right, expr.left) if isinstance(expr.right, Literal) else (expr.left, expr.right)
    if isinstance(literal, Literal) and literal.kind in ("string", "bool", "null"):
        operand, value = _compile(other), literal.value
        if literal.kind == "string":  # `call.tool == "x"`
            def equals_string(activation: Activation) -> bool:
                found = operand(activation)
                return (found == value if type(found) is str else _equals(found, value)) is not negate

            return equals_string
        def equals_constant(activation: Activation) -> bool:
            # bool and null by identity (`1 == true` is false in CEL); any other CEL value is
            # unequal, and a value that is not one (an `Unknown` placeholder) is refused by `_equals`
            found = operand(activation)
            if found is value:
                return not negate
            if found is None or type(found) is bool:
                return negate
            return _equals(found, value) is not negate

        return equals_constant
    left, right = _compile(expr.left), _compile(expr.right)
    if negate:
        return lambda activation: not _equals(left(activation), right(activation))
    return lambda activation: _equals(left(activation), right(activation))


def _compile_ordering(expr: Binary) -> _Closure:
    compare, symbol = _ORDERINGS[expr.op], expr.op
    if isinstance(expr.right, Literal) and expr.right.kind in ("int", "double", "uint"):
        number = _literal_value(expr.right)
        if not isinstance(number, _Failure):  # `args.amount > 500.0`
            left = _compile(expr.left)

            def ordering_with_number(activation: Activation) -> bool:
                value = left(activation)
                if type(value) in _NUMBER:
                    return compare(value, number)
                return compare(*_ordered(value, number, symbol))

            return ordering_with_number
    left, right = _compile(expr.left), _compile(expr.right)

    def ordering(activation: Activation) -> bool:
        return compare(*_ordered(left(activation), right(activation), symbol))

    return ordering


def _compile_in(expr: Binary) -> _Closure:
    left = _compile(expr.left)
    if isinstance(expr.right, ListExpr) and expr.right.items and all(
            isinstance(item, Literal) and item.kind == "string" for item in expr.right.items):
        strings = frozenset(item.value for item in expr.right.items)  # type: ignore[union-attr]
        return lambda activation: _in_strings(left(activation), strings)
    right = _compile(expr.right)
    return lambda activation: _contains(left(activation), right(activation))


def _in_strings(value: object, strings: frozenset) -> bool:
    if type(value) is str:
        return value in strings
    return any(_equals(value, item) for item in strings)


def _compile_conditional(expr: Conditional) -> _Closure:
    condition, then, otherwise = _compile(expr.condition), _compile(expr.then), _compile(expr.otherwise)

    def conditional(activation: Activation) -> object:
        chosen = condition(activation)
        if chosen is True:
            return then(activation)
        if chosen is False:
            return otherwise(activation)
        raise _Failure(f"the condition of `?:` is a `{type_name(chosen)}`, not a `bool`")

    return conditional


def _compile_map(expr: MapExpr) -> _Closure:
    entries = tuple((_compile(key), _compile(value)) for key, value in expr.entries)
    cost = len(entries) * ITERATION_COST  # each entry runs two closures, as a visited element does

    def build(activation: Activation) -> dict:
        _spend(cost)
        result: dict = {}
        for key_of, value_of in entries:
            key = _plain(key_of(activation))
            if type(key) not in (str, int, Uint, bool):
                raise _Failure(f"unsupported map key type `{type_name(key)}`")
            if key in result:  # also refuses `true` beside `1`, which Python cannot keep apart
                raise _Failure(f"duplicate map key `{_show(key)}`")
            result[key] = value_of(activation)
        return result

    return build
