"""The solver layer: CEL → SMT encoding, the worker's hard time bound, and `decide()`.

Unit tests of each verdict, differential tests against the runtime's evaluator (a verdict on
concrete values must agree with evaluating them; a witness, substituted back, must make the
condition true; "never" and "must" must hold on every sampled activation), and the process
guarantees: the bound holds even when the solver overruns, and plangate never imports z3 itself.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cel_strategies import VARIABLE_TYPES, activations, expressions
from plangate.cel.evaluate import compile_expr
from plangate.cel.reference import evaluate_reference
from plangate.smt import solve
from plangate.smt.decide import Unknown, Verdict, decide, instantiate
from plangate.cel.ast import Binary, Ident, Literal, Select, Unary, to_source, walk
from plangate.smt.encode import Encoder, WholeSeconds, duration_seconds
from plangate.source import SourceFile
from plangate.syntax import parse_expression

DIFFERENTIAL = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ACTIVATION = {
    "x": {"result": Unknown("x.result")},
    "args": {"amount": Unknown("args.amount", "double"), "env": Unknown("args.env", "string"),
             "count": Unknown("args.count", "int"), "force": Unknown("args.force", "bool")},
    "step": {"risk": 2, "retry": 1, "time": WholeSeconds(300)},  # a duration, in seconds to the solver
    "call": {"tool": "db.drop"},
    "read_only": 0, "reversible_write": 1, "external_write": 2, "irreversible": 3,
}


def parse(text: str):
    expr, diagnostics = parse_expression(SourceFile("<expr>", text))
    assert expr is not None, [d.message for d in diagnostics]
    return expr


def fires(text: str, activation: dict) -> bool:
    return compile_expr(parse(text))(activation) is True


def verdict(text: str, activation: dict | None = None, time_bound: float = 5.0) -> Verdict:
    return decide(parse(text), ACTIVATION if activation is None else activation, time_bound)


@pytest.mark.parametrize("text, outcome", [
    ("x.result.ok == true", "may"),
    ("x.result.ok == true && x.result.ok == false", "never"),
    ("x.result.ok == true || x.result.ok != true", "may"),  # an absent field fires neither side
    ("has(x.result.ok) || !has(x.result.ok)", "must"),
    ("x.result.a.b == 1 && !has(x.result.a)", "never"),
    ("args.amount > 500.0", "may"),
    ("args.amount > 500", "may"),  # int and double compare by value
    ("args.env == \"prod\" || args.env != \"prod\"", "must"),
    ("args.count == \"a\"", "never"),  # values of two types are never equal
    ("args.count > 1 && args.count < 2", "never"),
    ("x.result.n > 1 && x.result.n < 2", "may"),  # a run-time number may be a double
    ("x.result.n > 2 && x.result.n % 2 == 1", "may"),  # in int arithmetic: an int
    ("x.result.n > 1 && x.result.n < 2 && x.result.n + 1 > 0", "never"),
    ("x.result.n > 0.5 && x.result.n < 1.5 && x.result.n - 1 == 0", "may"),
    ("x.result.n > -1 && -x.result.n > 0.5", "may"),  # negation keeps a number's kind
    ("args.count * args.count == 2", "never"),
    ("args.count / 2 == -3 && args.count > -8", "may"),
    ("args.count % 3 == -1", "may"),
    ("args.env.startsWith(\"ab\") && size(args.env) == 2", "may"),
    ("args.env.startsWith(\"ab\") && size(args.env) == 1", "never"),
    ("args.env in [\"a\", \"b\"] && args.env != \"a\"", "may"),
    ("args.env in []", "never"),
    ("args.force ? args.count > 3 : args.count < 0", "may"),
    ("step.risk >= external_write", "must"),
    ("step.risk >= irreversible", "never"),
    ("step.time < duration(\"1h\")", "must"),
    ("call.tool == \"db.drop\" && args.env == \"prod\"", "may"),
    ("x.result.missing.deep", "may"),
    ("args.count + 1 > args.count", "may"),  # not must: at the top of the range `+ 1` overflows
    ("args.count - args.count == 0", "must"),
    ("no_such_variable == 1", "never"),  # an error: the condition never fires
    ("args.count == null", "never"),
    ("x.result.v == null && x.result.v > 1", "never"),  # a null is no number: `> 1` is an error
    ("x.result.v == null || x.result.v > 1", "may"),
    ("x.result.v == null && x.result.v != 1", "may"),  # a null is unequal to everything
    ('x.result.v == 1 && x.result.v == "a"', "never"),  # one value, of one type
    ('x.result.v == 1 || x.result.v == "a"', "may"),
    ('x.result.v == "a" && x.result.v != 1', "may"),  # a string is unequal to every number
    ('x.result.v == true && x.result.v == "a" || x.result.v == null && x.result.v == 2.0', "never"),
])
def test_verdicts(text, outcome):
    result = verdict(text)
    assert result.outcome == outcome, result


@pytest.mark.parametrize("text, fragment", [
    ("args.env.matches(\"(?i)^p\") && args.env.matches(\"q$\")", "`matches`"),  # no candidate confirmed
    ("[1, 2].exists(e, e > args.count)", "`exists`"),
    ("x.result.n > 2 && x.result.n.startsWith(\"a\")", "inconsistently"),
    ("x.result.n > 2 && x.result.n * 2.0 > 1.0 && x.result.n % 2 == 1", "inconsistently"),
    ("x.result.list[args.count] == 1", "index"),
    ("2u > 1u", "uint"),
])
def test_outside_the_subset_is_decided_at_run_time(text, fragment):
    result = verdict(text)
    assert result.outcome == "runtime" and fragment in (result.reason or ""), result


@pytest.mark.parametrize("text", [
    "x.result.ok == true", "args.amount > 500.0 && args.env.endsWith(\"-prod\")",
    "x.result.n > 1 && x.result.n < 2", "has(x.result.a) && !has(x.result.b) && x.result.a.c == \"z\"",
    "args.count / 3 == 7 && args.count % 3 == 2", "x.result.s + \"!\" == \"hi!\"",
    "args.env in [\"eu\", \"us\"] && args.count >= 2 && args.force",
    "x.result.a.b == 1 || x.result.c == \"q\"",
])
def test_witnesses_make_the_condition_true(text):
    result = verdict(text)
    assert result.outcome in ("may", "must")
    assert fires(text, instantiate(ACTIVATION, result.witness or {}))


@pytest.mark.parametrize("text, outcome, witness", [
    ('!args.env.matches("^https://")', "may", None),  # translated (`smt/regex.py`): decided exactly
    ('args.env.matches("^https://")', "may", "https://"),
    ('args.env.matches("(?i)^https://")', "may", "https://"),  # a flag: an opaque condition
    ('!args.env.matches("(?i)^https://")', "may", ""),
    ('args.env.startsWith("http") && !args.env.matches("^https://")', "may", None),
    ('args.env.matches("a") && !args.env.matches("a")', "never", None),
    ('args.env.matches("a") || !args.env.matches("a")', "must", None),
    ('args.count.matches("a")', "never", None),  # an int has no `matches`
    ("x.result.v == null", "may", None),
    ("x.result.v != null", "may", None),
    ("x.result.v == null && x.result.v != null", "never", None),
    ('"a" in x.result.tags', "may", None),
    ('!("a" in x.result.tags)', "may", None),
])
def test_opaque_conditions_are_decided_with_confirmed_witnesses(text, outcome, witness):
    """`matches`, `== null` on an untyped value and `in` over a run-time list are free Boolean
    constants to the solver (one per test and value): "never" and "must" stand, and a witness is
    given only when the runtime's evaluator confirms it."""
    result = verdict(text)
    assert result.outcome == outcome, result
    if outcome == "may":
        assert fires(text, instantiate(ACTIVATION, result.witness or {})), result
        if witness is not None:
            assert result.witness == {"args.env": witness}


