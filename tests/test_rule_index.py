"""The rule index (`plangate.policy.relevance`, `checks.rules.StepDecisions`): a condition whose
tool conjunct rejects a step's tool is never decided for that step, a condition that reads only
shared step fields is decided once per distinct value, and the verdicts are those of deciding
every condition for every step (`decide_for_step`)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from plangate.checks import rules
from plangate.checks.context import PlanContext
from plangate.checks.rules import StepDecisions, decide_for_step
from plangate.graph import build_graph
from plangate.policy.compiled import compile_policies
from plangate.policy.decide import evaluator_for
from plangate.policy.facts import plan_facts, rule_activation
from plangate.policy.relevance import ToolFilter, condition_shape
from plangate.source import SourceFile
from plangate.syntax import parse_source

TOOLS = ["a.x", "a.y", "b.z"]

CONDITIONS = [
    'call.tool == "a.x" && args.n > 3',
    '"a.y" == call.tool && args.n < 0',
    'step.tool == "b.z"',
    'call.tool in ["a.x", "b.z"] && args.n == 7',
    'call.tool.startsWith("a.") && step.risk >= external_write',
    'args.n > 1 && call.tool == "a.y" && step.risk == irreversible',
    'call.tool == "a.x" && call.tool == "a.y"',
    'step.risk == irreversible || call.tool == "a.x"',
    'step.risk >= reversible_write',
    'step.kind == "check" && step.retry > 0',
    'step.cost > 1.0',
    'step.nothing == 1',
    'args.n > 5',
    '!(call.tool == "a.x") && args.n > 2',
    '[1, 2].exists(x, x == step.retry)',
]

POLICY = "policy p {\n" + "\n".join(
    f"  tool {tool} {{ risk read_only args {{ n: int? }} }}" for tool in TOOLS) + """
  tool g.get { risk read_only }
