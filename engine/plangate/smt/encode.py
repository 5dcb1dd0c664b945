"""CEL → SMT-LIB2 text: a partial evaluator that folds what is known and encodes the rest.

Each CEL node evaluates to one of: a concrete Python value (None, bool, int, float, str, list,
dict — folded exactly as CEL evaluates it); an `Error` (a CEL evaluation error); a `Variable` (an
`Unknown` placeholder reached through the activation, or a field selected from one); a `Term`
(SMT text of one sort); or a `Cond` (a symbolic boolean). Nothing here imports z3: the text goes
to the solver worker (`plangate.smt.solve`), and only `Encoder.decode` reads its models.

Invariants:
- Errors are modelled, never ignored. A `Term` carries `defined`, the formula under which it
  evaluates without error; a `Cond` is the pair (`true`, `false`) of formulas under which it
  evaluates to true / to false, and neither holds when it errors. `&&` and `||` absorb errors as
  CEL does (`false && error` is false, `true || error` is true). A condition *fires* exactly when
  its `true` formula holds, so an error makes it not fire — at run time and here alike.
- A root `Unknown` (one the caller put in the activation) is present. A field selected from a
  run-time value may be absent: it gets a presence constant that implies its parent's presence,
  and its value is defined only when present (`has()` reads that constant).
- One path, one variable: the same `Unknown` path is one solver constant within one encoder.
- Sorts: a declared `Unknown` has its type's sort (`int`→Int, `double`→Real, `string`→String,
  `bool`→Bool); a `dyn` one takes its sort from use, through a union-find of sort classes: what it
  is compared with (a number makes it a Real — at run time it may be an int or a double, and CEL
  compares the two by value), what arithmetic it takes part in (exactly that sort), or its use as
  a condition (Bool). Two `dyn` values compared only with each other share one class (ordered:
  numbers; equal: an Int if nothing else decides). A value with fields is a map. A run-time
  value that became a real by meeting numbers is still a *number* of either kind: declared an
  int (an int argument passed as `n: x.result.n`), it stays a real constant asserted whole
  (`is_int`) and reads as `(to_int x)` where an int is needed, so `x.result.n > 0` guards
  `args.n < 0`; taking part in int arithmetic, it reads as `(to_int x)` there, defined only where
  it is whole (a double there is an error: that use does not fire, its other uses keep their
  double values, as at run time); double arithmetic fixes it (or a value of no sort yet) as
  a double, and negation, or `+ - *` with other values of no sort yet, makes a value of no sort yet
  a number of either kind (reals hold every int and double outcome; `/` and `%` there are outside
  the subset, as a real quotient is not an int one). A witness shows a
  number as a double when it met a double, and a value compared with a `duration("…")` literal
  (seconds to the solver) as a duration. A `dyn` value
  that meets a second sort raises `Unsupported` ("used inconsistently"), as does anything outside
  the subset (e.g. `exists`): the caller reports "decided at run time", never a silent true or false.
  A `dyn` value's sort is what its uses take it to be, not what it is: each one used has a Boolean
  constant `fits` (`k0`, `k1`…, "it has that sort"), and its terms are defined only where it fits,
  so no operation takes a value of another type; but compared for equality with a value of a
  declared sort, one that does not fit is unequal (CEL: `null != true`, `"a" != 1`), so the
  comparison is false there, not an error. A model where it does not fit decodes as `null`.
- A declared `list` or `map` (`Unknown(path, "list")`) has no constant of its own: it is known by
  its size and, for a map, its keys. `size()` of it is an Int constant (`n0`, `n1`…; 0 ≤ n ≤ 2⁶³-1,
  and for a map at least the number of its fields known present; an `in` found true over it makes
  it at least 1). A map's key (`"k" in m`, a string with no `.`/`[`/`]`, or an int) is the
  presence of its field `m.k` (`m[1]`), the one `has(m.k)` reads, so the two agree; its fields are
  values of no declared type. `in` over a list (or a map with another item) is an opaque condition
  (below) whose candidates are lists (maps). It is never null and never a condition (an error);
  compared or computed with as a whole, it is `Unsupported`. `decode` writes it out whole
  (`collection`): its size in filler items (an item no `in` tests) or filler keys (named unlike any
  key the condition names) with the fields the model has; a witness whose list or map is larger than
  `MAX_SHOWN_ITEMS` is not written out. Every run is a model, so "never" and "must" stand; the caller
  confirms such a witness with the runtime's evaluator before it shows it.
- `s.matches(p)` on a run-time string with a known pattern is `(str.in_re s R)`, R the regex of
  the texts the pattern finds a match in (`plangate.smt.regex`), when the pattern is in the subset
  that translates (no flags, anchors only at the ends, no look-arounds or back-references…).
- Opaque conditions (`Encoder(…, opaque=True)`): any other `s.matches(p)` on a run-time string, `x == null`
  and `x == c` for a constant `c` of another sort than `x`'s uses give it (`equal_other_type`: it
  implies `x` does not fit, and two such tests of one value exclude each other) on a value of no
  declared type, and `a in x` over a run-time list or map are each a free Boolean
  constant (`o0`, `o1`… — one per test and value, so a negation is the same constant negated),
  true or false where what they test evaluates. Every run is then a model, so "never" and "must"
  stand; a model need not be a run, so its caller confirms a witness with the runtime's evaluator,
  trying the candidate values each `Opaque` lists. Without `opaque` they raise `Unsupported`.
  With `opaque_tests` too (the budget check only), a comparison, `in` or `exists`/`all`/`exists_one`
  outside the subset is an opaque condition keyed by its text that may also fail (`test_atom`);
  a value used as two sorts (`Inconsistent`) still raises.
- Values of two declared types behave as the runtime's CEL (`plangate.cel.evaluate`): an int and
  a double compare by value, other types are never equal (and not ordered: an error), arithmetic
  never mixes types (an error).
- The subset: booleans, ints (64-bit: overflow is an error, division truncates as in CEL),
  doubles (as reals: rounding is not modelled; a double divided by anything but a constant other
  than zero is outside the subset, since its quotient may be an infinity or NaN), strings (`==`, ordering, `+` — concatenation, so `"DROP " + x` starts
  with "DROP" whatever `x` is —, `size`, `startsWith`, `endsWith`, `contains`, `string()` of a
  string or an int; `size` of a run-time value of no declared type is a string's length),
  comparisons, `in` over lists and maps whose items are known, declared lists and maps (`size`,
  `in`, `has()`: above), `has()`, `?:` (whose branches are of one type, or typed: a run-time value
  in one branch would otherwise take the other's type for all its uses), `double()` of a number
  (its own double: nothing done with it fixes the number's kind), and `duration("1h30m")` (a number
  of seconds to the solver, a duration in constant folding: never equal to a number).
- Output is deterministic and depends only on the shape of what was encoded: constants are named
  in order of first use (`x0`, `h0`…), so two conditions of one shape give one text (the budget
  check caches solver answers by text).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import string
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Mapping

from plangate.cel.evaluate import MAX_SIZE, CelError, Duration, Uint, compile_expr, type_name
from plangate.cel.ast import (Binary, Call, Conditional, Expr, Ident, Index, ListExpr, Literal, MapExpr, Select,
                              Unary, to_source, walk)

INT_MIN, INT_MAX = -(2 ** 63), 2 ** 63 - 1
UINT_MAX = 2 ** 64 - 1
# The strings of Unicode scalar values Z3 holds: Z3's characters include the surrogates U+D800–U+DFFF,
# which no text has, and which ordering ("\uD7FF" < s < "\uE000") or a class (`[^a]`) may pick.
SCALAR_TEXT = '(re.* (re.union (re.range "\\u{0}" "\\u{d7ff}") (re.range "\\u{e000}" "\\u{2ffff}")))'
UNKNOWN_SORTS = {"int": "Int", "uint": "Int", "double": "Real", "string": "String", "bool": "Bool", "list": "List",
                 "map": "Map", "dyn": None, "number": "Real"}
COLLECTIONS = ("list", "map")  # declared types whose values the encoder knows only by size and keys
SORT_NAMES = {"Int": "an int", "Real": "a double", "String": "a string", "Bool": "a bool", "Map": "a map",
              "List": "a list"}
DURATION_UNITS = {"h": Fraction(3600), "m": Fraction(60), "s": Fraction(1), "ms": Fraction(1, 1000),
                  "us": Fraction(1, 10 ** 6), "ns": Fraction(1, 10 ** 9)}
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|ns|m|s)")
MAX_SMT_CHAR = 0x2FFFF  # the largest character Z3's strings hold
MAX_SHOWN_ITEMS = 100  # a witness list or map larger than this is not written out


class WholeSeconds(int):
    """The seconds of a `duration("…")` literal: a number to the solver, a duration to a witness."""


class FractionalSeconds(float):
    """The seconds of a `duration("…")` literal with a fraction of a second."""


def in_seconds(duration: Duration) -> "WholeSeconds | FractionalSeconds":
    """A duration as the solver reasons about it: its seconds, still a duration (never equal to a
    number: `1800 != duration("30m")`)."""
    seconds = duration.seconds
    return WholeSeconds(seconds) if float(seconds).is_integer() else FractionalSeconds(seconds)


class Unsupported(Exception):
    """The expression is outside the subset the checker reasons about; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Inconsistent(Unsupported):
    """A value is used as two sorts (`x == 1` and `x == "a"`, `x.f` and `x > 1`): each use alone
    may be in the subset; together they are not (an opaque test does not stand in for them)."""


@dataclass(frozen=True)
class Unknown:
    """A value known only at run time, of a declared type ("int", "double", "string", "bool", "list",
    "map", "dyn")."""

    path: str
    type: str = "dyn"

    def __post_init__(self) -> None:
        if self.type not in UNKNOWN_SORTS:
            raise ValueError(f"unknown type `{self.type}`: one of {', '.join(UNKNOWN_SORTS)}")

    def field(self, name: str) -> "Unknown":
        return Unknown(f"{self.path}.{name}", "dyn")


