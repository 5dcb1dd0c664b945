"""`idempotency-key-shared`: two steps that may run together call one tool with the same key.

A tool that honours keys takes a call whose key it has seen for a retry of the earlier call: it
does not make the second call, or returns the first one's result. Two steps with one key for one
tool are then one effect, not two, and nothing says so at run time.

Algorithm
- Each step with a call and an `idempotency` key is grouped by its tool and its key: a key that
  reads no name by the text the runtime makes of its value (`runtime.canonical.key_text`: `5` and
  `"5"` are one key), any other key by its expression, compared without spans (the same
  expression over the same results has the same value in one run). A key that reads the step's
  own `result` is not the key the runtime uses (it derives one per step), a constant that names
  no key (null, `""`) fails its step, and a step that never runs (`unreachable-step`) makes no
  call: none of them takes part.
- Whether two steps may run together is read from their guard sets (`requirements.guard_sets`:
  the `when`s that must hold for a step to run, its own and those of the steps whose results it
  uses), as condition texts: when one set holds the other, whenever the step with more guards runs
  the other runs too. Sets where neither holds the other may be exclusive branches (`mode ==
  "fast"` and `mode != "fast"`), of which only one runs: not reported.
- In each group, a step is reported against the first earlier step it may run with. A group keeps
  the first step of each distinct guard set, up to `MAX_GUARD_SETS` of them, so the work per step
  is bounded.
Keys for different tools never clash: a tool keeps its own keys.
"""

from __future__ import annotations

from typing import Any, Iterator

from plangate.cel import ast as cel
from plangate.cel.evaluate import CelError, constant_value, reads_a_name
from plangate.checks.context import PlanContext
from plangate.checks.requirements import guard_condition, guard_sets
from plangate.checks.unreachable import never_running
from plangate.diagnostics import Diagnostic, Label, diagnostic
from plangate.ir.nodes import Step
from plangate.runtime.canonical import key_text

MAX_GUARD_SETS = 64


def check(ctx: PlanContext) -> Iterator[Diagnostic]:
    never = never_running(ctx)
    groups: dict[tuple[str, Any], list[Step]] = {}
    for step in ctx.graph.steps.values():
        if step.call is None or step.idempotency is None or cel.uses_bare_result(step.idempotency) is not None \
                or step.id in never:
            continue
        identity = _key_identity(step.idempotency)
        if identity is not None:
            groups.setdefault((step.call.tool, identity), []).append(step)
    shared = [steps for steps in groups.values() if len(steps) > 1]
    if not shared:
        return  # the common case: every key names one call, and no guard set is needed
    guards = guard_sets(ctx)

    def conditions(step: Step) -> frozenset[str]:
        """The `when`s `step` runs under, as canonical texts (equal texts: the same condition)."""
        return frozenset(guard_condition(ctx, guard) for guard in guards.get(step.id, ()))

    for steps in shared:
        firsts: dict[frozenset[str], tuple[int, Step]] = {}  # guard set → its first step, with its position
        for position, step in enumerate(steps):
            own = conditions(step)
            together = [found for guarded, found in firsts.items() if guarded <= own or own <= guarded]
            if own not in firsts and len(firsts) < MAX_GUARD_SETS:
                firsts[own] = (position, step)
            if together:
                yield _shared(min(together, key=lambda found: found[0])[1], step)


def _shared(first: Step, step: Step) -> Diagnostic:
    shown = cel.to_source(step.idempotency)  # type: ignore[arg-type]
    tool = step.call.tool  # type: ignore[union-attr]
    return diagnostic(
        "idempotency-key-shared", step.idempotency.span,  # type: ignore[union-attr]
        f"steps `{first.id}` and `{step.id}` both call `{tool}` with the idempotency key "
        f"`{shown if len(shown) <= 80 else shown[:77] + '...'}`",
        labels=[Label(first.idempotency.span, f"`{first.id}` uses the same key")],  # type: ignore[union-attr]
        notes=[f"`{tool}` may take the call of `{step.id}` for a retry of the call of `{first.id}`: "
               f"it would not be made, or would return the first call's result"],
        help=f'give each effect its own key, e.g. `"{step.id}-" + …`')


def _key_identity(key: cel.Expr) -> Any:
    """What makes two keys equal on a run: a constant key's text, else the expression; None for a
    constant that names no key (null, an empty string, an error, no canonical text): the runtime
    fails such a step instead of calling."""
    if reads_a_name(key):
        return ("expression", key)
    value = constant_value(key)
    if isinstance(value, CelError) or value is None or value == "":
        return None
    try:
        return ("text", key_text(value))
    except (TypeError, ValueError):
        return None
