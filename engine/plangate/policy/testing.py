"""`plangate test`: run the `test` blocks of policies.

Each policy's tests run against that policy compiled on its own. A test's call is decided exactly
as the runtime decides a call: the step's risk is the higher of the test's `risk` (if any) and the
catalogue's, and a `risk` below the catalogue's refuses the call (`risk-underdeclared` refuses
such a step; the rules are still asked); the arguments must be constants. A call no tool could be given (a NaN, a map key that
is not a string) is denied before any rule: no rule is asked (`catalogue.refusal_before_rules`).
A call whose arguments do not fit its tool's `args` is denied whatever the rules say, as the
runtime denies it, and so is an unmatched tool when the policy says `unknown_tools deny` (the
default); their rules are still asked, so a test names the deny rules that fire too (a rule may
name a tool the catalogue leaves out, or a test leave out an argument the rule does not read).
Expectations: `allow`
(no deny fires), `deny` (some deny fires), `deny "r"` (deny rule `r` fires), `warn "r"`,
`require K` (a requirement of kind K applies); every expectation of a test must hold, and a test
without one fails (it would pass whatever the policy decides). A failed
test is a `policy-test-failed` diagnostic at the test, saying what was expected and what the
policy decided.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from plangate.diagnostics import Diagnostic, Label, Severity, backticked, diagnostic
from plangate.ir.nodes import Plan, PolicyTest
from plangate.policy.compiled import CompiledPolicy, compile_policies
from plangate.source import SourceMap
from plangate.suggest import did_you_mean


@dataclass
class TestOutcome:
    policy: str
    name: str
    passed: bool
    decided: str
    file: str = ""
    problems: list[Diagnostic] = field(default_factory=list)  # what this test reported


@dataclass
class PolicyTestResult:
    diagnostics: list[Diagnostic]
    sources: SourceMap
    files: list[str]
    outcomes: list[TestOutcome] = field(default_factory=list)

    @property
    def report(self) -> str:
        lines = [f"{'ok  ' if o.passed else 'FAIL'} {o.policy} › {o.name}   ({o.decided})" for o in self.outcomes]
        passed = sum(o.passed for o in self.outcomes)
        if not self.outcomes and any(d.severity is Severity.ERROR and d.name in _UNREAD for d in self.diagnostics):
            lines.append("no test ran: a policy could not be read (below)")
        else:
            lines.append(f"{passed} passed, {len(self.outcomes) - passed} failed")
        return "\n".join(lines)

    def exit_code(self, strict: bool = False) -> int:
        if any(d.name in ("unreadable-input", "internal-error") for d in self.diagnostics):
            return 2
        failing = (Severity.ERROR, Severity.WARNING) if strict else (Severity.ERROR,)
        return 1 if any(d.severity in failing for d in self.diagnostics) else 0


_UNREAD = ("syntax-error", "unreadable-input", "input-too-large")


def run_policy_tests(paths: Sequence[str]) -> PolicyTestResult:
    """Check each policy and run its tests; every expression evaluated, by the checks and the tests,
    draws on one work allowance (`cel.evaluate.COMMAND_WORK`), as in `plangate check`."""
    from plangate.cel.evaluate import COMMAND_WORK, allowance
    from plangate.driver import work_exhausted

    with allowance(COMMAND_WORK) as work:
        result = _run_policy_tests(paths)
    if work.exhausted:  # the tests decided after that may pass or fail wrongly: say so, and fail
        first = result.sources.get(result.files[0]) if result.files else None
        result.diagnostics.insert(0, work_exhausted([first] if first is not None else []))
    return result


def _run_policy_tests(paths: Sequence[str]) -> PolicyTestResult:
    from plangate.driver import check, display_name, once_each
    from plangate.source import SourceMap

    paths = once_each(paths)  # `test a.policy ./a.policy` runs its tests once
    result = PolicyTestResult([], SourceMap(), [display_name(path) for path in paths])
    policies = []
    for path in paths:  # each policy is checked and tested on its own: this command does not combine
        checked = check([], [path])
        result.diagnostics.extend(checked.diagnostics)
        for name in checked.files:
            source = checked.sources.get(name)
            if source is not None:
                result.sources.add(source)
        policies.extend(checked.policies)
    if any(d.severity is Severity.ERROR and d.name in _UNREAD for d in result.diagnostics):
        policies = []  # a file that was not read may hold the tests that fail: none runs, so none misleads
    found = list(result.diagnostics)
    for policy in policies:
        compiled, _ = compile_policies([policy])
        for test in policy.tests:
            outcome, problems = run_test(compiled, policy.id, test)
            # an error inside the block (two `call`s, an unknown risk) fails its test: what it decided is not what was written
            inside = [d for d in found if d.severity is Severity.ERROR and d.span.file == test.span.file
                      and test.span.start <= d.span.start < test.span.end]
            if inside and outcome.passed:  # it would pass but for the error: say why it fails
                problems.append(diagnostic(
                    "policy-test-failed", test.span,
                    f"test `{test.name}` fails: its block holds an error (`{inside[0].name}`: "
                    f"{inside[0].message}), so what was decided is not what the test says",
                    help="fix the error in the test's block"))
            outcome.passed = outcome.passed and not inside
            outcome.file, outcome.problems = test.span.file, [*inside, *problems]
            result.outcomes.append(outcome)
            result.diagnostics.extend(problems)
    result.diagnostics.sort(key=Diagnostic.sort_key)
    return result


def run_test(policy: CompiledPolicy, policy_id: str, test: PolicyTest) -> tuple[TestOutcome, list[Diagnostic]]:
    from plangate.cel.evaluate import CelError, compile_expr
    from plangate.checks.catalogue import not_in_catalogue, refusal_before_rules, typed_arguments, underdeclared
    from plangate.runtime.canonical import call_value
    from plangate.policy.decide import evaluator_for
    from plangate.policy.facts import StepFacts, effective_risk, rule_activation
    from plangate.ir.nodes import Step

    problems: list[Diagnostic] = []
    if not test.call.tool:  # the test has no `call` (`missing-call` says where): there is nothing to decide
        problems.append(diagnostic("policy-test-failed", test.span, f"test `{test.name}` has no call: it decides nothing"))
        return TestOutcome(policy_id, test.name, False, "no call to decide"), problems
    args: dict[str, Any] = {}
    unsendable: list[str] = []  # arguments no tool could be given: the runtime fails such a call
    for argument in test.call.args:
        value = compile_expr(argument.value)({})
        if isinstance(value, CelError):
            problems.append(diagnostic("policy-test-failed", argument.value.span,
                                       f"test `{test.name}`: argument `{argument.name}` is not a constant: {value.message}",
                                       help="a test's call takes literal values"))
        else:
            sent = call_value(value)
            if isinstance(sent, CelError):
                unsendable.append(f"argument `{argument.name}`: {sent.message}")
        args[argument.name] = value
    if problems:  # the call under test is not known: it decides nothing, so the test cannot pass
        return TestOutcome(policy_id, test.name, False, "the call's arguments are not constants"), problems
    entry = policy.match(test.call.tool)
    step = Step(id="test", call=test.call, risk=test.risk)
    # The arguments are the plan's kind of constants: they fit the tool's `args` as `check` types a
    # step's (`"1h"` is no `duration`, `5` no `uint`); the rules then see them as the runtime would
    # hold them (900 for a `double` is 900.0).
    refused_by_arguments = refusal_before_rules(test.call.tool, entry, args)
    argument_refusal = "; ".join(unsendable) or (str(refused_by_arguments) if refused_by_arguments else None)
    rules_asked = not unsendable and (refused_by_arguments is None or refused_by_arguments.explainable)
    unknown = not_in_catalogue(test.call.tool) if entry is None and policy.unknown_tools == "deny" else None
    declared = test.risk.level if test.risk is not None else None
    args = typed_arguments(entry, args)
    denies: list[str] = []
    warns: list[str] = []
    kinds: list[str] = []
    errors: list[tuple[str, str]] = []
    if rules_asked:  # else values no rule could see: refused before any rule, as at run time
        facts = StepFacts(step=step, entry=entry, declared_risk=declared, effective_risk=effective_risk(step, entry),
                          args=args)
        decision = evaluator_for(policy).decide_call(rule_activation(facts, Plan(id=policy_id)))
        denies = [rule.name for rule in decision.denied_by]
        warns = [rule.name for rule in decision.warned_by]
        kinds = sorted({requirement.kind for requirement in decision.requirements})
        errors = [] if argument_refusal else decision.errors  # a rule fails on values of the wrong type: the refusal says why
    low = underdeclared(test.call.tool, declared, entry)
    refusal = "; ".join(part for part in (unknown, low, argument_refusal) if part) or None
    refused = bool(refusal)
    decided = _describe(denies, warns, kinds, refusal)
    rule_names = [rule.name for rule in policy.rules]
    passed = bool(test.expects)
    if not test.expects:  # a test that expects nothing checks nothing: it fails alone, the others run
        problems.append(diagnostic("policy-test-failed", test.span,
                                   f"test `{test.name}` has no `expect`: it checks nothing (the policy decides: {decided})",
                                   help='add `expect allow`, `expect deny "rule-name"` or the decision the test is for'))
    for expect in test.expects:
        if expect.effect == "allow":
            ok = not denies and not refused
            wanted = "allow"
        elif expect.effect == "deny":
            ok = (expect.rule in denies) if expect.rule else bool(denies or refused)
            wanted = f'deny "{expect.rule}"' if expect.rule else "deny"
        elif expect.effect == "warn":
            ok = (expect.rule in warns) if expect.rule else bool(warns)
            wanted = f'warn "{expect.rule}"' if expect.rule else "warn"
        else:
            ok = expect.rule in kinds
            wanted = f"require {expect.rule}"
        if ok:
            continue
        passed = False
        help_text = None
        if expect.rule and expect.effect in ("deny", "warn") and expect.rule not in rule_names:
            help_text = did_you_mean(expect.rule, rule_names) or f"the policy has no rule named `{expect.rule}`"
        problems.append(diagnostic(
            "policy-test-failed", expect.span,
            f"test `{test.name}` expects `{wanted}`, but the policy decides: {decided}",
            labels=[Label(test.call.span, "the call under test")],
            notes=[f"{name}: {message}" for name, message in errors if name in _relevant(policy, expect)],
            help=help_text))
    return TestOutcome(policy_id, test.name, passed, decided), problems


def _relevant(policy: CompiledPolicy, expect: Any) -> set[str]:
    """The conditions whose evaluation errors may explain a failed expectation (a rule or
    requirement that did not fire because its condition failed): the named rule; else the deny
    rules (for `allow` and `deny`), the warn rules, or the requirements of the kind expected."""
    if expect.effect in ("deny", "warn") and expect.rule:
        return {expect.rule}
    if expect.effect in ("allow", "deny", "warn"):
        effect = "warn" if expect.effect == "warn" else "deny"
        return {rule.name for rule in policy.rules if rule.effect == effect}
    return {requirement.describe() for requirement in policy.requirements if requirement.kind == expect.rule}


def _describe(denies: list[str], warns: list[str], kinds: list[str], refusal: str | None) -> str:
    parts = []
    if refusal:
        parts.append(f"deny ({refusal})")
    if denies:
        parts.append("deny by " + backticked(denies))
    if not parts:
        parts.append("allow")
    if warns:
        parts.append("warn by " + backticked(warns))
    if kinds:
        parts.append("requires " + ", ".join(kinds))
    return "; ".join(parts)