@dataclass(frozen=True)
class Error:
    reason: str


class SortClass:
    """A union-find node: values that must share one sort, and that sort once known."""

    __slots__ = ("parent", "sort", "paths", "declared", "number", "integral", "int_use", "double", "duration",
                 "peer_equal", "converted")

    def __init__(self, sort: str | None = None, path: str | None = None, declared: bool = False) -> None:
        self.parent: SortClass = self
        self.sort = sort
        self.paths: list[str] = [path] if path else []
        self.declared = declared  # the sort is a declared type or a constant's, not inferred from use
        # A "Real" only because it was compared with numbers: an int or a double at run time. It
        # may still turn out to be an int (`integral`: declared so), unless double arithmetic has
        # fixed it as a double.
        self.number = False
        self.integral = False
        self.int_use = False  # a number of either kind in int arithmetic: a whole witness shows an int
        self.peer_equal = False  # met another run-time value (`==`, `<`, `+`; itself too): both may be of another type
        self.converted = False  # a number the rules see as a double (an argument declared `double`): `number`
        self.double = False  # met a double (a literal or a declared one): a witness shows a double
        self.duration = False  # compared with a duration (as seconds): a witness shows a duration

    def find(self) -> "SortClass":
        node = self
        while node.parent is not node:
            node.parent = node.parent.parent
            node = node.parent
        return node


@dataclass(eq=False)
class Variable:
    path: str
    name: str  # the value's constant
    presence: str  # "true" for a root, else the presence constant
    sort: SortClass
    parent: "Variable | None"
    used: bool = False  # the value's constant appears in some formula
    opaque: bool = False  # an opaque condition tests it (a witness gives its value only if it is used)
    kind: str | None = None  # "list" or "map": declared so (known by its size and keys, no constant)
    size: str | None = None  # the constant of `size()` of a list or map, once asked
    tested: list[object] | None = None  # the known items `in` tests over it (a witness's filler avoids them)
    # A value of no declared type: the constant "it has the sort its uses give it" ("true" when declared).
    fits: str = "true"
    unsigned: bool = False  # a declared `uint`: an Int from 0 to 2⁶⁴-1, compared but never computed with
    converted: bool = False  # given to an argument declared `double`: a number on every run that counts


KEEP = object()  # a candidate that keeps the model's value (any value but the one excluded)


@dataclass(eq=False)
class Opaque:
    """A condition outside the subset, encoded as a free Boolean constant `name` (see `Encoder`)."""

    name: str
    reason: str  # what is outside the subset
    variable: Variable | None  # the run-time value it tests, when it is one
    text: str | None  # the SMT string term it tests (`matches`), pinned by a candidate
    candidates: tuple[tuple[object, bool], ...]  # values of what it tests, and its truth for each


@dataclass(frozen=True)
class Term:
    text: str
    sort: SortClass
    defined: str
    # When the value is there but of another type than its sort (a run-time value of no declared
    # type): no operation takes it, but it is unequal to anything of the sort.
    mismatch: str = "false"


class LiteralList(list):
    """The value of a list literal of the expression (its items encoded), not one of the activation."""


class LiteralMap(dict):
    """The value of a map literal of the expression (its values encoded), not one of the activation."""


@dataclass(frozen=True)
class Cond:
    true: str
    false: str


TRUE, FALSE = Cond("true", "false"), Cond("false", "true")
ERROR = Cond("false", "false")


def conj(*parts: str) -> str:
    """`(and …)` of the parts, each once in its first place; `true` parts left out, `false` absorbs."""
    kept: dict[str, None] = {}  # a dict keeps the order and tests membership in constant time
    for part in parts:
        if part == "false":
            return "false"
        if part != "true":
            kept[part] = None
    return "true" if not kept else next(iter(kept)) if len(kept) == 1 else f"(and {' '.join(kept)})"


def disj(*parts: str) -> str:
    """`(or …)` of the parts, each once in its first place; `false` parts left out, `true` absorbs."""
    kept: dict[str, None] = {}
    for part in parts:
        if part == "true":
            return "true"
        if part != "false":
            kept[part] = None
    return "false" if not kept else next(iter(kept)) if len(kept) == 1 else f"(or {' '.join(kept)})"


def neg(part: str) -> str:
    if part in ("true", "false"):
        return "false" if part == "true" else "true"
    if part.startswith("(not ") and _balanced(part[5:-1]):
        return part[5:-1]
    return f"(not {part})"


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += char == "("
        depth -= char == ")"
        if depth < 0:
            return False
    return depth == 0 and not text.startswith('"')


def int_text(value: int) -> str:
    return str(value) if value >= 0 else f"(- {-value})"


def real_text(value: Fraction) -> str:
    magnitude = abs(value)
    text = f"{magnitude.numerator}.0" if magnitude.denominator == 1 else \
        f"(/ {magnitude.numerator}.0 {magnitude.denominator}.0)"
    return text if value >= 0 else f"(- {text})"


def string_text(value: str) -> str:
    out = ['"']
    for char in value:
        code = ord(char)
        if code > MAX_SMT_CHAR:
            raise Unsupported("a string with characters beyond U+2FFFF")
        if char == '"':
            out.append('""')
        elif 32 <= code < 127 and char != "\\":
            out.append(char)
        else:
            out.append(f"\\u{{{code:x}}}")
    out.append('"')
    return "".join(out)


def duration_seconds(text: str) -> int | float | None:
    """Seconds in a CEL duration string such as "1h30m" or "-2.5s"; None when it is not one."""
    sign, body = (-1, text[1:]) if text.startswith("-") else (1, text)
    if not body:
        return None
    total, position = Fraction(0), 0
    for match in DURATION_PART.finditer(body):
        if match.start() != position:
            return None
        total += Fraction(match.group(1)) * DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(body):
        return None
    total *= sign
    return int(total) if total.denominator == 1 else float(total)


def kind_of(value: object) -> str:
    """A concrete value's CEL type as the encoder compares it: `type_name`'s, with `uint` as `int`
    (the solver has one integer sort, and `1 == 1u` in CEL)."""
    if isinstance(value, (WholeSeconds, FractionalSeconds)):
        return "duration"  # seconds to the solver, but never equal to (nor ordered with) a number
    name = type_name(value)
    return "int" if name == "uint" else name


SYMBOLIC = (Variable, Term, Cond)
MAX_INDEXED_ITEMS = 64  # a list literal indexed by a run-time value: one choice per item, up to this many


def concrete_call(function: str, value: object) -> object:
    """`function(value)` (`size`, `string`, `double`) of a value known before the run, as the
    runtime computes it (`_by_the_runtime`): `size(b"abc")` is 3, `string(1u)` is "1",
    `string(duration("1m"))` is "60s"."""
    return _by_the_runtime(("call", function), lambda: Call(function, None, (Ident("a"),)), value)


def concrete_by_the_runtime(op: str, left: object, right: object) -> object:
    """`left op right` of two values known before the run, as the runtime computes it, for the
    values whose operators the encoder does not model itself: bytes (ordered, concatenated), a
    `uint` (its own range, never mixed with an int), timestamps."""
    return _by_the_runtime(("binary", op), lambda: Binary(op, Ident("a"), Ident("b")), left, right)


def _by_the_runtime(key: tuple[str, str], build: Callable[[], Expr], *values: object) -> object:
    """The runtime's evaluator on values known before the run, so the checker and the run agree
    on every type. Durations go to it as durations, and a duration it returns comes back as
    seconds; its failure is an `Error` (one its bounds stopped is outside the subset)."""
    compiled = _BY_THE_RUNTIME.get(key)
    if compiled is None:
        compiled = _BY_THE_RUNTIME[key] = compile_expr(build())
    activation = {name: Duration.from_seconds(int(value) if isinstance(value, WholeSeconds) else Fraction(value))
                  if isinstance(value, (WholeSeconds, FractionalSeconds)) else value
                  for name, value in zip("ab", values)}
    result = compiled(activation)
    if isinstance(result, CelError):
        if result.bounded:
            raise Unsupported(result.message)
        return Error(result.message)
    return in_seconds(result) if isinstance(result, Duration) else result


_BY_THE_RUNTIME: dict[tuple[str, str], Callable[[Mapping[str, object]], object]] = {}
_OWN_KINDS = frozenset({int, float, str, bool, list, tuple, dict, WholeSeconds, FractionalSeconds})
NUMBER_KINDS = ("int", "double")
FIXED = {sort: SortClass(sort, declared=True) for sort in ("Int", "Real", "String", "Bool", "List", "Map")}
NUMERIC = ("Int", "Real")  # the sorts of constants


