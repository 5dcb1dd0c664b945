"""CEL: the compiled evaluator, the cel-python reference, the static type checker.

Unit tests of each feature and error, differential tests (compiled evaluator against cel-python on
random well-typed expressions), and hostile input that must come back as error values.
"""

from __future__ import annotations

import math
import sys
import time
import timeit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cel_strategies import KIND_TYPES, VARIABLE_TYPES, activations, typed_expressions
from plangate.cel.ast import Binary, Call, Ident, Literal, Select, to_source
from plangate.cel.evaluate import (INT_MIN, MAX_PATTERN_CHARS, MAX_SIZE, CelError, Duration, Uint,
                                   compile_expr, parse_duration)
from plangate.cel.reference import evaluate_reference
from plangate.cel.types import (BOOL, DOUBLE, DURATION, DYN, FUNCTIONS, INT, METHODS, STRING, TIMESTAMP, UINT, ListType,
                                MapType, RecordType, check_types)
from plangate.source import SourceFile
from plangate.syntax import parse_expression

DIFFERENTIAL = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse(text: str):
    expr, diagnostics = parse_expression(SourceFile("<expr>", text))
    assert expr is not None, [d.message for d in diagnostics]
    return expr


def run(text: str, activation: dict | None = None) -> object:
    return compile_expr(parse(text))(ACTIVATION if activation is None else activation)


ACTIVATION = {
    "call": {"tool": "payments.refund", "args": {"amount": 900.0, "currency": "EUR"}},
    "args": {"amount": 900.0, "currency": "EUR", "count": 3, "tags": ["a", "b"], "note": None},
    "step": {"id": "build", "tool": "ci.build", "risk": 2, "retry": 1, "cost": 2.5,
             "time": Duration.from_seconds(300)},
    "plan": {"id": "deploy", "version": 3, "budget": {"time": Duration.from_seconds(5400)}},
    "read_only": 0, "reversible_write": 1, "external_write": 2, "irreversible": 3,
    "flags": {True: "yes", "n": 1, 7: "seven"},
    "items": (1, 2, 3),
}


class Error:
    """An expected `CelError` whose message contains `fragment`."""

    def __init__(self, fragment: str) -> None:
        self.fragment = fragment

    def __repr__(self) -> str:
        return f"Error({self.fragment!r})"


def assert_result(result: object, expected: object) -> None:
    if isinstance(expected, Error):
        assert isinstance(result, CelError), result
        assert expected.fragment in result.message, result.message
    elif isinstance(expected, float) and math.isnan(expected):
        assert isinstance(result, float) and math.isnan(result)
    else:
        assert result == expected and type(result) is type(expected), (result, expected)


