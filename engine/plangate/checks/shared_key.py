"""`idempotency-key-shared`: two steps call one tool with the same idempotency key.

A tool that honours keys takes a call whose key it has seen for a retry of the earlier call: it
does not make the second call, or returns the first one's result. Two steps with one key for one
tool are then one effect, not two, and nothing says so at run time.

Algorithm: each step with a call and an `idempotency` key is grouped by its tool and its key — a
key that reads no name by its value where that value is a string (the key the runtime passes as
it is), any other key by its expression, compared without spans (the same expression over the same
results has the same value in one run). A key that reads the step's own `result` is not the key
the runtime uses (it derives one per step), so it takes part in no group, nor does a step that
never runs (`unreachable-step`). In each group, every step is reported against the first earlier
step it may run with: any step, if either has no `when`; else one with the same `when` (steps
with different `when`s may be exclusive branches, of which only one runs). Per group, the first step, the first with no `when` and the first of each
`when` are kept, so each step is looked up in constant time. Keys for different tools never
clash: a tool keeps its own keys.
"""

from __future__ import annotations

from typing import Any, Iterator

from plangate.cel import ast as cel
from plangate.cel.evaluate import constant_value, reads_a_name
from plangate.checks.context import PlanContext
from plangate.checks.unreachable import never_running
from plangate.diagnostics import Diagnostic, Label, diagnostic
from plangate.ir.nodes import Step


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    groups: dict[tuple[str, Any], _Group] = {}
    never = never_running(ctx)
    for step in ctx.graph.steps.values():
        if step.call is None or step.idempotency is None or cel.uses_bare_result(step.idempotency) is not None \
                or step.id in never:
            continue
        group = groups.setdefault((step.call.tool, _key_identity(step.idempotency)), _Group())
        first = group.partner(step)
        group.add(step)
        if first is None:
            continue
        shown = cel.to_source(step.idempotency)
        yield diagnostic(
            "idempotency-key-shared", step.idempotency.span,
            f"steps `{first.id}` and `{step.id}` both call `{step.call.tool}` with the idempotency key `{shown}`",
            labels=[Label(first.idempotency.span, f"`{first.id}` uses the same key")],  # type: ignore[union-attr]
            notes=[f"`{step.call.tool}` may take the call of `{step.id}` for a retry of the call of `{first.id}`: "
                   f"it would not be made, or would return the first call's result"],
            help=f'give each effect its own key, e.g. `"{step.id}-" + …`')


class _Group:
    """The steps seen so far with one tool and key, as far as `partner` needs them: each kept with
    its position in the plan."""

    def __init__(self) -> None:
        self.seen = 0
        self.first: Step | None = None
        self.first_unconditional: tuple[int, Step] | None = None
        self.first_under: dict[cel.Expr, tuple[int, Step]] = {}  # `when` → the first step with it

    def partner(self, step: Step) -> Step | None:
        """The first step seen that may run with `step`: any, if `step` has no `when`; else the
        earlier of the first with no `when` and the first with the same `when`."""
        if step.when is None:
            return self.first
        candidates = [found for found in (self.first_unconditional, self.first_under.get(step.when)) if found]
        return min(candidates, key=lambda found: found[0])[1] if candidates else None

    def add(self, step: Step) -> None:
        if self.first is None:
            self.first = step
        if step.when is None:
            self.first_unconditional = self.first_unconditional or (self.seen, step)
        else:
            self.first_under.setdefault(step.when, (self.seen, step))
        self.seen += 1


def _key_identity(key: cel.Expr) -> Any:
    """What makes two keys equal on a run: a constant string's value, else the expression."""
    if not reads_a_name(key):
        value = constant_value(key)
        if isinstance(value, str):
            return ("value", value)
    return ("expression", key)