class Encoder:
    """Encodes CEL expressions over one activation; every expression shares its variables.

    `touched` collects the path of every variable reached (the caller may reset it between
    expressions to learn which run-time values each one reads)."""

    _fixed = FIXED

    def __init__(self, activation: Mapping[str, object], opaque: bool = False,
                 kinds: Mapping[str, str] | None = None, opaque_tests: bool = False,
                 pinned: Mapping[str, object] | None = None) -> None:
        self.activation = activation
        # path → the value a premise fixes it to on every run that counts (`decide`: `when
        # a.result.level == "high"`): read as that constant, of its type, wherever it is reached
        self.pinned = pinned or {}
        # Tests outside the subset (`exists`, `all`, a comparison of `int(x)`…) as opaque conditions
        # keyed by their text, which may also fail (`test_atom`): for callers that only ask which
        # conditions can hold together (the budget check), never whether one must hold.
        self.opaque_tests = opaque_tests
        # path → "list" / "map" for the declared lists and maps (`collection_kinds`): a value reached
        # first as a field of a result (a step's `when`) is one of those as well
        self.kinds = kinds or {}
        self.variables: dict[str, Variable] = {}
        self.touched: set[str] = set()
        self.opaque = opaque
        self.atoms: dict[tuple, Opaque] = {}  # key → the opaque condition (with `opaque`)
        self.scalar_strings = False  # strings are ordered or matched: their characters must be scalars
        self.atoms_touched: set[str] = set()  # names of the opaque conditions reached (resettable)
        self.sizes: list[Variable] = []  # the lists and maps whose `size()` was asked, in order
        # Where a run-time value was taken to be of the one kind its use takes (a double in
        # `x * 0.5`, numbers of one kind in `x + y`, numbers in `x + x`) although a run may give
        # another: every run is not a model, so "must fire" cannot be claimed (`decide`). One made
        # in a premise counts too: `||` may absorb the use that fails, and the run still counts.
        self.narrowed: list[str] = []

    # -- the public surface -----------------------------------------------------------------

    def pins_read_as_values(self) -> bool:
        """Whether each pinned value was read only as itself (`field`, `reach`): no variable stands
        for a pinned path (`has()` or a key test made one, which knows nothing of the constant), and
        no map above one is read as a whole (its size, a test of it, its value)."""
        for path in self.pinned:
            if path in self.variables:
                return False
            for variable in self.variables.values():
                if path.startswith(variable.path + ".") and (
                        variable.used or variable.opaque or variable.size is not None or variable.tested):
                    return False
        return True

    def fires(self, expr: Expr) -> str:
        """The formula under which `expr`, used as a condition, evaluates to true."""
        return self.as_cond(self.evaluate(expr)).true

    def evaluates(self, expr: Expr) -> str:
        """The formula under which `expr` evaluates without error (whatever its value)."""
        return self.defined(self.evaluate(expr))

    def guarded(self, part: object, container: object) -> object:
        """`part`, read from a list or map literal (`container`), as a value that is an error
        wherever the literal is: CEL evaluates every item of a literal, so `[g.result.a, 1][1]`
        fails where `g.result.a` does."""
        if not isinstance(container, (LiteralList, LiteralMap)) or not _holds_symbolic(container):
            return part
        defined = self.defined(container)
        if defined == "true" or (isinstance(part, Variable) and defined == part.presence):
            return part  # nothing else in the literal can fail (a run-time value keeps its own sort)
        if isinstance(part, (bool, Cond)):
            cond = self.as_cond(part)
            return Cond(conj(defined, cond.true), conj(defined, cond.false))
        if isinstance(part, (list, tuple, Mapping)):
            raise Unsupported("a list or map inside a literal of values known only at run time")
        term = self.term(part)
        return Term(term.text, term.sort, conj(defined, term.defined), conj(defined, term.mismatch))

    def defined(self, value: object) -> str:
        """The formula under which an encoded value is no error: a list or map literal is when each
        of its items is (`[x, g.result.a]`: when `g.result.a` is present)."""
        if isinstance(value, Error):
            return "false"
        if isinstance(value, Cond):
            return disj(value.true, value.false)
        if isinstance(value, Variable):
            return value.presence
        if isinstance(value, Term):
            return value.defined
        if isinstance(value, (list, tuple)):
            return conj(*(self.defined(self.reach(item)) for item in value))
        if isinstance(value, Mapping):
            return conj(*(self.defined(self.reach(item)) for item in value.values()))
        return "true"

    def declarations(self) -> list[str]:
        """Declarations and background facts (presence chains, 64-bit ints) for what was encoded."""
        lines: list[str] = []
        facts: list[str] = []
        for variable in self.variables.values():
            if variable.presence != "true":
                lines.append(f"(declare-const {variable.presence} Bool)")
                if variable.parent is not None and variable.parent.presence != "true":
                    facts.append(f"(assert (=> {variable.presence} {variable.parent.presence}))")
            if variable.used:
                sort = self.sort_of(variable)
                lines.append(f"(declare-const {variable.name} {sort})")
                if variable.fits != "true":
                    lines.append(f"(declare-const {variable.fits} Bool)")
                    if variable.converted:  # the call is refused, before any rule, for a value of another type
                        facts.append(f"(assert {variable.fits})")
                if sort == "Int":
                    low, high = (0, UINT_MAX) if variable.unsigned else (INT_MIN, INT_MAX)
                    facts.append(f"(assert (and (<= {int_text(low)} {variable.name}) "
                                 f"(<= {variable.name} {high})))")
                elif sort == "String" and self.scalar_strings:  # a witness is text: no lone surrogate
                    facts.append(f"(assert (str.in_re {variable.name} {SCALAR_TEXT}))")
                elif sort == "Real" and variable.sort.find().integral:
                    facts.append(f"(assert (and (is_int {variable.name}) (<= {real_text(Fraction(INT_MIN))} {variable.name}) "
                                 f"(<= {variable.name} {real_text(Fraction(INT_MAX))})))")
        lines.extend(f"(declare-const {atom.name} Bool)" for atom in self.atoms.values())
        values: dict[str, list[Opaque]] = {}  # path → its `null` and other-type tests
        for key, atom in self.atoms.items():  # a null has none of the sorts a value's uses give it…
            variable = atom.variable
            if key[0] == "null" and variable is not None and variable.used and variable.fits != "true" \
                    and not variable.sort.find().peer_equal:  # …but equals another null (`v == w`, `v in [v]`)
                facts.append(f"(assert (=> {atom.name} (not {variable.fits})))")
            if key[0] == "is" and variable is not None and not variable.sort.find().peer_equal:
                # a value of another type than its uses give it (unless it meets another run-time
                # value: `v == w` holds for two equal strings, where their uses' sort is a number)
                facts.append(f"(assert (=> {atom.name} (not {variable.fits})))")
            if key[0] in ("null", "is"):
                values.setdefault(key[1], []).append(atom)
        for tests in values.values():  # one value: at most one of the constants it is tested against
            if len(tests) > 1:
                facts.extend(f"(assert (not (and {a.name} {b.name})))" for a, b in itertools.combinations(tests, 2))
        for variable in self.sizes:  # a size is a 64-bit count, at least the number of keys known present
            lines.append(f"(declare-const {variable.size} Int)")
            keys = [f"(ite {child.presence} 1 0)" for child in self.variables.values() if child.parent is variable]
            least = "0" if not keys else keys[0] if len(keys) == 1 else f"(+ {' '.join(keys)})"
            facts.append(f"(assert (and (<= {least} {variable.size}) (<= {variable.size} {INT_MAX})))")
            facts.extend(f"(assert (=> {atom.name} (<= 1 {variable.size})))"  # `in` finds something: not empty
                         for atom in self.atoms.values() if atom.variable is variable)
        return lines + facts

    def sort_of(self, variable: Variable) -> str:
        sort = variable.sort.find().sort
        if sort in ("Map", "List"):
            raise Inconsistent(f"`{variable.path}` is used both as {SORT_NAMES[sort]} and as a value")
        return sort or "Int"

    def values(self) -> tuple[tuple[str, str], ...]:
        """The constants a witness reads: each used value and each presence."""
        wanted: list[tuple[str, str]] = []
        for variable in self.variables.values():
            if variable.presence != "true":
                wanted.append((variable.presence, "Bool"))
            if variable.used:
                wanted.append((variable.name, self.sort_of(variable)))
                if variable.fits != "true":
                    wanted.append((variable.fits, "Bool"))
        wanted.extend((variable.size, "Int") for variable in self.sizes)  # type: ignore[misc]
        return tuple(wanted)

    def decode(self, model: Mapping[str, object]) -> dict[str, object] | None:
        """path → value for every present variable: the model's value; {} for a map whose fields
        were asked about; None for a field only known to be there; a declared list or map written
        out whole (`collection`). None when one is too large to write out (only declared lists and
        maps have sizes, so without them this is always a dict)."""
        witness: dict[str, object] = dict(self.pinned)
        # Values of one sort class meet in arithmetic, which takes one kind: if one of them needs a
        # double, they all read as doubles (`3.5 * 2` is an error in CEL; `3.5 * 2.0` is not).
        fractional = {id(variable.sort.find()) for variable in self.variables.values()
                      if isinstance(model.get(variable.name), list) and model[variable.name][1] != 1}
        for variable in self.variables.values():
            if variable.kind is not None and self.present(variable, model) and (
                    variable.parent is not None or variable.size is not None or variable.opaque
                    or any(child.parent is variable for child in self.variables.values())):
                witness[variable.path] = [] if variable.kind == "list" else {}  # written out below
                continue
            if not self.present(variable, model) or (variable.parent is None and not variable.used):
                continue
            if not variable.used:
                if variable.opaque and variable.sort.find().sort != "Map":
                    continue  # only an opaque condition reads it: the model says nothing of its value
                witness[variable.path] = {} if variable.sort.find().sort == "Map" else None
                continue
            if variable.fits != "true" and model.get(variable.fits) is False:
                witness[variable.path] = None  # of another type than its uses': `null` is unequal to all
                continue
            value = model.get(variable.name)
            if isinstance(value, list):  # a real: a run-time number of unknown kind reads as an int if whole
                number = Fraction(value[0], value[1])
                root = variable.sort.find()
                whole = number.denominator == 1 and (
                    root.integral or (root.int_use and root.number)
                    or not (root.declared or root.double or id(root) in fractional))
                value = int(number) if whole else float(number)
                if root.duration:
                    value = Duration.from_seconds(number)
            elif type(value) is int and variable.sort.find().duration:  # whole seconds, in the Int sort
                value = Duration.from_seconds(Fraction(value))
            elif type(value) is int and variable.unsigned:
                value = Uint(value)
            witness[variable.path] = value
        for variable in self.variables.values():  # after their fields: a map's fields go inside it
            if variable.kind is not None and variable.path in witness:
                whole = self.collection(variable, model, witness)
                if whole is None:
                    return None
                witness[variable.path] = whole
        return witness

    def collection(self, variable: Variable, model: Mapping[str, object],
                   witness: dict[str, object]) -> list[object] | dict[object, object] | None:
        """A declared list or map as a witness shows it: as many items as its size in the model
        (none if no size was asked). A list's items are one filler value that no `in` tests; a map
        holds its fields that the model says are present (taken out of `witness`, where they
        were read), then filler keys, named unlike any key the condition names, up to its size
        (their values: null). None when the size is over `MAX_SHOWN_ITEMS`."""
        size = model.get(variable.size) if variable.size is not None else 0
        count = size if isinstance(size, int) and not isinstance(size, bool) else 0
        if count > MAX_SHOWN_ITEMS:
            return None
        avoided = list(variable.tested or ())
        if variable.kind == "list":
            filler = next(name for name in _filler_names() if not any(concrete_equal(name, item) is True
                                                                        for item in avoided))
            return [filler] * count
        fields: dict[object, object] = {}
        for path in [path for path in witness if path.startswith((variable.path + ".", variable.path + "["))]:
            rest = path[len(variable.path):]
            store_path(fields, rest[1:] if rest.startswith(".") else rest, witness.pop(path))
        avoided.extend(_key_of(child.path[len(variable.path):]) for child in self.variables.values()
                       if child.parent is variable)
        names = (name for name in _filler_names() if name and not any(map_key_equal(name, key) for key in avoided))
        while len(fields) < count:
            fields[next(names)] = None
        return fields

    def present(self, variable: Variable, model: Mapping[str, object]) -> bool:
        return variable.presence == "true" or model.get(variable.presence) is True

    def evaluate(self, expr: Expr) -> object:
        return HANDLERS[type(expr)](self, expr)

    def as_cond(self, value: object) -> Cond:
        if isinstance(value, Cond):
            return value
        if isinstance(value, bool):
            return TRUE if value else FALSE
        if isinstance(value, Variable) and value.kind is not None:
            return ERROR  # a list or map is not a condition
        if isinstance(value, (Variable, Term)):
            term = self.term(value)
            root = term.sort.find()
            if root.declared and root.sort != "Bool":
                return ERROR  # a value of another declared type: no matching overload
            self.unify(term.sort, self._fixed["Bool"], value)
            return Cond(conj(term.defined, term.text), conj(term.defined, neg(term.text)))
        return ERROR  # an error, or a value that is not a bool: CEL reports no matching overload

    # -- values -----------------------------------------------------------------------------

    def reach(self, value: object) -> object:
        if isinstance(value, Unknown):
            if value.path in self.pinned:
                return self.pinned[value.path]
            variable = self.variable(value.path, UNKNOWN_SORTS[value.type], None)
            variable.unsigned = variable.unsigned or value.type == "uint"
            if value.type == "number":  # an int or a double, read as a double: of either kind, never of another type
                root = variable.sort.find()
                root.number, root.declared, root.converted, root.double = not root.integral, False, True, True
                variable.converted = True
            if value.type in COLLECTIONS:
                variable.kind = value.type  # `variable` unified its sort with the type's: one kind
            return variable
        return value

    def variable(self, path: str, sort: str | None, parent: Variable | None) -> Variable:
        self.touched.add(path)
        existing = self.variables.get(path)
        if existing is not None:
            if sort is not None:
                root = existing.sort.find()
                if sort == "Int" and root.sort == "Real" and root.number:
                    root.integral = True  # a number compared with others, declared an int
                elif sort == "Real" and root.sort == "Real":
                    root.number, root.double, root.declared = root.integral, True, not root.integral
                else:
                    self.unify(existing.sort, self._fixed[sort], existing)
            return existing
        number = len(self.variables)
        kind = self.kinds.get(path)
        if kind is not None and sort not in (None, UNKNOWN_SORTS[kind]):
            raise Inconsistent(f"`{path}` is used inconsistently: as {SORT_NAMES[str(sort)]} and as a {kind}")
        sort = UNKNOWN_SORTS[kind] if kind is not None else sort
        created = Variable(path, f"x{number}", "true" if parent is None else f"h{number}",
                           SortClass(sort, path, declared=sort is not None), parent, kind=kind,
                           fits="true" if sort is not None else f"k{number}")
        self.variables[path] = created
        return created

    def child(self, parent: Variable, key: str) -> Variable:
        self.bind_map(parent)
        return self.variable(f"{parent.path}.{key}", None, parent)

    def bind_map(self, variable: Variable) -> None:
        root = variable.sort.find()
        if root.sort is None:
            root.sort = "Map"
        elif root.sort != "Map":
            raise Inconsistent(f"`{variable.path}` is used both as {SORT_NAMES[root.sort]} and as a map")

    def term(self, value: object) -> Term:
        if isinstance(value, Term):
            return value
        if isinstance(value, Variable):
            if value.kind is not None:
                raise Unsupported(f"`{value.path}` is {SORT_NAMES[value.sort.find().sort or 'Map']} known only "
                                  f"at run time: only its `size()` and what `in` finds in it are reasoned about")
            if value.sort.find().sort == "Map":
                raise Inconsistent(f"`{value.path}` is used both as a map and as a value")
            value.used = True
            return Term(value.name, value.sort, conj(value.presence, value.fits),
                        conj(value.presence, neg(value.fits)))
        if isinstance(value, Cond):
            return Term(value.true, self._fixed["Bool"], disj(value.true, value.false))
        if isinstance(value, bool):
            return Term("true" if value else "false", self._fixed["Bool"], "true")
        if isinstance(value, int):
            return Term(int_text(value), self._fixed["Int"], "true")
        if isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise Unsupported("an infinite or NaN double")
            return Term(real_text(Fraction(value)), self._fixed["Real"], "true")
        if isinstance(value, str):
            return Term(string_text(value), self._fixed["String"], "true")
        if value is None:
            raise Unsupported("`null` met with a value known only at run time")
        raise Unsupported(f"a {kind_of(value)} met with a value known only at run time")

    def unify(self, first: SortClass, second: SortClass, culprit: object) -> str | None:
        """Give two classes one sort; the sort (None while still open). Only open classes are
        merged, so the shared classes of `FIXED` never change."""
        a, b = first.find(), second.find()
        if a is b:
            return a.sort
        if a.sort is not None and b.sort is not None:
            if a.sort != b.sort:
                raise Inconsistent(self._mismatch(a, b, culprit))
            return a.sort
        if a.sort is None and b.sort is None:
            _merge(a, b)
            return None
        open_class, bound = (a, b) if a.sort is None else (b, a)
        open_class.sort = bound.sort
        return bound.sort

    @staticmethod
    def _mismatch(a: SortClass, b: SortClass, culprit: object) -> str:
        named = a.paths + b.paths
        if isinstance(culprit, Variable) and culprit.path not in named:
            named.insert(0, culprit.path)
        subject = f"`{named[0]}`" if named else "a value"
        return f"{subject} is used inconsistently: as {_sort_name(a)} and as {_sort_name(b)}"

    def numeric(self, sort: str | None, op: str) -> None:
        if sort not in ("Int", "Real"):
            raise Unsupported(f"`{op}` on {SORT_NAMES.get(sort or '', 'a value')} known only at run time")

    # -- nodes ------------------------------------------------------------------------------

    def _literal(self, expr: Literal) -> object:
        if expr.kind in ("uint", "bytes"):
            raise Unsupported(f"{expr.kind} values are outside the subset the checker reasons about")
        return expr.value

    def _ident(self, expr: Ident) -> object:
        if expr.name in self.activation:
            return self.reach(self.activation[expr.name])
        return Error(f"no variable `{expr.name}`")

    def _select(self, expr: Select) -> object:
        return self.field(self.evaluate(expr.operand), expr.field)

    def field(self, target: object, key: str) -> object:
        if isinstance(target, Variable):
            if f"{target.path}.{key}" in self.pinned:
                self.bind_map(target)
                return self.pinned[f"{target.path}.{key}"]
            return self.child(target, key)
        if isinstance(target, Error):
            return target
        if isinstance(target, (dict, Mapping)):
            return self.guarded(self.reach(target[key]), target) if key in target else Error(f"no field `{key}`")
        if isinstance(target, (Term, Cond)):
            raise Unsupported("a field of a computed value known only at run time")
        return Error(f"no field `{key}` on a {kind_of(target)}")

    def _index(self, expr: Index) -> object:
        target, key = self.evaluate(expr.operand), self.evaluate(expr.index)
        if isinstance(key, SYMBOLIC) and isinstance(target, LiteralList) and 0 < len(target) <= MAX_INDEXED_ITEMS:
            # `[100.0, 200.0][g.result.i]`: the item whose position the index equals, else an error
            chosen: object = Error("an index out of the list's range")
            for position in reversed(range(len(target))):
                chosen = self.choose(self.as_cond(self.equal(key, position)), self.reach(target[position]), chosen)
            return self.guarded(chosen, target)
        if isinstance(key, SYMBOLIC):
            raise Unsupported("an index known only at run time")
        if isinstance(target, Error) or isinstance(key, Error):
            return target if isinstance(target, Error) else key
        if isinstance(target, Variable):
            if isinstance(key, str):
                if not _plain_key(key):  # `x["a.b"]` must not be the path of `x.a.b`
                    raise Unsupported(f"a key with `.`, `[` or `]` (`{key[:40]}`) in a value known only at run time")
                return self.field(target, key)
            if isinstance(key, int) and not isinstance(key, bool):
                self.bind_map(target)
                return self.variable(f"{target.path}[{key}]", None, target)
            return Error(f"no index {key!r}")
        if isinstance(target, (list, tuple)):
            if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(target):
                return self.guarded(self.reach(target[key]), target)
            return Error(f"index {key!r} out of range")
        if isinstance(target, Mapping):
            found = map_find(target, key)
            return found if isinstance(found, Error) else self.guarded(self.reach(found), target)
        if isinstance(target, (Term, Cond)):
            raise Unsupported("an index into a computed value known only at run time")
        return Error(f"cannot index a {kind_of(target)}")

    def _list(self, expr: ListExpr) -> object:
        items = LiteralList(self.evaluate(item) for item in expr.items)
        return next((item for item in items if isinstance(item, Error)), items)  # one error fails the list

    def _map(self, expr: MapExpr) -> object:
        result = LiteralMap()
        for key_expr, value_expr in expr.entries:
            key = self.evaluate(key_expr)
            if isinstance(key, SYMBOLIC):
                raise Unsupported("a map key known only at run time")
            if isinstance(key, Error):
                return key
            if not is_map_key(key):
                return Error(f"a map key cannot be a {kind_of(key)}")
            if any(map_key_equal(key, other) for other in result):
                return Error("duplicate map key")
            value = self.evaluate(value_expr)
            if isinstance(value, Error):
                return value
            result[key] = value
        return result

    def _unary(self, expr: Unary) -> object:
        value = self.evaluate(expr.operand)
        if expr.op == "!":
            if isinstance(value, bool):
                return not value
            if isinstance(value, SYMBOLIC):
                cond = self.as_cond(value)
                return Cond(cond.false, cond.true)
            return value if isinstance(value, Error) else Error(f"no `!` for a {kind_of(value)}")
        if isinstance(value, (WholeSeconds, FractionalSeconds)):  # a duration negated is a duration
            return type(value)(-value)
        if isinstance(value, float):
            return -value
        if isinstance(value, SYMBOLIC):
            term = self.term(value)
            root = term.sort.find()
            if root.sort is None:  # a run-time value of no sort yet: a number of either kind
                root.sort, root.number = "Real", True
            if root.number and not root.integral:  # a number of either kind: negation keeps its kind
                return Term(f"(- {term.text})", term.sort, term.defined)
            return self.arithmetic("-", 0.0 if root.sort == "Real" and not root.integral else 0, value)
        return self.arithmetic("-", 0, value)

    def _binary(self, expr: Binary) -> object:
        op = expr.op
        if op in ("&&", "||"):
            return self.logical(op, expr)
        if self.opaque_tests and (op in _TEST_NEGATIONS or op == "in"):
            try:
                return self._binary_of(expr)
            except Inconsistent:
                raise
            except Unsupported:
                return self.test_atom(expr)
        return self._binary_of(expr)

    def _binary_of(self, expr: Binary) -> object:
        op = expr.op
        left, right = self.evaluate(expr.left), self.evaluate(expr.right)
        if op in ("==", "!="):
            result = self.equal(left, right)
            return self.negate(result) if op == "!=" else result
        if op in ("<", "<=", ">", ">="):
            return self.order(op, left, right)
        if op == "in":
            return self.member(left, right)
        return self.arithmetic(op, left, right)

    def logical(self, op: str, expr: Binary) -> object:
        left = self.as_cond(self.evaluate(expr.left))
        if (op == "&&" and left == FALSE) or (op == "||" and left == TRUE):
            return left.true == "true"
        right = self.as_cond(self.evaluate(expr.right))
        if op == "&&":
            result = Cond(conj(left.true, right.true), disj(left.false, right.false))
        else:
            result = Cond(disj(left.true, right.true), conj(left.false, right.false))
        return self.settle(result)

    def settle(self, cond: Cond) -> object:
        """A condition that is decided without the solver, as a value."""
        if cond.true == "true":
            return True
        if cond.false == "true":
            return False
        if cond == ERROR:
            return Error("the condition always fails")
        return cond

    def negate(self, value: object) -> object:
        if isinstance(value, bool):
            return not value
        if isinstance(value, Cond):
            return Cond(value.false, value.true)
        return value

    def _conditional(self, expr: Conditional) -> object:
        choice = self.as_cond(self.evaluate(expr.condition))
        if choice == TRUE:
            return self.evaluate(expr.then)
        if choice == FALSE:
            return self.evaluate(expr.otherwise)
        if choice == ERROR:
            return Error("the condition of `?:` fails")
        return self.choose(choice, self.evaluate(expr.then), self.evaluate(expr.otherwise))

    def choose(self, choice: Cond, then: object, otherwise: object) -> object:
        """`then` where `choice` holds, `otherwise` where it does not (`?:`, an index known only at
        run time): one value of one sort, defined where the chosen side is."""
        if isinstance(then, Error) and isinstance(otherwise, Error):
            return then
        if isinstance(then, Error) or isinstance(otherwise, Error):
            kept, holds = (otherwise, choice.false) if isinstance(then, Error) else (then, choice.true)
            term = self.term(kept)
            return Term(term.text, term.sort, conj(holds, term.defined))
        a, b = self.term(then), self.term(otherwise)
        ra, rb = a.sort.find(), b.sort.find()
        if ra is not rb and not ((ra.declared or ra.converted) and (rb.declared or rb.converted)):
            # A run-time value in one branch would take the other branch's type for all its uses,
            # though on the runs that choose it, it may be of any type (`c ? 0 : x` with x a string).
            raise Unsupported("the branches of `?:` may be of different types, known only at run time")
        self.unify(a.sort, b.sort, then)
        return Term(f"(ite {choice.true} {a.text} {b.text})", a.sort,
                    disj(conj(choice.true, a.defined), conj(choice.false, b.defined)))

    # -- operators --------------------------------------------------------------------------

    def equal(self, left: object, right: object) -> object:
        if isinstance(left, Error) or isinstance(right, Error):
            return left if isinstance(left, Error) else right
        if not isinstance(left, SYMBOLIC) and not isinstance(right, SYMBOLIC):
            if _holds_symbolic(left) or _holds_symbolic(right):
                raise Unsupported("comparing lists or maps with values known only at run time")
            return concrete_equal(left, right)
        if left is None or right is None:
            return self.equal_null(right if left is None else left)
        self.mark_durations(left, right)
        a, b = self.term(left), self.term(right)
        self.mark_peers(a, b)
        try:
            sort = self.meet(a, b, left if isinstance(left, Variable) else right, ordering=False)
        except Inconsistent:
            typed = self.equal_other_type(left, right)
            if typed is None:
                raise
            return typed
        defined = conj(a.defined, b.defined)
        if sort == "Differ":
            return Cond("false", defined)
        relation = f"(= {self.real(a)} {self.real(b)})" if sort == "Mixed" else f"(= {a.text} {b.text})"
        unequal = conj(defined, neg(relation))
        # A run-time value of another type than the one it is compared with is unequal to it (CEL:
        # `null != true`, `"a" != 1`), not an error. (Two such values: both are taken to have the sort.)
        if (a.mismatch == "false") != (b.mismatch == "false"):
            typed, odd = (a, b) if a.mismatch == "false" else (b, a)
            unequal = disj(unequal, conj(typed.defined, odd.mismatch))
        return Cond(conj(defined, relation), unequal)

    @staticmethod
    def mark_peers(a: Term, b: Term) -> None:
        """Two run-time values of no declared type that meet (`==`, `<`, `+`) may both be of a type
        other than the one their uses give them, and still meet well (`"a" < "b"`, two nulls
        equal): such a value's other-type and null tests then say nothing of whether it fits."""
        if not a.sort.find().declared and not b.sort.find().declared:
            a.sort.find().peer_equal = b.sort.find().peer_equal = True

    def equal_other_type(self, left: object, right: object) -> Cond | None:
        """`v == c` for a run-time value of no declared type `v` whose uses give it another sort
        than the constant `c`'s (`v == 200` and `v == "error"`): an opaque condition, one per value
        and constant, that implies `v` does not fit its sort; two such tests of one value, or one
        and `v == null`, exclude each other (`declarations`): a value is one value. None where
        that does not apply (two run-time values, a declared type, a duration, no `opaque`)."""
        variable, constant = (left, right) if isinstance(left, Variable) else (right, left)
        if not isinstance(variable, Variable) or isinstance(constant, SYMBOLIC) or variable.fits == "true" \
                or variable.kind is not None or isinstance(constant, (WholeSeconds, FractionalSeconds)):
            return None
        if isinstance(constant, bool):
            key: tuple = ("bool", constant)
        elif isinstance(constant, (int, float)) and constant == constant and abs(constant) != float("inf"):
            key = ("number", Fraction(constant))  # an int and a double are equal by value
        elif isinstance(constant, str):
            key = ("string", constant)
        else:
            return None
        return self.atom(("is", variable.path, *key), f"`{variable.path}` is compared with values of two types",
                         variable.presence, variable, None, ((constant, True), (KEEP, False)))

    def test_atom(self, expr: Expr) -> Cond:
        """A test outside the subset as an opaque condition keyed by its text (`exists`…, or a
        comparison whose operands are: `int(x) > 3`), true, false or failing (a second constant):
        the same text is one condition and `!` of it its negation, so `c` and `!c` never hold
        together; `a < b` and `a >= b` are one test negated, as are `a > b` and `a <= b`."""
        negated = False
        if isinstance(expr, Binary) and expr.op in _TEST_NEGATIONS:
            op, negated = _TEST_NEGATIONS[expr.op]
            text = to_source(dataclasses.replace(expr, op=op))  # with the parentheses its operands need
        else:
            text = to_source(expr)
        for node in walk(expr):  # the run-time values it reads: conditions that read them are correlated
            if isinstance(node, Select):
                try:
                    self.evaluate(node)
                except Unsupported:
                    pass  # a value used as a map and as a value: reached as far as it goes
        reason = f"`{text}` is outside the subset the checker reasons about"
        defined = self.atom(("fails", text), reason, "true", None, None, ())
        found = self.atom(("test", text), reason, defined.false, None, None, ())
        return Cond(found.false, found.true) if negated else found

    def equal_null(self, value: object) -> object:
        """`value == null`: false for a value of a declared type; for a run-time value of no
        declared type, an opaque condition (null, or any other value)."""
        if isinstance(value, Variable) and value.kind is not None:
            return Cond("false", value.presence)
        if isinstance(value, Variable) and not value.sort.find().declared:
            value.opaque = True
            return self.atom(("null", value.path), "`null` met with a value known only at run time",
                             value.presence, value, None, ((None, True), (KEEP, False)))
        term = self.term(value)
        if not term.sort.find().declared:
            raise Unsupported("`null` met with a value known only at run time")
        return Cond("false", term.defined)

    def atom(self, key: tuple, reason: str, defined: str, variable: Variable | None, text: str | None,
             candidates: tuple[tuple[object, bool], ...]) -> Cond:
        """An opaque condition: true or false (when `defined`) as a free Boolean constant, one per
        `key` — the same test of the same value is one constant, its negation the constant's."""
        if not self.opaque:
            raise Unsupported(reason)
        found = self.atoms.get(key)
        if found is None:
            found = Opaque(f"o{len(self.atoms)}", reason, variable, text, candidates)
            self.atoms[key] = found
        self.atoms_touched.add(found.name)
        return Cond(conj(defined, found.name), conj(defined, neg(found.name)))

    def meet(self, a: Term, b: Term, culprit: object, ordering: bool) -> str:
        """The sort in which two terms are compared: their shared sort, "Mixed" (numbers of two
        sorts, compared as reals), "Differ" (declared values of two types: never equal, and not
        ordered) or "Open" (two run-time values met only with each other, so far). A run-time
        value that meets a number becomes a real: it may be an int or a double."""
        ra, rb = a.sort.find(), b.sort.find()
        if ra.sort is None and rb.sort is None:
            if ra is not rb:
                self.unify(ra, rb, culprit)
            root = ra.find()
            if ordering:
                root.sort = "Real"
            return root.sort or "Open"
        if ra.sort is None or rb.sort is None:
            open_class, bound = (ra, rb) if ra.sort is None else (rb, ra)
            if bound.sort == "Map":
                raise Inconsistent(self._mismatch(open_class, bound, culprit))
            open_class.sort = "Real" if bound.sort in NUMERIC else bound.sort
            open_class.number = bound.sort in NUMERIC
        for one, other in ((ra, rb), (rb, ra)):
            if one.number and other.sort == "Real" and (other.declared or other.double):
                one.double = True
        if ra.sort == rb.sort:
            return str(ra.sort)
        if ra.sort in NUMERIC and rb.sort in NUMERIC:
            return "Mixed"
        if ra.declared and rb.declared:
            return "Differ"
        raise Inconsistent(self._mismatch(ra, rb, culprit))

    def as_int_if_integral(self, term: Term, other: Term | None) -> Term:
        """A number known to be an int, or meeting an int in arithmetic (which only an int takes), as
        an Int term: `(to_int x)` of its real constant. Declared an int, it is whole everywhere
        (`declarations` says so); a number of either kind is an int only where this arithmetic is
        defined — `(is_int x)` within 64 bits is part of its `defined` —, so another condition on
        the same value (`x == 1.5`, where `x + 1` errors and does not fire) keeps its double worlds."""
        root = term.sort.find()
        if root.sort != "Real" or not root.number:
            return term
        if root.integral:
            return Term(f"(to_int {term.text})", self._fixed["Int"], term.defined, term.mismatch)
        if other is None or other.sort.find().sort != "Int":
            return term
        root.int_use = True
        # A whole double (2.0) is a real like the int 2, but int arithmetic fails on it: a run the
        # solver cannot tell apart, so "must" is not claimed (and a double argument never is an int).
        self.narrowed.append(f"{_named(root)} is a double (int arithmetic takes ints only)")
        whole = (f"(and (is_int {term.text}) (<= {real_text(Fraction(INT_MIN))} {term.text}) "
                 f"(<= {term.text} {real_text(Fraction(INT_MAX))}))")
        return Term(f"(to_int {term.text})", self._fixed["Int"], conj(term.defined, whole), term.mismatch)

    @staticmethod
    def real(term: Term) -> str:
        return term.text if term.sort.find().sort == "Real" else f"(to_real {term.text})"

    def order(self, op: str, left: object, right: object) -> object:
        if isinstance(left, Error) or isinstance(right, Error):
            return left if isinstance(left, Error) else right
        if not isinstance(left, SYMBOLIC) and not isinstance(right, SYMBOLIC):
            return concrete_order(op, left, right)
        if op in (">", ">="):
            op, left, right = ("<" if op == ">" else "<="), right, left
        self.mark_durations(left, right)
        a, b = self.term(left), self.term(right)
        self.mark_peers(a, b)
        sort = self.meet(a, b, left if isinstance(left, Variable) else right, ordering=True)
        if sort == "String":
            self.scalar_strings = True
            relation = f"(str.{op} {a.text} {b.text})"
        elif sort in NUMERIC:
            relation = f"({op} {a.text} {b.text})"
        elif sort == "Mixed":
            relation = f"({op} {self.real(a)} {self.real(b)})"
        elif sort == "Differ":
            return Error(f"no `{op}` between values of two types")
        else:
            raise Unsupported(f"ordering {SORT_NAMES.get(sort, 'values')} known only at run time")
        defined = conj(a.defined, b.defined)
        return Cond(conj(defined, relation), conj(defined, neg(relation)))

    def member(self, item: object, container: object) -> object:
        if isinstance(item, Error) or isinstance(container, Error):
            return item if isinstance(item, Error) else container
        if isinstance(container, SYMBOLIC):
            reason = "`in` over a list or map known only at run time"
            if not isinstance(container, Variable) or isinstance(item, (Term, Cond)) or _holds_symbolic(
                    item if not isinstance(item, Variable) else None):
                raise Unsupported(reason)
            if container.kind == "map" and _plain_key(item):  # a key of a declared map: that field is present
                child = self.child(container, item) if isinstance(item, str) else \
                    self.variable(f"{container.path}[{item}]", None, container)
                return Cond(child.presence, conj(container.presence, neg(child.presence)))
            container.opaque = True
            empty: object = {} if container.kind == "map" else []
            if isinstance(item, Variable):
                item.opaque = True
                key: object = item.path
                candidates: tuple[tuple[object, bool], ...] = ((empty, False),)
            else:
                key = (kind_of(item), repr(item))
                container.tested = [*(container.tested or ()), item]
                found_by = {item: None} if container.kind == "map" and is_map_key(item) else [item]
                candidates = ((empty, False),) if container.kind == "map" and not is_map_key(item) else \
                    ((empty, False), (found_by, True))
            defined = conj(container.presence, item.presence if isinstance(item, Variable) else "true")
            return self.atom(("in", key, container.path), reason, defined, container, None, candidates)
        if isinstance(container, Mapping):
            if not isinstance(item, SYMBOLIC) and not is_map_key(item) and kind_of(item) != "double":
                return Error(f"a map key cannot be a {kind_of(item)}")
            candidates: list[object] = list(container.keys())
        elif isinstance(container, (list, tuple)):
            candidates = [self.reach(candidate) for candidate in container]
        else:
            return Error(f"no `in` for a {kind_of(container)}")
        # the item and every element must evaluate; then `in` is true iff some element equals
        defined = conj(*(self.defined(value) for value in [item, *candidates] if isinstance(value, SYMBOLIC)),
                       self.defined(container) if isinstance(container, LiteralMap) else "true")  # its values too
        found: list[Cond] = []
        for candidate in candidates:
            equal = self.equal(item, candidate)
            found.append(ERROR if isinstance(equal, Error) else self.as_cond(equal))
        result = Cond(conj(defined, disj(*(f.true for f in found))), conj(defined, *(f.false for f in found)))
        return self.settle(result)

    def arithmetic(self, op: str, left: object, right: object) -> object:
        if isinstance(left, Error) or isinstance(right, Error):
            return left if isinstance(left, Error) else right
        if not isinstance(left, SYMBOLIC) and not isinstance(right, SYMBOLIC):
            return concrete_arithmetic(op, left, right)
        if any(isinstance(side, Variable) and side.unsigned for side in (left, right)):
            raise Unsupported("arithmetic on a `uint` known only at run time")
        if op in ("+", "-"):
            self.mark_durations(left, right)
        a, b = self.term(left), self.term(right)
        if op == "+":  # strings and lists join too
            self.mark_peers(a, b)
        for mine, other in ((a, b), (b, a)):
            kind, other_kind = _number_kind(mine.sort.find()), _number_kind(other.sort.find())
            if kind is not None and kind[1] and other_kind is not None and other_kind[0] != kind[0]:
                # A run-time value whose kind only its use fixed, meeting the other kind: at run time
                # it is one or the other, and either way some use of it is an error; which one
                # matters to the verdict, so the solver does not pick one.
                raise Inconsistent(f"{_named(mine.sort.find())} is used inconsistently: as an int and as a double")
        for mine, other in ((a, b), (b, a)):
            root = mine.sort.find()
            if root.sort is None and other.sort.find().sort == "Int":
                # A run-time value of no sort yet in int arithmetic: a number of either kind, read
                # as an int only where this arithmetic is defined (`as_int_if_integral`).
                root.sort, root.number = "Real", True
        a = self.as_int_if_integral(a, b)
        b = self.as_int_if_integral(b, a)
        a = self.as_int_if_integral(a, b)
        ra, rb = a.sort.find(), b.sort.find()
        if (ra.sort is None or _either_kind(ra)) and (rb.sort is None or _either_kind(rb)):
            # Run-time values of no sort yet or numbers of either kind, with each other: numbers of
            # one kind (CEL arithmetic takes one), either. Real arithmetic has every int and every
            # double outcome of `+ - *`, so "never" and "must" hold for both kinds; a real quotient
            # is not an int one. Whole operands read as ints (as a witness shows them), whose
            # arithmetic overflows past 64 bits: an error there, as at run time.
            if op in ("/", "%"):
                raise Unsupported(f"`{op}` between values whose types are known only at run time")
            for root in (ra, rb):
                if root.sort is None:
                    root.sort, root.number = "Real", True
                    if op == "+":  # strings and lists add too, to values no number use fits
                        self.narrowed.append(f"{_named(root)} is a string or a list (`+` adds those too)")
            if ra is not rb:
                self.narrowed.append(f"{_named(ra)} and {_named(rb)} are an int and a double (which do not mix)")
                _merge(ra, rb)
            text = f"({op} {a.text} {b.text})"
            in_range = (f"(=> (and (is_int {a.text}) (is_int {b.text})) (and (<= {real_text(Fraction(INT_MIN))} {text}) "
                        f"(<= {text} {real_text(Fraction(INT_MAX))})))")
            return Term(text, a.sort, conj(a.defined, b.defined, in_range))
        if ra.sort == "Real" and rb.sort == "Real":
            for root in (ra, rb):
                if root.number and not root.integral:
                    _fix_double(root, self.narrowed)  # double arithmetic: it is a double
        if ra.sort is not None and rb.sort is not None and ra.sort != rb.sort and ra.declared and rb.declared:
            return Error(f"no `{op}` between {SORT_NAMES[ra.sort]} and {SORT_NAMES[rb.sort]}")
        sort = self.unify(a.sort, b.sort, left if isinstance(left, Variable) else right)
        if sort == "Real":  # double arithmetic takes doubles only: a run-time operand is a double
            for root in (a.sort.find(), b.sort.find()):
                if not root.declared and not root.integral:
                    _fix_double(root, self.narrowed)
        defined = conj(a.defined, b.defined)
        if op == "+" and sort == "String":
            return Term(f"(str.++ {a.text} {b.text})", a.sort, defined)
        self.numeric(sort, op)
        if op == "%" and sort == "Real":
            raise Unsupported("`%` on doubles")
        if sort == "Real":
            if op == "/" and (isinstance(right, SYMBOLIC) or right == 0):
                # A double divided by zero is an infinity or NaN, which reals do not have: only a
                # divisor known not to be zero keeps the quotient a real.
                raise Unsupported("a double divided by a value that may be zero (infinities and NaN "
                                  "are outside the subset the checker reasons about)")
            return Term(f"({op} {a.text} {b.text})", a.sort, defined)
        if op in ("/", "%"):
            defined = conj(defined, f"(not (= {b.text} 0))")
        if op == "/":
            text = truncated_division(a.text, b.text)
        elif op == "%":
            text = f"(- {a.text} (* {b.text} {truncated_division(a.text, b.text)}))"
        else:
            text = f"({op} {a.text} {b.text})"
        in_range = f"(and (<= {int_text(INT_MIN)} {text}) (<= {text} {INT_MAX}))"
        return Term(text, a.sort, conj(defined, in_range))

    def _call(self, expr: Call) -> object:
        name = expr.function
        if name == "has" and expr.target is None and len(expr.args) == 1 and isinstance(expr.args[0], Select):
            return self.has(expr.args[0])
        if name == "duration" and expr.target is None and len(expr.args) == 1:
            return self.duration(self.evaluate(expr.args[0]))
        if name == "size" and len(expr.args) + (expr.target is not None) == 1:
            return self.size(self.evaluate(expr.target if expr.target is not None else expr.args[0]))
        if name == "string" and expr.target is None and len(expr.args) == 1:
            return self.to_string(self.evaluate(expr.args[0]))
        if name == "double" and expr.target is None and len(expr.args) == 1:
            return self.to_double(self.evaluate(expr.args[0]))
        if name in ("startsWith", "endsWith", "contains") and expr.target is not None and len(expr.args) == 1:
            return self.string_test(name, self.evaluate(expr.target), self.evaluate(expr.args[0]))
        if name == "matches" and len(expr.args) + (expr.target is not None) == 2:
            target, pattern = (expr.target, expr.args[0]) if expr.target is not None else expr.args
            return self.matches(self.evaluate(target), self.evaluate(pattern))
        if self.opaque_tests and name in ("exists", "all", "exists_one"):
            return self.test_atom(expr)
        raise Unsupported(f"`{name}` is outside the subset the checker reasons about")

    def to_double(self, value: object) -> object:
        """`double(x)`: of a value known before the run, as the runtime computes it
        (`concrete_call`); of a run-time number, the same value, a double (its own class: what is
        done with it fixes nothing about `x`); of a run-time value of no sort yet, or a string, it
        is outside the subset."""
        if isinstance(value, Error):
            return value
        if not isinstance(value, SYMBOLIC):
            return concrete_call("double", value)
        term = self.term(value)
        root = term.sort.find()
        if root.sort == "Int":
            return Term(f"(to_real {term.text})", self._fixed["Real"], term.defined)
        if root.sort == "Real":
            return Term(term.text, self._fixed["Real"], term.defined)
        raise Unsupported("`double()` of a value whose type is known only at run time")

    def matches(self, target: object, pattern: object) -> object:
        """`target.matches(pattern)` with a known pattern: folded on a known string; on a run-time
        one, membership in the regex of the texts the pattern finds a match in (`smt/regex.py`),
        or, for a pattern outside what that translates, an opaque condition, with the empty string
        and a string the pattern matches as candidates."""
        from plangate.cel.evaluate import regex_example, regex_search
        from plangate.smt.regex import search_language

        if isinstance(target, Error) or isinstance(pattern, Error):
            return target if isinstance(target, Error) else pattern
        reason = "`matches` is outside the subset the checker reasons about"
        if isinstance(pattern, SYMBOLIC):
            raise Unsupported(reason)
        if not isinstance(pattern, str):
            return Error(f"no `matches` with a {kind_of(pattern)} pattern")
        if not isinstance(target, SYMBOLIC):
            found = regex_search(pattern, target) if isinstance(target, str) else None
            return Error("`matches` fails") if found is None else found
        if regex_search(pattern, "") is None:
            return Error("an invalid regular expression")
        term = self.term(target)
        root = term.sort.find()
        if root.declared and root.sort != "String":
            return Error(f"no `matches` for {SORT_NAMES.get(str(root.sort), 'a value')}")
        self.unify(term.sort, self._fixed["String"], target)
        language = search_language(pattern)
        if language is not None:  # the texts it finds a match in, as an SMT regex: decided exactly
            self.scalar_strings = True  # `[^a]` and `.` hold surrogates too: no witness may be one
            member = f"(str.in_re {term.text} {language})"
            return Cond(conj(term.defined, member), conj(term.defined, neg(member)))
        candidates: list[tuple[object, bool]] = []
        for text in dict.fromkeys(["", regex_example(pattern)]):
            if text is not None and all(ord(char) <= MAX_SMT_CHAR for char in text):
                truth = regex_search(pattern, text)
                if truth is not None:
                    candidates.append((text, truth))
        return self.atom(("matches", term.text, pattern), reason, term.defined,
                         target if isinstance(target, Variable) else None, term.text, tuple(candidates))

    def has(self, expr: Select) -> object:
        target = self.evaluate(expr.operand)
        if isinstance(target, Error):
            return target
        if isinstance(target, Mapping):
            return self.guarded(expr.field in target, target)
        if isinstance(target, Variable):
            child = self.child(target, expr.field)
            return Cond(child.presence, conj(target.presence, neg(child.presence)))
        if isinstance(target, (Term, Cond)):
            raise Unsupported("`has()` on a computed value known only at run time")
        return Error(f"`has()` on a {kind_of(target)}")

    def duration(self, value: object) -> object:
        if isinstance(value, SYMBOLIC):
            raise Unsupported("`duration()` of a string known only at run time")
        if isinstance(value, Error):
            return value
        seconds = duration_seconds(value) if isinstance(value, str) else None
        if seconds is None:
            return Error(f"`{value}` is not a duration")
        return WholeSeconds(seconds) if isinstance(seconds, int) else FractionalSeconds(seconds)

    def mark_durations(self, left: object, right: object) -> None:
        """A run-time value compared with a duration literal, or added to one, is a duration (for its
        witness), and so are the values of its sort (`d + d > duration("1h")`: `d`)."""
        for one, other in ((left, right), (right, left)):
            if isinstance(one, Variable) and isinstance(other, (WholeSeconds, FractionalSeconds)):
                one.sort.find().duration = True
            elif isinstance(one, Term) and isinstance(other, (WholeSeconds, FractionalSeconds)):
                one.sort.find().duration = True

    def size(self, value: object) -> object:
        if isinstance(value, Error):
            return value
        if isinstance(value, Variable) and value.kind is not None:  # a declared list or map: a count
            if value.size is None:
                value.size = f"n{len(self.sizes)}"
                self.sizes.append(value)
            return Term(value.size, self._fixed["Int"], value.presence)
        if isinstance(value, (str, list, tuple, Mapping)):
            return self.guarded(len(value), value)  # a literal's size, whatever values its items take
        if isinstance(value, SYMBOLIC):
            term = self.term(value)
            self.unify(term.sort, self._fixed["String"], value)
            return Term(f"(str.len {term.text})", self._fixed["Int"], term.defined)
        return concrete_call("size", value)

    def to_string(self, value: object) -> object:
        """`string(x)`: of a value known before the run, as the runtime computes it (`concrete_call`);
        of a run-time string, itself; of a run-time int, its decimal digits (`-` first when negative)."""
        if isinstance(value, Error):
            return value
        if not isinstance(value, SYMBOLIC):
            return concrete_call("string", value)
        term = self.term(value)
        sort = term.sort.find().sort
        if sort == "String":
            return term
        if sort == "Int":
            text = (f"(ite (>= {term.text} 0) (str.from_int {term.text}) "
                    f"(str.++ \"-\" (str.from_int (- {term.text}))))")
            return Term(text, self._fixed["String"], term.defined)
        raise Unsupported(f"`string()` of {SORT_NAMES.get(sort or '', 'a value')} known only at run time")

    def string_test(self, name: str, target: object, argument: object) -> object:
        if isinstance(target, Error) or isinstance(argument, Error):
            return target if isinstance(target, Error) else argument
        if not isinstance(target, SYMBOLIC) and not isinstance(argument, SYMBOLIC):
            if not isinstance(target, str) or not isinstance(argument, str):
                return Error(f"no `{name}` for a {kind_of(target)}")
            return {"startsWith": target.startswith, "endsWith": target.endswith,
                    "contains": target.__contains__}[name](argument)
        a, b = self.term(target), self.term(argument)
        self.unify(a.sort, self._fixed["String"], target)
        self.unify(b.sort, self._fixed["String"], argument)
        function = {"startsWith": "str.prefixof", "endsWith": "str.suffixof", "contains": "str.contains"}[name]
        relation = f"({function} {b.text} {a.text})" if name != "contains" else f"({function} {a.text} {b.text})"
        defined = conj(a.defined, b.defined)
        return Cond(conj(defined, relation), conj(defined, neg(relation)))


