"""Decisions of a compiled policy on one call.

`Evaluator(policy)` compiles every rule and requirement condition once into closures
(`plangate.cel.evaluate`); the runtime and the static checks then decide calls with them:

- `decide_call(activation)` on concrete values → `CallDecision`: the deny rules that fire (any deny
  wins), the warn rules that fire, the requirements that apply. Only the conditions whose tool
  filter admits the call's tool are evaluated (`plangate.policy.relevance`: a rejecting filter
  means a false conjunct, so the condition is false whatever else it reads, errors included —
  also a value nested too deeply to evaluate, which `&&` does not absorb and which would
  otherwise count as holding: no such value reaches a run, whose values are at most 64 deep);
  the selection is remembered per tool name. A condition that errors at run
  time (a missing field, a type clash) does not fire, as in CEL policy engines; the error is kept in
  `CallDecision.errors` so it can be journaled and shown. Except one that the evaluator's own bounds
  stopped (too much work, a value too large or too deeply nested: `CelError.bounded`): whoever
  controls an argument's size could otherwise slip any call past any rule, so such a condition
  counts as holding — the deny fires, the warning is given, the requirement applies — and
  `CallDecision.unevaluated` says which and why.
- `verdict(expr, activation, unknown)` for the static checks: "never" / "must" when every value the
  condition reads is known (decided by the closure), otherwise the solver's three-valued answer
  (`plangate.smt.decide`), with a witness when it may fire.

The evaluator depends on the compiled policy alone; nothing else can change a decision.
"""

from __future__ import annotations

import threading

from dataclasses import dataclass, field
from typing import Any, Callable

from plangate.cel import ast as cel
from plangate.cel.evaluate import CelError, leaves
from plangate.policy.compiled import CompiledPolicy, CompiledRequirement, CompiledRule
from plangate.policy.relevance import condition_shape


@dataclass
class CallDecision:
    denied_by: list[CompiledRule] = field(default_factory=list)
    warned_by: list[CompiledRule] = field(default_factory=list)
    requirements: list[CompiledRequirement] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (rule or requirement, message)
    # Rules and requirements counted as holding because the evaluator's bounds stopped them: name → message.
    unevaluated: dict[str, str] = field(default_factory=dict)

    @property
    def allowed(self) -> bool:
        return not self.denied_by

    def denial(self, rule: CompiledRule) -> str:
        """Why `rule` (one of `denied_by`) refuses the call, in a sentence."""
        if rule.name in self.unevaluated:
            return (f"denied by `{rule.name}`: its condition could not be evaluated on these arguments "
                    f"({self.unevaluated[rule.name]}), and a rule stopped by the evaluator's bounds counts as firing")
        return f"denied by `{rule.name}`" + (f": {rule.because}" if rule.because else "")


@dataclass(frozen=True)
class StaticVerdict:
    outcome: str  # never | may | must | unknown | runtime
    witness: dict[str, Any] | None = None
    reason: str | None = None


