"""Static types of CEL expressions: `check_types(expr, env)` infers a type and reports misuse.

Types: the primitives `int` `uint` `double` `string` `bytes` `bool` `null` `duration` `timestamp`,
`list(E)`, `map(K, V)`, records (message-like: named fields with types, such as `step`) and `dyn`
(unknown until run time: anything goes, and whatever it yields is `dyn` again, except where the
operation fixes the result, as `size(x)` is an `int`).

Algorithm: one bottom-up pass over the tree. Each node's type follows from its children's by the
rules of CEL's standard definitions (the same operators and functions that `plangate.cel.evaluate`
implements); a node that fits no rule gets a `cel-type-error` at its span (or at the offending
operand's span), an identifier missing from `env` an `unknown-name`, and either way the node's type
becomes `dyn` so that one mistake is reported once, not again by every node above it.

Rules beyond the plain same-type ones, chosen to match the evaluator:
- Numbers compare across `int`, `uint` and `double` (`==` and the orderings); arithmetic does not.
- Types that can be `null` (`dyn`, lists, maps, records, durations, timestamps) compare with `null`.
- The branches of `?:` must have one type; a list or map literal of mixed types is `list(dyn)` or
  `map(K, dyn)`.
- Timestamps: `timestamp("…")` (RFC 3339) ordered among themselves; timestamp ± duration is a
  timestamp, timestamp − timestamp a duration.
- A literal `duration("…")`, `timestamp("…")` or `matches` pattern that cannot work is reported statically, and so
  is a key given twice in a map literal (an error in CEL).
- A name bound to a `selected_only` record (a step id in a plan) is no value: only `x.field` is;
  a bare `x` or `x.other` is an `unknown-name` whose help names the record's field. The help of an
  unknown name lists what may be written here (`x.result` for such a record), not `hidden` names.

Invariant: `check_types` never raises for any tree the parser builds; every finding is a diagnostic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Union

from plangate.cel.ast import (MACROS, Binary, Call, Conditional, Expr, Ident, Index, ListExpr, Literal, MapExpr,
                              Select, Unary, to_source)
from plangate.cel.evaluate import (INT_MAX, INT_MIN, UINT_MAX, CelError, is_macro, parse_duration, parse_timestamp,
                                  pattern_error)
from plangate.diagnostics import Diagnostic, backticked, diagnostic
from plangate.source import Span
from plangate.suggest import closest, did_you_mean


@dataclass(frozen=True, slots=True)
class Primitive:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class ListType:
    element: "CelType"

    def __str__(self) -> str:
        return f"list({self.element})"


@dataclass(frozen=True, slots=True)
class MapType:
    key: "CelType"
    value: "CelType"

    def __str__(self) -> str:
        return f"map({self.key}, {self.value})"


@dataclass(frozen=True, slots=True)
class RecordType:
    """A message-like value with known fields (`step`: id, tool, risk…); printed by its name."""

    name: str
    fields: tuple[tuple[str, "CelType"], ...]
    # A name bound to a record with `selected_only` is no value of its own: only its fields are
    # (a step id in a plan means nothing alone, `a.result` is its result).
    selected_only: bool = False

    @classmethod
    def of(cls, name: str, fields: Mapping[str, "CelType"], selected_only: bool = False) -> "RecordType":
        return cls(name, tuple(fields.items()), selected_only)

    def field_type(self, field: str) -> "CelType | None":
        for name, field_type in self.fields:
            if name == field:
                return field_type
        return None

    def __str__(self) -> str:
        return self.name


CelType = Union[Primitive, ListType, MapType, RecordType]

INT = Primitive("int")
UINT = Primitive("uint")
DOUBLE = Primitive("double")
STRING = Primitive("string")
BYTES = Primitive("bytes")
BOOL = Primitive("bool")
NULL = Primitive("null")
DURATION = Primitive("duration")
TIMESTAMP = Primitive("timestamp")
DYN = Primitive("dyn")

_NUMERIC = frozenset({INT, UINT, DOUBLE})
_ORDERED = frozenset({INT, UINT, DOUBLE, STRING, BYTES, BOOL, DURATION, TIMESTAMP})
_MAP_KEYS = frozenset({INT, UINT, STRING, BOOL, DYN})
_SIZED = (STRING, BYTES)

# Arithmetic: (left, right) → result. A `dyn` side matches any entry; lists are handled apart.
_ARITHMETIC: dict[str, dict[tuple[CelType, CelType], CelType]] = {
    "+": {(INT, INT): INT, (UINT, UINT): UINT, (DOUBLE, DOUBLE): DOUBLE, (STRING, STRING): STRING,
          (BYTES, BYTES): BYTES, (DURATION, DURATION): DURATION, (TIMESTAMP, DURATION): TIMESTAMP,
          (DURATION, TIMESTAMP): TIMESTAMP},
    "-": {(INT, INT): INT, (UINT, UINT): UINT, (DOUBLE, DOUBLE): DOUBLE, (DURATION, DURATION): DURATION,
          (TIMESTAMP, TIMESTAMP): DURATION, (TIMESTAMP, DURATION): TIMESTAMP},
    "*": {(INT, INT): INT, (UINT, UINT): UINT, (DOUBLE, DOUBLE): DOUBLE},
    "/": {(INT, INT): INT, (UINT, UINT): UINT, (DOUBLE, DOUBLE): DOUBLE},
    "%": {(INT, INT): INT, (UINT, UINT): UINT},
}

# Conversions: function → (the argument types it takes, its result).
_CONVERSIONS: dict[str, tuple[frozenset[CelType], CelType]] = {
    "int": (frozenset({INT, UINT, DOUBLE, STRING}), INT),
    "uint": (frozenset({INT, UINT, DOUBLE, STRING}), UINT),
    "double": (frozenset({INT, UINT, DOUBLE, STRING}), DOUBLE),
    "string": (frozenset({INT, UINT, DOUBLE, STRING, BOOL, BYTES, DURATION, TIMESTAMP}), STRING),
    "bool": (frozenset({BOOL, STRING}), BOOL),
    "bytes": (frozenset({BYTES, STRING}), BYTES),
    "duration": (frozenset({STRING, DURATION}), DURATION),
    "timestamp": (frozenset({STRING, TIMESTAMP}), TIMESTAMP),
    "dyn": (frozenset(), DYN),  # accepts anything: handled before the table is read
}
_STRING_METHODS = frozenset({"startsWith", "endsWith", "contains", "matches"})
FUNCTIONS = frozenset({"has", "size", "matches", *_CONVERSIONS})
METHODS = frozenset({"size", *_STRING_METHODS})


def check_types(expr: Expr, env: Mapping[str, CelType],
                hidden: frozenset[str] = frozenset()) -> tuple[CelType, list[Diagnostic]]:
    """The type of `expr` where the variables have the types in `env`, and what is wrong in it.
    Names in `hidden` are typed (another check reports their use) but never listed or suggested."""
    checker = _Checker(env, hidden)
    return checker.check(expr), checker.diagnostics


def _nullable(cel_type: CelType) -> bool:
    return cel_type in (NULL, DYN, DURATION, TIMESTAMP) or isinstance(cel_type, (ListType, MapType, RecordType))


def _risk_string(expr: Binary) -> str | None:
    """The fix for a risk class written as a string (`step.risk == "external_write"`): the risk
    classes are ordered constants, named without quotes."""
    from plangate.ir.nodes import RISK_NAMES

    texts = []
    for side in (expr.left, expr.right):
        if isinstance(side, Literal) and side.kind == "string" and side.value in RISK_NAMES:
            texts.append(str(side.value))
        else:
            texts.append(to_source(side))
    if texts == [to_source(expr.left), to_source(expr.right)]:
        return None
    return f"risk classes are constants, not strings: write `{texts[0]} {expr.op} {texts[1]}`"


def comparable(left: CelType, right: CelType) -> bool:
    """Whether `==` may compare values of the two types (numbers across kinds, `dyn` with anything)."""
    if left is DYN or right is DYN or left is right or left == DYN or right == DYN or left == right:
        return True  # (the identities first: they are the common case, and cheaper than `==`)
    if left in _NUMERIC and right in _NUMERIC:
        return True
    if left == NULL or right == NULL:
        return _nullable(left) and _nullable(right)
    if isinstance(left, ListType) and isinstance(right, ListType):
        return comparable(left.element, right.element)
    if isinstance(left, MapType) and isinstance(right, MapType):
        return comparable(left.key, right.key) and comparable(left.value, right.value)
    for record, other in ((left, right), (right, left)):  # a record is a map of its fields at run time
        if isinstance(record, RecordType) and not record.selected_only and isinstance(other, (MapType, RecordType)):
            return not isinstance(other, MapType) or comparable(other.key, STRING)
    return False


def join(left: CelType, right: CelType) -> CelType | None:
    """The one type that holds values of both, or None when they have none in common."""
    if left == right:
        return left
    if left == DYN or right == DYN:
        return DYN
    if left == NULL and _nullable(right):
        return right
    if right == NULL and _nullable(left):
        return left
    if isinstance(left, ListType) and isinstance(right, ListType):
        element = join(left.element, right.element)
        return ListType(element) if element is not None else None
    if isinstance(left, MapType) and isinstance(right, MapType):
        key, value = join(left.key, right.key), join(left.value, right.value)
        return MapType(key, value) if key is not None and value is not None else None
    return None


class _Checker:
    def __init__(self, env: Mapping[str, CelType], hidden: frozenset[str] = frozenset()) -> None:
        self.env = env
        self.hidden = hidden
        self.diagnostics: list[Diagnostic] = []

    def names_in_scope(self) -> list[str]:
        """What may be written here: each variable, and `x.field` for a selected-only record `x`."""
        names: list[str] = []
        for name, cel_type in self.env.items():
            if name in self.hidden:
                continue
            if isinstance(cel_type, RecordType) and cel_type.selected_only:
                names.extend(f"{name}.{field}" for field, _ in cel_type.fields)
            else:
                names.append(name)
        return names

    def operand(self, expr: Expr) -> CelType:
        """The type of a selection's operand: a selected-only record is fine here."""
        if isinstance(expr, Ident):
            found = self.env.get(expr.name)
            if found is not None:  # what `ident` gives, but a selected-only record is no error here
                return found
        return self.check(expr)

    def error(self, span: Span, message: str, help: str | None = None) -> CelType:
        self.diagnostics.append(diagnostic("cel-type-error", span, message, help=help))
        return DYN

    def check(self, expr: Expr) -> CelType:
        method = _CHECKS.get(type(expr))
        if method is None:
            raise TypeError(f"not a CEL node: {expr!r}")
        return method(self, expr)

    def selection(self, expr: Select) -> CelType:
        """`a.b.c`: the chain's root, then each field from the innermost out (iteratively: one
        call per link, not a dispatch and an `operand` per link)."""
        links = [expr]
        root = expr.operand
        while type(root) is Select:
            links.append(root)
            root = root.operand
        selected = self.operand(root)
        for link in reversed(links):
            selected = self.select(selected, link.field, link)
        return selected

    def list_literal(self, expr: ListExpr) -> CelType:
        return ListType(self.common(expr.items))

    def common(self, items: tuple[Expr, ...]) -> CelType:
        """The joined type of `items` (`dyn` when empty or mixed)."""
        result: CelType | None = None
        for item in items:
            item_type = self.check(item)
            result = item_type if result is None else (join(result, item_type) or DYN)
        return result or DYN

    # ------------------------------------------------------------------------- leaves
    def literal(self, expr: Literal) -> CelType:
        if expr.kind == "int" and not INT_MIN <= expr.value <= INT_MAX:  # type: ignore[operator]
            return self.error(expr.span, f"`{expr.value}` is out of the range of `int`")
        if expr.kind == "uint" and not 0 <= expr.value <= UINT_MAX:  # type: ignore[operator]
            return self.error(expr.span, f"`{expr.value}u` is out of the range of `uint`")
        if expr.kind == "double" and expr.value in (float("inf"), float("-inf")):  # `1e400`: no double holds it
            return self.error(expr.span, "the number is out of the range of `double`")
        return _LITERAL_TYPES[expr.kind]

    def ident(self, expr: Ident) -> CelType:
        found = self.env.get(expr.name)
        if isinstance(found, RecordType) and found.selected_only:
            fields = [field for field, _ in found.fields]
            self.diagnostics.append(diagnostic(
                "unknown-name", expr.span, f"unknown name `{expr.name}`",
                help=f"did you mean `{expr.name}.{fields[0]}`?" if fields else None))
            return DYN
        if found is not None:
            return found
        names = self.names_in_scope()
        suggestions = {name.split(".")[0]: name for name in names}
        match = closest(expr.name, suggestions)
        self.diagnostics.append(diagnostic(
            "unknown-name", expr.span, f"unknown name `{expr.name}`",
            help=f"did you mean `{suggestions[match]}`?" if match else _listing("the names here are", names)))
        return DYN

    def macro(self, expr: Call) -> CelType:
        """`xs.all(x, p)` and the other comprehensions: `x` is an element of a list (a key of a
        map) inside the macro's own scope; predicates must be bool."""
        assert expr.target is not None
        collection = self.check(expr.target)
        if isinstance(collection, ListType):
            element = collection.element
        elif isinstance(collection, MapType):
            element = collection.key
        elif isinstance(collection, RecordType) and not collection.selected_only:
            element = STRING  # a map of its fields at run time: its keys
        elif collection == DYN:
            element = DYN
        else:
            return self.error(expr.target.span, f"`{expr.function}` iterates over a list or a map, not {_a(collection)}")
        variable = expr.args[0].name  # type: ignore[union-attr]
        inner = _Checker({**self.env, variable: element}, self.hidden - {variable})
        steps = [inner.check(arg) for arg in expr.args[1:]]
        self.diagnostics.extend(inner.diagnostics)
        predicates = steps[:-1] if expr.function == "map" else steps
        for step, arg in zip(predicates, expr.args[1:]):
            if step not in (BOOL, DYN):
                self.error(arg.span, f"the predicate of `{expr.function}` must be a bool, not {_a(step)}")
        if expr.function == "map":
            return ListType(steps[-1])
        if expr.function == "filter":
            return collection if isinstance(collection, ListType) else ListType(element)
        return BOOL

    # ---------------------------------------------------------------------- selection
    def select(self, operand: CelType, field: str, expr: Expr) -> CelType:
        if isinstance(operand, RecordType):  # (a record is never `dyn`: asked first, it saves a comparison)
            found = operand.field_type(field)
            if found is not None:
                return found
            names = [name for name, _ in operand.fields]
            if operand.selected_only and isinstance(expr, Select) and isinstance(expr.operand, Ident):
                near = closest(field, names)  # `fetch.reslt`: a typo of `result`; `fetch.body`: `result` left out
                shown = f"{expr.operand.name}.{near}" if near else f"{expr.operand.name}.{names[0]}.{field}" if names else None
                self.diagnostics.append(diagnostic(
                    "unknown-name", expr.span, f"unknown name `{expr.operand.name}.{field}`",
                    help=f"did you mean `{shown}`?" if shown else None))
                return DYN
            return self.error(expr.span, f"`{operand.name}` has no field `{field}`",
                              help=did_you_mean(field, names) or _listing("its fields are", names))
        if operand is DYN or operand == DYN:
            return DYN
        if isinstance(operand, MapType):
            if operand.key in (STRING, DYN):
                return operand.value
            return self.error(expr.span, f"cannot select `{field}` from {_a(operand)}: its keys are not strings",
                              help="index the map instead: `m[key]`")
        return self.error(expr.span, f"cannot select `{field}` from a value of type `{operand}`")

    def index(self, expr: Index) -> CelType:
        container, key = self.check(expr.operand), self.check(expr.index)
        if container == DYN:
            return DYN
        if isinstance(container, ListType):
            if key not in (INT, UINT, DYN):
                return self.error(expr.index.span, f"a list index must be an `int`, not `{key}`")
            return container.element
        if isinstance(container, MapType):
            if not comparable(container.key, key):
                return self.error(expr.index.span, f"the keys of this `{container}` are `{container.key}`, not `{key}`")
            return container.value
        if isinstance(container, RecordType) and not container.selected_only:  # a map of its fields at run time
            if key not in (STRING, DYN):
                return self.error(expr.index.span, f"the keys of `{container}` are strings, not `{key}`")
            if isinstance(expr.index, Literal) and expr.index.kind == "string":
                return self.select(container, str(expr.index.value), expr)  # `args["amount"]` is `args.amount`
            return DYN
        if isinstance(container, RecordType):
            return self.error(expr.span, f"cannot index {_a(container)}",
                              help=f"select its fields instead: `{container.name}.field`")
        return self.error(expr.span, f"cannot index a value of type `{container}`")

    # ---------------------------------------------------------------------- functions
    def call(self, expr: Call) -> CelType:
        name, args = expr.function, expr.args
        if expr.target is None and name == "has":
            return self.has(expr)
        if is_macro(expr):
            return self.macro(expr)
        if expr.target is None and name == "matches":
            if len(args) != 2:
                return self.arity(expr, 2)
            return self.string_method("matches", self.check(args[0]), args[1:], expr)
        if expr.target is None and (name in _CONVERSIONS or name == "size"):
            if len(args) != 1:
                return self.arity(expr, 1)
            argument = self.check(args[0])
            return self.size(argument, expr) if name == "size" else self.conversion(name, argument, args[0], expr)
        if expr.target is not None and name in METHODS:
            target = self.check(expr.target)
            if name == "size":
                return self.size(target, expr) if not args else self.arity(expr, 0)
            return self.string_method(name, target, args, expr)
        if expr.target is not None and name in MACROS:  # `xs.map(1, x)`, `xs.all(x)`: not the macro's shape
            self.check(expr.target)
            counts, shape = ("2 or 3", "`map(x, expression)` or `map(x, predicate, expression)`") if name == "map" \
                else ("2", f"`{name}(x, predicate)`")
            if not expr.args or not isinstance(expr.args[0], Ident):
                return self.error(expr.span, f"the first argument of `{name}` names the variable each item is bound "
                                             f"to: write {shape}")
            return self.error(expr.span, f"`{name}` takes {counts} arguments, not {len(args)}: write {shape}")
        for arg in args:
            self.check(arg)
        if expr.target is None and name in METHODS:
            return self.error(expr.span, f"`{name}` is a method: write `value.{name}(…)`")
        if expr.target is not None and name in FUNCTIONS:
            self.check(expr.target)
            return self.error(expr.span, f"`{name}` is a function, not a method: write `{name}(value)`")
        if expr.target is not None:
            self.check(expr.target)
        known = METHODS if expr.target is not None else FUNCTIONS
        self.diagnostics.append(diagnostic(
            "unknown-name", expr.span, f"unknown function `{name}`",
            help=did_you_mean(name, known) or _listing("the functions here are", known)))
        return DYN

    def arity(self, expr: Call, expected: int) -> CelType:
        for arg in expr.args:
            self.check(arg)
        count = "1 argument" if expected == 1 else f"{expected} arguments"
        return self.error(expr.span, f"`{expr.function}` takes {count}, not {len(expr.args)}")

    def has(self, expr: Call) -> CelType:
        if len(expr.args) != 1 or not isinstance(expr.args[0], Select):
            for arg in expr.args:
                self.check(arg)
            return self.error(expr.span, "`has` takes one field selection, such as `has(a.b)`")
        selection = expr.args[0]
        operand = self.operand(selection.operand)
        if not (operand == DYN or isinstance(operand, (RecordType, MapType))):
            return self.error(selection.span, f"`has` cannot test a field of a value of type `{operand}`")
        if isinstance(operand, RecordType):
            self.select(operand, selection.field, selection)
        return BOOL

    def size(self, argument: CelType, expr: Call) -> CelType:
        if argument in (*_SIZED, DYN) or isinstance(argument, (ListType, MapType)) or (
                isinstance(argument, RecordType) and not argument.selected_only):
            return INT
        return self.error(expr.span, f"`size` takes a string, bytes, list or map, not `{argument}`")

    def conversion(self, name: str, argument: CelType, argument_expr: Expr, expr: Call) -> CelType:
        if name == "dyn":
            return DYN
        accepted, result = _CONVERSIONS[name]
        if argument != DYN and argument not in accepted:
            return self.error(expr.span, f"`{name}` cannot convert {_a(argument)}",
                              help="it takes " + backticked(sorted(accepted, key=str)))
        if name == "duration" and _is_string_literal(argument_expr):
            parsed = parse_duration(argument_expr.value)  # type: ignore[union-attr,arg-type]
            if isinstance(parsed, CelError):
                return self.error(argument_expr.span, parsed.message,
                                  help='write a duration such as `"30s"`, `"1h30m"` or `"100ms"`')
        if name == "timestamp" and _is_string_literal(argument_expr):
            stamp = parse_timestamp(argument_expr.value)  # type: ignore[union-attr,arg-type]
            if isinstance(stamp, CelError):
                return self.error(argument_expr.span, stamp.message,
                                  help='write an RFC 3339 time such as `"2024-01-01T00:00:00Z"`')
        return result

    def string_method(self, name: str, target: CelType, args: tuple[Expr, ...], expr: Call) -> CelType:
        argument_types = [self.check(arg) for arg in args]
        if len(args) != 1:
            return self.error(expr.span, f"`{name}` takes 1 argument, not {len(args)}")
        if target not in (STRING, DYN):
            return self.error(expr.span, f"`{name}` applies to a `string`, not {_a(target)}")
        if argument_types[0] not in (STRING, DYN):
            return self.error(args[0].span, f"the argument of `{name}` must be a `string`, not `{argument_types[0]}`")
        if name == "matches" and _is_string_literal(args[0]):
            problem = pattern_error(args[0].value)  # type: ignore[union-attr,arg-type]
            if problem is not None:
                return self.error(args[0].span, problem, help="patterns use RE2 syntax")
        return BOOL

    # ---------------------------------------------------------------------- operators
    def unary(self, expr: Unary) -> CelType:
        operand = self.check(expr.operand)
        if expr.op == "!":
            if operand in (BOOL, DYN):
                return BOOL
            return self.error(expr.operand.span, f"`!` needs a `bool`, not `{operand}`")
        if operand in (INT, DOUBLE, DURATION, DYN):
            return operand
        return self.error(expr.span, f"`-` cannot negate {_a(operand)}")

    def binary(self, expr: Binary) -> CelType:
        left, right = self.check(expr.left), self.check(expr.right)
        op = expr.op
        if op in ("&&", "||"):
            for side, side_type in ((expr.left, left), (expr.right, right)):
                if side_type not in (BOOL, DYN):
                    self.error(side.span, f"`{op}` needs `bool` operands, not `{side_type}`")
            return BOOL
        if op in ("==", "!="):
            if not comparable(left, right):
                return self.error(expr.span, f"cannot compare `{left}` with `{right}`", help=_risk_string(expr))
            return BOOL
        if op in ("<", "<=", ">", ">="):
            return self.ordering(left, right, expr)
        if op == "in":
            return self.membership(left, right, expr)
        return self.arithmetic(op, left, right, expr)

    def ordering(self, left: CelType, right: CelType, expr: Binary) -> CelType:
        for side in (left, right):
            if side != DYN and side not in _ORDERED:
                return self.error(expr.span, f"`{expr.op}` cannot order values of type `{side}`")
        if left == DYN or right == DYN or left == right or (left in _NUMERIC and right in _NUMERIC):
            return BOOL
        return self.error(expr.span, f"cannot compare `{left}` with `{right}`", help=_risk_string(expr))

    def membership(self, item: CelType, container: CelType, expr: Binary) -> CelType:
        if container == DYN:
            return BOOL
        if isinstance(container, ListType):
            if not comparable(item, container.element):
                return self.error(expr.span, f"cannot look for {_a(item)} in {_a(container)}")
            return BOOL
        if isinstance(container, MapType):
            if not comparable(item, container.key):
                return self.error(expr.span, f"cannot look for {_a(item)} among the keys of {_a(container)}")
            return BOOL
        if isinstance(container, RecordType) and not container.selected_only:  # `"n" in args`: a map of fields
            if item not in (STRING, DYN):
                return self.error(expr.span, f"cannot look for {_a(item)} among the fields of `{container}`")
            return BOOL
        return self.error(expr.right.span, f"`in` needs a list or a map on its right, not `{container}`")

    def arithmetic(self, op: str, left: CelType, right: CelType, expr: Binary) -> CelType:
        if op == "+" and (isinstance(left, ListType) or isinstance(right, ListType)):
            if left == DYN or right == DYN:
                return left if right == DYN else right
            if isinstance(left, ListType) and isinstance(right, ListType):
                return ListType(join(left.element, right.element) or DYN)
        else:
            result = _arithmetic_result(op, left, right)
            if result is not None:
                return result
        return self.error(expr.span, f"`{op}` cannot combine `{left}` and `{right}`",
                          help=_arithmetic_help(left, right))

    def conditional(self, expr: Conditional) -> CelType:
        condition = self.check(expr.condition)
        then, otherwise = self.check(expr.then), self.check(expr.otherwise)
        if condition not in (BOOL, DYN):
            self.error(expr.condition.span, f"the condition of `?:` must be a `bool`, not `{condition}`")
        result = join(then, otherwise)
        if result is None:
            return self.error(expr.span, f"the branches of `?:` have different types, `{then}` and `{otherwise}`")
        return result

    def map_literal(self, expr: MapExpr) -> CelType:
        key_type: CelType | None = None
        seen: set[object] = set()
        for key, _ in expr.entries:
            if isinstance(key, Literal) and key.kind in ("string", "int", "uint", "bool"):
                # CEL's key equality: 1 and 1u are one key; true is never 1
                value = (key.kind == "bool", key.value)
                if value in seen:
                    self.error(key.span, f"duplicate map key `{to_source(key)}`",
                               help="a map literal gives each key once")
                seen.add(value)
            this_key = self.check(key)
            if this_key not in _MAP_KEYS:
                self.error(key.span, f"a map key cannot be {_a(this_key)}", help="use a string, int, uint or bool")
                this_key = DYN
            key_type = this_key if key_type is None else (join(key_type, this_key) or DYN)
        value_type = self.common(tuple(value for _, value in expr.entries))
        return MapType(key_type or DYN, value_type)