def _number_kind(root: SortClass) -> tuple[str, bool] | None:
    """("int" or "double", whether only its use says so) for a number whose kind is fixed; None for
    anything else (a number of either kind, a string…)."""
    if root.sort == "Int":
        return "int", False
    if root.sort != "Real":
        return None
    if root.integral:
        return "int", not root.declared
    if not root.number:  # a declared double, or one that double arithmetic fixed
        return "double", not root.declared
    return None  # a number of either kind (`double` alone only says it met a double in a comparison)


def _merge(into: SortClass, other: SortClass) -> None:
    """Make `other` part of `into`'s class, with what was learnt of each."""
    other.parent = into
    into.paths.extend(other.paths)
    into.duration = into.duration or other.duration
    into.int_use = into.int_use or other.int_use
    into.peer_equal = into.peer_equal or other.peer_equal
    into.converted = into.converted or other.converted


def _fix_double(root: SortClass, narrowed: list[str]) -> None:
    """A run-time number in double arithmetic: a double (an int there is an error: `narrowed`).
    One that int arithmetic read as an int too is used both ways — at run time one of the two is
    an error, and which one decides the verdict —, so it is decided at run time, in either order."""
    if root.int_use:
        raise Inconsistent(f"{_named(root)} is used inconsistently: as an int and as a double")
    root.number, root.double = False, True
    if not root.converted:
        narrowed.append(f"{_named(root)} is an int (double arithmetic takes doubles only)")