def test_the_same_path_is_one_variable():
    result = verdict("x.result.n == 7 && x.result.n != 8")
    assert result.outcome == "may" and result.witness == {"x.result.n": 7}


def test_unknown_fields_extend_the_path():
    assert Unknown("x.result").field("ok") == Unknown("x.result.ok", "dyn")
    with pytest.raises(ValueError):
        Unknown("x", "float")


@pytest.mark.parametrize("text", ['x.result.d + duration("1s") == duration("2s")',
                                  'duration("1s") + x.result.d == duration("2s")',
                                  'x.result.d + x.result.d > duration("3s")',
                                  'x.result.d - duration("1m") > duration("2s")'])
def test_a_value_added_to_a_duration_has_a_duration_witness_that_fires(text):
    found = verdict(text)
    assert found.outcome == "may"
    assert fires(text, instantiate(ACTIVATION, found.witness or {})), found.witness


@pytest.mark.parametrize("text", ["args.amount / 0.0 == 5.0", "args.amount > 0.0 && args.amount / 0.0 == args.amount / 0.0 + 1.0",
                                  "args.amount / args.amount == 1.0"])
def test_a_double_divided_by_what_may_be_zero_is_decided_at_run_time(text):
    """Its quotient may be an infinity or NaN (`d / 0.0 == d / 0.0 + 1.0` holds for every d > 0),
    which reals do not have: no verdict over reals would be sound."""
    found = verdict(text)
    assert found.outcome == "runtime" and "divided by a value that may be zero" in (found.reason or "")
    assert verdict("args.amount / 2.0 > 5.0").outcome == "may"


