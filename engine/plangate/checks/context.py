"""What a check sees: one plan (or one policy), its graph, and the compiled policy, all read-only."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from plangate.graph import PlanGraph
from plangate.ir.nodes import Plan, Policy

if TYPE_CHECKING:
    from plangate.policy.compiled import CompiledPolicy


@dataclass
class PlanContext:
    plan: Plan
    graph: PlanGraph
    policy: "CompiledPolicy | None"
    options: dict[str, Any] = field(default_factory=dict)
    # Facts one check derives for the later ones (e.g. the solver's verdicts); keyed by check name.
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class PolicyContext:
    policy: Policy