# ---------------------------------------------------------------------------------- evaluation
EVALUATION_CASES = [
    # the rules of the policy language
    ('call.tool == "payments.refund" && args.amount > 500.0', True),
    ('call.tool == "db.drop" && args.env == "prod"', False),
    ("step.risk >= external_write", True),
    ("step.risk == irreversible", False),
    ('plan.budget.time > duration("1h")', True),
    ('step.time <= duration("5m")', True),
    # literals and variables
    ("42", 42), ("0x1F", 31), ("7u", Uint(7)), ("2.5", 2.5), ('"a\\"b"', 'a"b'), ("true", True), ("null", None),
    ("[1, 2]", [1, 2]), ('{"a": 1}', {"a": 1}),
    ("missing", Error("unknown name `missing`")),
    ("9223372036854775808", Error("out of the range of `int`")),
    ("-9223372036854775808", INT_MIN),
    # int arithmetic: 64 bits, truncating division
    ("9223372036854775807 + 1", Error("integer overflow")),
    ("-9223372036854775807 - 2", Error("integer overflow")),
    ("3037000500 * 3037000500", Error("integer overflow")),
    ("-(-9223372036854775807 - 1)", Error("integer overflow")),
    ("(-9223372036854775807 - 1) / -1", Error("integer overflow")),
    ("7 / 2", 3), ("-7 / 2", -3), ("7 / -2", -3), ("-7 % 2", -1), ("7 % -2", 1),
    ("1 / 0", Error("division by zero")), ("1 % 0", Error("modulus by zero")),
    ("2 + 3 * 4 - 1", 13),
    # uint
    ("1u - 2u", Error("unsigned integer overflow")), ("18446744073709551615u + 1u", Error("unsigned")),
    ("7u / 2u", Uint(3)), ("7u % 2u", Uint(1)), ("1u / 0u", Error("division by zero")),
    ("-1u", Error("no such overload")),
    # double: IEEE 754
    ("1.0 / 0.0", math.inf), ("-1.0 / 0.0", -math.inf), ("0.0 / 0.0", math.nan), ("1.5 * 2.0", 3.0),
    ("1.5 % 1.0", Error("no such overload")), ("1e308 * 10.0", math.inf),
    # no implicit mixing in arithmetic; numbers compare across kinds
    ("1 + 1.0", Error("no such overload for `int + double`")), ("1u + 1", Error("no such overload")),
    ("1 == 1.0", True), ("1u == 1", True), ("1 < 2.5", True), ("2.5 > 2", True), ("3u >= 3.0", True),
    ("9007199254740993 > 9007199254740992.0", True),
    # equality across types is false, never an error
    ('1 == "1"', False), ("1 != true", True), ("null == 0", False), ('[1, "a"] == [1, "a"]', True),
    ("[1, 2] == [1.0, 2.0]", True), ('{"a": 1} == {"a": 1.0}', True), ('{"a": 1} == {"b": 1}', False),
    ("[1] == [1, 2]", False), ("true == 1", False), ("0 == false", False),
    # ordering
    ('"a" < "b"', True), ('"b" <= "a"', False), ("false < true", True), ('1 < "a"', Error("no such overload")),
    ("[1] < [2]", Error("no such overload")), ('duration("30s") < duration("1m")', True),
    # strings and lists
    ('"ab" + "cd"', "abcd"), ("[1] + [2, 3]", [1, 2, 3]), ("items + [4]", [1, 2, 3, 4]),
    ('"a" + 1', Error("no such overload for `string + int`")),
    # logic: errors absorbed by the deciding side, in either order
    ("false && 1 / 0 == 1", False), ("1 / 0 == 1 && false", False), ("true || 1 / 0 == 1", True),
    ("1 / 0 == 1 || true", True), ("1 / 0 == 1 || false", Error("division by zero")),
    ("true && 1 / 0 == 1", Error("division by zero")), ("1 && false", False), ("true && 1", Error("no such overload")),
    ("1 || 2", Error("no such overload")), ("!true", False), ("!5", Error("no such overload for `!int`")),
    # ternary
    ("true ? 1 : 2", 1), ("false ? 1 / 0 : 2", 2), ("1 ? 2 : 3", Error("condition of `?:`")),
    # in
    ("2 in [1, 2, 3]", True), ('"c" in args.tags', False), ('"a" in ["a", "b"]', True), ("1 in [\"a\"]", False),
    ("2.0 in items", True), ('"amount" in args', True), ('"zzz" in args', False), ("1 in 2", Error("no such overload")),
    ("7.0 in flags", True), ("true in flags", True), ("1 in flags", False),
    # selection, indexing, has
    ("args.currency", "EUR"), ("args.missing", Error("no such key `missing`")), ('args["count"]', 3),
    ('args["missing"]', Error("no such key")), ("args.tags[1]", "b"), ("args.tags[-1]", Error("out of range")),
    ("args.tags[2]", Error("out of range")), ("args.tags[1u]", "b"), ("args.tags[1.0]", Error("no such overload")),
    ("flags[true]", "yes"), ("flags[7u]", "seven"), ("flags[7.0]", "seven"), ("flags[1]", Error("no such key")),
    ("flags[[1]]", Error("unsupported map key type `list`")),
    ("args.amount.value", Error("cannot select `value` from a value of type `double`")),
    ('"abc"[0]', Error("cannot index")),
    ("has(args.note)", True), ("has(args.env)", False), ("has(step.risk)", True),
    ("has(args.amount.x)", Error("`has` cannot test")), ("has(1)", Error("`has` takes one field selection")),
    ("call.args.amount", 900.0),
    # functions
    ('size("héllo")', 5), ('"abc".size()', 3), ("size(args.tags)", 2), ("size(args)", 5),
    ("size(1)", Error("no such overload for `size(int)`")),
    ('"refund".startsWith("ref")', True), ('"refund".endsWith("und")', True), ('"refund".contains("fun")', True),
    ('"refund".contains(1)', Error("no such overload")), ('"abc".matches("^a.c$")', True),
    ('"abc".matches("b")', True), ('matches("abc", "^b")', False), ('"a".matches("(")', Error("invalid regular expression")),
    ('"x".unknown()', Error("unknown function `unknown`")), ("nope(1)", Error("unknown function `nope`")),
    ("size(1, 2)", Error("no overload of `size`")),
    # conversions
    ('int("12")', 12), ('int("-12")', -12), ("int(-1.9)", -1), ("int(7u)", 7), ('int("0x10")', Error("cannot convert")),
    ('int(" 1")', Error("cannot convert")), ("int(1e19)", Error("out of the range")), ("int(0.0 / 0.0)", Error("cannot convert")),
    ("int(18446744073709551615u)", Error("integer overflow")), ("int(true)", Error("no such overload")),
    ("uint(3)", Uint(3)), ("uint(-1)", Error("unsigned integer overflow")), ("uint(1.5)", Uint(1)),
    ('uint("12")', Uint(12)),
    ("double(3)", 3.0), ('double("1.5e3")', 1500.0), ('double("1_0")', Error("cannot convert")),
    ('double("inf")', math.inf),
    ("string(12)", "12"), ("string(1.5)", "1.5"), ("string(true)", "true"), ("string(3u)", "3"),
    ('string(duration("1h30m"))', "5400s"), ('string(duration("100ms"))', "0.1s"), ("string(null)", Error("no such overload")),
    ('bool("true")', True), ('bool("f")', False), ('bool("yes")', Error("cannot convert")),
    ('bytes("é")', "é".encode()), ('string(bytes("é"))', "é"),
    # durations
    ('duration("1h30m") == duration("90m")', True), ('duration("1.5h") == duration("5400s")', True),
    ('duration("100ms") > duration("0s")', True), ('duration("-30s") < duration("0")', True),
    ('duration("1h") + duration("1s") == duration("3601s")', True),
    ('duration("1h") - duration("2h") == -duration("1h")', True),
    ('duration("x")', Error("invalid duration")), ('duration("1.5")', Error("invalid duration")),
    ('duration("1h") + 1', Error("no such overload")),
    # maps
    ('{"a": 1, "a": 2}', Error("duplicate map key `a`")), ("{1.5: 2}", Error("unsupported map key type `double`")),
    ("{1: 2}[1]", 2), ("{1: 2}[1u]", 2), ("{true: 1, 1: 2}", Error("duplicate map key")),
]


@pytest.mark.parametrize("text, expected", EVALUATION_CASES, ids=[case[0] for case in EVALUATION_CASES])
def test_evaluation(text: str, expected: object) -> None:
    assert_result(run(text), expected)


def test_the_same_evaluator_serves_many_activations() -> None:
    rule = compile_expr(parse('call.tool == "payments.refund" && args.amount > 500.0'))
    assert rule({"call": {"tool": "payments.refund"}, "args": {"amount": 900.0}}) is True
    assert rule({"call": {"tool": "payments.refund"}, "args": {"amount": 100}}) is False
    assert rule({"call": {"tool": "payments.refund"}, "args": {"amount": 501}}) is True
    assert rule({"call": {"tool": "ci.build"}, "args": {}}) is False  # the false side absorbs the missing key
    missing = rule({"call": {"tool": "payments.refund"}, "args": {}})
    assert isinstance(missing, CelError) and missing.message == "no such key `amount`"
    unknown = rule({})
    assert isinstance(unknown, CelError) and "unknown name" in unknown.message


def test_risk_constants_come_from_the_activation() -> None:
    rule = compile_expr(parse("step.risk >= external_write"))
    assert rule({"step": {"risk": 2}, "external_write": 2}) is True
    assert rule({"step": {"risk": 2}, "external_write": 3}) is False