def _named(root: SortClass) -> str:
    return f"`{root.paths[0]}`" if root.paths else "a value"


def _either_kind(root: SortClass) -> bool:
    """A run-time number not yet known to be an int or a double."""
    return root.sort == "Real" and root.number and not (root.integral or root.double or root.declared)


def _sort_name(sort: SortClass) -> str:
    if sort.sort == "Real" and not sort.declared:
        return "a number"  # a run-time value compared with numbers
    return SORT_NAMES.get(str(sort.sort), "a value")


def truncated_division(a: str, b: str) -> str:
    """CEL's integer division (toward zero) from SMT's Euclidean `div`."""
    return (f"(ite (>= {a} 0) (ite (> {b} 0) (div {a} {b}) (- (div {a} (- {b})))) "
            f"(ite (> {b} 0) (- (div (- {a}) {b})) (div (- {a}) (- {b}))))")


def _holds_symbolic(value: object) -> bool:
    if isinstance(value, SYMBOLIC) or isinstance(value, Unknown):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_symbolic(item) for item in value)
    if isinstance(value, Mapping):
        return any(_holds_symbolic(item) for item in value.values())
    return False


def collection_kinds(activation: Mapping[str, object]) -> dict[str, str]:
    """path → "list" / "map" for each declared list or map `Unknown` in the activation's maps."""
    found: dict[str, str] = {}
    pending = list(activation.values())
    while pending:
        value = pending.pop()
        if isinstance(value, Unknown) and value.type in COLLECTIONS:
            found[value.path] = value.type
        elif isinstance(value, Mapping):
            pending.extend(value.values())
    return found