def test_durations():
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("1.5s") == 1.5
    assert duration_seconds("-2m") == -120
    assert duration_seconds("90") is None and duration_seconds("1x") is None


def test_identical_shapes_give_identical_text():
    first, second = Encoder(ACTIVATION), Encoder({"y": {"result": Unknown("y.result")}})
    assert first.fires(parse("x.result.kind == \"a\"")) == second.fires(parse("y.result.kind == \"a\""))
    assert first.declarations() == second.declarations()


# -- differential: concrete values ---------------------------------------------------------

@DIFFERENTIAL
@given(expressions("bool"), activations())
def test_concrete_verdicts_agree_with_the_runtime(expr, activation):
    """With no `Unknown`, a verdict is the runtime's value: must ⇔ true, never ⇔ not true."""
    result = decide(expr, activation)
    if result.outcome == "runtime":
        return  # e.g. an infinite double meeting nothing symbolic never happens; strings past U+2FFFF
    assert result.outcome in ("must", "never"), result
    assert (result.outcome == "must") == (compile_expr(expr)(activation) is True)


@DIFFERENTIAL
@given(expressions("bool"), activations())
def test_concrete_verdicts_agree_with_cel_python(expr, activation):
    """The same, against the reference semantics directly (cel-python), not only the closures."""
    result = decide(expr, activation)
    if result.outcome == "runtime":
        return
    reference = evaluate_reference(expr, activation)
    assert (result.outcome == "must") == (reference is True), (result, reference)


# -- differential: symbolic values ---------------------------------------------------------

SYMBOLIC_TYPES = {"i1": "int", "i2": "int", "s1": "string", "s2": "string", "b1": "bool", "b2": "bool"}


@DIFFERENTIAL
@given(expressions("bool"), activations(), st.sets(st.sampled_from(sorted(SYMBOLIC_TYPES)), min_size=1))
def test_symbolic_verdicts_hold_on_sampled_values(expr, activation, unknown):
    """Some variables become `Unknown`s of their type: the verdict must hold for the sampled
    values (never ⇒ false there, must ⇒ true there), and a witness must make the condition true."""
    partial = {name: Unknown(name, SYMBOLIC_TYPES[name]) if name in unknown else value
               for name, value in activation.items()}
    result = decide(expr, partial)
    if result.outcome in ("runtime", "unknown"):
        return
    sampled = compile_expr(expr)(activation) is True
    if result.outcome == "never":
        assert not sampled
    if result.outcome == "must":
        assert sampled
    if result.outcome in ("may", "must"):
        witnessed = {name: value for name, value in activation.items()}
        witnessed.update(instantiate({name: partial[name] for name in unknown}, result.witness or {}))
        for name in unknown:
            if witnessed[name] == {}:  # the condition did not read it: any value of its type
                witnessed[name] = activation[name]
        assert compile_expr(expr)(witnessed) is True, (result, witnessed)
        assert evaluate_reference(expr, witnessed) is True, (result, witnessed)  # and by cel-python


# Untyped run-time values (a tool with no argument schema: `call db.x(n: q.result.n)`) in int and
# double arithmetic: at run time each is an int or a double, and arithmetic never mixes the two.