def test_values_of_subclasses_behave_as_their_base_types() -> None:
    import enum

    class Colour(str, enum.Enum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    activation = {"colour": Colour.RED, "level": Level.HIGH}
    assert run('colour + "!"', activation) == "red!"
    assert run('colour == "red"', activation) is True
    assert run("level + 1", activation) == 4
    assert run("level > 2", activation) is True


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("1.5h", 5400), ("1h30m", 5400), ("100ms", 0.1),
                                           ("-2m", -120), ("1d", 86400), ("0", 0), ("250us", 0.00025),
                                           ("1ns", 1e-9), (".5s", 0.5)])
def test_duration_strings(text: str, seconds: float) -> None:
    parsed = parse_duration(text)
    assert isinstance(parsed, Duration)
    assert parsed.seconds == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "h", "1x", "1h 30m", "--1s", "1.2.3s", "9" * 300 + "s",
                                  "99999999999999h"])
def test_invalid_duration_strings(text: str) -> None:
    assert isinstance(parse_duration(text), CelError)


def test_duration_conversions() -> None:
    assert Duration.from_seconds(90) == Duration(90_000_000_000)
    assert str(Duration.from_seconds(-1.25)) == "-1.25s"
    assert str(Duration(0)) == "0s"
    assert Duration.from_seconds(0.3) == Duration(300_000_000)


# ----------------------------------------------------------------------------------- hostile
class Secretive:
    secret = "do not read"

    def __eq__(self, other: object) -> bool:
        raise AssertionError("never compared as a Python object")

    __hash__ = object.__hash__


