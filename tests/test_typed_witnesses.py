"""Declared `list` and `map` values known only at run time: verdicts and witnesses of their type.

A call argument declared `list` or `map` and passed a result (`tags: x.result.tags`) is reasoned
about by its size and its keys: the verdict must hold on sampled lists and maps, and a witness is
a list or a map (never a string for a list) that the runtime's evaluator confirms.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plangate.cel.ast import Binary, Call, Ident, Literal, Select, Unary, to_source
from plangate.cel.evaluate import compile_expr
from plangate.driver import check_sources
from plangate.smt.decide import Unknown, decide, instantiate
from plangate.source import SourceFile
from plangate.syntax import parse_expression

ACTIVATION = {"args": {"tags": Unknown("x.result.tags", "list"), "m": Unknown("x.result.m", "map"),
                       "n": Unknown("x.result.n", "int")}}


def parse(text: str):
    expr, diagnostics = parse_expression(SourceFile("<expr>", text))
    assert expr is not None, [d.message for d in diagnostics]
    return expr


def decided(text: str):
    return decide(parse(text), ACTIVATION, 5.0)


def replays(text: str, witness: dict) -> bool:
    return compile_expr(parse(text))(instantiate(ACTIVATION, witness)) is True


@pytest.mark.parametrize("text, outcome", [
    ("size(args.tags) > 5", "may"),
    ("size(args.m) > 2", "may"),
    ('"k" in args.m', "may"),
    ("1 in args.m", "may"),
    ('"k" in args.tags', "may"),
    ("size(args.tags) >= 0", "must"),
    ("size(args.m) >= 0 || size(args.tags) < 0", "must"),
    ("size(args.tags) < 0", "never"),
    ('"k" in args.m && size(args.m) == 0', "never"),
    ('has(args.m.k) && !("k" in args.m)', "never"),
    ('"a" in args.m && "b" in args.m && size(args.m) < 2', "never"),
    ('"a" in args.tags && size(args.tags) <= 0', "never"),  # what `in` finds, a list holds
    ("args.tags == null", "never"),
    ("args.m", "never"),  # a map is not a condition: an error, which never fires
    ("size(args.tags) == args.n && args.n > 3", "may"),
    ("args.tags == []", "runtime"),  # comparing a whole list is outside the subset
])
def test_verdicts(text, outcome):
    assert decided(text).outcome == outcome, decided(text)


@pytest.mark.parametrize("text, path, kind", [
    ("size(args.tags) > 5", "x.result.tags", list),
    ("size(args.m) > 2", "x.result.m", dict),
    ('"k" in args.m', "x.result.m", dict),
    ("1 in args.m", "x.result.m", dict),
    ('"k" in args.tags', "x.result.tags", list),
    ('size(args.tags) > 3 && "k" in args.tags', "x.result.tags", list),
    ('size(args.tags) > 2 && !("" in args.tags)', "x.result.tags", list),
    ('size(args.m) == 3 && has(args.m.a) && !("b" in args.m) && args.m.a > 2', "x.result.m", dict),
    ("size(args.tags) == args.n && args.n > 3", "x.result.tags", list),
])
def test_witnesses_have_the_declared_type_and_fire(text, path, kind):
    result = decided(text)
    assert result.outcome in ("may", "must") and result.witness is not None, result
    assert isinstance(result.witness[path], kind), result.witness
    assert not any(key.startswith(path + ".") for key in result.witness), result.witness  # a map shown whole
    assert replays(text, result.witness), result.witness


def test_the_reported_witnesses():
    assert decided("size(args.tags) > 5").witness == {"x.result.tags": ["", "", "", "", "", ""]}
    assert decided("size(args.m) > 2").witness == {"x.result.m": {"a": None, "b": None, "c": None}}
    assert decided('"k" in args.m').witness == {"x.result.m": {"k": None}}


def test_a_list_too_large_to_show_keeps_its_verdict_without_a_witness():
    result = decided("size(args.tags) > 1000")
    assert (result.outcome, result.witness) == ("may", None)


def test_a_plan_shows_lists_and_maps():
    policy = """policy p {
      tool dns.route { risk read_only args { tags: list, m: map } }
      deny "size"  when size(args.tags) > 5
      deny "msize" when size(args.m) > 2
      deny "has"   when "k" in args.m
    }"""
    plan = """plan q {
      step x { call dns.route(tags: [], m: {}) }
      step a { call dns.route(tags: x.result.tags, m: x.result.m) }
    }"""
    result = check_sources([SourceFile("p.plan", plan)], [SourceFile("p.policy", policy)])
    shown = sorted(d.message.split(": it fires when ")[1] for d in result.diagnostics
                   if d.name == "policy-deny-possible")
    assert shown == ['`x.result.m` = {"a": null, "b": null, "c": null}', '`x.result.m` = {"k": null}',
                     '`x.result.tags` = ["", "", "", "", "", ""]']


MANY_TAGS_POLICY = """policy p {
  tool t.x { risk read_only args { tags: list } }
  tool t.get { risk read_only }
  deny "many" when call.tool == "t.x" && size(args.tags) > 5
}"""


def test_a_step_guard_on_the_size_rules_the_deny_out():
    policy = MANY_TAGS_POLICY
    plan = """plan q {
      step g { call t.get() }
      step a { call t.x(tags: g.result.tags) when size(g.result.tags) <= 5 }
    }"""
    result = check_sources([SourceFile("p.plan", plan)], [SourceFile("p.policy", policy)])
    assert [d.name for d in result.diagnostics if d.name != "no-policy"] == []


# -- differential: sampled lists and maps ----------------------------------------------------

DIFFERENTIAL = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = ["a", "k", "z"]
TAGS, MAP = Select(Ident("args"), "tags"), Select(Ident("args"), "m")


def _conditions():
    sizes = st.builds(lambda target, op, number: Binary(op, Call("size", None, (target,)), Literal(number, "int")),
                      st.sampled_from([TAGS, MAP]), st.sampled_from(["==", "!=", "<", "<=", ">", ">="]),
                      st.integers(-1, 3))
    keys = st.sampled_from(KEYS).map(lambda key: Literal(key, "string"))
    member = st.builds(lambda key, target: Binary("in", key, target), keys, st.sampled_from([TAGS, MAP]))
    present = st.sampled_from(KEYS).map(lambda key: Call("has", None, (Select(MAP, key),)))
    field = st.builds(lambda key, number: Binary(">", Select(MAP, key), Literal(number, "int")),
                      st.sampled_from(KEYS), st.integers(-1, 2))
    atoms = st.one_of(sizes, member, present, field)
    return st.recursive(atoms, lambda inner: st.one_of(
        st.builds(Binary, st.sampled_from(["&&", "||"]), inner, inner), inner.map(lambda c: Unary("!", c))),
        max_leaves=4)


_LISTS = st.lists(st.sampled_from(["a", "k", "", "q"]), max_size=4)
_MAPS = st.dictionaries(st.sampled_from(KEYS + ["b"]), st.one_of(st.none(), st.integers(-2, 3)), max_size=4)


@DIFFERENTIAL
@given(_conditions(), _LISTS, _MAPS)
def test_verdicts_hold_on_sampled_lists_and_maps(expr, tags, mapping):
    """never ⇒ false on the sample, must ⇒ true on it; a witness is a list and a map that make the
    condition true."""
    result = decide(expr, ACTIVATION, 5.0)
    if result.outcome in ("runtime", "unknown"):
        return
    condition = compile_expr(expr)
    sampled = condition({"args": {"tags": tags, "m": mapping, "n": 0}}) is True
    assert not (result.outcome == "never" and sampled), (to_source(expr), tags, mapping)
    assert not (result.outcome == "must" and not sampled), (to_source(expr), tags, mapping)
    if result.witness:
        for path, kind in (("x.result.tags", list), ("x.result.m", dict)):
            assert isinstance(result.witness.get(path, kind()), kind), (to_source(expr), result)
        assert condition(instantiate(ACTIVATION, result.witness)) is True, (to_source(expr), result)


def test_a_loose_step_guard_keeps_a_list_witness():
    policy = MANY_TAGS_POLICY
    plan = """plan q {
      step g { call t.get() }
      step a { call t.x(tags: g.result.tags) when size(g.result.tags) > 3 }
    }"""
    result = check_sources([SourceFile("p.plan", plan)], [SourceFile("p.policy", policy)])
    found = [d for d in result.diagnostics if d.name != "no-policy"]
    assert [d.name for d in found] == ["policy-deny-possible"]
    assert found[0].message.endswith('it fires when `g.result.tags` = ["", "", "", "", "", ""]'), found[0].message