UNTYPED = {"args": {"n": Unknown("q.result.n"), "m": Unknown("q.result.m")}}
_DOUBLE_LITERALS = st.sampled_from([0.5, 1.0, 2.0, 10.0]).map(lambda value: Literal(value, "double"))
_INT_LITERALS = st.sampled_from([1, 2, 3, -4, 10]).map(lambda value: Literal(value, "int"))


def _untyped_numbers():
    leaves = st.sampled_from([Select(Ident("args"), "n"), Select(Ident("args"), "m")])
    return st.recursive(leaves, lambda inner: st.one_of(
        st.builds(Binary, st.sampled_from(["+", "-", "*"]), inner, _DOUBLE_LITERALS),
        st.builds(Binary, st.sampled_from(["+", "-", "*"]), _DOUBLE_LITERALS, inner),
        st.builds(Binary, st.just("/"), inner, st.sampled_from([0.5, 2.0]).map(lambda v: Literal(v, "double"))),
        st.builds(Binary, st.sampled_from(["+", "-", "*", "%"]), inner, _INT_LITERALS),
        inner.map(lambda operand: Unary("-", operand)),
        st.builds(Binary, st.sampled_from(["+", "*"]), inner, inner)), max_leaves=4)


def _untyped_conditions():
    comparison = st.builds(Binary, st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), _untyped_numbers(),
                           st.one_of(_DOUBLE_LITERALS, _INT_LITERALS))
    return st.recursive(comparison, lambda inner: st.one_of(
        st.builds(Binary, st.sampled_from(["&&", "||"]), inner, inner), inner.map(lambda c: Unary("!", c))),
        max_leaves=3)


_UNTYPED_VALUES = st.one_of(st.integers(-12, 12), st.integers(-24, 24).map(lambda half: half / 2))


@DIFFERENTIAL
@given(_untyped_conditions(), _UNTYPED_VALUES, _UNTYPED_VALUES)
def test_untyped_witnesses_make_the_condition_true(expr, n, m):
    """A witness replayed through the evaluator makes the condition true: a value that takes part
    in double arithmetic is shown as a double (an int there is an error). (Only witnesses: an
    untyped value takes one sort from its use, so "never" and "must" speak of that sort.)"""
    result = decide(expr, UNTYPED, 5.0)
    if result.outcome in ("may", "must"):
        witness = {"q.result.n": n, "q.result.m": m, **(result.witness or {})}
        if any(isinstance(value, float) and (value * 1024) % 1 for value in witness.values()):
            return  # doubles are reals to the solver: rounding (`n` = 1/3) is not modelled
        replayed = instantiate(UNTYPED, witness)
        assert compile_expr(expr)(replayed) is True, (to_source(expr), result)  # (cel-python: no mixed `==`)


@pytest.mark.parametrize("text, shown", [
    ("args.n * 2.0 > 10.0", "q.result.n"), ("args.m + 1.0 > 10.0", "q.result.m"),
    ("args.n / 2.0 > 10.0", "q.result.n"), ("-args.n * 2.0 > 10.0", "q.result.n"),
])
def test_double_arithmetic_makes_an_untyped_value_a_double(text, shown):
    result = decide(parse(text), UNTYPED, 5.0)
    assert result.outcome == "may" and isinstance((result.witness or {}).get(shown), float), result
    assert fires(text, instantiate(UNTYPED, result.witness or {}))


def test_strategies_cover_every_symbolic_variable():
    assert set(SYMBOLIC_TYPES) <= set(VARIABLE_TYPES)
    assert all(str(VARIABLE_TYPES[name]) == kind for name, kind in SYMBOLIC_TYPES.items())


# -- the time bound --------------------------------------------------------------------------

# Three cubes summing to 33, in ints (`+ 0` makes each an int: alone, values of no declared type
# are numbers of either kind, and over the reals this is easy).
HARD = "x.result.a * x.result.a * x.result.a + x.result.b * x.result.b * x.result.b + " \
       "x.result.c * x.result.c * x.result.c == 33 && x.result.a + 0 > 1000000 && x.result.b + 0 > 1000000 " \
       "&& x.result.c + 0 < 0"


def test_a_hard_query_comes_back_unknown_within_its_bound():
    verdict("x.result.ok == true")  # the worker is up
    started = time.monotonic()
    result = verdict(HARD, time_bound=0.5)
    elapsed = time.monotonic() - started
    assert result.outcome == "unknown" and "0.5s" in (result.reason or ""), result
    assert elapsed < 1.5