DOUBLING = "[[1]]" + "".join(f".map(v{level}, [v{level}, v{level}])" for level in range(40))
HOSTILE_CASES = [
    ("args.__class__", Error("no such key `__class__`")),
    ("args.__class__.__init__.__globals__", Error("no such key `__class__`")),
    ('args["__class__"]', Error("no such key")),
    ("has(args.__dict__)", False),
    ('"text".__class__', Error("cannot select `__class__` from a value of type `string`")),
    ("obj.secret", Error("cannot select `secret`")),
    ("obj.__class__", Error("cannot select")),
    ("has(obj.secret)", Error("`has` cannot test")),
    ("obj == 1", Error("unsupported value of Python type `Secretive`")),
    ('obj == "x"', Error("unsupported value")),
    ('"x" != obj', Error("unsupported value")),
    ("obj in [1]", Error("unsupported value")),
    ("size(obj)", Error("no such overload")),
    ('huge + huge', Error("longer than")),
    ('[huge] + [huge]', [("x" * (MAX_SIZE // 2 + 1))] * 2),
    ("long_list + long_list", Error("longer than")),
    ('"a".matches("(a)\\\\1")', Error("invalid regular expression")),
    ('"a".matches("(?=a)")', Error("invalid regular expression")),
    # shared references: 40 steps, 2⁴⁰ elements as a tree; equality pays for each, and such a value
    # cannot leave the evaluation (a JSON form or a walk would visit them all)
    (DOUBLING + " == " + DOUBLING, Error("too much work")),
    (DOUBLING, Error("repeat over 4,000,000 elements and characters of itself")),
    ("long_list.map(x, huge)", Error("repeat over 4,000,000")),
    ("[long_list, huge, obj_list]", [[0] * (MAX_SIZE // 2 + 1), "x" * (MAX_SIZE // 2 + 1), []]),  # passed along: no repetition
    ('long_list.filter(x, x == 0).size() > 0 && [huge].exists(s, s == "y") == false', True),
    ("domains.all(d, d in allowed)", True),  # each scan pays only as far as it goes (to the match)
    # work in C inside a comprehension: each element scans the long list, or reads the long text
    ("[1, 2, 3].all(x, !(x in long_list)) && [1, 2, 3].all(x, !(x in long_list))", Error("too much work")),
    ('long_list.map(x, huge.matches("y")).size() > 0', Error("too much work")),
    ('long_list.exists(x, huge.contains("y"))', Error("too much work")),
    ("long_list == long_list && long_list == long_list", Error("too much work")),
    # comparing long strings reads each character (in C): 300 × 500,000 characters is past the bound
    ("indices.all(i, huge != other_huge)", Error("too much work")),
    ("indices.all(i, huge < other_huge)", Error("too much work")),
    ("indices.all(i, i < 150 ? huge != other_huge : true)", True),  # 150 × 500,000: within
]


@pytest.mark.parametrize("text, expected", HOSTILE_CASES, ids=[case[0][:60] for case in HOSTILE_CASES])
def test_hostile_input_stays_inside(text: str, expected: object) -> None:
    activation = {**ACTIVATION, "obj": Secretive(), "huge": "x" * (MAX_SIZE // 2 + 1),
                  "other_huge": "x" * (MAX_SIZE // 2) + "y", "indices": list(range(300)),
                  "long_list": [0] * (MAX_SIZE // 2 + 1), "obj_list": [],
                  "domains": [f"d{index % 250}" for index in range(5000)], "allowed": [f"d{index}" for index in range(250)]}
    assert_result(run(text, activation), expected)


def test_catastrophic_regex_is_linear() -> None:
    rule = compile_expr(parse('text.matches("(a+)+$") || text.matches(pattern)'))
    started = time.perf_counter()
    assert rule({"text": "a" * 100_000 + "!", "pattern": "(x+x+)+y"}) is False
    assert time.perf_counter() - started < 1.0


def test_overlong_pattern_is_refused() -> None:
    result = run("text.matches(pattern)", {"text": "a", "pattern": "a" * (MAX_PATTERN_CHARS + 1)})
    assert isinstance(result, CelError) and "longer than" in result.message


def test_invalid_unicode_is_an_error_value() -> None:
    assert isinstance(run('text.matches("a")', {"text": "\ud800"}), CelError)
    assert isinstance(run('bytes(text)', {"text": "\ud800"}), CelError)


def test_deeply_nested_values_give_an_error_value() -> None:
    nested: list = []
    for _ in range(sys.getrecursionlimit() * 2):
        nested = [nested]
    result = run("a == b", {"a": nested, "b": nested})
    assert isinstance(result, CelError) and "nested too deeply" in result.message


def test_deep_trees_compile_to_an_error_value() -> None:
    expr = Literal(1, "int")
    for _ in range(sys.getrecursionlimit() * 2):
        expr = Binary("+", expr, Literal(1, "int"))
    assert isinstance(compile_expr(expr)({}), CelError)



def test_nested_comprehensions_are_bounded_in_total_not_per_list() -> None:
    """Ten elements, nine comprehensions deep, is 10⁹ elements though no list is long: the work
    budget stops it (in about a second, not a minute), as an error value."""
    from plangate.cel.evaluate import ITERATION_COST, MAX_WORK

    ten = "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"
    text = "0"
    for variable in "abcdefghi":
        text = f"{ten}.map({variable}, {text})"
    started = time.perf_counter()
    result = run(f"{text}.size()", {})
    assert isinstance(result, CelError) and "too much work" in result.message
    assert time.perf_counter() - started < 20  # a safety bound: unbounded, it runs for minutes
    # Within the budget, a large comprehension is an ordinary one, and each evaluation has the whole budget.
    rows = [{"ok": True}] * (MAX_WORK // ITERATION_COST // 2)
    assert run("rows.all(r, r.ok)", {"rows": rows}) is True
    assert run("rows.all(r, r.ok)", {"rows": rows}) is True
    assert isinstance(run("rows.all(r, r.ok) && rows.all(r, r.ok) && rows.all(r, r.ok)", {"rows": rows}), CelError)


_TOKENS = ["args", "call", "step", ".", "amount", "tool", "__class__", "(", ")", "[", "]", "{", "}", ":", ",",
           "1", "0", "-1", "2.5", "0.0", "7u", '"a"', '""', "true", "false", "null", "==", "!=", "<", ">=",
           "+", "-", "*", "/", "%", "&&", "||", "!", "?", "in", "size", "has", "int", "uint", "double", "string",
           "bool", "bytes", "duration", '"1h"', "matches", '"(a+)+"', "startsWith", "x", "9223372036854775807"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=14))
def test_nothing_raises_on_arbitrary_expressions(tokens: list[str]) -> None:
    expr, _ = parse_expression(SourceFile("<fuzz>", " ".join(tokens)))
    if expr is None:
        return
    check_types(expr, CHECK_ENV)
    compile_expr(expr)(ACTIVATION)
    evaluate_reference(expr, ACTIVATION)


# ------------------------------------------------------------------------------ differential
def same_result(ours: object, reference: object) -> bool:
    if isinstance(ours, CelError) or isinstance(reference, CelError):
        return isinstance(ours, CelError) and isinstance(reference, CelError)
    if type(ours) is not type(reference):
        return False
    if isinstance(ours, float) and math.isnan(ours):
        return math.isnan(reference)  # type: ignore[arg-type]
    return ours == reference


@DIFFERENTIAL
@given(typed_expressions(), activations())
def test_compiled_evaluator_agrees_with_cel_python(typed: tuple, activation: dict) -> None:
    kind, expr = typed
    ours = compile_expr(expr)(activation)
    reference = evaluate_reference(expr, activation)
    assert same_result(ours, reference), (to_source(expr), activation, ours, reference)


@DIFFERENTIAL
@given(typed_expressions())
def test_generated_expressions_type_check(typed: tuple) -> None:
    kind, expr = typed
    assert check_types(expr, VARIABLE_TYPES) == (KIND_TYPES[kind], [])


@DIFFERENTIAL
@given(typed_expressions(), activations())
def test_printed_and_reparsed_expressions_evaluate_the_same(typed: tuple, activation: dict) -> None:
    _, expr = typed
    reparsed = parse(to_source(expr))
    assert same_result(compile_expr(reparsed)(activation), compile_expr(expr)(activation)), to_source(expr)


@pytest.mark.parametrize("text, expected", [
    ('call.tool == "payments.refund" && args.amount > 500.0', True),
    ("step.risk >= external_write", True),
    ('plan.budget.time > duration("1h")', True),
    ("1 / 0", Error("divide by zero")),
    ('"a" < ', Error("cannot compile")),
])
def test_reference_evaluator(text: str, expected: object) -> None:
    assert_result(evaluate_reference(text, ACTIVATION), expected)


def test_reference_converts_values_both_ways() -> None:
    assert evaluate_reference("x", {"x": Uint(3)}) == Uint(3)
    assert evaluate_reference("[x, y]", {"x": b"a", "y": None}) == [b"a", None]
    assert evaluate_reference("m", {"m": {"a": [1.5]}}) == {"a": [1.5]}
    assert evaluate_reference("d", {"d": Duration.from_seconds(90)}) == Duration.from_seconds(90)
    assert isinstance(evaluate_reference("x", {"x": object()}), CelError)


def test_compiled_evaluator_is_fast() -> None:
    text = 'call.tool == "payments.refund" && args.amount > 500.0'
    ours = compile_expr(parse(text))
    ours_seconds = min(timeit.repeat(lambda: ours(ACTIVATION), number=2000, repeat=3)) / 2000
    reference_seconds = min(timeit.repeat(lambda: evaluate_reference(text, ACTIVATION), number=20, repeat=3)) / 20
    assert ours_seconds * 10 < reference_seconds


# -------------------------------------------------------------------------------- type checks
STEP = RecordType.of("step", {"id": STRING, "tool": STRING, "risk": INT, "retry": INT, "cost": DOUBLE,
                              "time": DURATION})
CALL = RecordType.of("call", {"tool": STRING, "args": MapType(STRING, DYN)})
PLAN = RecordType.of("plan", {"id": STRING, "version": INT,
                              "budget": RecordType.of("budget", {"cost": DOUBLE, "time": DURATION, "calls": INT})})
CHECK_ENV = {"step": STEP, "call": CALL, "args": MapType(STRING, DYN), "plan": PLAN,
             "read_only": INT, "reversible_write": INT, "external_write": INT, "irreversible": INT,
             "build": RecordType.of("build", {"result": DYN}), "names": ListType(STRING), "count": UINT}

WELL_TYPED = [
    ('call.tool == "payments.refund" && args.amount > 500.0', BOOL),
    ('call.tool == "db.drop" && args.env == "prod"', BOOL),
    ("step.risk >= external_write", BOOL),
    ('plan.budget.time > duration("1h")', BOOL),
    ('build.result.status == "ok"', BOOL),
    ('"preview-" + build.result.artifact', STRING),
    ("build.result.count + 1", INT),
    ("step.cost * 2.0", DOUBLE),
    ("step.retry > 1.5", BOOL),
    ("step.risk == 2.0", BOOL),
    ("count < 3", BOOL),
    ("size(names) + names.size()", INT),
    ('names[0].startsWith("a")', BOOL),
    ('"a" in names', BOOL),
    ('"x" in args', BOOL),
    ("has(args.note) && args.note != null", BOOL),
    ("has(step.risk)", BOOL),
    ("step.time + duration(\"1m\") < duration(\"2h\")", BOOL),
    ("-step.time", DURATION),
    ("true ? step.id : build.result", DYN),
    ("true ? names : null", ListType(STRING)),
    ('[1, "a"]', ListType(DYN)),
    ("[1, 2]", ListType(INT)),
    ("[]", ListType(DYN)),
    ('{"a": 1}', MapType(STRING, INT)),
    ("int(step.cost) + int(\"3\")", INT),
    ("string(step.risk) + string(step.time)", STRING),
    ('matches(step.tool, "^ci\\\\.")', BOOL),
    ("args.tags[0]", DYN),
    ("[1, 2][0]", INT),
    ('{"a": 1}["a"]', INT),
]


@pytest.mark.parametrize("text, expected", WELL_TYPED, ids=[case[0] for case in WELL_TYPED])
def test_well_typed_expressions(text: str, expected: object) -> None:
    cel_type, diagnostics = check_types(parse(text), CHECK_ENV)
    assert [d.message for d in diagnostics] == []
    assert cel_type == expected


ILL_TYPED = [
    # (text, diagnostic name, message fragment, the text the span covers, help fragment)
    ('"a" + 1', "cel-type-error", "`+` cannot combine `string` and `int`", '"a" + 1', "string(…)"),
    ('names.size() > "3"', "cel-type-error", "cannot compare `int` with `string`", 'names.size() > "3"', None),
    ("!5", "cel-type-error", "`!` needs a `bool`, not `int`", "5", None),
    ('step.id == 1', "cel-type-error", "cannot compare `string` with `int`", "step.id == 1", None),
    ('step.id < 1', "cel-type-error", "cannot compare `string` with `int`", "step.id < 1", None),
    ("step.risk && true", "cel-type-error", "`&&` needs `bool` operands, not `int`", "step.risk", None),
    ("true || step.id", "cel-type-error", "`||` needs `bool` operands, not `string`", "step.id", None),
    ("step.rsik > 1", "cel-type-error", "`step` has no field `rsik`", "step.rsik", "did you mean `risk`?"),
    ("has(step.rsik)", "cel-type-error", "`step` has no field `rsik`", "step.rsik", "did you mean `risk`?"),
    ("plan.budget.tme", "cel-type-error", "`budget` has no field `tme`", "plan.budget.tme", "did you mean `time`?"),
    ("stpe.risk", "unknown-name", "unknown name `stpe`", "stpe", "did you mean `step`?"),
    ("zzz", "unknown-name", "unknown name `zzz`", "zzz", "the names here are"),
    ("sise(names)", "unknown-name", "unknown function `sise`", "sise(names)", "did you mean `size`?"),
    ('names.startWith("a")', "unknown-name", "unknown function `startWith`", 'names.startWith("a")',
     "did you mean `startsWith`?"),
    ('startsWith("a", "b")', "cel-type-error", "`startsWith` is a method", 'startsWith("a", "b")', None),
    ("step.risk.int()", "cel-type-error", "`int` is a function, not a method", "step.risk.int()", None),
    ("size(1)", "cel-type-error", "`size` takes a string, bytes, list or map, not `int`", "size(1)", None),
    ("size(1, 2)", "cel-type-error", "`size` takes 1 argument, not 2", "size(1, 2)", None),
    ("has(step)", "cel-type-error", "`has` takes one field selection", "has(step)", None),
    ("step.risk.x", "cel-type-error", "cannot select `x` from a value of type `int`", "step.risk.x", None),
    ("names.first", "cel-type-error", "cannot select `first` from a value of type `list(string)`", "names.first", None),
    ('names["a"]', "cel-type-error", "a list index must be an `int`, not `string`", '"a"', None),
    ("step[0]", "cel-type-error", "the keys of `step` are strings, not `int`", "0", None),
    ("step[\"rsk\"]", "cel-type-error", "`step` has no field `rsk`", "step[\"rsk\"]", "did you mean `risk`?"),
    ("1 in step.id", "cel-type-error", "`in` needs a list or a map on its right, not `string`", "step.id", None),
    ("1 in names", "cel-type-error", "cannot look for an `int` in a `list(string)`", "1 in names", None),
    ('-"a"', "cel-type-error", "`-` cannot negate a `string`", '-"a"', None),
    ("-count", "cel-type-error", "`-` cannot negate a `uint`", "-count", None),
    ("1 + 1.0", "cel-type-error", "`+` cannot combine `int` and `double`", "1 + 1.0", "double(…)"),
    ("count + 1", "cel-type-error", "`+` cannot combine `uint` and `int`", "count + 1", None),
    ("5 % 2.0", "cel-type-error", "`%` cannot combine `int` and `double`", "5 % 2.0", None),
    ("1 ? 2 : 3", "cel-type-error", "the condition of `?:` must be a `bool`, not `int`", "1", None),
    ('true ? 1 : "a"', "cel-type-error", "different types, `int` and `string`", 'true ? 1 : "a"', None),
    ('duration("1x")', "cel-type-error", "invalid duration `1x`", '"1x"', "1h30m"),
    ("duration(5)", "cel-type-error", "`duration` cannot convert an `int`", "duration(5)", None),
    ('step.tool.matches("(")', "cel-type-error", "invalid regular expression `(`", '"("', "RE2"),
    ("step.risk.startsWith(\"a\")", "cel-type-error", "`startsWith` applies to a `string`, not an `int`",
     'step.risk.startsWith("a")', None),
    ("step.tool.contains(1)", "cel-type-error", "the argument of `contains` must be a `string`", "1", None),
    ("9223372036854775808", "cel-type-error", "out of the range of `int`", "9223372036854775808", None),
    ("{1.5: 2}", "cel-type-error", "a map key cannot be a `double`", "1.5", None),
    ("null == 1", "cel-type-error", "cannot compare `null` with `int`", "null == 1", None),
    ("[1] < [2]", "cel-type-error", "`<` cannot order values of type `list(int)`", "[1] < [2]", None),
]


@pytest.mark.parametrize("text, name, message, covered, help_text", ILL_TYPED, ids=[case[0] for case in ILL_TYPED])
def test_ill_typed_expressions(text: str, name: str, message: str, covered: str, help_text: str | None) -> None:
    _, diagnostics = check_types(parse(text), CHECK_ENV)
    assert len(diagnostics) == 1, [d.message for d in diagnostics]
    (found,) = diagnostics
    assert found.name == name
    assert message in found.message
    assert text[found.span.start:found.span.end] == covered
    if help_text is not None:
        assert found.help is not None and help_text in found.help


def test_one_mistake_is_reported_once() -> None:
    cel_type, diagnostics = check_types(parse('("a" + 1) * 2 > 3 && stpe.risk + 1 > 0'), CHECK_ENV)
    assert cel_type == BOOL
    assert [d.name for d in diagnostics] == ["cel-type-error", "unknown-name"]


def test_checker_and_evaluator_know_the_same_functions() -> None:
    for name in FUNCTIONS:
        arity = 2 if name == "matches" else 1
        args = tuple(Literal("a", "string") for _ in range(arity))
        call = Call(name, None, (Select(Ident("x"), "y"),) if name == "has" else args)
        result = compile_expr(call)({"x": {"y": 1}})
        assert not (isinstance(result, CelError) and "unknown function" in result.message), name
    for name in METHODS:
        call = Call(name, Literal("abc", "string"), () if name == "size" else (Literal("a", "string"),))
        assert not isinstance(compile_expr(call)({}), CelError), name


def test_type_names_print_as_cel_writes_them() -> None:
    assert str(MapType(STRING, ListType(INT))) == "map(string, list(int))"
    assert str(STEP) == "step"
    assert STEP.field_type("risk") == INT and STEP.field_type("nope") is None


MACRO_CASES = [
    ("[1, 2, 3].exists(x, x > 2)", True),
    ("[1, 2, 3].all(x, x > 0)", True),
    ("[1, 2, 3].all(x, x > 1)", False),
    ("[1, 2].exists_one(x, x == 1)", True),
    ("[1, 1].exists_one(x, x == 1)", False),
    ("[1, 2, 3].filter(x, x > 1)", [2, 3]),
    ("[1, 2, 3].map(x, x * 2)", [2, 4, 6]),
    ('{"a": 1, "bb": 2}.all(k, k.size() == 1)', False),
    ("tags.exists(t, t.startsWith(\"prod\"))", True),
    ("[1, 0].exists(x, 1 / x > 0)", True),   # an error elsewhere does not matter once one is true
    ("[0, 1].all(x, 1 / x > 5)", False),     # nor once one is false
]


@pytest.mark.parametrize("text, expected", MACRO_CASES)
def test_comprehension_macros_agree_with_cel_python(text, expected):
    from plangate.cel.reference import evaluate_reference

    expr = parse(text)
    activation = {"tags": ["dev", "prod-eu"]}
    assert compile_expr(expr)(activation) == expected
    assert evaluate_reference(expr, activation) == expected


def test_macro_errors_and_types():
    from plangate.cel.types import BOOL, INT, ListType, STRING

    assert isinstance(compile_expr(parse("[1, 0].all(x, 1 / x > 0)"))({}), CelError)
    assert isinstance(compile_expr(parse("[1].all(x, x)"))({}), CelError)
    assert isinstance(compile_expr(parse("size(x)"))({}), CelError)  # the variable lives only inside the macro
    result_type, problems = check_types(parse("tags.map(t, t.size())"), {"tags": ListType(STRING)})
    assert (result_type, problems) == (ListType(INT), [])
    result_type, problems = check_types(parse("tags.all(t, t)"), {"tags": ListType(STRING)})
    assert result_type == BOOL and [p.message for p in problems] == ["the predicate of `all` must be a bool, not a `string`"]
    for text, message in [  # a macro's name in another shape: what the macro takes, not "unknown function"
        ("tags.map(1, t)", "the first argument of `map` names the variable each item is bound to: write "
                           "`map(x, expression)` or `map(x, predicate, expression)`"),
        ("tags.all(t)", "`all` takes 2 arguments, not 1: write `all(x, predicate)`"),
    ]:
        assert [p.message for p in check_types(parse(text), {"tags": ListType(STRING)})[1]] == [message]


# -- timestamps ----------------------------------------------------------------------------------

_STAMPS = st.builds(
    lambda year, month, day, hour, minute, second, micros, offset: (
        f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
        + (f".{micros:06d}" if micros else "")
        + ("Z" if offset == 0 else f"{'+' if offset > 0 else '-'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}")),
    st.integers(1971, 2200), st.integers(1, 12), st.integers(1, 28), st.integers(0, 23), st.integers(0, 59),
    st.integers(0, 59), st.sampled_from([0, 500000, 1, 999999]), st.sampled_from([0, 60, -150, 330, -720]))
_DURATIONS = st.sampled_from(["1h", "90s", "0.5s", "-2h30m", "0s", "86400s"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_STAMPS, _STAMPS, _DURATIONS, st.sampled_from([
    'timestamp("{a}") < timestamp("{b}")', 'timestamp("{a}") == timestamp("{b}")',
    'timestamp("{a}") >= timestamp("{b}")', 'timestamp("{a}") - timestamp("{b}")',
    'timestamp("{a}") + duration("{d}")', 'timestamp("{a}") - duration("{d}")',
    'timestamp("{a}") + duration("{d}") > timestamp("{b}")']))
def test_timestamps_agree_with_cel_python(a: str, b: str, d: str, template: str) -> None:
    # not `string(timestamp(…))`: cel-python keeps the offset and drops the fraction, where CEL
    # prints RFC 3339 in UTC (`2024-02-29T14:30:00.25Z`), as the evaluator does
    text = template.format(a=a, b=b, d=d)
    ours, reference = run(text), evaluate_reference(text, {})
    assert same_result(ours, reference), (text, ours, reference)


@pytest.mark.parametrize("text, expected", [
    ('timestamp("2024-01-01T00:00:00Z") < timestamp("2024-01-01T00:00:01.5+01:00")', False),
    ('string(timestamp("2024-02-29T12:00:00.25-02:30"))', "2024-02-29T14:30:00.25Z"),
    ('timestamp("2024-01-02T00:00:00Z") - timestamp("2024-01-01T00:00:00Z") == duration("24h")', True),
    ('timestamp("2024-01-01T00:00:00Z") + duration("1h") == timestamp("2024-01-01T01:00:00Z")', True),
])
def test_timestamp_evaluation(text: str, expected: object) -> None:
    assert run(text) == expected


@pytest.mark.parametrize("text", ['timestamp("x")', 'timestamp("2023-02-29T00:00:00Z")',
                                  'timestamp("2024-01-01 00:00:00Z")', 'timestamp("2024-01-01T00:00:00")'])
def test_invalid_timestamps_are_errors(text: str) -> None:
    assert isinstance(run(text), CelError)
    _type, problems = check_types(parse(text), {})
    assert [problem.name for problem in problems] == ["cel-type-error"]


def test_timestamps_type_check() -> None:
    assert check_types(parse('timestamp("2024-01-01T00:00:00Z") + duration("1h")'), {})[0] == TIMESTAMP
    assert check_types(parse('timestamp("2024-01-01T00:00:00Z") - timestamp("2024-01-01T00:00:00Z")'), {})[0] == DURATION
    assert check_types(parse('timestamp("2024-01-01T00:00:00Z") < timestamp("2024-01-01T00:00:00Z")'), {})[0] == BOOL


# -- values known only at run time ------------------------------------------------------------
# The static checks evaluate with `Unknown` placeholders for run-time values: a bool from that
# evaluation is taken as decided, so it must be the value of every run.

def _evaluator():
    from plangate.policy.compiled import compile_policies
    from plangate.policy.decide import Evaluator

    return Evaluator(compile_policies([])[0])


_RECORD_FIELDS = {"a": "int", "s": "string", "b": "bool", "n": "null"}
_ANY_VALUE = st.sampled_from([None, True, False, 0, 1, -1.5, "", "a", [], ["a"], {}, {"a": 1}])


def _record_leaf() -> st.SearchStrategy:
    return st.sampled_from(sorted(_RECORD_FIELDS)).map(lambda name: Select(Ident("m"), name))


def _with_constants(kind: str) -> st.SearchStrategy:
    """Bool conditions with the shapes that have fast paths: comparisons with `true`, `false` and
    `null` (either side), `in` over literal lists of strings, `has`, `size`, `?:`, `!`, `&&`, `||`."""
    from cel_strategies import expressions
    from plangate.cel.ast import Conditional, ListExpr, Unary

    value = st.one_of(st.sampled_from([Ident(name) for name in VARIABLE_TYPES]), _record_leaf(), st.just(Ident("m")),
                      expressions("bool", 1), expressions("string", 1), expressions("int", 1))
    constant = st.sampled_from([Literal(True, "bool"), Literal(False, "bool"), Literal(None, "null")])
    with_constant = st.builds(lambda op, v, c, flip: Binary(op, c, v) if flip else Binary(op, v, c),
                              st.sampled_from(["==", "!="]), value, constant, st.booleans())
    atoms = st.one_of(
        with_constant, with_constant, with_constant,
        expressions("bool", 2),
        st.builds(lambda v, items: Binary("in", v, ListExpr(tuple(Literal(i, "string") for i in items))),
                  value, st.lists(st.sampled_from(["a", "b", ""]), min_size=1, max_size=3)),
        st.builds(lambda v, c: Binary("in", v, c), value, st.sampled_from([Ident("m"), Select(Ident("m"), "s")])),
        _record_leaf().map(lambda leaf: Call("has", None, (leaf,))),
        value.map(lambda v: Binary(">", Call("size", None, (v,)), Literal(0, "int"))),
        _record_leaf(),
        st.just(Select(Ident("m"), "b")),
    )
    return st.recursive(atoms, lambda inner: st.one_of(
        st.builds(Binary, st.sampled_from(["&&", "||", "==", "!="]), inner, inner),
        inner.map(lambda operand: Unary("!", operand)),
        st.builds(Conditional, inner, inner, inner)), max_leaves=6)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_with_constants("bool"), activations(), st.fixed_dictionaries(
    {name: st.sampled_from(["int", "string", "bool", "null"]).flatmap(
        lambda kind: st.sampled_from([0, 7]) if kind == "int" else st.sampled_from(["", "a"]) if kind == "string"
        else st.booleans() if kind == "bool" else st.none()) for name in _RECORD_FIELDS}),
    st.sets(st.sampled_from(sorted([*VARIABLE_TYPES, "m", *("m." + f for f in _RECORD_FIELDS)])), min_size=1),
    st.data())
def test_a_decision_with_unknown_values_holds_for_every_value(expr, activation, record, unknown, data) -> None:
    """If `Evaluator.holds` gives a bool over an activation with some values unknown, every
    substitution of concrete values (of their types, or of any other) gives that same bool."""
    from plangate.smt.decide import Unknown

    evaluator = _evaluator()
    concrete = {**activation, "m": dict(record)}
    partial = {name: Unknown(name, str(VARIABLE_TYPES[name])) if name in unknown else value
               for name, value in activation.items()}
    partial["m"] = Unknown("m") if "m" in unknown else {
        name: Unknown(f"m.{name}") if f"m.{name}" in unknown else value for name, value in record.items()}
    decided = evaluator.holds(expr, partial)
    if not isinstance(decided, bool):
        return
    assert evaluator.holds(expr, concrete) is decided, (to_source(expr), concrete)
    alien = dict(concrete)  # the unknown values replaced by values of any type
    for name in unknown:
        if "." in name:
            if isinstance(alien["m"], dict):
                alien["m"] = {**alien["m"], name[2:]: data.draw(_ANY_VALUE)}
        else:
            alien[name] = data.draw(_ANY_VALUE)
    assert evaluator.holds(expr, alien) is decided, (to_source(expr), alien)


@pytest.mark.parametrize("text", ["x == true", "x == false", "true == x", "x == null", "null == x",
                                  "x != true", "x != false", "x != null", "!(x == true)", "x == true || false"])
def test_comparing_an_unknown_value_with_a_constant_is_undecided(text) -> None:
    from plangate.smt.decide import Unknown

    assert isinstance(_evaluator().holds(parse(text), {"x": Unknown("x", "bool")}), str)
    assert _evaluator().holds(parse(text), {"x": 1}) is (text.startswith("x !=") or text.startswith("!"))


@pytest.mark.parametrize("source, reads", [
    ("1 + 2", False), ("x", True), ("[1, 2].exists(v, v > 5)", False), ("[1, 2].exists(v, v > w)", True),
    ("[1].map(v, [2].map(w, v + w))", False), ("[1].map(v, [2].map(w, v + z))", True),
    ("[1].all(v, v > 0) && v > 1", True), ("{1: 2}.map(k, k)", False), ("has(a.b)", True),
    ("x.map(v, v)", True), ("[1].filter(v, v > 0).size() + 1", False),
])
def test_reads_a_name_knows_a_macros_own_variable(source, reads):
    from plangate.cel.evaluate import reads_a_name
    from plangate.source import SourceFile
    from plangate.syntax.parser import parse_expression

    expr, problems = parse_expression(SourceFile("e", source))
    assert not problems and reads_a_name(expr) is reads


def test_evaluations_inside_an_allowance_share_it_and_fail_bounded_once_it_is_spent():
    """One command's evaluations draw on one budget (`allowance`): each costs what it does, an
    inner allowance spends from the outer one, and once it is spent every evaluation fails at
    once, `bounded` (so a deny rule counts as firing), naming the shared bound."""
    from plangate.cel.evaluate import ITERATION_COST, allowance, compile_expr

    scan = compile_expr(parse("[" + ", ".join(map(str, range(50))) + "].exists(x, x == 99)"))
    cheap = compile_expr(parse("1 + 1 == 2"))
    assert scan({}) is False  # no allowance: only the evaluation's own bound
    with allowance(150 * ITERATION_COST) as work:
        assert scan({}) is False  # 50 items built, 50 visited: within
        with allowance(10 ** 9):  # an inner allowance has only what is left
            spent = scan({})
        assert isinstance(spent, CelError) and spent.bounded and "checked together" in spent.message
        assert cheap({}) is True  # a constant fold costs nothing
        again = scan({})
        assert isinstance(again, CelError) and again.bounded
    assert work.exhausted
    assert scan({}) is False  # outside it, as before


def test_a_command_whose_expressions_spend_the_allowance_says_its_verdicts_may_be_wrong(monkeypatch, tmp_path):
    """Past the shared allowance every evaluation fails at the bound (a deny fires, a test expecting
    a warning passes): `check` and `test` then add one `input-too-large` error, so the output is
    never taken for a complete answer."""
    from plangate.cel import evaluate
    from plangate.driver import check_sources
    from plangate.policy.testing import run_policy_tests

    monkeypatch.setattr(evaluate, "COMMAND_WORK", evaluate.MAX_WORK // 10_000)
    heavy = "[" + ", ".join(map(str, range(100))) + "].exists(x, x == args.a + 1000)"
    policy = f'policy q {{ tool t.x {{ risk read_only }} warn "heavy" when {heavy} }}'
    plan = "plan p {\n" + "".join(f"  step s{i} {{ call t.x(a: {i}) }}\n" for i in range(40)) + "}"
    found = check_sources([SourceFile("p.plan", plan)], [SourceFile("q.policy", policy)]).diagnostics
    assert [d.name for d in found if d.name == "input-too-large"] == ["input-too-large"]
    assert "some verdicts here may be wrong" in next(d.message for d in found if d.name == "input-too-large")
    tests = "".join(f'  test "t{i}" {{ call t.x(a: {i}) expect warn "heavy" }}\n' for i in range(40))
    path = tmp_path / "q.policy"
    path.write_text(policy[:-1] + tests + "}")
    result = run_policy_tests([str(path)])
    assert result.diagnostics[0].name == "input-too-large" and result.exit_code() == 1
    assert [d.name for d in result.diagnostics].count("input-too-large") == 1
    monkeypatch.setattr(evaluate, "COMMAND_WORK", 20 * evaluate.MAX_WORK)
    assert not [d for d in check_sources([SourceFile("p.plan", plan)], [SourceFile("q.policy", policy)]).diagnostics
                if d.name == "input-too-large"]


@pytest.mark.parametrize("text, fix", [
    ('step.risk == "external_write"', "step.risk == external_write"),
    ('"irreversible" <= step.risk', "irreversible <= step.risk"),
])
def test_a_risk_class_written_as_a_string_gets_the_fix(text, fix):
    from plangate.driver import check_sources

    policy = SourceFile("q.policy", f'policy q {{ tool t.x {{ risk read_only }} deny "d" when {text} }}')
    [found] = check_sources([], [policy]).diagnostics
    assert found.name == "cel-type-error" and found.help == f"risk classes are constants, not strings: write `{fix}`"


def test_negating_the_least_int_literal_again_overflows_as_printed_and_reparsed():
    """`-9223372036854775808` is one literal; a second `-` leaves the range and overflows when
    evaluated — it is not folded back into a literal (`---9223372036854775808` had read as the
    least int, where its printed tree overflows)."""
    from plangate.cel.ast import Binary, ListExpr, Literal, Unary, to_source
    from plangate.cel.evaluate import CelError, compile_expr
    from plangate.source import SourceFile
    from plangate.syntax.parser import parse_expression

    tree = Binary("in", Unary("-", Unary("-", Literal(-9223372036854775808, "int"))), ListExpr(()))
    reparsed, problems = parse_expression(SourceFile("x", to_source(tree)))
    assert not problems and reparsed == tree
    assert isinstance(compile_expr(reparsed)({}), CelError)
    assert parse_expression(SourceFile("x", "-9223372036854775808"))[0] == Literal(-9223372036854775808, "int")
    assert parse_expression(SourceFile("x", "--5"))[0] == Literal(5, "int")
