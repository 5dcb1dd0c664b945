"""`dependency-cycle`: the plan must be a DAG.

One diagnostic per strongly connected group of steps, naming one cycle through it (and the group's
other steps, which a cycle through them keeps alive after this one is broken) and saying, for each
edge, whether it comes from `after`, from a `x.result` reference, or both; and one per step that
depends on itself (a cycle of one step: in its own `after`, or naming its own result `x.result`,
each place labelled).
"""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, Label, backticked, diagnostic
from plangate.graph import Edge

LISTED = 8  # steps of a long cycle shown at each end, and of its group's others


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    by_step: dict[str, list[Edge]] = {}
    for edge in ctx.graph.self_edges:
        by_step.setdefault(edge.target, []).append(edge)
    for step_id, edges in by_step.items():
        after = [edge for edge in edges if edge.kind == "after"]
        references = [edge for edge in edges if edge.kind == "reference"]
        how = [*(["is after itself"] if after else []),
               *([f"uses its own result as `{step_id}.result`"] if references else [])]
        places = [*after[:1], *references]  # a name repeated in one `after` is one place
        yield diagnostic(
            "dependency-cycle", places[0].span, f"step `{step_id}` depends on itself: it {' and '.join(how)}",
            labels=[Label(edge.span, "and here") for edge in places[1:]],
            help="; ".join([*(["remove it from its own `after`"] if after else []),
                               *(["inside `expect`, `idempotency` and `rollback` a step's own result is `result`"]
                                 if references else [])]))
    for cycle, group in ctx.graph.cycles():
        names = [edge.source for edge in cycle] + [cycle[0].source]
        path = backticked(names, " → ")
        if len(cycle) > 2 * LISTED:  # a long cycle: its ends, and each of its first edges explained
            path = (backticked(names[:LISTED], " → ") + f" → … ({len(cycle) - 2 * LISTED + 1} more) → "
                    + backticked(names[-LISTED:], " → "))
        on_cycle = set(names)
        cycle = cycle[:LISTED] + cycle[-1:] if len(cycle) > 2 * LISTED else cycle
        ways = [_ways(ctx, edge) for edge in cycle]
        labels = [Label(edge.span, f"`{edge.target}` runs after `{edge.source}` ("
                        + " and ".join("after" if way == "after" else f"uses `{edge.source}.result`" for way in edge_ways)
                        + ")") for edge, edge_ways in zip(cycle, ways)]
        kinds = sorted({way for edge_ways in ways for way in edge_ways})
        through = " and ".join("`after`" if kind == "after" else "references" for kind in kinds)
        notes = [f"`{edge.target}` depends on `{edge.source}` by "
                 + " and ".join("`after`" if way == "after" else f"a reference to `{edge.source}.result`" for way in edge_ways)
                 for edge, edge_ways in zip(cycle, ways)]
        others = [step_id for step_id in group if step_id not in on_cycle]
        if others:
            shown = backticked(others[:LISTED]) + (
                f" and {len(others) - LISTED} more" if len(others) > LISTED else "")
            notes.append(f"{shown} and these steps depend on each other too: a cycle through them may remain when "
                         "this one is broken")
        yield diagnostic(
            "dependency-cycle", cycle[-1].span, f"the steps form a cycle through {through}: {path}",
            labels=labels[:-1], notes=notes,
            help="remove one of these dependencies so the steps can run in some order",
        )


def _ways(ctx: PlanContext, edge: Edge) -> list[str]:
    """How `edge.target` depends on `edge.source`: by `after`, by a reference to its result, or
    both (the graph keeps one edge per pair: the reference when there are both)."""
    after = any(name.name == edge.source for name in ctx.graph.steps[edge.target].after)
    if edge.kind == "reference":
        return ["after", "reference"] if after else ["reference"]
    return ["after"]