def test_a_timeout_names_the_bound_the_allowance_left_not_the_querys_own():
    verdict("x.result.ok == true")
    with solve.allowance(0.4):
        result = verdict(HARD, time_bound=2.0)
    assert result.outcome == "unknown", result
    assert "timed out after 0.4s" in (result.reason or ""), result.reason


def test_the_worker_is_killed_when_the_solver_overruns(monkeypatch):
    """The parent's wait ends before Z3's own timeout: the worker is killed, the answer is
    "unknown", and the next query gets a fresh worker."""
    verdict("x.result.ok == true")
    monkeypatch.setattr(solve, "GRACE", -0.4)  # wait 0.1 s for a query Z3 may run for 0.5 s
    started = time.monotonic()
    result = verdict(HARD, time_bound=0.5)
    assert result.outcome == "unknown" and "timed out" in (result.reason or "")
    assert time.monotonic() - started < 1.0
    monkeypatch.setattr(solve, "GRACE", 0.25)
    assert verdict("x.result.ok == true").outcome == "may"


def test_no_answer_is_a_pass():
    answers = solve.check([solve.Query("(declare-const a Int)(assert (> a 1))", (("a", "Int"),))], 1e-9)
    assert answers[0].status == "unknown" and answers[0].reason


# -- z3 stays out of the checking process ----------------------------------------------------

def test_checking_never_imports_z3():
    script = textwrap.dedent('''
        import sys
        from plangate.driver import check_sources
        from plangate.source import SourceFile
        plain = "plan p { budget { cost <= 5 usd } step a { call t.x() cost 2 usd } }"
        branching = ("plan q { budget { cost <= 5 usd } step a { call t.x() cost 2 usd } "
                     "step b { call t.y() when a.result.ok == true cost 4 usd } "
                     "step c { call t.y() when a.result.ok == false cost 4 usd } }")
        check_sources([SourceFile("p.plan", plain)])
        print("plain", "z3" in sys.modules)
        check_sources([SourceFile("q.plan", branching)])
        print("branching", "z3" in sys.modules)
    ''')
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert output.stdout.split() == ["plain", "False", "branching", "False"], output.stderr


def test_constant_conditions_need_no_worker(monkeypatch):
    monkeypatch.setattr(solve, "check", lambda *args: pytest.fail("the solver was asked"))
    assert verdict("step.risk >= external_write && call.tool == \"db.drop\"").outcome == "must"
    assert verdict("x.result.ok == true || true").outcome == "must"
    assert verdict("false && x.result.s.matches(\"a\")").outcome == "never"


# -- ill-typed constants are CEL errors, never Python exceptions --------------------------------

@pytest.mark.parametrize("text", [
    '{"a": 1}[["a"]] == 1',
    "args[args]",
    '{"a": 1}[{"b": 2}] == 1 || x.result.ok',
    '[1] in {"a": 1} || x.result.ok',
    '{[1]: 2}[1] == 2 || x.result.ok',
    '{"k": 1, "k": 2}["k"] == 1 || x.result.ok',
    '{1: "a"}[1.0] == "a" && x.result.ok',
    '{true: "a"}[1] == "a" || x.result.ok',
])
def test_ill_typed_keys_are_errors(text):
    result = verdict(text)
    runtime = compile_expr(parse(text))
    assert result.outcome in ("never", "may", "must")
    if result.outcome == "never":
        assert runtime(instantiate(ACTIVATION, {"x.result.ok": True})) is not True


# -- concatenations decided exactly, under the premise that the computed argument evaluates ------