# The method that types each kind of node (dispatch on the node's class).
_CHECKS = {Literal: _Checker.literal, Ident: _Checker.ident, Select: _Checker.selection, Index: _Checker.index,
           Call: _Checker.call, Unary: _Checker.unary, Binary: _Checker.binary, Conditional: _Checker.conditional,
           ListExpr: _Checker.list_literal, MapExpr: _Checker.map_literal}

_LITERAL_TYPES = {"int": INT, "uint": UINT, "double": DOUBLE, "string": STRING, "bytes": BYTES, "bool": BOOL,
                  "null": NULL}

_ARITHMETIC_RESULTS: dict[tuple[str, CelType, CelType], CelType | None] = {}


def _arithmetic_result(op: str, left: CelType, right: CelType) -> CelType | None:
    """The type of `left op right` by `_ARITHMETIC` (a `dyn` side matches any entry; several
    results make `dyn`), None when no entry fits; remembered per operator and operand types."""
    key = (op, left, right)
    if key not in _ARITHMETIC_RESULTS:
        results = {result for (first, second), result in _ARITHMETIC[op].items()
                   if left in (first, DYN) and right in (second, DYN)}
        if len(_ARITHMETIC_RESULTS) >= 4096:  # operand types nest without bound: keep the memo small
            _ARITHMETIC_RESULTS.clear()
        _ARITHMETIC_RESULTS[key] = (results.pop() if len(results) == 1 else DYN) if results else None
    return _ARITHMETIC_RESULTS[key]


def _a(cel_type: CelType) -> str:
    """The type with its article: "an `int`", "a `string`"."""
    name = str(cel_type)
    return f"{'an' if name[0] in 'aeio' else 'a'} `{name}`"


def _is_string_literal(expr: Expr) -> bool:
    return isinstance(expr, Literal) and expr.kind == "string"


def _arithmetic_help(left: CelType, right: CelType) -> str | None:
    if left in _NUMERIC and right in _NUMERIC:
        return f"convert one side first, e.g. `double(…)`: CEL does not mix `{left}` and `{right}` in arithmetic"
    if STRING in (left, right):
        return "convert the other side with `string(…)` to concatenate"
    return None


def _listing(lead: str, names: Mapping[str, object] | list[str] | frozenset[str]) -> str | None:
    ordered = sorted(names)
    if not ordered:
        return None
    shown = backticked(ordered[:12])
    return f"{lead} {shown}" + ("…" if len(ordered) > 12 else "")
