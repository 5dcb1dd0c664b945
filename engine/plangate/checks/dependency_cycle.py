"""`dependency-cycle`: the plan must be a DAG.

One diagnostic per strongly connected component, naming one cycle through it and saying, for each
edge, whether it comes from `after` or from a `x.result` reference; and one per step that depends
on itself (a cycle of one step: it is in its own `after` — once however often —, or names its own
result `x.result`, at each place).
"""

from __future__ import annotations

from typing import Iterator

from plangate.checks.context import PlanContext
from plangate.diagnostics import Diagnostic, Label, diagnostic


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    after_itself: set[str] = set()
    for edge in ctx.graph.self_edges:
        if edge.kind == "after":
            if edge.target in after_itself:
                continue
            after_itself.add(edge.target)
        how = "is after itself" if edge.kind == "after" else f"uses its own result as `{edge.source}.result`"
        help_text = ("remove it from its own `after`" if edge.kind == "after"
                     else "inside `expect`, `idempotency` and `rollback` a step's own result is `result`")
        yield diagnostic("dependency-cycle", edge.span, f"step `{edge.target}` depends on itself: it {how}",
                         help=help_text)
    for cycle in ctx.graph.cycles():
        names = [edge.source for edge in cycle] + [cycle[0].source]
        path = " → ".join(f"`{name}`" for name in names)
        labels = [
            Label(edge.span, f"`{edge.target}` runs after `{edge.source}` "
                             + ("(after)" if edge.kind == "after" else f"(uses `{edge.source}.result`)"))
            for edge in cycle
        ]
        kinds = sorted({edge.kind for edge in cycle})
        through = " and ".join("`after`" if kind == "after" else "references" for kind in kinds)
        yield diagnostic(
            "dependency-cycle", cycle[-1].span, f"the steps form a cycle through {through}: {path}",
            labels=labels[:-1],
            notes=[f"`{edge.target}` depends on `{edge.source}` by "
                   + ("`after`" if edge.kind == "after" else f"a reference to `{edge.source}.result`")
                   for edge in cycle],
            help="remove one of these dependencies so the steps can run in some order",
        )