class Evaluator:
    def __init__(self, policy: CompiledPolicy) -> None:
        from plangate.cel.evaluate import compile_expr

        self.policy = policy
        # The policy's own conditions, compiled once; `policy` keeps them alive, so ids stay valid.
        conditions = [rule.when for rule in policy.rules]
        conditions += [req.when for req in policy.requirements if req.when is not None]
        self._compiled: dict[int, Callable[[Any], Any]] = {id(expr): compile_expr(expr) for expr in conditions}
        self._by_tool: dict[str, tuple[tuple[CompiledRule, ...], tuple[CompiledRequirement, ...]]] = {}

    def holds(self, expr: cel.Expr | None, activation: dict[str, Any]) -> bool | str:
        """True/False, or the error message when the condition cannot be evaluated."""
        outcome = self.evaluate(expr, activation)
        return outcome.message if isinstance(outcome, CelError) else outcome

    def evaluate(self, expr: cel.Expr | None, activation: dict[str, Any]) -> "bool | CelError":
        """True/False, or the `CelError` when the condition cannot be evaluated. A condition that
        is not the policy's own (one the checks combine for a step) is compiled for this call
        only, so the cache never grows with the plans checked."""
        if expr is None:
            return True
        from plangate.cel.evaluate import compile_expr

        function = self._compiled.get(id(expr)) or compile_expr(expr)
        value = function(activation)
        if isinstance(value, CelError):
            return value
        if not isinstance(value, bool):
            return CelError(f"the condition gives `{value!r}`, not a bool")
        return value

    def decide_call(self, activation: dict[str, Any]) -> CallDecision:
        decision = CallDecision()
        rules, requirements = self._for_tool(activation)
        for rule in rules:
            if self._applies(rule.when, rule.name, activation, decision):
                (decision.denied_by if rule.effect == "deny" else decision.warned_by).append(rule)
        for requirement in requirements:
            if self._applies(requirement.when, requirement.describe(), activation, decision):
                decision.requirements.append(requirement)
        return decision

    def _for_tool(self, activation: dict[str, Any]) -> tuple[tuple[CompiledRule, ...], tuple[CompiledRequirement, ...]]:
        """The rules and requirements that can hold for the call's tool, in policy order: every one
        whose condition's tool filter admits it (all of them when the tool is not one string that
        `call.tool` and `step.tool` share)."""
        call, step = activation.get("call"), activation.get("step")
        tool = call.get("tool") if isinstance(call, dict) else None
        if type(tool) is not str or not isinstance(step, dict) or step.get("tool") != tool:
            return self.policy.rules, self.policy.requirements
        found = self._by_tool.get(tool)
        if found is None:
            def admitted(condition: cel.Expr | None) -> bool:
                tools = condition_shape(condition).tools if condition is not None else None
                return tools is None or tools.admits(tool)  # type: ignore[arg-type]

            found = (tuple(rule for rule in self.policy.rules if admitted(rule.when)),
                     tuple(requirement for requirement in self.policy.requirements if admitted(requirement.when)))
            if len(self._by_tool) >= 4096:  # tool names come from plans: keep the memory bounded
                self._by_tool.clear()
            self._by_tool[tool] = found
        return found

    def _applies(self, condition: cel.Expr | None, name: str, activation: dict[str, Any],
                 decision: CallDecision) -> bool:
        outcome = self.evaluate(condition, activation)
        if not isinstance(outcome, CelError):
            return outcome
        decision.errors.append((name, outcome.message))
        if outcome.bounded:  # fail closed: see the module's docstring
            decision.unevaluated[name] = outcome.message
        return outcome.bounded

    def verdict(self, expr: cel.Expr, activation: dict[str, Any], unknown: bool,
                time_bound: float = 2.0) -> StaticVerdict:
        """Whether `expr` never, may or must hold, given an activation that may hold `Unknown`s."""
        outcome = self.evaluate(expr, activation)
        if isinstance(outcome, bool):
            # Decided with the unknown values still opaque: a `Unknown` makes every operation that
            # reads it an error, so a bool here did not depend on them (`false && x`, `has(…)`).
            return StaticVerdict("must" if outcome else "never")
        if not unknown or not _reads_unknown(expr, activation):
            # An error that no run-time value can mend: the condition never holds, unless the
            # evaluator's bounds stopped it, which the runtime counts as holding.
            return StaticVerdict("must" if outcome.bounded else "never", reason=outcome.message)
        from plangate.smt.decide import decide

        answer = decide(expr, _seconds_for_durations(activation), time_bound, original=activation)
        return StaticVerdict(answer.outcome, answer.witness, answer.reason)


def _reads_unknown(expr: cel.Expr, activation: dict[str, Any]) -> bool:
    """Whether `expr` reads a value known only at run time: some field path it selects from a
    variable (`args.amount`, `call.args`) reaches an `Unknown`, or ends at a container holding
    one. A path that runs into a missing field reads nothing unknown: its error is certain."""
    from plangate.smt.decide import Unknown

    selected = {id(node.operand) for node in cel.walk(expr) if isinstance(node, cel.Select)}
    for node in cel.walk(expr):
        if id(node) in selected or not isinstance(node, (cel.Select, cel.Ident)):
            continue  # only the outermost node of each `a.b.c` chain
        chain = cel.field_chain(node)
        if chain is None or chain[0] not in activation:
            continue  # a chain over a computed value: its parts are outermost chains of their own
        value: Any = activation[chain[0]]
        for key in chain[1]:
            if isinstance(value, Unknown):
                return True
            if not isinstance(value, dict) or key not in value:
                value = None  # a missing field: an error whatever the run brings
                break
            value = value[key]
        if value is not None and _holds_unknown(value, Unknown):
            return True
    return False


def _holds_unknown(value: Any, unknown_type: type) -> bool:
    return any(isinstance(item, unknown_type) for item in leaves(value))


def _seconds_for_durations(value: Any) -> Any:
    """The solver reasons about durations as seconds: the same activation with each `Duration`
    replaced by its number of seconds."""
    from plangate.cel.evaluate import Duration

    if isinstance(value, Duration):
        from plangate.smt.encode import in_seconds

        return in_seconds(value)
    if isinstance(value, dict):
        return {key: _seconds_for_durations(item) for key, item in value.items()}
    return value


_EVALUATORS: dict[str, Evaluator] = {}
_EVALUATORS_MUTEX = threading.Lock()  # the threads of an embedding share the cache


def evaluator_for(policy: CompiledPolicy) -> Evaluator:
    """One evaluator per compiled policy (keyed by its content hash)."""
    found = _EVALUATORS.get(policy.hash)
    if found is None or found.policy is not policy:
        found = Evaluator(policy)
        with _EVALUATORS_MUTEX:
            if len(_EVALUATORS) >= 64:  # a long-lived process may compile many policies: keep the recent ones
                _EVALUATORS.pop(next(iter(_EVALUATORS)))
            _EVALUATORS[policy.hash] = found
    return found
