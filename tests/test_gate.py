"""The embeddable gate: `Gate.decide` answers for one concrete call what `plangate check` and the
runtime answer, and never raises.

The strongest test is the first: every `test` block of the repository's policies, asked of the gate
as a call, gets the decision the block expects — the gate and `plangate test` agree.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plangate import Gate, GateError
from plangate.cel.evaluate import compile_expr
from plangate.driver import check, compile_policy

ROOT = Path(__file__).resolve().parents[1]
POLICIES = sorted((ROOT / "policies").glob("*.policy"))
BASELINE = ROOT / "policies" / "baseline.policy"


def _test_blocks():
    for path in POLICIES:
        result = check([], [path])
        for policy in result.policies:
            for test in policy.tests:
                yield pytest.param(path, test, id=f"{path.stem}: {test.name}")


@pytest.mark.parametrize("path, test", list(_test_blocks()))
def test_the_gate_decides_every_policy_test_as_the_test_expects(path, test):
    gate = Gate.from_files([path])
    args = {argument.name: compile_expr(argument.value)({}) for argument in test.call.args}
    decision = gate.decide(test.call.tool, args, risk=test.risk.name if test.risk is not None else None)
    for expect in test.expects:
        if expect.effect == "allow":
            assert decision.allowed, decision.reasons
        elif expect.effect == "deny":
            assert not decision.allowed
            if expect.rule:
                assert expect.rule in decision.denied_by
        elif expect.effect == "warn":
            assert any(f"`{expect.rule}`" in warning for warning in decision.warnings) if expect.rule \
                else decision.warnings
        else:
            required = decision.requires + (["approval"] if decision.approvals else [])
            assert expect.rule in required


def test_an_allowed_call_lists_the_approvals_and_requirements_it_needs():
    gate = Gate.from_files([BASELINE])
    decision = gate.decide("dns.route", {"host": "v2.example.com", "target": "pv-42"})
    assert decision.allowed and decision.reasons == []
    assert decision.risk == "external_write"
    assert [(need.role, need.count, need.within_seconds) for need in decision.approvals] == [("operator", 1, 3600)]
    assert "check" in decision.requires
    assert decision.policy_hash == gate.policy_hash and decision.policy_hash.startswith("sha256:")
    as_dict = decision.to_dict()
    assert as_dict["approvals"][0]["role"] == "operator" and as_dict["allowed"] is True


def test_a_deny_rule_refuses_the_call_and_says_which_and_why():
    gate = Gate.from_files([BASELINE])
    decision = gate.decide("dns.route", {"host": "*", "target": "pv-42"})
    assert not decision.allowed
    assert decision.denied_by and any(reason.startswith(f"denied by `{decision.denied_by[0]}`")
                                      for reason in decision.reasons)


POLICY = """
policy gate_tests {
  tool pay.refund { risk irreversible args { amount: double, currency: string, window: duration? } }
  tool read.*     { risk read_only }
  deny "cap" when call.tool == "pay.refund" && args.amount > 500.0 because "finance handles those"
  deny "slow" when has(args.window) && args.window > duration("1h")
  warn "eur" when has(args.currency) && args.currency == "EUR"
  require approval when step.risk == irreversible by 2 of role "finance" within 15m
  require approval when step.risk >= external_write by role "operator" within 1h
  require idempotency when step.risk >= reversible_write
}
"""


@pytest.fixture(scope="module")
def gate() -> Gate:
    return Gate.from_sources([("gate.policy", POLICY)])


def test_arguments_are_checked_against_the_catalogue(gate):
    decision = gate.decide("pay.refund", {"amout": 10.0, "currency": 5})
    assert not decision.allowed
    assert "`pay.refund` has no argument `amout`" in decision.reasons
    assert "`pay.refund` needs argument `amount` (`double`)" in decision.reasons
    assert any(reason.startswith("argument `currency` of `pay.refund` must be `string`") for reason in decision.reasons)


def test_rules_warnings_and_merged_approvals(gate):
    decision = gate.decide("pay.refund", {"amount": 900.0, "currency": "EUR"})
    assert not decision.allowed and decision.denied_by == ["cap"]
    assert "denied by `cap`: finance handles those" in decision.reasons
    assert decision.warnings == ["warn rule `eur` fires"]
    assert {(need.role, need.count, need.within_seconds) for need in decision.approvals} == {
        ("finance", 2, 900), ("operator", 1, 3600)}
    assert decision.requires == ["idempotency"]
    small = gate.decide("pay.refund", {"amount": 20, "currency": "USD"})  # an int passes for a double
    assert small.allowed and small.warnings == []


def test_a_duration_argument_may_be_given_as_its_text(gate):
    assert gate.decide("pay.refund", {"amount": 1.0, "currency": "USD", "window": "30m"}).allowed
    decision = gate.decide("pay.refund", {"amount": 1.0, "currency": "USD", "window": "2h"})
    assert decision.denied_by == ["slow"]


def test_a_bytes_argument_may_be_given_as_its_text_which_the_rules_see_as_its_utf8_bytes():
    """A tool is given a `bytes` value as text (JSON has no bytes), so that text is what a caller
    passes; `size()` then counts bytes, not characters."""
    blobs = Gate.from_sources([("b.policy", """policy b {
      tool up.load { risk read_only args { blob: bytes } }
      deny "big" when args.blob.size() > 3
      deny "magic" when args.blob == bytes("evil")
    }""")])
    assert blobs.decide("up.load", {"blob": "abc"}).allowed
    assert blobs.decide("up.load", {"blob": "é€"}).denied_by == ["big"]  # two characters, five bytes
    assert blobs.decide("up.load", {"blob": "evil"}).denied_by == ["big", "magic"]
    refused = blobs.decide("up.load", {"blob": 7})
    assert refused.reasons == ["argument `blob` of `up.load` must be `bytes`, but it is the int `7`"]


def test_limit_approval_within_caps_every_approval_the_gate_asks_for_as_the_runtime_does():
    capped = Gate.from_sources([("c.policy", """policy c {
      tool dns.route { risk external_write }
      require approval when step.risk >= external_write by role "operator" within 1h
      require approval when step.risk >= external_write by role "sre"
      limit approval_within <= 30m
    }""")])
    needs = {need.role: need.within_seconds for need in capped.decide("dns.route", {}).approvals}
    assert needs == {"operator": 1800, "sre": 1800}


def test_one_policy_path_may_be_given_as_bytes(tmp_path):
    path = tmp_path / "b.policy"
    path.write_text("policy b { tool a.b { risk read_only } }", encoding="utf-8")
    assert Gate.from_files(os.fsencode(path)).decide("a.b", {}).allowed


def test_unknown_tools_and_declared_risk(gate):
    assert gate.decide("mail.send", {}).reasons == ["`mail.send` is not in the policy's catalogue"]
    assert gate.decide("read.logs", {}).allowed and gate.decide("read.logs", {}).approvals == []
    higher = gate.decide("read.logs", {}, risk="external_write")
    assert higher.risk == "external_write" and [need.role for need in higher.approvals] == ["operator"]
    assert gate.decide("read.logs", {}, risk="external_write", kind="check").requires == []
    with pytest.raises(ValueError, match="not a risk class"):
        gate.decide("read.logs", {}, risk="dangerous")
    warned = Gate.from_sources([("w.policy", "policy w { tool a.b { risk read_only } unknown_tools warn }")])
    decision = warned.decide("x.y", {})
    assert decision.allowed and decision.warnings == ["`x.y` is not in the policy's catalogue"]


def test_a_policy_with_errors_is_refused_with_its_diagnostics():
    with pytest.raises(GateError) as raised:
        Gate.from_sources([("bad.policy", "policy p { tool a.b { risk nowhere } }")])
    assert [item.name for item in raised.value.diagnostics] == ["unknown-risk"]
    with pytest.raises(GateError):
        Gate.from_files([ROOT / "no-such.policy"])


def test_check_plan_uses_the_same_policies(gate):
    result = gate.check_plan('plan p { step r { call pay.refund(amount: 900.0, currency: "USD") } }')
    assert "policy-deny" in {item.name for item in result.diagnostics}


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tool=st.sampled_from(["pay.refund", "read.x", "read", "", "pay.refund.x", "ünï.cödé"]),
       args=st.dictionaries(st.sampled_from(["amount", "currency", "window", "other", ""]), JSON, max_size=4))
def test_the_gate_never_raises(gate, tool, args):
    decision = gate.decide(tool, args)
    assert decision.allowed == (not decision.reasons)


def test_a_gate_needs_a_policy_and_check_takes_one_path_alone():
    with pytest.raises(ValueError, match="at least one policy"):
        Gate.from_files([])
    assert check(str(ROOT / "examples" / "deploy.plan"), str(BASELINE)).exit_code() == 0


def test_an_int_given_for_a_double_is_the_double_the_rules_see():
    """`amount: 900` passes for a double; a rule's `args.amount * 1.05` then sees 900.0 (CEL has no
    `int * double`: with the int the rule would fail to evaluate, and the call would slip past it).
    A non-negative int given for a `uint` (JSON has no unsigned ints) is a uint."""
    gate = Gate.from_sources([("p.policy", """policy p {
      tool pay.refund { risk irreversible args { amount: double, count: uint? } }
      deny "cap" when args.amount * 1.05 > 500.0
      deny "many" when has(args.count) && args.count > 3u
    }""")])
    assert gate.decide("pay.refund", {"amount": 900}).denied_by == ["cap"]
    assert gate.decide("pay.refund", {"amount": 100, "count": 5}).denied_by == ["many"]
    assert gate.decide("pay.refund", {"amount": 100, "count": 2}).allowed
    assert not gate.decide("pay.refund", {"amount": 100, "count": -1}).allowed  # no uint: refused by the schema


def test_the_gate_refuses_what_no_call_could_be_and_what_check_would_refuse():
    import json

    gate = Gate.from_files(str(BASELINE))  # one path as itself
    nan = gate.decide("payments.refund", json.loads('{"charge_id": "ch_1", "amount": NaN, "currency": "EUR"}'))
    assert not nan.allowed and nan.reasons == ["the arguments have no JSON form: JSON has no spelling for the float nan"]
    as_check = gate.decide("dns.route", {"host": "h", "target": "t"}, kind="check")
    assert not as_check.allowed and "a check only observes, and `dns.route` is `external_write`" in as_check.reasons
    pattern = gate.decide("deploy.*", {})
    assert not pattern.allowed and pattern.reasons[0].startswith("`deploy.*` is not a tool name")
    retried = Gate.from_sources([("p.policy", "policy p { tool t.x { risk read_only } limit retries <= 3 }")])
    assert retried.decide("t.x", {}, retry=3).allowed
    assert retried.decide("t.x", {}, retry=4).reasons == ["4 retries are over `limit retries <= 3`"]
    for tool, args in ((None, {}), (123, {}), ("t.x", "x")):
        with pytest.raises(TypeError):
            gate.decide(tool, args)
    with pytest.raises(TypeError, match="a \\(name, text\\) pair or a SourceFile"):
        Gate.from_sources(["policy p { }"])


def test_check_plan_says_when_the_text_is_no_plan():
    gate = Gate.from_files([BASELINE])
    found = gate.check_plan(BASELINE.read_text(), "p.policy").diagnostics
    assert [d.name for d in found] == ["wrong-document-kind"] and gate.check_plan(
        BASELINE.read_text(), "p.policy").exit_code() == 1


def test_the_policies_of_a_gate_are_a_set_whatever_their_order_and_repeats():
    strict = ROOT / "policies" / "strict.policy"
    one = Gate.from_files([BASELINE, strict])
    assert Gate.from_files([strict, BASELINE]).policy_hash == one.policy_hash
    assert Gate.from_files([BASELINE, strict, BASELINE]).policy_hash == one.policy_hash
    twice = Gate.from_files([BASELINE, BASELINE]).decide("payments.refund", {"charge_id": "c", "amount": 900.0,
                                                                            "currency": "EUR"})
    assert len(twice.denied_by) == len(set(twice.denied_by)) and twice.denied_by


def test_misused_arguments_are_clear_errors_not_decisions(gate):
    with pytest.raises(TypeError, match="retry must be an int"):
        gate.decide("logs.search", {}, retry="2")
    with pytest.raises(ValueError, match="retry must be 0 or more"):
        gate.decide("logs.search", {}, retry=-1)
    with pytest.raises(TypeError, match="must be a str"):
        Gate.from_sources([("a.policy", b"policy a { }")])
    with pytest.raises(TypeError, match="the plan text must be a str"):
        gate.check_plan(b"plan p { }")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a gate decides by a CompiledPolicy"):
        Gate(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the policy files are a path or a list of paths, not NoneType"):
        Gate.from_files(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a policy path is a str, bytes or os.PathLike, not NoneType"):
        Gate.from_files([None])  # type: ignore[arg-type]


def test_paths_may_come_from_a_generator_and_are_all_read(tmp_path):
    """A generator is read once, and every path in it counts (a first pass that only checked the
    types used it up, and the plan was then checked against no policy and passed)."""
    plan = tmp_path / "drop.plan"
    plan.write_text('plan p { step drop { call db.drop(database: "orders", env: "prod") risk irreversible } }')
    policy = ROOT / "policies" / "baseline.policy"
    expected = [d.name for d in check([plan], [policy]).diagnostics]
    assert "policy-deny" in expected
    assert [d.name for d in check((p for p in [plan]), (p for p in [policy])).diagnostics] == expected
    compiled, result = compile_policy(p for p in [policy])
    assert compiled is not None and result.exit_code() == 0
    assert Gate.from_files(p for p in [policy]).policy == compiled
    with pytest.raises(TypeError, match="the plan files are a path or a list of paths, not NoneType"):
        check(None, [policy])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the policy files are a path or a list of paths, not int"):
        check([plan], 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["policy q { tool a.b { risk nope } }", "policy q { tool a.b { risk read_only } limit foo <= 3 }"])
def test_compile_policy_gives_no_policy_when_a_file_has_an_error(tmp_path, text):
    """As documented: None when any policy has an error, not only when one does not parse."""
    path = tmp_path / "q.policy"
    path.write_text(text)
    compiled, result = compile_policy([path])
    assert compiled is None and result.errors and result.exit_code() == 1


def test_a_refused_call_lists_every_problem_and_the_rules_that_fire_too():
    """Arguments that do not fit refuse the call whatever the rules say; the rules are still asked
    and the deny rule that fires is named after the other problems."""
    gate = Gate.from_sources([("p.policy", """policy p { tool t.w { risk reversible_write args { n: int } }
        limit retries <= 1
        deny "big" when args.n > 5 }""")])
    decision = gate.decide("t.w", {"n": 9.5}, kind="check", retry=3)
    assert not decision.allowed and decision.denied_by == ["big"] and decision.errors == []
    assert decision.reasons[:3] == ["argument `n` of `t.w` must be `int`, but it is the double `9.5`",
                                    "a check only observes, and `t.w` is `reversible_write`",
                                    "3 retries are over `limit retries <= 1`"]
    assert len(decision.reasons) == 4 and "`big`" in decision.reasons[3]
    unknown = gate.decide("t.zz", {"n": float("nan")})
    assert [reason.split(":")[0] for reason in unknown.reasons] == [
        "`t.zz` is not in the policy's catalogue", "the arguments have no JSON form"]
    assert gate.decide("t.w", {"n": 9}).denied_by == ["big"]  # a call that fits: the rules decide


def test_a_retried_write_requires_an_idempotency_key_as_check_says():
    gate = Gate.from_sources([("p.policy", "policy p { tool t.w { risk reversible_write } tool t.r { risk read_only } }")])
    assert gate.decide("t.w", {}, retry=2).requires == ["idempotency"]
    assert gate.decide("t.w", {}).requires == [] and gate.decide("t.r", {}, retry=2).requires == []
    plan = "plan p { step w { call t.w() retry 2 } }"
    assert [d.name for d in gate.check_plan(plan).diagnostics] == ["retry-without-idempotency"]


def test_decimals_and_ints_past_64_bits_are_refused_not_let_through():
    from decimal import Decimal

    from plangate.gate import Gate

    gate = Gate.from_sources([("q.policy", 'policy q {\n  tool t.free { risk read_only }\n'
                                           '  tool t.days { risk read_only args { days: int } }\n'
                                           '  deny "fr" when call.tool == "t.free" && args.x == 1.5\n}\n')])
    assert not gate.decide("t.free", {"x": 1.5}).allowed
    refused = gate.decide("t.free", {"x": Decimal("1.5")})
    assert not refused.allowed and "Decimal" in refused.reasons[0]
    assert not gate.decide("t.free", {"x": [10 ** 30]}).allowed
    over = gate.decide("t.days", {"days": 2 ** 63})
    assert not over.allowed and over.reasons == [
        "an argument holds `9223372036854775808`, out of the range of a CEL `int` (a `uint` argument must be declared so)"]
    assert gate.decide("t.days", {"days": 2 ** 63 - 1}).allowed
    undeclared = gate.decide("t.free", {"x": 2 ** 63})  # no CEL `int` holds it, and no schema says `uint`
    assert not undeclared.allowed and "out of the range of a CEL `int`" in undeclared.reasons[0]
    assert not gate.decide("t.free", {"x": {"n": -(2 ** 63) - 1}}).allowed


def test_values_the_rules_cannot_see_are_refused_before_any_rule_where_the_catalogue_types_them_too():
    """A Decimal for a declared `double` is not "not a double": it is a value no rule can see, so no
    rule is asked (api.md) — though a deny rule would fire on its number, and requirements apply."""
    from decimal import Decimal

    gate = Gate.from_sources([("p.policy", 'policy p {\n  tool t.typed { risk read_only args { d: double, s: string } }\n'
                                           '  deny "big" when args.d > 5.0\n  require check when true\n}\n')])
    refused = gate.decide("t.typed", {"d": Decimal("900"), "s": "a"})
    assert (refused.allowed, refused.denied_by, refused.requires, refused.approvals, refused.errors) == (
        False, [], [], [], [])
    assert refused.reasons == ["the argument value `900` is a Decimal: pass a float, or the amount as a string"]
    misfit = gate.decide("t.typed", {"d": 1.0, "s": Decimal("2")})  # a string argument given a number: said too
    assert misfit.reasons == ["the argument value `2` is a Decimal: pass a float, or the amount as a string",
                              "argument `s` of `t.typed` must be `string`, but it is `2`"]
    assert gate.decide("t.typed", {"d": 900.0, "s": "a"}).denied_by == ["big"]


def test_the_api_takes_policies_as_a_set_and_texts_as_pairs_or_files():
    from pathlib import Path

    from plangate.driver import check, check_sources
    from plangate.source import SourceFile

    root = Path(__file__).resolve().parents[1]
    base, strict = str(root / "policies" / "baseline.policy"), str(root / "policies" / "strict.policy")
    hashes = {check([], order).policy.hash for order in ([base, strict], [strict, base], [base, base, strict])}
    assert len(hashes) == 1
    plan = "plan p {\n  step a { call logs.search(service: \"s\", query: \"q\", since: \"1h\") risk read_only }\n}\n"
    as_pairs = check_sources([("p.plan", plan)], [("b.policy", Path(base).read_text(encoding="utf-8"))])
    as_files = check_sources([SourceFile("p.plan", plan)], [SourceFile("b.policy", Path(base).read_text(encoding="utf-8"))])
    assert as_pairs.diagnostics == as_files.diagnostics and as_pairs.policy.hash == as_files.policy.hash
    assert check(base.encode(), []).exit_code() == 0  # a bytes path, as os functions take it
    with pytest.raises(TypeError, match="list of SourceFile or \\(name, text\\) pairs"):
        check_sources(plan)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a str"):
        check_sources([("p.plan", plan.encode())])


def test_idempotency_key_is_the_runtimes_to_give_in_a_plan_and_the_callers_at_the_gate():
    """A plan's call never gives `idempotency_key` (the runtime passes the step's key), even where
    the catalogue declares it, required or not; an agent runtime at the gate may pass its own."""
    from plangate.checks.step_shape import IDEMPOTENCY_PARAMETER
    from plangate.runtime import tools

    assert IDEMPOTENCY_PARAMETER == tools.IDEMPOTENCY_PARAMETER
    gate = Gate.from_sources([("p.policy", """policy p { tool t.w { risk reversible_write }
        tool t.k { risk reversible_write args { amount: double, idempotency_key: string } } }""")])
    assert gate.decide("t.w", {"idempotency_key": "k"}).allowed
    assert gate.decide("t.k", {"amount": 1.0, "idempotency_key": "k"}).allowed
    assert gate.decide("t.k", {"amount": 1.0}).allowed  # the key is the runtime's to give
    for call in ('t.w(idempotency_key: "k")', 't.k(amount: 1.0, idempotency_key: "k")'):
        found = gate.check_plan(f'plan p {{ step w {{ call {call} idempotency "k" }} }}').diagnostics
        assert [d.name for d in found] == ["arg-type"] and "the runtime gives a tool" in found[0].message
    assert gate.check_plan('plan p { step w { call t.k(amount: 1.0) idempotency "k" } }').diagnostics == []



def test_a_pattern_past_the_evaluators_bound_counts_as_firing_not_as_a_pass():
    """A deny rule whose regular expression comes from the call: a pattern too long to compile is
    the evaluator's limit, not a sign the rule does not apply, so it cannot be used to slip past."""
    gate = Gate.from_sources([("p.policy", """policy p { tool t.x { risk read_only }
        deny "re" when call.tool == "t.x" && "abc".matches(args.p) }""")])
    assert gate.decide("t.x", {"p": "z"}).allowed
    long = gate.decide("t.x", {"p": "z" * 5000})
    assert not long.allowed and long.denied_by == ["re"]
    invalid = gate.decide("t.x", {"p": "("})  # an invalid pattern is the pattern's meaning: an error, no deny
    assert invalid.allowed and invalid.errors


