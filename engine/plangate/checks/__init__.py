"""The checks, in the order they run.

Each check is a module with `check(ctx) -> Iterable[Diagnostic]`; it never raises and reports
everything it finds. `PLAN_CHECKS` run on every plan (with the compiled policy, if any, in the
context); `POLICY_CHECKS` on every policy document. Checks marked `needs_policy` are skipped when no
policy was given. A later check may read facts an earlier one left in `ctx.facts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from plangate.checks import (
    budget,
    catalogue,
    check_steps,
    currency,
    dependency_cycle,
    expressions,
    duplicate_step,
    limits,
    open_decision,
    policy_expressions,
    policy_structure,
    requirements,
    result_scope,
    retry_idempotency,
    rules,
    shared_key,
    step_shape,
    unknown_step,
    unreachable,
)


@dataclass(frozen=True)
class Check:
    name: str
    module: ModuleType
    needs_policy: bool = False
    needs_dag: bool = False


PLAN_CHECKS: tuple[Check, ...] = (
    Check("step-shape", step_shape),
    Check("duplicate-step", duplicate_step),
    Check("unknown-step", unknown_step),
    Check("dependency-cycle", dependency_cycle),
    Check("result-scope", result_scope),
    Check("expressions", expressions),
    Check("currency", currency),
    Check("open-decision", open_decision),
    Check("unreachable", unreachable, needs_dag=True),
    Check("catalogue", catalogue, needs_policy=True),
    Check("check-steps", check_steps),
    Check("retry-idempotency", retry_idempotency),
    Check("shared-key", shared_key),
    Check("requirements", requirements, needs_policy=True),
    Check("rules", rules, needs_policy=True),
    Check("limits", limits, needs_policy=False),
    Check("budget", budget, needs_dag=True),
)

POLICY_CHECKS: tuple[Check, ...] = (
    Check("policy-structure", policy_structure),
    Check("policy-expressions", policy_expressions),
)
