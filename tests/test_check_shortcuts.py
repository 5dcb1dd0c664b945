"""Shortcuts the static checks take must not change what they report: the budget check skips its
figures when there is no policy and the plan states no budget, because `evaluate` then finds nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

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