""" + "\n".join(f'  deny "r{index}" when {condition}' for index, condition in enumerate(CONDITIONS)) + "\n}\n"


def context(plan_text: str, policy_text: str = POLICY) -> PlanContext:
    plan = parse_source(SourceFile("p.plan", plan_text)).document.plans[0]
    policy, _ = compile_policies(parse_source(SourceFile("p.policy", policy_text)).document.policies)
    return PlanContext(plan=plan, graph=build_graph(plan), policy=policy)


def unindexed(ctx: PlanContext, condition) -> dict[str, str]:
    evaluator = evaluator_for(ctx.policy)
    return {step_id: decide_for_step(evaluator, condition, facts, rule_activation(facts, ctx.plan), ctx).outcome
            for step_id, facts in plan_facts(ctx).items() if facts.step.call is not None}


def indexed(ctx: PlanContext, condition) -> dict[str, str]:
    decisions = StepDecisions(ctx)
    decided = {step_id: verdict.outcome for step_id, verdict in decisions.verdicts(condition)}
    return {step_id: decided.get(step_id, "never") for step_id in decisions.steps_with_calls}


def test_tool_filters_are_read_off_the_outermost_conjunction():
    policy = context("plan q { step s { call a.x() } }").policy
    shapes = [condition_shape(rule.when).tools for rule in policy.rules]
    assert shapes[0] == ToolFilter(frozenset({"a.x"}))
    assert shapes[1] == ToolFilter(frozenset({"a.y"}))
    assert shapes[2] == ToolFilter(frozenset({"b.z"}))
    assert shapes[3] == ToolFilter(frozenset({"a.x", "b.z"}))
    assert shapes[4] == ToolFilter(None, ("a.",))
    assert shapes[6] == ToolFilter(frozenset())  # two tools at once: no step
    assert shapes[7] is None  # a disjunction says nothing
    assert shapes[13] is None  # nor a negation


def test_shared_reads_are_only_known_step_fields():
    policy = context("plan q { step s { call a.x() } }").policy
    reads = [condition_shape(rule.when).reads for rule in policy.rules]
    assert reads[8] == (("step", "risk"),)
    assert reads[4] == (("call", "tool"), ("step", "risk"))
    assert reads[0] is None  # an argument
    assert reads[14] is None  # a macro's variable


def test_a_rule_whose_tool_does_not_match_is_never_decided_per_step(monkeypatch):
    decided = []

    def recording(evaluator, when, facts, activation, ctx):
        decided.append((when, facts.step.id))
        return decide_for_step(evaluator, when, facts, activation, ctx)

    monkeypatch.setattr(rules, "decide_for_step", recording)
    ctx = context("plan q { step s { call a.y(n: 4) } step t { call b.z(n: 1) } }")
    assert indexed(ctx, ctx.policy.rules[0].when) == {"s": "never", "t": "never"}
    assert decided == []


def test_a_condition_on_the_risk_is_decided_once_per_risk(monkeypatch):
    decided = []

    def recording(evaluator, when, facts, activation, ctx):
        decided.append(facts.step.id)
        return decide_for_step(evaluator, when, facts, activation, ctx)

    monkeypatch.setattr(rules, "decide_for_step", recording)
    steps = " ".join(f"step s{i} {{ call a.x(n: {i}) risk {'irreversible' if i % 2 else 'read_only'} }}"
                     for i in range(6))
    ctx = context(f"plan q {{ {steps} }}")
    outcomes = indexed(ctx, ctx.policy.rules[8].when)
    assert outcomes == {f"s{i}": "must" if i % 2 else "never" for i in range(6)}
    assert decided == ["s0", "s1"]


_ARGUMENTS = st.sampled_from(["", "n: 1", "n: 9", "n: -2", "n: 7", "n: g.result.n", "n: g.result.n + 1", "n: 1 / 0"])
_RISKS = st.sampled_from(["", "risk read_only", "risk reversible_write", "risk external_write", "risk irreversible"])
_STEPS = st.lists(st.tuples(st.sampled_from(["step", "check"]), st.sampled_from(TOOLS), _ARGUMENTS, _RISKS,
                            st.sampled_from(["", "when g.result.ok", "when g.result.n > 2"]),
                            st.sampled_from(["", "retry 1", "cost 2 usd", "cost 0.5 usd"])),
                  min_size=1, max_size=6)


@settings(max_examples=25, deadline=None)
@given(_STEPS)
def test_indexed_verdicts_equal_deciding_every_step(steps):
    body = " ".join(f"{kind} s{i} after g {{ call {tool}({args}) {risk} {when} {extra} }}"
                    for i, (kind, tool, args, risk, when, extra) in enumerate(steps))
    ctx = context(f"plan q {{ step g {{ call g.get() }} {body} }}")
    for rule in ctx.policy.rules:
        assert indexed(ctx, rule.when) == unindexed(ctx, rule.when), rule.name


_VALUES = st.one_of(st.none(), st.integers(-10, 10), st.text("ab", max_size=2), st.booleans(), st.just({"n": 3}))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([*TOOLS, "g.get", "c.q"]), st.dictionaries(st.sampled_from(["n", "m"]), _VALUES, max_size=2),
       st.sampled_from(["read_only", "reversible_write", "external_write", "irreversible"]),
       st.integers(0, 3))
def test_decide_call_evaluates_only_the_rules_its_tool_admits_and_decides_alike(tool, args, risk, retry):
    """`Evaluator.decide_call` skips the conditions whose tool filter rejects the call's tool: the
    rules that fire, the requirements that apply and the errors are those of evaluating them all."""
    policy = context("plan q { step s { call a.x() } }").policy
    evaluator = evaluator_for(policy)
    step = {"id": "s", "tool": tool, "risk": ["read_only", "reversible_write", "external_write", "irreversible"].index(risk),
            "retry": retry, "kind": "step", "cost": 1.0}
    activation = {"read_only": 0, "reversible_write": 1, "external_write": 2, "irreversible": 3,
                  "step": step, "call": {"tool": tool, "args": args}, "args": args, "plan": {"id": "q"}}
    decision = evaluator.decide_call(activation)
    every = [(rule.name, evaluator.evaluate(rule.when, activation)) for rule in policy.rules]
    assert [rule.name for rule in decision.denied_by] == [name for name, outcome in every if outcome is True]
    assert [name for name, _ in decision.errors] == [name for name, outcome in every if not isinstance(outcome, bool)]
    skipped = [rule.name for rule in policy.rules if rule not in evaluator._for_tool(activation)[0]]
    assert all(outcome is False for name, outcome in every if name in skipped)
    if tool == "c.q":
        assert {"r0", "r1", "r2", "r3", "r4", "r6"} <= set(skipped)  # no tool conjunct admits it


def test_a_policy_diff_tool_class_holds_a_condition_only_when_its_filter_admits_one_of_its_tools():
    from plangate.policy.diff import ToolClass

    exact = ToolClass("a.x", exact="a.x")
    pattern = ToolClass("a.*", prefix="a.", excluded=("a.x",), excluded_prefixes=("a.b.",))
    other = ToolClass("any other tool", excluded=("a.x", "z.q"), excluded_prefixes=("a.",))
    assert exact.may_hold(ToolFilter(frozenset({"a.x", "b.z"})))
    assert not exact.may_hold(ToolFilter(frozenset({"a.y"})))
    assert not exact.may_hold(ToolFilter(None, ("b.",)))
    assert pattern.may_hold(ToolFilter(frozenset({"a.y"})))
    assert not pattern.may_hold(ToolFilter(frozenset({"a.x", "a.b.c", "b.z"})))  # each taken elsewhere
    assert pattern.may_hold(ToolFilter(None, ("a.c",))) and pattern.may_hold(ToolFilter(None, ("",)))
    assert not pattern.may_hold(ToolFilter(None, ("b.",)))
    assert other.may_hold(ToolFilter(frozenset({"b.z"})))
    assert not other.may_hold(ToolFilter(frozenset({"z.q", "a.y"})))
    assert other.may_hold(None) and pattern.may_hold(None)