def _plain_key(value: object) -> bool:
    """A key whose field path is the key itself: a string with no `.`, `[` or `]`, or an int."""
    if isinstance(value, str):
        return not any(char in value for char in ".[]")
    return isinstance(value, int) and not isinstance(value, bool)


def _filler_names():
    """"", "a", "b", … "z", "a1", "b1", …: fillers for a witness's list items and map keys."""
    yield ""
    for number in itertools.count():
        for letter in string.ascii_lowercase:
            yield letter + (str(number) if number else "")


def _key_of(rest: str) -> object:
    """The key of a field path relative to its map: ".name" → "name", "[3]" → 3."""
    return int(rest[1:-1]) if rest.startswith("[") else rest[1:]


def store_path(fields: dict[object, object], rest: str, value: object) -> None:
    """Store `value` at the relative path `rest` ("a.b", "[0].c") inside nested maps; a map stored
    where one is already keeps what that one holds."""
    segments: list[object] = []
    for part in rest.split("."):
        while "[" in part:
            head, _, tail = part.partition("[")
            if head:
                segments.append(head)
            index, _, part = tail.partition("]")
            segments.append(int(index))
        if part:
            segments.append(part)
    node = fields
    for segment in segments[:-1]:
        node = node.setdefault(segment, {})  # type: ignore[assignment]
    existing = node.get(segments[-1])
    if isinstance(value, dict) and isinstance(existing, dict):
        existing.update({key: item for key, item in value.items() if key not in existing})
    else:
        node[segments[-1]] = value