@pytest.mark.parametrize("argument, condition, outcome", [
    ('"DROP TABLE " + g.result.name', 'sql.startsWith("DROP")', "must"),
    ('"DROP TABLE " + g.result.name', 'sql.contains("TABLE ")', "must"),
    ('g.result.name + ".tmp"', 'sql.endsWith(".tmp")', "must"),
    ('"DROP TABLE " + g.result.name', 'sql == "DROP TABLE users"', "may"),
    ('"DROP TABLE " + g.result.name', 'sql.startsWith("SELECT")', "never"),
    ('"a" + g.result.x + "b"', 'size(sql) >= 2 && sql.startsWith("a") && sql.endsWith("b")', "must"),
    ('"id-" + string(g.result.n + 1)', 'sql.startsWith("id-")', "may"),  # n = 2.0: `+ 1` fails
    ('"id-" + string(g.result.n + 1)', 'sql == "id--4"', "may"),
    ('"id-" + string(g.result.n + 1)', 'sql == "id-1x"', "never"),
])
def test_conditions_over_concatenations(argument, condition, outcome):
    computed = parse(argument)
    expr = parse(condition.replace("sql", f"({argument})"))
    activation = {"g": {"result": Unknown("g.result")}}
    result = decide(expr, activation, 5.0, assume=(computed,))
    assert result.outcome == outcome, result
    if outcome != "never":
        assert fires(condition.replace("sql", f"({argument})"), instantiate(activation, result.witness or {}))


def test_without_the_premise_an_absent_part_may_fail():
    expr = parse('("DROP TABLE " + g.result.name).startsWith("DROP")')
    assert decide(expr, {"g": {"result": Unknown("g.result")}}).outcome == "may"


def test_a_premise_that_cannot_hold_never_fires():
    result = decide(parse("g.result.ok"), {"g": {"result": Unknown("g.result")}}, assume=(parse("1 / 0"),))
    assert result.outcome == "never"


@DIFFERENTIAL
@given(_untyped_conditions(), _UNTYPED_VALUES, _UNTYPED_VALUES)
def test_untyped_never_holds_for_ints_and_doubles_alike(expr, n, m):
    """"never" over untyped values holds whichever kind each turns out to be at run time: `+ - *`
    between values of no sort yet are reasoned about as reals, which hold every int and double
    outcome (`args.n + args.n == 3` may fire: `n` = 1.5)."""
    result = decide(expr, UNTYPED, 5.0)
    if result.outcome == "never" and not _int_and_double_arithmetic(expr):
        for value_n, value_m in ((n, m), (float(n), m), (n, float(m)), (float(n), float(m))):
            replayed = instantiate(UNTYPED, {"q.result.n": value_n, "q.result.m": value_m})
            assert compile_expr(expr)(replayed) is not True, (to_source(expr), value_n, value_m)


def _int_and_double_arithmetic(expr) -> bool:
    """Whether `expr` does arithmetic with an int literal and with a double one: a value of no type
    then takes the kind of its first such use, and a use of the other kind is an error to the
    solver. Which kind the run brings can change the verdict (where one of the uses is absorbed by
    `&&`/`||`), a limit the solver's one sort per value has (docs/semantics.md)."""
    kinds = {part.kind for node in walk(expr) if isinstance(node, Binary) and node.op in "+-*/%"
             for part in (node.left, node.right) if isinstance(part, Literal)}
    return {"int", "double"} <= kinds


@pytest.mark.parametrize("text, outcome", [
    ("args.n + args.n == 3", "may"), ("args.n + args.m == 500.5", "may"), ("(args.n + args.m) * 2 == 5", "never"),
    ("args.n * args.m == 7 && args.n > 1 && args.m > 1", "may"), ("args.n / args.m == 1", "runtime"),
])
def test_arithmetic_between_untyped_values_covers_both_kinds(text, outcome):
    result = decide(parse(text), UNTYPED, 5.0)
    assert result.outcome == outcome, result
    if outcome == "may":
        assert fires(text, instantiate(UNTYPED, result.witness or {}))


def test_an_allowance_bounds_all_the_solving_inside_it():
    from plangate.smt import solve

    query = solve.Query("(declare-const x Int)\n(assert (> x 3))", (("x", "Int"),))
    with solve.allowance(0.0):
        [answer] = solve.check([query], 2.0)
    assert answer.status == "unknown" and "solver time of 0s in all is spent" in answer.reason
    with solve.allowance(30.0):
        [answer] = solve.check([query], 2.0)
    assert answer.status == "sat"
    [answer] = solve.check([query], 2.0)  # outside: no overall bound
    assert answer.status == "sat"


# ------------------------------------------------------------------ `matches` as an SMT regex
_REGEX_ATOMS = st.sampled_from(["a", "b", "-", "\\n", "\\.", ".", "[ab]", "[^a]", "[a-c]", "[^\\d-]", "\\d",
                                "\\w", "\\s", "\\W", "\\D", "\\S", "[\\s0]"])


