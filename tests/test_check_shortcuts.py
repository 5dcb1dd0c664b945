"""Shortcuts the static checks take must not change what they report: the budget check skips its
figures when there is no policy and the plan states no budget, because `evaluate` then finds nothing;
a constant argument that is a literal is read without compiling it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from plangate.cel.ast import Binary, Literal
from plangate.cel.evaluate import compile_expr, constant_value
from plangate.checks import budget
from plangate.checks.context import PlanContext
from plangate.graph import build_graph
from plangate.source import SourceFile
from plangate.syntax import parse_source

ROOT = Path(__file__).resolve().parents[1]
PLANS = sorted((ROOT / "examples").glob("*.plan")) + sorted((ROOT / "tests" / "twins").glob("*.plan"))


def _without_budget(text: str) -> list:
    plans = parse_source(SourceFile("p.plan", text)).document.plans
    return [plan.model_copy(update={"budget": None}) for plan in plans]


@pytest.mark.parametrize("path", PLANS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_budget_evaluation_finds_nothing_without_policy_or_budget(path: Path) -> None:
    for plan in _without_budget(path.read_text()):
        graph = build_graph(plan)
        if not graph.is_dag():
            continue
        ctx = PlanContext(plan=plan, graph=graph, policy=None)
        report = budget.evaluate(ctx)
        assert report.diagnostics == [] and report.findings == []
        assert list(budget.check(PlanContext(plan=plan, graph=graph, policy=None))) == []


_LITERALS = st.one_of(
    st.integers(-(2 ** 70), 2 ** 70).map(lambda value: Literal(value, "int")),
    st.integers(-5, 2 ** 70).map(lambda value: Literal(value, "uint")),
    st.floats(allow_nan=False).map(lambda value: Literal(value, "double")),
    st.text(max_size=4).map(lambda value: Literal(value, "string")),
    st.binary(max_size=4).map(lambda value: Literal(value, "bytes")),
    st.booleans().map(lambda value: Literal(value, "bool")),
    st.just(Literal(None, "null")))


@given(st.one_of(_LITERALS, st.builds(Binary, st.sampled_from(["+", "/", "=="]), _LITERALS, _LITERALS)))
def test_constant_value_is_the_compiled_value(expr) -> None:
    """`constant_value` skips compiling a closure for a literal; the value (or error) is the same."""
    assert repr(constant_value(expr)) == repr(compile_expr(expr)({}))