def is_map_key(value: object) -> bool:
    """Whether CEL takes `value` as a map key: an int, a string or a bool."""
    return isinstance(value, (str, int))


def map_key_equal(key: object, other: object) -> bool:
    """Key equality without Python's `True == 1`."""
    return isinstance(key, bool) == isinstance(other, bool) and kind_of(key) == kind_of(other) and key == other


def map_find(mapping: Mapping, key: object) -> object:
    """The value under `key` with CEL's key equality (a whole double finds an int key; a bool never
    finds `1`), or an `Error`: never Python's `TypeError` for a key that cannot be hashed."""
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    if isinstance(key, str):
        return mapping[key] if key in mapping else Error(f"no key {key!r}")
    if not is_map_key(key):
        return Error(f"a map key cannot be a {kind_of(key)}")
    for stored, value in mapping.items():
        if map_key_equal(key, stored):
            return value
    return Error(f"no key {key!r}")


def concrete_equal(left: object, right: object) -> object:
    """CEL equality as the runtime has it: numbers by value across int and double, values of two
    other types never equal."""
    kind, other = kind_of(left), kind_of(right)
    if kind in NUMBER_KINDS and other in NUMBER_KINDS:
        return left == right
    if kind != other:
        return False
    if kind == "list":
        return len(left) == len(right) and all(concrete_equal(a, b) is True  # type: ignore[arg-type]
                                               for a, b in zip(left, right))  # type: ignore[call-overload]
    if kind == "map":
        return set(left) == set(right) and all(concrete_equal(left[key], right[key]) is True  # type: ignore[index]
                                               for key in left)  # type: ignore[union-attr]
    return left == right