@st.composite
def _patterns(draw, depth: int = 0) -> str:
    """Patterns of the subset `smt/regex.py` translates: atoms, groups, alternation, repetition."""
    parts = []
    for _ in range(draw(st.integers(0 if depth else 1, 3))):
        part = draw(_REGEX_ATOMS) if depth >= 2 or draw(st.booleans()) else \
            "(" + "|".join(draw(st.lists(_patterns(depth + 1), min_size=1, max_size=2))) + ")"
        part += draw(st.sampled_from(["", "", "*", "+", "?", "{2}", "{0,2}", "{1,}", "*?"]))
        parts.append(part)
    return "".join(parts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=_patterns(), start=st.booleans(), end=st.booleans(),
       texts=st.lists(st.text(alphabet="ab-.0 _\nc", max_size=5), min_size=1, max_size=6))
def test_matches_as_an_smt_regex_agrees_with_re2_search(pattern, start, end, texts):
    """`(str.in_re text R)` holds exactly when RE2's search of the pattern finds a match in text."""
    from plangate.cel.evaluate import regex_search
    from plangate.smt.encode import string_text
    from plangate.smt.regex import search_language

    pattern = ("^" if start else "") + pattern + ("$" if end else "")
    language = search_language(pattern)
    assert language is not None, pattern  # the generated syntax is all in the subset
    queries = [solve.Query(f"(assert (str.in_re {string_text(text)} {language}))") for text in texts]
    answers = solve.check(queries, 10.0)
    for text, answer in zip(texts, answers):
        assert answer.status in ("sat", "unsat"), answer.reason
        assert (answer.status == "sat") == regex_search(pattern, text), (pattern, text)


@pytest.mark.parametrize("pattern", ["(?i)a", "a{,3}", "a{01}", "a{1,02}", "[\U000E0000-\U000E007F]", "[[:digit:]]", "\\ba", "a(?=b)", "(a)\\1", "\\0", "a^b", "\\pL", "\\Z"])
def test_patterns_python_and_re2_may_read_differently_are_not_translated(pattern):
    from plangate.smt.regex import search_language

    assert search_language(pattern) is None


def test_conjunctions_and_disjunctions_keep_each_part_once_in_its_first_place():
    from plangate.smt.encode import conj, disj

    assert conj("a", "true", "b", "a") == "(and a b)" and conj("a", "false", "b") == "false"
    assert conj() == "true" and conj("true", "a", "a") == "a"
    assert disj("a", "false", "b", "a") == "(or a b)" and disj("a", "true") == "true" and disj() == "false"
    many = [f"(= s v{i})" for i in range(20_000)]  # a rule's `in` over a long list: kept whole, in order
    assert disj(*many, *many) == f"(or {' '.join(many)})"


def test_remembered_answers_are_bounded_in_count_and_text(monkeypatch):
    from plangate.smt import solve

    solve.forget_answers()
    monkeypatch.setattr(solve, "MAX_REMEMBERED", 3)
    queries = [solve.Query(f"(declare-const x Int)\n(assert (= x {i}))", (("x", "Int"),)) for i in range(5)]
    answers = solve.check(queries, 5.0)
    assert [a.status for a in answers] == ["sat"] * 5 and [a.model["x"] for a in answers] == [0, 1, 2, 3, 4]
    assert list(solve._answers) == queries[2:]  # the oldest forgotten first
    monkeypatch.setattr(solve, "MAX_REMEMBERED_TEXT", len(queries[0].smt) * 2)
    solve.check([queries[0]], 5.0)
    assert list(solve._answers) == [queries[4], queries[0]]
    solve.forget_answers()


def test_a_batch_of_remembered_and_new_questions_gets_every_answer_when_the_new_push_the_old_out(monkeypatch):
    from plangate.smt import solve

    solve.forget_answers()
    monkeypatch.setattr(solve, "MAX_REMEMBERED", 1)
    kept = solve.Query("(declare-const x Int)\n(assert (> x 1))", (("x", "Int"),))
    new = solve.Query("(declare-const x Int)\n(assert (< x 0))", (("x", "Int"),))
    solve.check([kept], 5.0)
    assert [a.status for a in solve.check([kept, new], 5.0)] == ["sat", "sat"]  # `new` pushes `kept` out meanwhile
    assert list(solve._answers) == [new]
    solve.forget_answers()
