"""The plan's dependency graph.

Edges come from two places and remember which: `after a, b` (kind "after") and every `x.result…`
reference in any expression of a step (kind "reference": arguments, `when`, `expect`,
`idempotency`, `rollback`). An edge x → s means s runs after x. Names that are no step, and steps
that name themselves, are collected for the checks instead of becoming edges, so the graph holds
only real steps. The first step with a given id is the one the graph keeps (duplicates are a
diagnostic of their own).

Adjacency is kept in plain dicts (`pred`, `succ`: step → {neighbour: None}, in plan order), and
`topological_order()` is Kahn's algorithm with ties broken by plan order; a plan that is a DAG (the
common case) never imports networkx. Only when Kahn's algorithm leaves steps over does `cycles()`
build a networkx graph to find every strongly connected component with more than one step
(Tarjan) and one concrete cycle through each, with the edges that close it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import heapq

from plangate.cel.ast import Expr, step_references
from plangate.ir.nodes import Plan, Step
from plangate.source import Span


class Edge(NamedTuple):  # a named tuple: one is built per dependency of a large plan
    source: str
    target: str
    kind: str  # "after" | "reference"
    span: Span


class DanglingName(NamedTuple):
    name: str
    step: str
    kind: str
    span: Span


@dataclass
class PlanGraph:
    plan: Plan
    steps: dict[str, Step]
    pred: dict[str, dict[str, None]]
    succ: dict[str, dict[str, None]]
    edges: dict[tuple[str, str], Edge]
    dangling: list[DanglingName] = field(default_factory=list)
    self_edges: list[Edge] = field(default_factory=list)
    _order: list[str] | None = field(default=None, repr=False)

    def predecessors(self, step_id: str) -> list[str]:
        return list(self.pred[step_id])

    def successors(self, step_id: str) -> list[str]:
        return list(self.succ[step_id])

    def _kahn(self) -> list[str]:
        if self._order is None:
            position = {step_id: index for index, step_id in enumerate(self.steps)}
            waiting = {step_id: len(sources) for step_id, sources in self.pred.items()}
            ready = [position[step_id] for step_id, count in waiting.items() if count == 0]
            heapq.heapify(ready)
            ids = list(self.steps)
            order = []
            while ready:
                step_id = ids[heapq.heappop(ready)]
                order.append(step_id)
                for target in self.succ[step_id]:
                    waiting[target] -= 1
                    if waiting[target] == 0:
                        heapq.heappush(ready, position[target])
            self._order = order
        return self._order

    def is_dag(self) -> bool:
        return len(self._kahn()) == len(self.steps)

    def topological_order(self) -> list[str]:
        """Steps in an order that respects every edge; ties keep the plan's order (DAGs only)."""
        return list(self._kahn())

    def cycles(self) -> list[tuple[list[Edge], list[str]]]:
        """One cycle per strongly connected group of steps (of two or more), with the group's steps
        in plan order: the cycle need not pass through all of them."""
        if self.is_dag():
            return []
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_nodes_from(self.steps)
        graph.add_edges_from(self.edges)
        found = []
        for component in nx.strongly_connected_components(graph):
            if len(component) < 2:
                continue
            order = [step_id for step_id in self.steps if step_id in component]
            cycle = nx.find_cycle(graph.subgraph(component), source=order[0])
            found.append(([self.edges[(source, target)] for source, target in cycle], order))
        found.sort(key=lambda item: item[0][0].span.start)
        return found


def step_expressions(step: Step) -> list[tuple[str, Expr]]:
    """Every expression of a step with the clause it stands in: call arguments, rollback arguments,
    `when`, `idempotency`, `expect`s (a list: the graph and the checks ask for every step's)."""
    found = [("call", argument.value) for argument in step.call.args] if step.call is not None else []
    if step.rollback is not None:
        found += [("rollback", argument.value) for argument in step.rollback.args]
    if step.when is not None:
        found.append(("when", step.when))
    if step.idempotency is not None:
        found.append(("idempotency", step.idempotency))
    found += [("expect", expectation.expr) for expectation in step.expects]
    return found


def build_graph(plan: Plan) -> PlanGraph:
    steps: dict[str, Step] = {}
    for step in plan.steps:
        steps.setdefault(step.id, step)
    pred: dict[str, dict[str, None]] = {step_id: {} for step_id in steps}
    succ: dict[str, dict[str, None]] = {step_id: {} for step_id in steps}
    edges: dict[tuple[str, str], Edge] = {}
    dangling: list[DanglingName] = []
    self_edges: list[Edge] = []

    def link(source: str, target: str, kind: str, span: Span) -> None:
        key = (source, target)
        if key in edges:
            if kind == "reference":  # a reference says more than `after`: it carries the result
                edges[key] = Edge(source, target, kind, span)
        elif source not in steps:
            dangling.append(DanglingName(source, target, kind, span))
        elif source == target:
            self_edges.append(Edge(source, target, kind, span))
        else:
            edges[key] = Edge(source, target, kind, span)
            pred[target][source] = None
            succ[source][target] = None

    for step_id, step in steps.items():
        for name in step.after:
            link(name.name, step_id, "after", name.span)
        for _clause, expr in step_expressions(step):
            for name, span in step_references(expr):
                link(name, step_id, "reference", span)
    return PlanGraph(plan, steps, pred, succ, edges, dangling, self_edges)