def test_a_declared_risk_below_the_catalogue_is_refused_as_check_refuses_the_step():
    gate = Gate.from_sources([("p.policy", 'policy p { tool pay.refund { risk irreversible } deny "big" when args.n > 5 }')])
    decision = gate.decide("pay.refund", {"n": 9}, risk="read_only")
    assert not decision.allowed and decision.risk == "irreversible" and decision.denied_by == ["big"]
    assert decision.reasons[0] == "the call declares risk `read_only`, below `irreversible`, the risk of `pay.refund` in the catalogue"
    assert gate.decide("pay.refund", {"n": 1}, risk="irreversible").allowed
    [found] = [d for d in gate.check_plan("plan q { step s { call pay.refund(n: 1) risk read_only } }").diagnostics
               if d.severity.value == "error"]
    assert found.name == "risk-underdeclared"


@pytest.mark.parametrize("keyword, value", [("step", 5), ("plan", None), ("plan_version", "x"), ("plan_version", True)])
def test_decide_refuses_fields_of_the_wrong_type_the_rules_would_misread(keyword, value):
    """`plan_version="x"` made `plan.version < 2` fail to evaluate, so its deny rule did not fire."""
    gate = Gate.from_sources([("p.policy", 'policy p { tool a.b { risk read_only } deny "old" when plan.version < 2 }')])
    with pytest.raises(TypeError, match=keyword):
        gate.decide("a.b", {}, **{keyword: value})


def test_the_package_lists_its_public_names_and_a_check_result_is_the_json_object():
    import plangate

    assert {"Gate", "JournalError", "ApprovalNeed", "check"} <= set(dir(plangate))
    result = plangate.check_sources([plangate.SourceFile("a.plan", "plan p { step a { call t.x( } }")])
    document = result.to_dict()
    assert document["summary"] == {"errors": 1, "warnings": 0, "files": 1}
    assert document["diagnostics"][0]["span"]["start"] == {"line": 1, "column": 29}
