"""The plan's dependency graph.

Edges come from two places and remember which: `after a, b` (kind "after") and every `x.result…`
reference in any expression of a step (kind "reference": arguments, `when`, `expect`,
`idempotency`, `rollback`). An edge x → s means s runs after x. Names that are no step, and steps
that name themselves, are collected for the checks instead of becoming edges, so the graph holds
only real steps. The first step with a given id is the one the graph keeps (duplicates are a
diagnostic of their own).

`cycles()` finds every strongly connected component with more than one step (Tarjan, via
networkx) and returns one concrete cycle through each, with the edges that close it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import networkx as nx

from plangate.cel.ast import Expr, step_references
from plangate.ir.nodes import Plan, Step, ToolCall
from plangate.source import Span


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # "after" | "reference"
    span: Span


@dataclass(frozen=True)
class DanglingName:
    name: str
    step: str
    kind: str
    span: Span


@dataclass
class PlanGraph:
    plan: Plan
    steps: dict[str, Step]
    graph: nx.DiGraph
    edges: dict[tuple[str, str], Edge]
    dangling: list[DanglingName] = field(default_factory=list)
    self_edges: list[Edge] = field(default_factory=list)

    def predecessors(self, step_id: str) -> list[str]:
        return list(self.graph.predecessors(step_id))

    def successors(self, step_id: str) -> list[str]:
        return list(self.graph.successors(step_id))

    def is_dag(self) -> bool:
        return nx.is_directed_acyclic_graph(self.graph)

    def topological_order(self) -> list[str]:
        """Steps in an order that respects every edge; ties keep the plan's order."""
        position = {step_id: index for index, step_id in enumerate(self.steps)}
        return list(nx.lexicographical_topological_sort(self.graph, key=position.__getitem__))

    def cycles(self) -> list[list[Edge]]:
        found = []
        for component in nx.strongly_connected_components(self.graph):
            if len(component) < 2:
                continue
            order = [step_id for step_id in self.steps if step_id in component]
            cycle = nx.find_cycle(self.graph.subgraph(component), source=order[0])
            found.append([self.edges[(source, target)] for source, target in cycle])
        found.sort(key=lambda edges: edges[0].span.start)
        return found


def step_expressions(step: Step) -> Iterator[tuple[str, Expr]]:
    """Every expression of a step with the clause it stands in."""
    for name, call in (("call", step.call), ("rollback", step.rollback)):
        if call is not None:
            yield from ((name, argument.value) for argument in call.args)
    if step.when is not None:
        yield "when", step.when
    if step.idempotency is not None:
        yield "idempotency", step.idempotency
    for expectation in step.expects:
        yield "expect", expectation.expr


def call_expressions(call: ToolCall | None) -> Iterator[Expr]:
    if call is not None:
        yield from (argument.value for argument in call.args)


def build_graph(plan: Plan) -> PlanGraph:
    steps: dict[str, Step] = {}
    for step in plan.steps:
        steps.setdefault(step.id, step)
    graph = nx.DiGraph()
    graph.add_nodes_from(steps)
    edges: dict[tuple[str, str], Edge] = {}
    dangling: list[DanglingName] = []
    self_edges: list[Edge] = []

    def link(source: str, target: Step, kind: str, span: Span) -> None:
        if source not in steps:
            dangling.append(DanglingName(source, target.id, kind, span))
        elif source == target.id:
            self_edges.append(Edge(source, target.id, kind, span))
        elif (source, target.id) not in edges:
            edges[(source, target.id)] = Edge(source, target.id, kind, span)
            graph.add_edge(source, target.id)
        elif kind == "reference":  # a reference says more than `after`: it carries the result
            edges[(source, target.id)] = Edge(source, target.id, kind, span)

    for step in steps.values():
        for name in step.after:
            link(name.name, step, "after", name.span)
        for _clause, expr in step_expressions(step):
            for name, span in step_references(expr):
                link(name, step, "reference", span)
    return PlanGraph(plan, steps, graph, edges, dangling, self_edges)