def concrete_order(op: str, left: object, right: object) -> object:
    if type(left) not in _OWN_KINDS or type(right) not in _OWN_KINDS:
        return concrete_by_the_runtime(op, left, right)
    kind, other = kind_of(left), kind_of(right)
    if not ((kind in NUMBER_KINDS and other in NUMBER_KINDS) or (kind == other and kind in ("string", "bool", "duration"))):
        return Error(f"no `{op}` between a {kind} and a {other}")
    return {"<": left < right, "<=": left <= right, ">": left > right,  # type: ignore[operator]
            ">=": left >= right}[op]  # type: ignore[operator]


def concrete_arithmetic(op: str, left: object, right: object) -> object:
    if type(left) not in _OWN_KINDS or type(right) not in _OWN_KINDS:
        return concrete_by_the_runtime(op, left, right)
    kind = kind_of(left)
    if kind != kind_of(right):
        return Error(f"no `{op}` between a {kind} and a {kind_of(right)}")
    if kind == "int":
        a, b = int(left), int(right)  # type: ignore[call-overload]
        if op in ("/", "%") and b == 0:
            return Error("division by zero")
        if op == "/":
            result = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)
        elif op == "%":
            result = a - b * (abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1))
        else:
            result = {"+": a + b, "-": a - b, "*": a * b}[op]
        return result if INT_MIN <= result <= INT_MAX else Error("integer overflow")
    if kind == "double" and op in ("+", "-", "*", "/"):
        a, b = float(left), float(right)  # type: ignore[arg-type]
        if op == "/":
            return a / b if b else (float("nan") if a == 0 else float("inf") * (1 if a > 0 else -1))
        return {"+": a + b, "-": a - b, "*": a * b}[op]
    if kind == "duration" and op in ("+", "-"):
        total = left + right if op == "+" else left - right  # type: ignore[operator]
        return WholeSeconds(total) if float(total).is_integer() else FractionalSeconds(total)
    if op == "+" and kind in ("string", "list"):
        if len(left) + len(right) > MAX_SIZE:  # type: ignore[arg-type]
            raise Unsupported(f"a {kind} longer than {MAX_SIZE:,}, which the evaluator's bounds stop")
        return left + right  # type: ignore[operator]
    return Error(f"no `{op}` for a {kind}")


# A comparison and the one it is the negation of, as (the test, negated): `a >= b` is `!(a < b)`.
_TEST_NEGATIONS = {"==": ("==", False), "!=": ("==", True), "<": ("<", False), ">=": ("<", True),
                   ">": (">", False), "<=": (">", True)}

HANDLERS: dict[type, Callable[[Encoder, Expr], object]] = {
    Literal: Encoder._literal, Ident: Encoder._ident, Select: Encoder._select, Index: Encoder._index,
    Call: Encoder._call, Unary: Encoder._unary, Binary: Encoder._binary, Conditional: Encoder._conditional,
    ListExpr: Encoder._list, MapExpr: Encoder._map,
}
